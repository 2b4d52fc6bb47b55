//! Waiting: the adaptive spin-then-sleep policy and runtime-agnostic futures.
//!
//! Awaitable waits must not block an executor thread and must not tie users
//! to one async runtime. [`blocking_future`] runs a blocking wait on a
//! dedicated waiter thread and completes a plain [`std::future::Future`] that
//! any executor can poll (tokio, async-std, smol, a hand-written one).
//!
//! A future dropped before it completes (a `select!` that took another
//! branch, a timeout around it) cancels its wait: the waiter thread notices
//! within [`CANCEL_CHECK`] and ends, whatever timeout the wait had (even
//! none). Backends get this for free by waiting through [`spin_then_sleep`].

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::device::WaitFuture;
use crate::error::{Error, Result};
use crate::kit::os::lock::lock;

struct Shared {
    result: Option<Result<()>>,
    waker: Option<Waker>,
}

struct ThreadFuture {
    shared: Arc<Mutex<Shared>>,
    started: Option<Box<dyn FnOnce() -> Result<()> + Send + 'static>>,
    cancelled: Arc<AtomicBool>,
}

/// How long a waiter thread whose future was dropped may go on sleeping
/// before it notices and ends.
pub const CANCEL_CHECK: Duration = Duration::from_millis(20);

thread_local! {
    /// The cancellation flag of the future this waiter thread serves.
    static CANCEL: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// The cancellation flag of the wait running on this thread, if it runs
/// for a [`blocking_future`].
fn cancel_flag() -> Option<Arc<AtomicBool>> {
    CANCEL.with(|c| c.borrow().clone())
}

impl Drop for ThreadFuture {
    fn drop(&mut self) {
        // Done or not, nobody waits for the result any more.
        self.cancelled.store(true, Ordering::Release);
    }
}

impl Future for ThreadFuture {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let Some(work) = self.started.take() {
            let shared = Arc::clone(&self.shared);
            let cancelled = Arc::clone(&self.cancelled);
            lock(&shared).waker = Some(cx.waker().clone());
            let spawned = crate::kit::os::thread::spawn(WAITER_THREAD, move || {
                CANCEL.with(|c| *c.borrow_mut() = Some(cancelled));
                let r = work();
                let mut s = lock(&shared);
                s.result = Some(r);
                if let Some(w) = s.waker.take() {
                    w.wake();
                }
            });
            if let Err(e) = spawned {
                return Poll::Ready(Err(Error::io("spawning a waiter thread", e)));
            }
        }
        let mut s = lock(&self.shared);
        match s.result.take() {
            Some(r) => Poll::Ready(r),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// The name of waiter threads.
pub const WAITER_THREAD: &str = "hal-waiter";

/// How many polls a spinning wait makes between two reads of the clock
/// (notifies here, the channel's waits too): a read costs as much as
/// several polls on virtual machines, and a spinner that read it after
/// each poll would see its peer's change that much later.
pub(crate) const CLOCK_EVERY: u32 = 32;

/// A future that runs `wait` on a waiter thread when first polled and
/// completes with its result. The executor thread never blocks.
///
/// Dropping the future before it completes cancels the wait: a `wait` that
/// sleeps through [`spin_then_sleep`] returns within [`CANCEL_CHECK`] and
/// its thread ends.
pub fn blocking_future<F>(wait: F) -> WaitFuture<'static>
where
    F: FnOnce() -> Result<()> + Send + 'static,
{
    Box::pin(ThreadFuture {
        shared: Arc::new(Mutex::new(Shared {
            result: None,
            waker: None,
        })),
        started: Some(Box::new(wait)),
        cancelled: Arc::new(AtomicBool::new(false)),
    })
}

/// A future that is ready at once with `r` (for errors found before waiting).
pub fn ready(r: Result<()>) -> WaitFuture<'static> {
    Box::pin(std::future::ready(r))
}

/// Spin on `done` for at most `spin`, then call `sleep(remaining)` until
/// `done` holds or `timeout` passes. `sleep` blocks for at most the duration
/// it is given (or forever for `None`) and may return early.
///
/// This is the adaptive policy of every hal wait: an active peer is answered
/// almost as fast as pure spinning, an idle waiter burns no CPU.
///
/// On the waiter thread of a [`blocking_future`], each sleep lasts at most
/// [`CANCEL_CHECK`], and a wait whose future was dropped returns
/// [`Error::Closed`] (nobody receives it) instead of sleeping on.
pub fn spin_then_sleep(
    what: &str,
    spin: Duration,
    timeout: Option<Duration>,
    mut done: impl FnMut() -> bool,
    mut sleep: impl FnMut(Option<Duration>),
) -> Result<()> {
    // A wait whose future was dropped stops before it looks at the
    // condition again: looking may consume it (a notify's signal), and
    // nobody would receive it.
    let cancel = cancel_flag();
    let cancelled = || {
        cancel
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::Acquire))
    };
    let dropped = || Error::Closed {
        what: format!("the wait for {what}: its future was dropped"),
    };
    if cancelled() {
        return Err(dropped());
    }
    if done() {
        return Ok(());
    }
    // Read only now: a wait that finds what it waits for pays no clock
    // read (tens of nanoseconds on virtual machines).
    let start = Instant::now();
    if !spin.is_zero() {
        let spin = timeout.map_or(spin, |t| spin.min(t));
        // `done` is polled after every pause instruction. A pause costs tens
        // of nanoseconds on current CPUs (about 25 ns on AMD Zen 5, about
        // 40 ns on Intel since Skylake), so polling after 64 of them, as this
        // loop once did, answered a spinning peer up to 1.6 us late: 16 times
        // a raw spin round trip (`halctl bench`, notify-spin-pingpong). The
        // clock (and cancellation) is read every CLOCK_EVERY (32) polls and the CPU is
        // offered to other threads every 4096 polls (about 100 us), as before.
        let mut polls = 0u32;
        loop {
            if done() {
                return Ok(());
            }
            std::hint::spin_loop();
            polls = polls.wrapping_add(1);
            if polls % CLOCK_EVERY == 0 {
                if start.elapsed() >= spin {
                    break;
                }
                if cancelled() {
                    return Err(dropped());
                }
                if polls % 4096 == 0 {
                    std::thread::yield_now();
                }
            }
        }
    }
    loop {
        if cancelled() {
            return Err(dropped());
        }
        if done() {
            return Ok(());
        }
        let mut remaining = match timeout {
            None => None,
            Some(t) => match t.checked_sub(start.elapsed()) {
                Some(r) if !r.is_zero() => Some(r),
                _ => {
                    return Err(Error::Timeout {
                        after: t,
                        what: what.to_string(),
                    })
                }
            },
        };
        if cancel.is_some() {
            remaining = Some(remaining.map_or(CANCEL_CHECK, |r| r.min(CANCEL_CHECK)));
        }
        sleep(remaining);
    }
}

