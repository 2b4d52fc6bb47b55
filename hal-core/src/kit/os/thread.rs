//! Every thread hal starts, started one way: with every asynchronous
//! signal blocked.
//!
//! A program that embeds hal decides which of its threads take signals: a
//! PostgreSQL backend expects its latch's `SIGUSR1`, `SIGTERM` and `SIGINT`
//! on its one thread, and a signal the kernel gives a hal thread instead
//! would be lost for it (or run its handler on a thread the handler does
//! not expect). So [`spawn`] and [`spawn_scoped`] block the signals on the
//! calling thread just for the spawn, the child inherits that mask, and the
//! caller's own mask is put back before they return: a signal that arrived
//! meanwhile stays pending and is taken by the caller then.
//!
//! The synchronous signals ([`SYNCHRONOUS`]: `SIGSEGV`, `SIGBUS`, `SIGFPE`,
//! `SIGILL`, `SIGTRAP`, `SIGSYS`) stay unblocked: the kernel raises them on
//! the thread that faulted, whose mask cannot send them elsewhere, and a
//! fault raised while blocked kills the process without running the
//! program's handler. glibc's own two real-time signals (32 and 33, for
//! thread cancellation and `setxid`) cannot be blocked.
//!
//! ```
//! let t = hal_core::kit::os::thread::spawn("hal-example", || 7).unwrap();
//! assert_eq!(t.join().unwrap(), 7);
//! ```

use std::io;
use std::thread::{Builder, JoinHandle, Scope, ScopedJoinHandle};

use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};

/// The signals a hal thread leaves unblocked: raised by a fault of the
/// thread itself, never sent to the process.
pub const SYNCHRONOUS: [Signal; 6] = [
    Signal::SIGSEGV,
    Signal::SIGBUS,
    Signal::SIGFPE,
    Signal::SIGILL,
    Signal::SIGTRAP,
    Signal::SIGSYS,
];

/// The set a hal thread blocks: every signal but [`SYNCHRONOUS`].
pub fn blocked_set() -> SigSet {
    let mut set = SigSet::all();
    for s in SYNCHRONOUS {
        set.remove(s);
    }
    set
}

/// Start a thread named `name` running `f`, with every asynchronous signal
/// blocked in it; the calling thread's mask is as it was when this returns.
pub fn spawn<F, T>(name: &str, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let builder = Builder::new().name(name.to_string());
    with_signals_blocked(|| builder.spawn(f))
}

/// [`spawn`] in a `std::thread::scope`.
pub fn spawn_scoped<'scope, 'env, F, T>(
    scope: &'scope Scope<'scope, 'env>,
    name: &str,
    f: F,
) -> io::Result<ScopedJoinHandle<'scope, T>>
where
    F: FnOnce() -> T + Send + 'scope,
    T: Send + 'scope,
{
    let builder = Builder::new().name(name.to_string());
    with_signals_blocked(|| builder.spawn_scoped(scope, f))
}

/// Run `f` with the signals of [`blocked_set`] blocked on this thread,
/// then restore the mask this thread had.
fn with_signals_blocked<R>(f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
    let mut old = SigSet::empty();
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&blocked_set()), Some(&mut old))
        .map_err(|e| io::Error::other(format!("blocking signals for a hal thread: {e}")))?;
    let r = f();
    if let Err(e) = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None) {
        // Cannot happen with a valid set; say so rather than leave the
        // caller deaf to its signals without a word.
        log::warn!("restoring the signal mask after starting a hal thread: {e}");
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mask() -> SigSet {
        let mut now = SigSet::empty();
        pthread_sigmask(SigmaskHow::SIG_BLOCK, None, Some(&mut now)).unwrap();
        now
    }

    #[test]
    fn the_thread_blocks_and_the_caller_keeps_its_mask() {
        let before = mask();
        let inside = spawn("hal-test-mask", mask).unwrap().join().unwrap();
        for s in Signal::iterator().filter(|s| ![Signal::SIGKILL, Signal::SIGSTOP].contains(s)) {
            assert_eq!(
                inside.contains(s),
                !SYNCHRONOUS.contains(&s),
                "{s:?} in the thread"
            );
            assert_eq!(
                mask().contains(s),
                before.contains(s),
                "{s:?} in the caller"
            );
        }
    }

    #[test]
    fn scoped_threads_block_too() {
        let inside = std::thread::scope(|s| {
            spawn_scoped(s, "hal-test-mask", mask)
                .unwrap()
                .join()
                .unwrap()
        });
        assert!(inside.contains(Signal::SIGUSR1) && inside.contains(Signal::SIGTERM));
        assert!(!inside.contains(Signal::SIGSEGV));
    }
}
