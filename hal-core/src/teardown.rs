//! Dropping what must wait for the device's queued work, without waiting
//! for ever.
//!
//! A vendor backend unmaps a reservation only after the work queued on the
//! device has run (`cuCtxSynchronize`, `aclrtSynchronizeDevice`): a kernel
//! or copy may still use the range through its address. That work may wait
//! for a notify that another process signals late, or never (the peer
//! crashed), and a `Drop` that waited for it would hang the dropping thread
//! for as long. [`after_work`] runs such a teardown (the wait, then the
//! unmaps and frees) on a thread of its own and waits for it for at most
//! [`GRACE`]: when the device is idle the drop has released everything when
//! it returns; when it is not, the drop returns and the teardown finishes
//! once the work has run. Work that never runs keeps what the teardown
//! would free until the process ends.
//!
//! ```
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::sync::Arc;
//!
//! let freed = Arc::new(AtomicBool::new(false));
//! let f = Arc::clone(&freed);
//! hal_core::teardown::after_work("example-teardown", move || f.store(true, Ordering::Release));
//! // Nothing to wait for: done before `after_work` returned.
//! assert!(freed.load(Ordering::Acquire));
//! assert_eq!(hal_core::teardown::unfinished(), 0);
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How long a drop waits for its teardown before it returns and lets the
/// teardown finish on its own.
pub const GRACE: Duration = Duration::from_millis(100);

/// Teardowns handed to [`after_work`] that have not finished.
static UNFINISHED: AtomicUsize = AtomicUsize::new(0);

/// How many teardowns handed to [`after_work`] in this process have not
/// finished yet (their device work has not run).
pub fn unfinished() -> usize {
    UNFINISHED.load(Ordering::Acquire)
}

/// Run `teardown` on a thread named `name` and wait up to [`GRACE`] for it
/// to finish. Where no thread can be started, it runs here, and the caller
/// waits for it as long as it takes.
pub fn after_work(name: &str, teardown: impl FnOnce() + Send + 'static) {
    // The job and whether it finished: taken back to run here when no
    // thread starts (a failed spawn drops its closure unrun).
    let job = Arc::new(Mutex::new(Some(teardown)));
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    UNFINISHED.fetch_add(1, Ordering::AcqRel);
    let (their_job, their_done) = (Arc::clone(&job), Arc::clone(&done));
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let teardown = their_job.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(teardown) = teardown {
                teardown();
            }
            finished(&their_done);
        });
    if let Err(e) = spawned {
        log::warn!("no thread for {name} could be started ({e}); waiting for the device here");
        let teardown = job.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(teardown) = teardown {
            teardown();
        }
        finished(&done);
        return;
    }
    let (flag, changed) = &*done;
    let guard = flag.lock().unwrap_or_else(|p| p.into_inner());
    let (guard, waited) = changed
        .wait_timeout_while(guard, GRACE, |finished| !*finished)
        .unwrap_or_else(|p| p.into_inner());
    if waited.timed_out() && !*guard {
        log::debug!("{name}: the device's queued work has not run yet; finishing when it has");
    }
}

fn finished(done: &(Mutex<bool>, Condvar)) {
    UNFINISHED.fetch_sub(1, Ordering::AcqRel);
    *done.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
    done.1.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_teardown_that_waits_finishes_after_the_drop_returned() {
        let (open, gate) = mpsc::channel::<()>();
        let (tell, told) = mpsc::channel();
        let before = unfinished();
        after_work("test-teardown", move || {
            let _ = gate.recv();
            let _ = tell.send(std::thread::current().name().map(String::from));
        });
        assert!(
            unfinished() > before,
            "returned after the grace, still waiting"
        );
        open.send(()).unwrap();
        let name = told.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(name.as_deref(), Some("test-teardown"), "on its own thread");
    }
}
