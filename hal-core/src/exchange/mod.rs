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
//! with its process's broker, started on the first export: a few worker
//! threads (one per CPU, at most 4), each an `epoll` loop over an *abstract*
//! Unix socket named `hal-<pid>-<16 hex digits>` and the connections it
//! accepted (abstract names live in the kernel only, so nothing is left on
//! the file system, even after a crash). No thread is started per
//! connection and no worker waits on a peer. The handle names the socket,
//! so its text alone is enough to import from another process:
//!
//! 1. the importer connects (`SOCK_SEQPACKET`; 5 s timeouts, [`BROKER_TIMEOUT`],
//!    on connect, send and receive, after which it gets [`Error::Timeout`]) and
//!    checks the server: its uid must be the importer's or root's, and when the
//!    exporter is visible in the importer's pid namespace, its pid must be the
//!    exporter's. The connection is **kept** for later requests to the same
//!    broker (see *Connections* below);
//! 2. it sends a request of 40 bytes: `HALB`, version 2, an operation
//!    (1: fetch the descriptors, 2: a lease only, for descriptors that came
//!    another way, 3: give a lease back, 5: lease and locate, see *The
//!    `pidfd_getfd` path* below), two zero bytes, a 16-byte id (the
//!    object's; for a release, the lease table's), the slot (`u32`), four
//!    zero bytes, the token (`u64`; zero but for a release); or a **batch**
//!    (operation 4, or 6 to locate): `HALB`, version 2, 4, the number of
//!    objects (`u16`, 1 to 64), then their 16-byte ids;
//! 3. the broker reads the importer's credentials from the kernel
//!    (`SO_PEERCRED`, once per connection), never from the request, and
//!    answers with 40 bytes:
//!    `HALR`, version 2, a status, the number of descriptors, flags (1: a
//!    lease ticket follows), the importer's pid as the broker sees it (`u32`
//!    little-endian), then the ticket: slot, token, table id. The
//!    descriptors are attached (`SCM_RIGHTS`) when a fetch succeeds. A batch
//!    is answered with `HALR`, version 2, status 0, the number of
//!    descriptors, a zero byte, the pid, the number of objects (`u16`), two
//!    zero bytes, then 32 bytes per object (its status, its number of
//!    descriptors, flags, a zero byte, its ticket), and every object's
//!    descriptors in one `SCM_RIGHTS` message, in order (at most 240).
//!    Each object of a batch is decided on its own, exactly as a fetch of it
//!    alone: a batch is **not all-or-nothing**, and an object refused to the
//!    importer is answered with its status while the others are served
//!    ([`take_fds_leased_batch`]). A batch malformed as a whole is answered
//!    with a plain 40-byte reply (status 1).
//!
//! **Connections.** A connection carries any number of requests, one at a
//! time (the importer reads each reply before it sends the next request).
//! The broker reads at most one message per connection per wake-up, so a
//! peer that floods it does not starve others; a peer that sends a request
//! before it has read the previous reply is disconnected, unanswered, with
//! a warning (a connection holds at most one unread reply, so that no
//! importer piles up descriptors in flight, which the kernel charges to the
//! exporter's user). The leases of a reply whose send fails are given back. A new connection
//! must send its first request within 1 s (another user's within 50 ms); a
//! connection is closed after 30 s without a request, and at most 1024 are
//! open at once (past that, the least recently used one is closed to
//! accept a new one). The importer keeps at most 4 idle connections per
//! broker, closes a connection it has not used for 5 s at its next import,
//! and sends a request again, once, on a new connection when the broker
//! had closed the kept one (the broker never reads a request from a
//! connection it closes, so nothing is served twice).
//! [`close_broker_connections`] closes the kept connections at once and
//! [`broker_connections`] counts them. Credentials are checked per
//! connection, on both sides: the broker decides every request on it for
//! the process that connected, and the importer checks, for every handle,
//! that the server it connected to may be the handle's creator.
//!
//! When the export counts its importers (memory), the broker registers a
//! lease for every process it serves, under the pid it sees and that
//! process's start time (see [`lease`](crate::lease)); the importer keeps a
//! [`Lease`] and gives it back with a release request when it drops the
//! mapping. The broker frees a slot only for the ticket's token presented
//! by the pid it registered.
//!
//! | status | meaning | importer's error |
//! | ---: | --- | --- |
//! | 0 | done: the descriptors (and the ticket) follow | — |
//! | 1 | malformed request | [`Error::Io`] (incompatible versions) |
//! | 2 | unknown protocol version | [`Error::Io`] (incompatible versions) |
//! | 3 | no export with this object id (no such lease, for a release) | [`Error::NotFound`] |
//! | 4 | the pid is not allowed | [`Error::PermissionDenied`] with the pid |
//! | 5 | another user, or the overflow uid | [`Error::PermissionDenied`] |
//! | 6 | the broker could not serve | [`Error::Io`] |
//! | 7 | every lease slot is held by a live process | [`Error::Busy`] |
//! | 8 | the export counts importers and cannot see this one (pid 0) | [`Error::PermissionDenied`] |
//!
//! The broker's own registration, not the handle, decides who may import: it
//! is updated by [`Exported::set_importers`](crate::Exported::set_importers)
//! and [`Exported::add_importers`](crate::Exported::add_importers), and a
//! forged handle text (say, with [`HandleFlags::ANY_IMPORTER`] set) gains
//! nothing. Each allowed pid is pinned to the process that had it when it
//! was allowed (its start time), so a process that later gets a recycled
//! pid is refused; a pid that no process had when it was allowed is pinned
//! by the first process served under it. The exporting process itself is
//! always served. Requests of another length than 40 bytes (but a batch),
//! descriptors sent to the broker, silence (the broker waits at most 1 s
//! for a first request) and garbage are answered or dropped without
//! disturbing later requests; a malformed request, or one from another
//! user, also ends its connection.
//!
//! **Users.** The broker serves processes of its own effective uid and root.
//! Root is served because refusing it protects nothing: root can read any
//! process's memory and take its descriptors anyway (`/proc/PID/mem`,
//! `pidfd_getfd` with `CAP_SYS_PTRACE`). The overflow uid
//! (`/proc/sys/kernel/overflowuid`) never matches, on either side: it stands
//! for every user not mapped into the reader's user namespace, so an
//! exporter running as it would otherwise serve all of them (and an importer
//! running as it would trust any of their brokers). Processes that run as
//! the overflow uid share descriptors over sockets only.
//!
//! **Pid namespaces.** Allow-list pids are pids as the *exporter's* pid
//! namespace numbers processes, and the kernel translates the importer's pid
//! into that namespace before the broker compares it. An importer in a child
//! namespace (a container started from the exporter's namespace) must be
//! listed under the pid the exporter sees, not the one it sees itself (the
//! error names both). An importer the exporter cannot see at all (a sibling or
//! parent namespace) shows up as pid 0: it can fetch only from an export open
//! to anyone that does not count importers (events, notifies); memory, whose
//! leases must be told dead, is refused to it (status 8). Leases are kept
//! under the pid the exporter sees, so an importer in a child namespace is
//! counted exactly as long as it lives. `creator_pid` is likewise the exporter's view, so the liveness
//! checks that make error messages precise are only hints across namespaces.
//!
//! What a handle records makes this decidable (wire version 2; see
//! [`wire`](crate::handle::wire)):
//!
//! - [`Handle::creator_pid_ns`] is the exporter's pid namespace, the inode of
//!   its `/proc/self/ns/pid` ([`os::pid_namespace`](crate::kit::os::pid_namespace)).
//!   [`Handle::same_pid_namespace`] tells an importer whether the handle's
//!   pids mean here what they meant to the exporter; [`Handle::is_own`] is
//!   true only in the exporting process (pid, start time and namespace all
//!   equal). A handle of wire version 1, or from an exporter without
//!   `/proc`, has 0 there: then neither can be told, and `is_own` says false.
//! - [`Handle::pid_kind`] says what the allow-list holds.
//!   [`PidKind::Os`](crate::PidKind::Os): OS pids in the exporter's
//!   namespace, checked by the broker as above.
//!   [`PidKind::Vendor`](crate::PidKind::Vendor): the vendor runtime's own
//!   process ids, checked by the vendor, which does not number processes by
//!   pid namespace (Ascend's bare tgid is the host pid, inside a container
//!   too).
//! - Either way, the id to allow is what the importer's
//!   [`Device::process_id`](crate::Device::process_id) gives: the importer
//!   sends it to the exporter, which passes it to
//!   [`Device::allow_importers`](crate::Device::allow_importers). For an OS
//!   pid, that id is right as it stands only when both are in one pid
//!   namespace (`same_pid_namespace` is `Some(true)` on the importer's side);
//!   an importer in a child namespace sees itself under another pid than the
//!   exporter does, and must be allowed under the pid the exporter sees (the
//!   broker's refusal names it).
//!
//! **Network namespaces.** Abstract socket names belong to a network
//! namespace: an importer in another one cannot reach the broker and gets
//! [`Error::Closed`] or [`Error::NotFound`] saying so. Pass the handle with its
//! descriptors over a Unix socket file that both can open ([`HandleListener`])
//! instead.
//!
//! **Fork.** A child forked by an exporter inherits neither the broker's
//! workers nor its sockets (a fork handler closes the listening socket, the
//! workers' `epoll` descriptors and every connection in the child), so it
//! never serves, and never blocks, its parent's registrations, and an
//! importer sees the broker hang up when the parent exits. A child forked
//! by an importer never uses the connections its parent kept: the broker
//! knows them as the parent's (their credentials are the parent's, and the
//! leases taken over them would count the parent), so a fork handler closes
//! the child's copies right after `fork`, before the child runs any code of
//! its own, and the child connects anew at its first import. The first
//! export in the child starts the child's own broker under a new name. An
//! `Exported` copied into a child by `fork` still names the parent's broker
//! and does not unregister anything when dropped there. As with every lock
//! in a multi-threaded program, a child forked while another thread is inside
//! an export must `exec` before exporting.
//!
//! # The `pidfd_getfd` path
//!
//! An importer may take the descriptors from the exporter itself with
//! `pidfd_getfd(2)` instead of receiving them with `SCM_RIGHTS`: the kernel
//! allows it where the importer has ptrace access to the exporter, which
//! gives it the exporter's memory anyway. It has two forms: the **direct**
//! import, which asks no one, **on by default**, and the **located** fetch,
//! which asks the broker as a fetch does and takes the descriptors where
//! the broker says they are, for what the direct import cannot decide,
//! only where it is asked for. `HAL_PIDFD_GETFD` ([`PIDFD_GETFD_ENV`], read
//! once per process) says which: `0` turns the path off, `1` adds the
//! located form (and warns once where the kernel refuses); unset, the
//! direct import alone, silent where the kernel refuses. [`set_pidfd_getfd`]
//! overrides it. Before it asks a broker for its board, an importer asks
//! the kernel whether it may take that exporter's descriptors at all (a
//! `pidfd_getfd` of a number no process can have answers `EBADF` where it
//! may, `EPERM` where it may not): an exporter makes no board for
//! importers that cannot use it.
//!
//! **Direct imports: no round trip.** The first import from a broker asks
//! it (by location, below) for its **board**: a sealed memfd of fixed size
//! where the exporter publishes, for each export, its descriptors'
//! numbers and identities (`st_dev`, `st_ino`), whether it counts
//! importers, and its allow-list (anyone of the user, one uid, or up to six
//! pids pinned to their start times). The board is made at that first
//! request (an exporter no one asks pays nothing) and is served only by
//! location, never with `SCM_RIGHTS`, and only to the exporter's user: only
//! a process that can take the exporter's descriptors itself maps it. The
//! importer maps it once, with a pidfd of the exporter, and from then on
//! imports each object on its own:
//!
//! 1. it finds the object on the board (read whole under the entry's
//!    sequence word) and checks the allow-list itself, under its own pid
//!    and start time (only when the exporter is in its pid namespace);
//! 2. when the export counts importers, it records its lease in a slot of
//!    the board (its pid, its start time, the entry and its generation),
//!    then reads the entry again: the exporter withdraws an entry before it
//!    counts the leases of a release, so either the importer sees the
//!    withdrawal and gives the slot back, or the exporter counts the lease;
//! 3. it takes each descriptor with `pidfd_getfd`, reads its seals first
//!    and checks its identity, as below; dropping the import frees the slot.
//!
//! The exporter's lease table counts the board's slots with its own:
//! [`importers`](crate::Allocation::importers) is exact as soon as a lease
//! is taken or given back, a holder whose process died is not counted
//! (its slot is freed), and a release that waits for its importers sees a
//! board lease go within its 20 ms poll. **Every doubt goes to the
//! broker**: an object the board does not state (more than four
//! descriptors, descriptors that are not memfds, a longer allow-list, a pid not yet pinned, more than 4096
//! live exports), an allow-list that does not name this process, a full
//! lease area, an exporter in another pid namespace, a descriptor that is
//! not the file the board names: the import is then fetched by location
//! or with `SCM_RIGHTS`, and gets the broker's answer and refusal, exactly
//! as without the path. So the direct import only ever says yes where the
//! broker would. Who can use it could read and write the exporter's memory
//! anyway (ptrace access), so honouring the allow-list on the importer's
//! side gives such a process nothing it did not have; a process without
//! that access never sees the board. A process that writes garbage over
//! the board (it can: it has the same access) makes imports ask the
//! broker, never take another file: each descriptor is checked against the
//! identity the entry states and its seals, and entries or slots that do
//! not parse are passed over (`hal-core/tests/direct.rs`).
//!
//! **Located fetches.** Where the board cannot decide, the broker is asked
//! on the same kept connection: the allow-list and the leases live in the
//! exporter (a handle's own list can be forged), so only the exporter can
//! decide such an import.
//!
//! 1. The importer opens a pidfd of the broker's process (`pidfd_open(2)`,
//!    the pid from `SO_PEERCRED`), kept with the connection and closed with
//!    it. It is opened before the first request that uses it, so a reply
//!    on the connection proves it names the exporter (a live process keeps
//!    its pid); when the handle names the creator's start time under that
//!    pid, the start time is checked too.
//! 2. It sends a **lease and locate** request (operation 5; a batch:
//!    operation 6). The broker decides it exactly as a fetch: credentials,
//!    allow-list, lease. A refused importer gets the same refusal as for a
//!    fetch, and nothing else: **the allow-list holds on both paths,
//!    because the broker decides before it reveals anything**, and what it
//!    reveals (descriptor numbers) is of no use without ptrace access to
//!    the exporter, which reads its memory anyway.
//! 3. An allowed importer gets, instead of descriptors, their numbers in
//!    the exporter and each file's identity: the reply's flags have bit 2
//!    set and 24 bytes per descriptor follow its 40 bytes (a batch reply:
//!    its zero header byte is 2, and the records follow the entries, every
//!    object's in order): the number (`u32`), four zero bytes, `st_dev` and
//!    `st_ino` (`u64` each), little-endian.
//! 4. The importer takes each descriptor (`pidfd_getfd`), reads its seals
//!    (`F_GET_SEALS`, which answers at once for any file) and only then
//!    checks its identity with `fstat`: the exporter may have closed the
//!    number and reused it between the reply and the take (a dropped
//!    export). A descriptor without seals (not a memfd: a hostile
//!    exporter may locate a FUSE-backed file, whose `fstat` waits for its
//!    server as long as the server likes) is closed without being looked
//!    at further (so an honest export that is no memfd, a vendor's
//!    shareable handle, always comes with `SCM_RIGHTS`). A mismatch, a
//!    descriptor without seals, or one no longer there gives the lease back
//!    and fetches that object with `SCM_RIGHTS`.
//!
//! When the kernel or the security policy refuses the path (`EPERM` or
//! `EACCES`: Yama's `ptrace_scope`, another user, the seccomp profiles of
//! Docker and Podman; `ENOSYS` or `EINVAL`: a kernel before 5.6), the path
//! is off from then on for that exporter's broker (a Yama scope of 1 allows
//! it towards descendants, so one refusal does not say much about other
//! exporters), and the import goes on with `SCM_RIGHTS`; the first refusal
//! in the process is logged with one `log::warn!` line where the path was
//! asked for (`HAL_PIDFD_GETFD=1`), at debug level otherwise. A broker of an
//! older hal answers the new operations as malformed: the path is off for
//! it, silently. An exporter in a pid namespace this process cannot see
//! (its pid reads 0) cannot be opened: the path is off for it, silently.
//!
//! **Why on by default, and the located form not.** Direct imports skip
//! the round trip (`halctl bench`'s `import-direct` against
//! `import-first-persistent`: see docs/performance.md for the numbers) and trust
//! the importer with nothing the kernel does not already give it: ptrace
//! access is the exporter's memory. Where the kernel refuses, the importer
//! learns it before it asks the broker anything, so the refusal costs one
//! system call per exporter and no board. A located fetch keeps the round
//! trip and saves nothing measurable over `SCM_RIGHTS` (see
//! `docs/performance.md`), and for an export that is no memfd it costs a
//! second request: it runs only where `HAL_PIDFD_GETFD=1` asks for it.
//!
//! # Example
//!
//! ```
//! use std::os::fd::AsFd;
//! use hal_core::kit::os;
//! use hal_core::{exchange, BackendId, Exported, FdSource, Handle, HandleFlags, HandleKind};
//! use hal_core::{Location, PidKind, SharedHandle};
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
//!     creator_pid_ns: os::pid_namespace(),
//!     object_id: os::random_id(),
//!     flags: HandleFlags::ANY_IMPORTER,
//!     pid_kind: PidKind::Os,
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

