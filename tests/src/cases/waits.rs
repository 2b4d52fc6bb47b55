//! The meaning of wait timeouts, and awaitable waits that are given up.

use hal_core::DeviceExt;
use std::time::{Duration, Instant};

use hal_core::wait::WAITER_THREAD;
use hal_core::{Backend, Error, Notify, WaitOptions};

use super::sync::pending_after_one_poll;
use crate::process::report;
use crate::support::{must, must_time_out, Suite, LONG};

/// The child role that starts awaitable waits and drops them.
pub(crate) const CANCEL_ROLE: &str = "cancel-waits";

/// How many awaitable waits the child starts and drops.
const DROPPED_WAITS: usize = 200;

/// Timeouts mean one thing on every backend: `None` waits until the
/// condition holds, `Some(0)` looks once and answers at once (a signal
/// present: success, consuming it; none: `Timeout`).
pub fn notify_timeout_semantics<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let n = must(dev.create_notify(), "create_notify");
    let poll_once = WaitOptions {
        timeout: Some(Duration::ZERO),
        spin: Duration::ZERO,
    };
    must_time_out(n.wait(poll_once), "Some(0) on a notify nobody signalled");
    must(n.signal(), "signal");
    must(n.wait(poll_once), "Some(0) on a signalled notify");
    must_time_out(n.wait(poll_once), "Some(0) after the signal was consumed");
    // Some(0) with the default spin: the spin is bounded by the timeout.
    must_time_out(
        n.wait(WaitOptions::timeout(Duration::ZERO)),
        "Some(0) with a spin phase",
    );
    let forever = WaitOptions {
        timeout: None,
        spin: Duration::ZERO,
    };
    std::thread::scope(|scope| {
        let n = &n;
        scope.spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            must(n.signal(), "signal from another thread");
        });
        must(n.wait(forever), "None waits until the signal");
    });
}

/// A dropped `wait_async` future leaves no thread behind: a child starts
/// 200 awaitable waits without a timeout on a notify nobody signals (one
/// poll each starts its waiter thread), drops them, and counts its waiter
/// threads until none is left (or a generous guard runs out).
pub fn cancelled_wait_async_releases_thread<B: Backend>(s: &Suite<B>) {
    let mut child = s.spawn(CANCEL_ROLE, &[]);
    assert_eq!(
        child.expect("started"),
        DROPPED_WAITS.to_string(),
        "awaitable waits started"
    );
    assert_eq!(
        child.expect("waiters-left"),
        "0",
        "waiter threads left behind by dropped wait_async futures"
    );
    child.finish();
}

pub(crate) fn child_cancel_waits<B: Backend>(suite: &Suite<B>) {
    let dev = suite.device();
    let n = must(dev.create_notify(), "create_notify");
    let forever = WaitOptions {
        timeout: None,
        spin: Duration::ZERO,
    };
    // Threads start named after their parent and take their own name
    // later: count every thread of this process against the count before.
    let before = threads();
    let mut started = 0;
    for _ in 0..DROPPED_WAITS {
        let mut fut = n.wait_async(forever);
        if pending_after_one_poll(&mut fut) {
            started += 1;
        }
        drop(fut);
    }
    report("started", &started.to_string());
    let guard = Instant::now() + LONG;
    let left = || threads().saturating_sub(before).max(waiter_threads());
    while left() > 0 && Instant::now() < guard {
        std::thread::sleep(Duration::from_millis(10));
    }
    report("waiters-left", &left().to_string());
    // The notify still works for a wait that is not given up.
    must(n.signal(), "signal");
    match hal_core::wait::block_on(n.wait_async(WaitOptions::timeout(LONG))) {
        Ok(()) => {}
        Err(e @ Error::Timeout { .. }) => panic!("an awaited signalled notify: {e}"),
        Err(e) => panic!("an awaited signalled notify: {e}"),
    }
}

/// Threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |dir| dir.count())
}

/// Threads of this process named as waiter threads.
fn waiter_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|dir| {
            dir.flatten()
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.trim() == WAITER_THREAD)
                })
                .count()
        })
        .unwrap_or(0)
}
