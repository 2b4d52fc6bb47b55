//! How handles and their file descriptors travel between processes.
//!
//! A [`Handle`] is plain data and travels as text or bytes; the descriptors
//! that go with it (for memfd-based memory: the data memfd and the lease
//! table) cannot be written down and travel out of band. This module offers
//! four ways:
//!
//! | way | handle | descriptors | peer identity |
//! | --- | --- | --- | --- |
//! | a file: [`write_handle_file`], [`read_handle_file`] | text, written atomically, mode `0600` | the exporter's broker | — |
//! | a string: [`encode`], [`decode`], [`to_env`], [`from_env`] | text | the exporter's broker | — |
//! | a Unix socket: [`HandleListener`], [`HandleStream`], [`socketpair`] | bytes | `SCM_RIGHTS` beside it | `SO_PEERCRED` / `SCM_CREDENTIALS` |
//! | the descriptor broker, through [`take_fds`] | any of the above | `SCM_RIGHTS` from the exporter | `SO_PEERCRED` |
//!
//! An importer hands what it received to [`take_fds`] (backends do this in
//! their `import_*` calls): descriptors that came with the handle are used as
//! they are, otherwise they are fetched from the exporter's broker named in
//! the handle ([`FdSource::Broker`]).
//!
//! # The descriptor broker
//!
//! [`Exported::new`](crate::Exported::new) registers an export's descriptors
//! with its process's broker: a thread, started on the first export, that
//! accepts on an *abstract* Unix socket named `hal-<pid>-<16 hex digits>`
//! (abstract names live in the kernel only, so nothing is left on the file
//! system, even after a crash). The handle names the socket, so its text alone
//! is enough to import from another process:
//!
//! 1. the importer connects (`SOCK_SEQPACKET`; 5 s timeouts, [`BROKER_TIMEOUT`],
//!    on connect, send and receive, after which it gets [`Error::Timeout`]) and
//!    checks the server: its uid must be the importer's or root's, and when the
//!    exporter is visible in the importer's pid namespace, its pid must be the
//!    exporter's;
//! 2. it sends a request: `HALB`, version 1, operation 1 (fetch), two zero
//!    bytes, the 16-byte object id (24 bytes);
//! 3. the broker reads the importer's credentials from the kernel
//!    (`SO_PEERCRED`), never from the request, and answers `HALR`, version 1,
//!    a status, the number of descriptors, a zero byte, and the importer's pid
//!    as the broker sees it (`u32` little-endian; 12 bytes), with the
//!    descriptors attached (`SCM_RIGHTS`) when the status is 0.
//!
//! | status | meaning | importer's error |
//! | ---: | --- | --- |
//! | 0 | the descriptors follow | — |
//! | 1 | malformed request | [`Error::Io`] (incompatible versions) |
//! | 2 | unknown protocol version | [`Error::Io`] (incompatible versions) |
//! | 3 | no export with this object id | [`Error::NotFound`] |
//! | 4 | the pid is not allowed | [`Error::PermissionDenied`] with the pid |
//! | 5 | another user | [`Error::PermissionDenied`] |
//! | 6 | the broker could not serve | [`Error::Io`] |
//!
//! The broker's own registration, not the handle, decides who may import: it
//! is updated by [`Exported::set_importers`](crate::Exported::set_importers)
//! and [`Exported::add_importers`](crate::Exported::add_importers), and a
//! forged handle text (say, with [`HandleFlags::ANY_IMPORTER`] set) gains
//! nothing. The exporting process itself is always served. Requests longer
//! than 24 bytes, descriptors sent to the broker, silence (the broker waits at
//! most 1 s per connection) and garbage are answered or dropped without
//! disturbing later requests.
//!
//! **Users.** The broker serves processes of its own effective uid and root.
//! Root is served because refusing it protects nothing: root can read any
//! process's memory and take its descriptors anyway (`/proc/PID/mem`,
//! `pidfd_getfd` with `CAP_SYS_PTRACE`). A process of a user namespace in
//! which the exporter's uid is not mapped shows up as the overflow uid and is
//! refused.
//!
//! **Pid namespaces.** Allow-list pids are pids as the *exporter's* pid
//! namespace numbers processes, and the kernel translates the importer's pid
//! into that namespace before the broker compares it. An importer in a child
//! namespace (a container started from the exporter's namespace) must be
//! listed under the pid the exporter sees, not the one it sees itself (the
//! error names both). An importer the exporter cannot see at all (a sibling or
//! parent namespace) shows up as pid 0 and can import only an export open to
//! anyone. `creator_pid` is likewise the exporter's view, so the liveness
//! checks that make error messages precise are only hints across namespaces.
//!
//! **Network namespaces.** Abstract socket names belong to a network
//! namespace: an importer in another one cannot reach the broker and gets
//! [`Error::Closed`] or [`Error::NotFound`] saying so. Pass the handle with its
//! descriptors over a Unix socket file that both can open ([`HandleListener`])
//! instead.
//!
//! **Fork.** A child forked by an exporter inherits neither the broker thread
//! nor its listening socket (a fork handler closes it in the child), so it
//! never serves, and never blocks, its parent's registrations. The first
//! export in the child starts the child's own broker under a new name. An
//! `Exported` copied into a child by `fork` still names the parent's broker
//! and does not unregister anything when dropped there. As with every lock
//! in a multi-threaded program, a child forked while another thread is inside
//! an export must `exec` before exporting.
//!
//! **Why a broker and not `pidfd_getfd`.** Taking descriptors straight from
//! the exporter with `pidfd_getfd(2)` needs ptrace rights over it, which
//! unprivileged containers refuse: the default seccomp profiles of Docker
//! and Podman block the call, Yama's `ptrace_scope=1` (the default on most
//! distributions) allows it only towards descendants, and a pid from another
//! pid namespace cannot be opened at all. `SCM_RIGHTS` from the exporter
//! works in all of these cases, and it lets the exporter apply its own
//! allow-list. A `pidfd_getfd` fast path for privileged deployments is
//! possible future work; it is not built.
//!
//! # Example
//!
//! ```
//! use std::os::fd::AsFd;
//! use hal_core::{exchange, os, BackendId, Exported, FdSource, Handle, HandleFlags, HandleKind};
//! use hal_core::{Location, SharedHandle};
//!
//! // The exporter: a memfd and a handle that anyone (of this user) may import.
//! let fd = os::memfd("example", 4096, None)?;
//! let (pid, start) = os::self_identity();
//! let handle = Handle {
//!     kind: HandleKind::Memory,
//!     backend: BackendId::CpuShm,
//!     device: 0,
//!     device_uuid: [0; 16],
//!     location: Location::Host,
//!     size: 4096,
//!     offset: 0,
//!     address: 0,
//!     creator_pid: pid,
//!     creator_start: start,
//!     object_id: os::random_id(),
//!     flags: HandleFlags::ANY_IMPORTER,
//!     allowed_pids: Vec::new(),
//!     fds: FdSource::None,
//!     payload: Vec::new(),
//! };
//! let exported = Exported::new(handle, vec![fd])?;
//! let text = exported.to_text(); // a file, an environment variable, argv...
//!
//! // The importer (here the same process): the text is all it needs.
//! let mut shared = SharedHandle::from(exchange::decode(&text)?);
//! let fds = exchange::take_fds(&mut shared)?;
//! assert_eq!(fds.len(), 1);
//! assert_eq!(os::fstat(fds[0].as_fd())?.st_size, 4096);
//! # Ok::<(), hal_core::Error>(())
//! ```