use crate::error::{Error, HandleError, Result};
use crate::handle::{FdSource, SharedHandle};
#[cfg(doc)]
use crate::handle::{Handle, HandleFlags};

pub(crate) mod broker;
pub mod envelope;
mod export;
mod file;
mod held;
mod limits;
mod peer;
pub mod sealed;
mod socket;
#[allow(unsafe_code)]
mod sys;
mod text;

pub use broker::GETFD_ENV as PIDFD_GETFD_ENV;
pub use broker::{trust_exporter_uid, TRUST_ENV as TRUST_EXPORTER_UIDS_ENV};
pub use file::{read_handle_file, write_handle_file, MAX_HANDLE_FILE};
pub use held::Lease;
pub use limits::{BROKER_TIMEOUT, MAX_FDS};
pub use peer::PeerCred;
pub use socket::{socketpair, HandleListener, HandleStream, MAX_FRAME};
pub use text::{decode, encode, from_env, to_env};

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
    Ok(take(shared, false)?.fds)
}

/// What [`take_fds_leased`] gives an importer.
#[derive(Debug)]
pub struct Taken {
    /// The descriptors, in the exporter's order.
    pub fds: Vec<OwnedFd>,
    /// The importer's lease, when the exporter counts its importers.
    pub lease: Option<Lease>,
    /// True when the descriptors are the exporter's own: fetched from a
    /// broker that [`take_fds`] checked is served by the handle's creator,
    /// or the very files registered with this process's own broker. Descriptors that came
    /// attached to a handle from another process are not: any peer can
    /// attach its own descriptors to a copy of a genuine handle. Import
    /// caches keep only checked imports.
    pub checked: bool,
    /// What was read of each descriptor when this process took it itself
    /// (`pidfd_getfd`): its seals, then its `fstat`, so that checks of the
    /// descriptors need not read them again.
    pub(crate) facts: Option<Vec<crate::kit::os::FileFacts>>,
}