/// [`spin_then_sleep`] on a condition whose look can fail (a vendor's
/// stream or event query): until `done` answers true, answers an error
/// (returned as it is), or `timeout` passes.
pub fn poll_until(
    what: &str,
    spin: Duration,
    timeout: Option<Duration>,
    mut done: impl FnMut() -> Result<bool>,
    sleep: impl FnMut(Option<Duration>),
) -> Result<()> {
    let mut failed = None;
    let waited = spin_then_sleep(
        what,
        spin,
        timeout,
        || match done() {
            Ok(d) => d,
            Err(e) => {
                failed = Some(e);
                true
            }
        },
        sleep,
    );
    match failed {
        Some(e) => Err(e),
        None => waited,
    }
}

/// Block on a future on the calling thread (for tests and examples that have
/// no executor).
pub fn block_on<F: Future>(fut: F) -> F::Output {
    struct ThreadWaker(std::thread::Thread);
    impl std::task::Wake for ThreadWaker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_look_ends_the_wait_with_its_error() {
        let mut looks = 0;
        let r = poll_until(
            "a failing query",
            Duration::ZERO,
            None,
            || {
                looks += 1;
                if looks < 3 {
                    Ok(false)
                } else {
                    Err(Error::unsupported("test", "query", "it failed"))
                }
            },
            |_| {},
        );
        assert!(
            matches!(r, Err(Error::Unsupported { .. })),
            "the query's own error: {r:?}"
        );
        assert_eq!(looks, 3);
        assert!(poll_until("done", Duration::ZERO, None, || Ok(true), |_| {}).is_ok());
        assert!(matches!(
            poll_until(
                "never",
                Duration::ZERO,
                Some(Duration::ZERO),
                || Ok(false),
                |_| {}
            ),
            Err(Error::Timeout { .. })
        ));
    }

    #[test]
    fn future_completes_from_waiter_thread() {
        let flag = Arc::new(AtomicBool::new(false));
        let f2 = Arc::clone(&flag);
        let fut = blocking_future(move || {
            std::thread::sleep(Duration::from_millis(5));
            f2.store(true, Ordering::SeqCst);
            Ok(())
        });
        block_on(fut).unwrap();
        assert!(flag.load(Ordering::SeqCst));
    }

    #[test]
    fn a_dropped_future_ends_its_wait() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (asleep_tx, asleep) = std::sync::mpsc::channel();
        let slept = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&slept);
        let mut fut = blocking_future(move || {
            let r = spin_then_sleep(
                "nothing",
                Duration::ZERO,
                None,
                || false,
                |d| {
                    seen.lock().unwrap().push(d);
                    let _ = asleep_tx.send(());
                    std::thread::sleep(Duration::from_millis(1));
                },
            );
            let _ = tx.send(r);
            Ok(())
        });
        let waker = Waker::from(Arc::new(Noop));
        assert!(fut
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        asleep
            .recv_timeout(Duration::from_secs(30))
            .expect("the waiter thread sleeps");
        drop(fut);
        let r = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the cancelled wait returned");
        assert!(matches!(r, Err(Error::Closed { .. })), "{r:?}");
        // Every sleep of a wait without a timeout was bounded.
        let slept = slept.lock().unwrap();
        assert!(!slept.is_empty());
        assert!(slept.iter().all(|d| *d == Some(CANCEL_CHECK)));
    }

    #[test]
    fn waits_outside_a_future_sleep_as_asked() {
        let mut slept = Vec::new();
        let mut n = 0;
        spin_then_sleep(
            "three naps",
            Duration::ZERO,
            None,
            || {
                n += 1;
                n > 3
            },
            |d| slept.push(d),
        )
        .unwrap();
        assert!(slept.iter().all(Option::is_none), "{slept:?}");
    }

    struct Noop;
    impl std::task::Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }

    #[test]
    fn spin_then_sleep_times_out() {
        let e = spin_then_sleep(
            "nothing",
            Duration::from_micros(10),
            Some(Duration::from_millis(3)),
            || false,
            |d| std::thread::sleep(d.unwrap_or(Duration::from_millis(1))),
        )
        .unwrap_err();
        assert!(e.is_timeout());
    }
}
