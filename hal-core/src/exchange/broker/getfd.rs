//! The importer's `pidfd_getfd(2)` path: after the exporter's broker has
//! decided a request (allow-list, lease) and answered with where the
//! descriptors are ([`Located`]), the importer takes them from the exporter
//! itself, through a pidfd kept with the connection, and checks each file's
//! identity.
//!
//! - On by default for **direct** imports ([`super::direct`]: the
//!   exporter's board, no request); `HAL_PIDFD_GETFD=0` turns the path off
//!   (read once per process), `HAL_PIDFD_GETFD=1` adds the **located** form
//!   (a request answered with where the descriptors are, for what the board
//!   does not state), and [`set_enabled`] overrides both. See the
//!   `exchange` documentation.
//! - Refused (`EPERM`, `EACCES`: Yama, another user, a seccomp filter;
//!   `ENOSYS`, `EINVAL`: an older kernel): the path is off for that
//!   exporter's broker from then on and the import goes on with
//!   `SCM_RIGHTS`; said once per process with `log::warn!` where the path
//!   was asked for (`HAL_PIDFD_GETFD=1`), at debug level otherwise.
//! - A broker that does not know the request (an older hal), or an exporter
//!   this process cannot see (another pid namespace): the path is off for
//!   that broker, silently.
//! - A descriptor that is not the located file (the exporter closed the
//!   number and reused it), or not there any more: that request is fetched
//!   again with `SCM_RIGHTS`.
//! - A located descriptor is taken only if it is a memfd of the located
//!   identity, and nothing on the way can wait on the file behind the
//!   number ([`take`]): any other file (a hostile exporter's FUSE-backed
//!   file, whose `open`, `fstat` and `close` wait for its daemon, or a
//!   vendor's shareable handle) is never opened, and the request is
//!   fetched again with `SCM_RIGHTS`, so exports that are no memfds always
//!   come that way.

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

use super::located::Located;
use super::pool::Pooled;
use crate::handle::Handle;
use crate::kit::os;
use crate::kit::os::lock::lock;

/// The environment variable that turns the `pidfd_getfd` path off (`0`),
/// or on with its located form too (`1`).
pub const ENV: &str = "HAL_PIDFD_GETFD";

/// [`MODE`]: not decided yet.
const UNDECIDED: u8 = 0;
/// [`MODE`]: off.
const OFF: u8 = 1;
/// [`MODE`]: direct imports only (the default).
const DIRECT_ONLY: u8 = 2;
/// [`MODE`]: direct imports, and located fetches for the rest (asked for).
const ASKED: u8 = 3;

/// The path's mode in this process.
static MODE: AtomicU8 = AtomicU8::new(UNDECIDED);
/// Imports whose descriptors came by `pidfd_getfd`.
static TAKEN: AtomicU64 = AtomicU64::new(0);
/// Imports of those that asked no one (the exporter's board).
static DIRECT: AtomicU64 = AtomicU64::new(0);
/// Imports that tried the path and were fetched with `SCM_RIGHTS` after all.
static FELL_BACK: AtomicU64 = AtomicU64::new(0);
/// Whether the refusal was logged.
static WARNED: AtomicBool = AtomicBool::new(false);
/// Brokers the path is off for.
static OFF_FOR: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// The path's mode in this process: [`ENV`] read at the first call.
fn mode() -> u8 {
    match MODE.load(Ordering::Relaxed) {
        UNDECIDED => {
            let from_env = match std::env::var(ENV).as_deref().map(str::trim) {
                Ok("0") => OFF,
                Ok("1") => ASKED,
                _ => DIRECT_ONLY,
            };
            // A concurrent `set_enabled` wins over the environment.
            let _ =
                MODE.compare_exchange(UNDECIDED, from_env, Ordering::Relaxed, Ordering::Relaxed);
            MODE.load(Ordering::Relaxed)
        }
        m => m,
    }
}

/// Whether the path is on in this process (direct imports at least).
pub(crate) fn enabled() -> bool {
    mode() >= DIRECT_ONLY
}

/// Turn the path on (with its located form) or off in this process, or
/// (`None`) back to what [`ENV`] says.
pub(crate) fn set_enabled(on: Option<bool>) {
    MODE.store(
        match on {
            None => UNDECIDED,
            Some(false) => OFF,
            Some(true) => ASKED,
        },
        Ordering::Relaxed,
    );
}

/// How many imports came by `pidfd_getfd`, and how many tried it and
/// fell back to `SCM_RIGHTS`.
pub(crate) fn counts() -> (u64, u64) {
    (
        TAKEN.load(Ordering::Relaxed),
        FELL_BACK.load(Ordering::Relaxed),
    )
}

pub(super) fn note_taken() {
    TAKEN.fetch_add(1, Ordering::Relaxed);
}

/// An import by `pidfd_getfd` that asked no one (counted as taken too).
pub(super) fn note_direct() {
    DIRECT.fetch_add(1, Ordering::Relaxed);
    note_taken();
}

/// How many imports asked no one.
pub(crate) fn direct_count() -> u64 {
    DIRECT.load(Ordering::Relaxed)
}

pub(super) fn note_fell_back() {
    FELL_BACK.fetch_add(1, Ordering::Relaxed);
}

fn off_for() -> std::sync::MutexGuard<'static, Option<HashSet<String>>> {
    lock(&OFF_FOR)
}

/// Whether to try direct imports with the broker `name`.
pub(super) fn wanted(name: &str) -> bool {
    enabled() && !off_for().as_ref().is_some_and(|s| s.contains(name))
}