impl Taken {
    /// What was read of the descriptor `i` when it was taken, if anything.
    pub fn facts(&self, i: usize) -> Option<&crate::kit::os::FileFacts> {
        self.facts.as_ref().and_then(|f| f.get(i))
    }
}

/// True when the descriptors of `shared` will come from a checked source
/// ([`Taken::checked`]): none are attached and the handle names a broker,
/// or the attached ones are those this process's own broker registered for
/// the handle's object.
pub fn source_is_checked(shared: &SharedHandle) -> bool {
    match &shared.handle.fds {
        FdSource::Broker { name, .. } => {
            shared.fds.is_empty()
                || broker::registered_here(name, &shared.handle.object_id, &shared.fds)
        }
        _ => false,
    }
}

/// The descriptors for an import, as [`take_fds`], and a [`Lease`] when the
/// exporter counts its importers: the exporter's broker registers it with
/// the fetch (one round trip), or on its own when the descriptors came with
/// the handle. Backends keep the lease in the mapping and drop it with the
/// mapping.
///
/// No lease when the export does not count importers, or when the handle
/// names no broker ([`FdSource::Attached`]: the exporter could not start
/// one, and its importers are not counted). An importer in a pid namespace
/// the exporter cannot see gets [`Error::PermissionDenied`] from an export
/// that counts importers: its death could never be noticed.
///
/// With descriptors attached to a handle, the lease is asked for on its
/// own: an exporter that has exited leaves the import without one (nothing
/// counts importers any more, and the memory lives with the descriptors);
/// an export that was dropped while its exporter lives is refused
/// ([`Error::NotFound`]), as a text import is.
///
/// Descriptors attached to a handle are used as they came; they count as
/// checked only when they are the very files this process's own broker
/// registered for the handle's object (an import in the exporting process,
/// [`Exported::share`](crate::Exported::share)).
pub fn take_fds_leased(shared: &mut SharedHandle) -> Result<Taken> {
    take(shared, true)
}