use std::os::fd::OwnedFd;
use std::time::Duration;

use crate::error::{Error, HandleError, Result};
use crate::handle::{FdSource, SharedHandle};
#[cfg(doc)]
use crate::handle::{Handle, HandleFlags};

pub(crate) mod broker;
mod file;
mod socket;
mod sys;
mod text;

pub use file::{read_handle_file, write_handle_file, MAX_HANDLE_FILE};
pub use socket::{socketpair, HandleListener, HandleStream, MAX_FRAME};
pub use text::{decode, encode, from_env, to_env};

/// Most descriptors one handle may carry, on a socket or from a broker.
pub const MAX_FDS: usize = 16;

/// How long an importer waits for a broker to accept, take a request and
/// answer, each, before [`Error::Timeout`].
pub const BROKER_TIMEOUT: Duration = Duration::from_secs(5);

/// The credentials of the process at the other end of a socket, as the
/// kernel reports them (translated into this process's pid and user
/// namespaces; a process this namespace cannot see has pid 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerCred {
    /// Process id.
    pub pid: u32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// The descriptors for an import.
///
/// - Descriptors attached to `shared` (received on a socket, inherited, or
///   from [`Exported::share`](crate::Exported::share)) are taken out of it;
///   their number must be the handle's ([`FdSource::count`]), else
///   [`HandleError::Descriptors`].
/// - Otherwise, for [`FdSource::Broker`], they are fetched from the exporter's
///   broker, which checks this process's uid and pid against the exporter's
///   own allow-list (not the handle's claim): [`Error::PermissionDenied`] with
///   the pid when refused, [`Error::NotFound`] for an export that was
///   dropped, [`Error::Closed`] when the exporter has exited,
///   [`Error::Timeout`] after [`BROKER_TIMEOUT`].
/// - For [`FdSource::None`], none: an empty vector.
/// - For [`FdSource::Attached`] with nothing attached:
///   [`HandleError::Descriptors`] (the descriptors were meant to come with the
///   handle and did not).
pub fn take_fds(shared: &mut SharedHandle) -> Result<Vec<OwnedFd>> {
    let expected = shared.handle.fds.count();
    if !shared.fds.is_empty() {
        if shared.fds.len() != expected {
            return Err(HandleError::Descriptors(format!(
                "{} descriptor(s) came with the handle, which describes {expected}",
                shared.fds.len()
            ))
            .into());
        }
        return Ok(std::mem::take(&mut shared.fds));
    }
    match &shared.handle.fds {
        FdSource::None => Ok(Vec::new()),
        FdSource::Attached { count } => Err(HandleError::Descriptors(format!(
            "the handle's {count} descriptor(s) travel beside it and none came with it: pass \
             it over a Unix socket (exchange::HandleStream) or with Exported::share"
        ))
        .into()),
        FdSource::Broker { count, name } => {
            let count = *count as usize;
            if count > MAX_FDS {
                return Err(HandleError::Descriptors(format!(
                    "the handle describes {count} descriptors, over the bound of {MAX_FDS}"
                ))
                .into());
            }
            broker::fetch(&shared.handle, name, count)
        }
    }
}

/// The error for a reception the kernel truncated (`MSG_CTRUNC`).
pub(crate) fn dropped_descriptors(arrived: usize, expected: Option<usize>) -> Error {
    let expected = expected.map_or(String::new(), |n| format!(" of {n}"));
    Error::Io {
        context: format!(
            "receiving a handle's descriptors: the kernel dropped descriptors (MSG_CTRUNC; \
             {arrived}{expected} arrived and were closed). This process is probably at its \
             open-file limit (RLIMIT_NOFILE, `ulimit -n`): close descriptors or raise the \
             limit; otherwise the sender attached more than {MAX_FDS}"
        ),
        source: std::io::Error::other("descriptors dropped in transit"),
    }
}