/// Whether to ask the broker `name` for locations of what its board does
/// not state: only where the path was asked for (`HAL_PIDFD_GETFD=1`);
/// by default such imports are fetched with `SCM_RIGHTS` at once.
pub(super) fn located_wanted(name: &str) -> bool {
    mode() == ASKED && wanted(name)
}

/// Whether the path is off for the broker `name`.
#[cfg(test)]
pub(super) fn is_off(name: &str) -> bool {
    off_for().as_ref().is_some_and(|s| s.contains(name))
}

/// Never try the path with the broker `name` again in this process.
pub(super) fn turn_off(name: &str) {
    off_for()
        .get_or_insert_with(HashSet::new)
        .insert(name.to_owned());
}

/// Whether `e` says that this process may not use the path at all (as
/// opposed to a descriptor or a process that is gone).
fn is_refusal(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPERM | libc::EACCES | libc::ENOSYS | libc::EINVAL)
    )
}

/// The path was refused with the broker `name`: off for it, and said once.
fn refused(name: &str, call: &str, e: &io::Error) {
    turn_off(name);
    if mode() == ASKED && !WARNED.swap(true, Ordering::Relaxed) {
        log::warn!(
            "{call} refused ({e}): descriptors are passed by the exporters' brokers instead \
             (SCM_RIGHTS, as with {ENV}=0); pidfd_getfd needs ptrace access to the exporter, \
             which Yama, seccomp profiles of container runtimes and older kernels refuse"
        );
    } else {
        log::debug!("{call} refused for the broker `{name}` ({e})");
    }
}

/// Make sure `conn` holds a pidfd of its server; false when the path is not
/// possible with it. The pidfd is opened before any request asks for
/// locations, so a reply on the connection proves that the process it
/// names was the broker's when it was opened: the broker answered, so its
/// process still lived, and a live process keeps its pid. When the handle
/// names its creator's start time under the server's pid, that is checked
/// too.
pub(super) fn ensure_pidfd(conn: &mut Pooled, handle: &Handle, name: &str) -> bool {
    if conn.pidfd().is_some() {
        return true;
    }
    let pid = conn.server.pid;
    if pid == 0 {
        // The exporter runs in a pid namespace this process cannot see.
        turn_off(name);
        return false;
    }
    let pidfd = match os::pidfd_open(pid) {
        Ok(fd) => fd,
        Err(e) if is_refusal(&e) => {
            refused(name, "pidfd_open", &e);
            return false;
        }
        Err(e) => {
            log::debug!("pidfd_open({pid}) for the broker `{name}`: {e}");
            return false;
        }
    };
    if pid == handle.creator_pid
        && handle.creator_start != 0
        && (os::process_start_time(pid) != Some(handle.creator_start)
            || !os::pidfd_alive(pidfd.as_fd()))
    {
        // This handle (forged, or naming a process that exited) is fetched
        // with SCM_RIGHTS; the path stays on for the broker's genuine ones.
        return false;
    }
    // The path is taken where the kernel grants this process ptrace
    // access to the exporter, as `pidfd_getfd` needs; the descriptors are
    // then opened through /proc ([`take`]), which never waits on them.
    if let Err(e) = os::pidfd_getfd_allowed(pidfd.as_fd()) {
        if is_refusal(&e) {
            refused(name, "pidfd_getfd", &e);
        }
        return false;
    }
    conn.set_pidfd(pidfd);
    true
}

/// What taking located descriptors gave.
pub(super) enum Took {
    /// The descriptors, each checked to be the located file, and what the
    /// check read of each (its seals and `fstat`).
    Fds(Vec<OwnedFd>, Vec<os::FileFacts>),
    /// Fetch them with `SCM_RIGHTS` instead.
    Fallback,
}

/// Take the descriptors at `places` from the process of `pidfd` (the
/// broker `name`'s, `pid`) and check that each is the file the broker
/// located, a memfd, without ever waiting on the file behind a number
/// ([`os::reach_memfd`]: an `O_PATH` open first, the identity from what
/// the kernel knows, then a new open of that very memfd): a hostile
/// exporter may locate a FUSE file, whose `open`, `fstat` and `close`
/// would each wait for its daemon.
pub(super) fn take(pidfd: BorrowedFd<'_>, pid: u32, places: &[Located], name: &str) -> Took {
    let mut fds = Vec::with_capacity(places.len());
    let mut facts = Vec::with_capacity(places.len());
    for place in places {
        let fd = match os::reach_memfd(pid, place.fd, (place.dev, place.ino)) {
            Ok(fd) => fd,
            Err(os::Unreached::Denied(e)) => {
                refused(name, "opening /proc/PID/fd", &e);
                return Took::Fallback;
            }
            Err(why) => {
                // Not a memfd (an export that is no memfd, such as a
                // vendor's shareable handle, or a hostile exporter's file),
                // another object (the number was closed and reused), or
                // gone: fetched with SCM_RIGHTS and checked as any
                // fetched descriptor is.
                log::debug!(
                    "descriptor {} of the broker `{name}`'s process is not taken ({why:?}); \
                     fetching it with SCM_RIGHTS",
                    place.fd
                );
                return Took::Fallback;
            }
        };
        // A memfd of the located identity: its seals and fstat answer at
        // once.
        let Ok(found) = os::file_facts(fd.as_fd()) else {
            return Took::Fallback;
        };
        fds.push(fd);
        facts.push(found);
    }
    // The pid named the broker's process throughout: it still lives.
    if !os::pidfd_alive(pidfd) {
        return Took::Fallback;
    }
    Took::Fds(fds, facts)
}