/// [`take_fds_leased`] for many handles at once: the handles whose
/// descriptors come from the same exporter's broker are fetched together,
/// one round trip for up to 64 of them, over a connection that is kept
/// for later imports. One result per handle, in order: each handle is
/// decided on its own (its allow-list, its lease), so a handle this process
/// may not import gets its [`Error::PermissionDenied`] and the others are
/// served; the batch is not all-or-nothing. Handles whose descriptors came
/// with them, or that name no broker, are taken as [`take_fds_leased`]
/// takes them.
pub fn take_fds_leased_batch(shared: &mut [SharedHandle]) -> Vec<Result<Taken>> {
    let mut out: Vec<Option<Result<Taken>>> = (0..shared.len()).map(|_| None).collect();
    // Handles to fetch, by broker, in order of first appearance.
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, s) in shared.iter_mut().enumerate() {
        match &s.handle.fds {
            FdSource::Broker { name, count }
                if s.fds.is_empty() && (*count as usize) <= MAX_FDS =>
            {
                match groups.iter_mut().find(|(n, _)| n == name) {
                    Some((_, list)) => list.push(i),
                    None => groups.push((name.clone(), vec![i])),
                }
            }
            _ => out[i] = Some(take(s, true)),
        }
    }
    for (name, list) in groups {
        let handles: Vec<&crate::handle::Handle> =
            list.iter().map(|&i| &shared[i].handle).collect();
        let counts: Vec<usize> = handles.iter().map(|h| h.fds.count()).collect();
        let served = broker::fetch_batch(&handles, &counts, &name);
        for (&i, r) in list.iter().zip(served) {
            out[i] = Some(r.map(|s| taken(s, &name, true)));
        }
    }
    out.into_iter()
        .map(|r| r.unwrap_or_else(|| Err(Error::invalid("a handle of the batch was not taken"))))
        .collect()
}

