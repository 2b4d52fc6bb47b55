//! Who this process is: the pid (kept, and read again after `fork`), start
//! times read from `/proc/PID/stat`, the pid namespace. Whether another
//! process lives is the kit's (`kit::os::process_alive`).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Once, OnceLock};

/// This process's pid, once read (0: to be read).
static PID: AtomicU32 = AtomicU32::new(0);
/// This process's pid namespace, once read (0: to be read).
static PID_NS: AtomicU64 = AtomicU64::new(0);
static FORK_HOOK: Once = Once::new();
/// True once the fork handler is installed: only then may the pid and the
/// pid namespace be kept, since only then does a child forget them.
static HOOKED: AtomicBool = AtomicBool::new(false);
/// How many `fork`s lie between the first process of this address space
/// and this one (counted once the fork handler is installed).
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Runs in a child right after `fork`: its pid and pid namespace must be
/// read again, and it is one generation further from its parent.
extern "C" fn forget_in_child() {
    PID.store(0, Ordering::SeqCst);
    PID_NS.store(0, Ordering::SeqCst);
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// This process's fork generation: 0 in the process that installed the
/// fork handler, one more in each child forked after that. `None` when the
/// handler could not be installed (then only the pid tells a child apart).
#[inline]
pub(crate) fn fork_generation() -> Option<u64> {
    pid();
    HOOKED
        .load(Ordering::SeqCst)
        .then(|| GENERATION.load(Ordering::Acquire))
}

/// This process's pid. It is read once (`getpid` is a system call: glibc
/// does not keep it) and read again in a child after `fork` (a fork handler
/// forgets it).
#[inline]
pub fn pid() -> u32 {
    let p = PID.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    read_pid()
}

/// The pid read from the kernel (and kept, once the fork handler is
/// installed): the first call, and the first in a forked child.
#[cold]
#[inline(never)]
fn read_pid() -> u32 {
    FORK_HOOK.call_once(|| {
        // SAFETY: the handler only stores into atomics, which is
        // async-signal-safe, as handlers that run in a forked child must be.
        let r = unsafe { libc::pthread_atfork(None, None, Some(forget_in_child)) };
        if r == 0 {
            HOOKED.store(true, Ordering::SeqCst);
        } else {
            log::warn!("pthread_atfork failed ({r}): the pid is read at every call");
        }
    });
    let p = std::process::id();
    if HOOKED.load(Ordering::SeqCst) {
        PID.store(p, Ordering::Relaxed);
    }
    p
}

/// The contents of `/proc/PID/stat` after the command name (whose field may
/// hold spaces and parentheses: fields resume after its last `)`), read
/// with one `read` where it fits in 1 KiB; `None` when there is no such
/// process.
pub(crate) fn stat_fields(pid: u32, buf: &mut [u8; 1024]) -> Option<&str> {
    let file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let n = read_line(file, buf)?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    Some(&text[text.rfind(')')? + 1..])
}

/// Read `file` into `buf` until a read ends with a newline, the file ends
/// or `buf` is full (an interrupted read is tried again): how many bytes,
/// or `None` on an error. `/proc` gives a whole line in one read, so one
/// read is the usual cost.
fn read_line(mut file: impl std::io::Read, buf: &mut [u8]) -> Option<usize> {
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
    Some(n)
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
    // `pid()` installs the fork handler that forgets the value.
    pid();
    if HOOKED.load(Ordering::SeqCst) {
        PID_NS.store(ns, Ordering::Relaxed);
    }
    ns
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::os::process_alive;

    #[test]
    fn the_kept_pid_is_read_again_after_fork() {
        assert_eq!(pid(), std::process::id());
        assert_eq!(pid(), std::process::id(), "kept");
        // Kept, not read by a system call each time: the fork handler is
        // installed, so a child forgets it and counts one generation more.
        assert_eq!(PID.load(Ordering::Relaxed), std::process::id());
        let generation = fork_generation().expect("the fork handler is installed");
        // SAFETY: the child calls only async-signal-safe functions and
        // atomics, then leaves with `_exit`.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            // SAFETY: getpid is async-signal-safe and takes no argument.
            let ok = pid() as i32 == unsafe { libc::getpid() }
                && fork_generation() == Some(generation + 1);
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

    /// A reader that answers each read with the next of `reads`, and counts
    /// the reads.
    struct Script {
        reads: std::collections::VecDeque<std::io::Result<&'static [u8]>>,
        count: usize,
    }

    impl std::io::Read for Script {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.count += 1;
            let Some(next) = self.reads.pop_front() else {
                return Ok(0);
            };
            let bytes = next?;
            let n = bytes.len().min(buf.len());
            buf[..n].copy_from_slice(&bytes[..n]);
            Ok(n)
        }
    }

    fn script(reads: Vec<std::io::Result<&'static [u8]>>) -> Script {
        Script {
            reads: reads.into(),
            count: 0,
        }
    }

    #[test]
    fn a_line_is_read_until_a_read_ends_it() {
        let mut buf = [0u8; 64];
        let mut lines = script(vec![Ok(b"12 (a b) "), Ok(b"S 1\n"), Ok(b"more")]);
        assert_eq!(read_line(&mut lines, &mut buf), Some(13));
        assert_eq!(&buf[..13], b"12 (a b) S 1\n");
        assert_eq!(lines.count, 2, "no read after the newline");
        let mut short = script(vec![Ok(b"no newline")]);
        assert_eq!(read_line(&mut short, &mut buf), Some(10));
        assert_eq!(short.count, 2, "read until the end of the file");
        let mut small = [0u8; 4];
        let mut full = script(vec![Ok(b"abcd"), Ok(b"efgh")]);
        assert_eq!(read_line(&mut full, &mut small), Some(4));
        assert_eq!(full.count, 1, "no read into a full buffer");
    }

    #[test]
    fn an_interrupted_read_is_tried_again_and_an_error_ends_the_line() {
        use std::io::{Error, ErrorKind};
        let mut buf = [0u8; 64];
        let interrupted = || Err(Error::from(ErrorKind::Interrupted));
        let mut again = script(vec![interrupted(), Ok(b"x\n")]);
        assert_eq!(read_line(&mut again, &mut buf), Some(2));
        let mut failed = script(vec![Err(Error::from(ErrorKind::Other)), Ok(b"x\n")]);
        assert_eq!(read_line(&mut failed, &mut buf), None);
    }

    /// A forked child inherits the parent's cached identity; it must answer
    /// its own pid and start time.
    #[test]
    fn a_forked_child_has_an_identity_of_its_own() {
        let (me, start) = self_identity();
        // Start times count clock ticks (10 ms at 100 Hz): a child forked
        // later than two ticks after this process started cannot share its
        // start time.
        std::thread::sleep(std::time::Duration::from_millis(30));
        // SAFETY: the child reads /proc (glibc makes malloc usable after
        // fork) and leaves with `_exit`.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            // SAFETY: getpid is async-signal-safe and takes no argument.
            let own = unsafe { libc::getpid() } as u32;
            let (pid, start_here) = self_identity();
            let ok = pid == own
                && pid != me
                && start_here != start
                && Some(start_here) == process_start_time(own);
            // SAFETY: leaves the child without the parent's exit handlers.
            unsafe { libc::_exit(i32::from(!ok)) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
}
