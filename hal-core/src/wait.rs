//! Waiting: the adaptive spin-then-sleep policy and runtime-agnostic futures.
//!
//! Awaitable waits must not block an executor thread and must not tie users
//! to one async runtime. [`blocking_future`] runs a blocking wait on a
//! dedicated waiter thread and completes a plain [`std::future::Future`] that
//! any executor can poll (tokio, async-std, smol, a hand-written one).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::device::WaitFuture;
use crate::error::{Error, Result};

struct Shared {
    result: Option<Result<()>>,
    waker: Option<Waker>,
}

struct ThreadFuture {
    shared: Arc<Mutex<Shared>>,
    started: Option<Box<dyn FnOnce() -> Result<()> + Send + 'static>>,
}

impl Future for ThreadFuture {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let Some(work) = self.started.take() {
            let shared = Arc::clone(&self.shared);
            shared.lock().unwrap_or_else(|p| p.into_inner()).waker = Some(cx.waker().clone());
            let spawned = std::thread::Builder::new()
                .name("hal-waiter".into())
                .spawn(move || {
                    let r = work();
                    let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
                    s.result = Some(r);
                    if let Some(w) = s.waker.take() {
                        w.wake();
                    }
                });
            if let Err(e) = spawned {
                return Poll::Ready(Err(Error::io("spawning a waiter thread", e)));
            }
        }
        let mut s = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        match s.result.take() {
            Some(r) => Poll::Ready(r),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A future that runs `wait` on a waiter thread when first polled and
/// completes with its result. The executor thread never blocks.
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
pub fn spin_then_sleep(
    what: &str,
    spin: Duration,
    timeout: Option<Duration>,
    mut done: impl FnMut() -> bool,
    mut sleep: impl FnMut(Option<Duration>),
) -> Result<()> {
    let start = Instant::now();
    if done() {
        return Ok(());
    }
    if !spin.is_zero() {
        let spin = timeout.map_or(spin, |t| spin.min(t));
        // `done` is polled after every pause instruction. A pause costs tens
        // of nanoseconds on current CPUs (about 25 ns on AMD Zen 5, about
        // 40 ns on Intel since Skylake), so polling after 64 of them, as this
        // loop once did, answered a spinning peer up to 1.6 us late: 16 times
        // a raw spin round trip (`halctl bench`, notify-spin-pingpong). The
        // clock is read every 32 polls and the CPU is offered to other
        // threads every 4096 polls (about 100 us), as before.
        let mut polls = 0u32;
        loop {
            if done() {
                return Ok(());
            }
            std::hint::spin_loop();
            polls = polls.wrapping_add(1);
            if polls % 32 == 0 {
                if start.elapsed() >= spin {
                    break;
                }
                if polls % 4096 == 0 {
                    std::thread::yield_now();
                }
            }
        }
    }
    loop {
        if done() {
            return Ok(());
        }
        let remaining = match timeout {
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
        sleep(remaining);
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
    use std::sync::atomic::{AtomicBool, Ordering};

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