/// Close the connections this process keeps to exporters' brokers (see
/// the module documentation); returns how many were closed. Imports
/// reconnect when they need to. Useful before counting this process's
/// descriptors, or before entering a sandbox that forbids sockets.
pub fn close_broker_connections() -> usize {
    broker::close_all()
}

/// Turn the `pidfd_getfd` path (see the module documentation) on or off
/// for this process, over what [`PIDFD_GETFD_ENV`] says; `None` goes back
/// to what it says. Brokers that refused the path stay off.
pub fn set_pidfd_getfd(on: Option<bool>) {
    broker::set_getfd(on);
}

/// How many imports of this process took their descriptors by
/// `pidfd_getfd`, and how many tried and were fetched with `SCM_RIGHTS`
/// after all: which path imports took, for a program's report (`halctl
/// bench` prints it) and for tests.
pub fn pidfd_getfd_counts() -> (u64, u64) {
    broker::getfd_counts()
}

/// How many imports of this process (counted in [`pidfd_getfd_counts`]
/// too) asked no one: found on the exporter's board, leased there and
/// taken: for a program's report (`halctl demo` and `halctl bench` print
/// it) and for tests.
pub fn direct_import_count() -> u64 {
    broker::direct_count()
}

/// The name of the memfd that holds the board of process `pid`'s broker,
/// as `/proc/PID/fd` and `/proc/PID/maps` show it (`/memfd:NAME`): the
/// board lives as long as its broker, made at the first importer's request.
/// For tests that count what a process holds; only with the `testing`
/// feature.
#[cfg(feature = "testing")]
pub fn board_memfd_name(pid: u32) -> String {
    broker::board_name(pid)
}

