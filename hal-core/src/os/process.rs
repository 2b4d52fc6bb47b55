//! Who this process is and whether another one lives: the pid (kept, and
//! read again after `fork`), start times read from `/proc/PID/stat`, the
//! pid namespace.

use std::io::Read as _;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Once, OnceLock};

/// This process's pid, once read (0: to be read).
static PID: AtomicU32 = AtomicU32::new(0);
/// This process's pid namespace, once read (0: to be read).
static PID_NS: AtomicU64 = AtomicU64::new(0);
static FORK_HOOK: Once = Once::new();

/// Runs in a child right after `fork`: its pid and pid namespace must be
/// read again.
extern "C" fn forget_in_child() {
    PID.store(0, Ordering::SeqCst);
    PID_NS.store(0, Ordering::SeqCst);
}

/// This process's pid. It is read once (`getpid` is a system call: glibc
/// does not keep it) and read again in a child after `fork` (a fork handler
/// forgets it).
pub fn pid() -> u32 {
    let p = PID.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    FORK_HOOK.call_once(|| {
        // SAFETY: the handler only stores into atomics, which is
        // async-signal-safe, as handlers that run in a forked child must be.
        let r = unsafe { libc::pthread_atfork(None, None, Some(forget_in_child)) };
        if r != 0 {
            log::warn!("pthread_atfork failed ({r}): the pid is read at every call");
        }
    });
    let p = std::process::id();
    if FORK_HOOK.is_completed() {
        PID.store(p, Ordering::Relaxed);
    }
    p
}

/// The contents of `/proc/PID/stat` after the command name (whose field may
/// hold spaces and parentheses: fields resume after its last `)`), read
/// with one `read` where it fits in 1 KiB; `None` when there is no such
/// process.
fn stat_fields(pid: u32, buf: &mut [u8; 1024]) -> Option<&str> {
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                if buf[n - 1] == b'\n' {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    Some(&text[text.rfind(')')? + 1..])
}

/// The start time of process `pid` in clock ticks since boot (field 22 of
/// `/proc/PID/stat`), or `None` when no such process exists.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let mut buf = [0u8; 1024];
    stat_fields(pid, &mut buf)?
        .split_ascii_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// This process's (pid, start time), computed once per process.
pub fn self_identity() -> (u32, u64) {
    static ID: OnceLock<(u32, u64)> = OnceLock::new();
    let pid = pid();
    let &(cached_pid, start) =
        ID.get_or_init(|| (pid, process_start_time(pid).unwrap_or_default()));
    if cached_pid == pid {
        (pid, start)
    } else {
        // A forked child inherits the cache; recompute.
        (pid, process_start_time(pid).unwrap_or_default())
    }
}

/// This process's pid namespace: the inode number of `/proc/self/ns/pid`
/// (what `lsns` and `readlink /proc/self/ns/pid` show as `pid:[N]`), or 0
/// when it cannot be read (no `/proc`, or a `/proc` mounted from a pid
/// namespace that does not see this process).
///
/// Two processes with the same value number processes alike, so a pid one
/// of them names means the same process to the other. A process's pid
/// namespace never changes (`unshare` and `setns` move only its later
/// children), so the value is read once; a forked child, which may be in
/// another namespace, reads it again (a fork handler forgets it).
pub fn pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let ns = PID_NS.load(Ordering::Relaxed);
    if ns != 0 {
        return ns;
    }
    let ns = std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino());
    // `pid()` registers the fork handler that forgets the value.
    if pid() != 0 && FORK_HOOK.is_completed() {
        PID_NS.store(ns, Ordering::Relaxed);
    }
    ns
}

/// True when the process `pid` that started at `start` is still alive (a
/// zombie, or a process already in its exit path, counts as dead).
/// `start == 0` means unknown and trusts the pid alone.
pub fn process_alive(pid: u32, start: u64) -> bool {
    if pid == 0 {
        return false;
    }
    let mut buf = [0u8; 1024];
    let Some(rest) = stat_fields(pid, &mut buf) else {
        return false;
    };
    // Fields after the command name: state (field 3), ..., flags (field 9),
    // ..., start time (field 22).
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return false;
    }
    // A process being torn down (PF_EXITING, set at the start of the kernel's
    // exit path, before its descriptors are closed and before it shows as a
    // zombie) counts as dead too: otherwise a peer that sees the dying
    // process's sockets close reads it as alive and misreports the cause
    // (for example an exporter killed during a broker fetch gave NotFound
    // instead of Closed).
    const PF_EXITING: u64 = 0x4;
    if fields
        .get(6)
        .and_then(|s| s.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_EXITING != 0)
    {
        return false;
    }
    start == 0 || fields.get(19).and_then(|s| s.parse::<u64>().ok()) == Some(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_pid_is_read_again_after_fork() {
        assert_eq!(pid(), std::process::id());
        assert_eq!(pid(), std::process::id(), "kept");
        // SAFETY: the child calls only async-signal-safe functions and
        // atomics, then leaves with `_exit`.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            // SAFETY: getpid is async-signal-safe and takes no argument.
            let ok = pid() as i32 == unsafe { libc::getpid() };
            // SAFETY: leaves the forked child without running the parent's
            // exit handlers or destructors twice.
            unsafe { libc::_exit(i32::from(!ok)) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }

    #[test]
    fn start_times_come_from_proc() {
        let (me, start) = self_identity();
        assert_ne!(start, 0);
        assert_eq!(process_start_time(me), Some(start));
        assert!(process_alive(me, start));
        assert!(!process_alive(me, start + 1));
        assert_eq!(process_start_time(0x7fff_fff0), None);
    }
}