/// How many connections this process keeps to the broker `name` (or to
/// every broker, for `None`) for later imports.
pub fn broker_connections(name: Option<&str>) -> usize {
    broker::kept(name)
}

/// What the broker `name` served, as an importer keeps it: the descriptors,
/// and the lease when `leased` (an export that counts importers registers
/// one with every fetch; a caller that wants none gives it back at once).
fn taken(served: broker::Served, name: &str, leased: bool) -> Taken {
    let lease = match (served.board, served.lease) {
        (Some(b), _) => Some(Lease::on_board(name.to_owned(), b)),
        (None, Some(t)) => Some(Lease::new(name.to_owned(), t)),
        (None, None) => None,
    };
    Taken {
        fds: served.fds,
        lease: lease.filter(|_| leased),
        checked: true,
        facts: served.facts,
    }
}

/// [`take_fds`] (`leased` false) or [`take_fds_leased`], with the whole
/// [`Taken`] either way.
pub(crate) fn take(shared: &mut SharedHandle, leased: bool) -> Result<Taken> {
    let expected = shared.handle.fds.count();
    if !shared.fds.is_empty() {
        if shared.fds.len() != expected {
            return Err(HandleError::Descriptors(format!(
                "{} descriptor(s) came with the handle, which describes {expected}",
                shared.fds.len()
            ))
            .into());
        }
        let fds = std::mem::take(&mut shared.fds);
        return match &shared.handle.fds {
            FdSource::Broker { name, .. } => {
                let checked = broker::registered_here(name, &shared.handle.object_id, &fds);
                let lease = if leased {
                    match broker::lease(&shared.handle, name) {
                        Ok(ticket) => ticket.map(|t| Lease::new(name.clone(), t)),
                        // The exporter has exited: nothing counts importers
                        // any more, and the memory lives with the descriptors.
                        Err(Error::Closed { .. }) => None,
                        Err(e) => return Err(e),
                    }
                } else {
                    None
                };
                Ok(Taken {
                    fds,
                    lease,
                    checked,
                    facts: None,
                })
            }
            _ => Ok(Taken {
                fds,
                lease: None,
                checked: false,
                facts: None,
            }),
        };
    }
    match &shared.handle.fds {
        FdSource::None => Ok(Taken {
            fds: Vec::new(),
            lease: None,
            checked: false,
            facts: None,
        }),
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
            Ok(taken(
                broker::fetch(&shared.handle, name, count)?,
                name,
                leased,
            ))
        }
    }
}
