//! Dropping what must wait for the device's queued work, without waiting
//! for ever.
//!
//! A vendor backend unmaps a reservation only after the work queued on the
//! device has run (`cuCtxSynchronize`, `aclrtSynchronizeDevice`), and a
//! driver may synchronize the device when it frees memory (`cuMemFree`
//! "may perform implicit synchronization"): a kernel or copy may still use
//! the memory through its address. That work may wait for a notify that
//! another process signals late, or never (the peer crashed), and a `Drop`
//! that waited for it would hang the dropping thread for as long.
//! [`after_work`] runs such a teardown (the wait, then the unmaps and
//! frees) on a worker thread and waits for it for at most [`GRACE`]: when
//! the device is idle the drop has released everything when it returns;
//! when it is not, the drop returns and the teardown finishes once the
//! work has run. Work that never runs keeps what the teardown would free
//! until the process ends.
//!
//! Memory a pending teardown frees is not back yet: an allocation that
//! finds the device full while teardowns are pending waits for them and
//! tries again ([`when_freed`], for at most [`PATIENCE`]), so dropping a
//! buffer and allocating the next of its size still succeeds on a device
//! that is merely busy.
//!
//! The workers are kept: a teardown goes to one that is idle, and a new
//! one starts only when every worker is busy (one may be stuck behind a
//! crashed peer's work, and must not hold back the teardowns of other
//! devices). A worker idle for [`IDLE`] ends.
//!
//! ```
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::sync::Arc;
//!
//! let freed = Arc::new(AtomicBool::new(false));
//! let f = Arc::clone(&freed);
//! hal_core::kit::stream::teardown::after_work("example-teardown", move || f.store(true, Ordering::Release));
//! // Nothing to wait for: done before `after_work` returned.
//! assert!(freed.load(Ordering::Acquire));
//! assert_eq!(hal_core::kit::stream::teardown::unfinished(), 0);
//! ```

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::kit::os::lock::{lock, wait_timeout, wait_timeout_while};
use crate::{Error, Result};

/// How long a drop waits for its teardown before it returns and lets the
/// teardown finish on its own.
pub const GRACE: Duration = Duration::from_millis(100);

/// How long an allocation refused for lack of memory waits, with
/// [`when_freed`], for this process's pending teardowns before it answers
/// with the refusal: long enough for a busy device's queued work, short
/// enough that work waiting for a crashed peer ends in an error.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// How long a worker with nothing to do waits for a teardown before it
/// ends.
pub const IDLE: Duration = Duration::from_secs(10);

/// The name of the worker threads.
pub const WORKER_NAME: &str = "hal-teardown";

/// The pool of this process.
static POOL: Pool = Pool::new(IDLE);

/// How many teardowns handed to [`after_work`] in this process have not
/// finished yet (their device work has not run).
pub fn unfinished() -> usize {
    POOL.unfinished.load(Ordering::Acquire)
}

/// How many worker threads this process has now, busy or idle.
pub fn workers() -> usize {
    POOL.lock().workers
}

/// Run `attempt`; while it fails for lack of memory (`for_lack_of_memory`
/// says which errors are) and teardowns handed to [`after_work`] are
/// unfinished (what they free may be the memory it lacks), wait for one of
/// them to finish and try again, for at most `patience` in all. Past that,
/// the last error, saying how many teardowns still wait for the device.
pub fn when_freed<T>(
    patience: Duration,
    for_lack_of_memory: impl Fn(&Error) -> bool,
    attempt: impl FnMut() -> Result<T>,
) -> Result<T> {
    POOL.when_freed(patience, for_lack_of_memory, attempt)
}

/// Run `teardown` on a worker thread and wait up to [`GRACE`] for it to
/// finish; `name` says in the log what it was. Where no worker is idle and
/// no thread can be started, it runs here, and the caller waits for it as
/// long as it takes.
pub fn after_work(name: &str, teardown: impl FnOnce() + Send + 'static) {
    POOL.after_work(name, teardown);
}

/// Run `teardown` here when `waits` is false (nothing it does waits for
/// the device: a reservation with nothing mapped), else as
/// [`after_work`] does.
pub fn after_work_if(waits: bool, name: &str, teardown: impl FnOnce() + Send + 'static) {
    if waits {
        after_work(name, teardown);
    } else {
        teardown();
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// Workers and the teardowns they have to run.
struct Pool {
    queue: Mutex<Queue>,
    /// Rung when a job is queued for an idle worker.
    queued: Condvar,
    /// Teardowns handed over that have not finished.
    unfinished: AtomicUsize,
    /// How long a worker waits for a job before it ends.
    idle_for: Duration,
    /// How many teardowns have finished, rung at each.
    finished: Mutex<u64>,
    finished_one: Condvar,
}

/// The teardowns no worker has taken yet, and the workers.
struct Queue {
    jobs: VecDeque<Job>,
    /// Workers waiting for a job.
    idle: usize,
    /// Workers alive.
    workers: usize,
    /// The process the workers were started in: a child forked from it
    /// has none of them.
    origin: Option<crate::kit::os::Origin>,
}

impl Pool {
    const fn new(idle_for: Duration) -> Self {
        Self {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                idle: 0,
                workers: 0,
                origin: None,
            }),
            queued: Condvar::new(),
            unfinished: AtomicUsize::new(0),
            idle_for,
            finished: Mutex::new(0),
            finished_one: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A job runs outside the lock, so no panic of a job poisons it.
        let mut queue = lock(&self.queue);
        if queue.origin.is_some_and(|o| o.forked()) {
            // A forked child: its parent's workers did not come along, and
            // the teardowns they had not run are the parent's (its vendor
            // context): they are forgotten, never run here.
            for job in std::mem::take(&mut queue.jobs) {
                std::mem::forget(job);
            }
            queue.idle = 0;
            queue.workers = 0;
            queue.origin = None;
            self.unfinished.store(0, Ordering::Release);
        }
        queue
    }

    fn after_work(&'static self, name: &str, teardown: impl FnOnce() + Send + 'static) {
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        self.unfinished.fetch_add(1, Ordering::AcqRel);
        let theirs = Arc::clone(&done);
        let job: Job = Box::new(move || {
            // A teardown that panics is counted finished, and its worker
            // lives on.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(teardown)).is_err() {
                log::error!("a teardown panicked; what it was freeing may be left");
            }
            self.unfinished.fetch_sub(1, Ordering::AcqRel);
            *lock(&self.finished) += 1;
            self.finished_one.notify_all();
            *lock(&theirs.0) = true;
            theirs.1.notify_all();
        });
        if let Some(job) = self.hand_over(job) {
            log::warn!("no thread for {name} could be started; waiting for the device here");
            job();
            return;
        }
        let (flag, changed) = &*done;
        let guard = lock(flag);
        let (guard, _) = wait_timeout_while(changed, guard, GRACE, |finished| !*finished);
        if !*guard {
            log::debug!("{name}: the device's queued work has not run yet; finishing when it has");
        }
    }

    fn when_freed<T>(
        &self,
        patience: Duration,
        for_lack_of_memory: impl Fn(&Error) -> bool,
        mut attempt: impl FnMut() -> Result<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + patience;
        loop {
            // Read before the attempt: a teardown that finishes during it
            // counts as progress, and the next attempt follows at once.
            let seen = *lock(&self.finished);
            let e = match attempt() {
                Err(e) if for_lack_of_memory(&e) => e,
                other => return other,
            };
            let pending = self.unfinished.load(Ordering::Acquire);
            if pending == 0 || !self.wait_for_one(seen, deadline) {
                return Err(pending_said(e, self.unfinished.load(Ordering::Acquire)));
            }
        }
    }

    /// Wait until more teardowns than `seen` have finished, or `deadline`
    /// passed; true in the first case.
    fn wait_for_one(&self, seen: u64, deadline: Instant) -> bool {
        let mut finished = lock(&self.finished);
        while *finished == seen {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return false;
            };
            finished = wait_timeout(&self.finished_one, finished, left).0;
        }
        true
    }

    /// Give `job` to an idle worker, or to a new one; the job back when no
    /// worker could be started.
    fn hand_over(&'static self, job: Job) -> Option<Job> {
        let mut queue = self.lock();
        if queue.jobs.len() < queue.idle {
            queue.jobs.push_back(job);
            self.queued.notify_one();
            return None;
        }
        // Every worker is busy, or already has a job coming: a new one
        // starts with this job. A failed spawn drops its closure unrun, so
        // the job travels in a slot it can be taken back from.
        let slot = Arc::new(Mutex::new(Some(job)));
        let theirs = Arc::clone(&slot);
        let spawned = crate::kit::os::thread::spawn(WORKER_NAME, move || {
            let first = lock(&theirs).take();
            if let Some(first) = first {
                first();
            }
            self.work();
        });
        match spawned {
            Ok(_) => {
                queue.workers += 1;
                queue
                    .origin
                    .get_or_insert_with(crate::kit::os::Origin::here);
                None
            }
            Err(e) => {
                log::warn!("starting a {WORKER_NAME} thread: {e}");
                let job = lock(&slot).take();
                job
            }
        }
    }

    /// A worker's life after its first job: the queued jobs, then a wait
    /// of at most `idle_for` for the next.
    fn work(&self) {
        let mut queue = self.lock();
        loop {
            if let Some(job) = queue.jobs.pop_front() {
                drop(queue);
                job();
                queue = self.lock();
                continue;
            }
            queue.idle += 1;
            let (back, waited) = wait_timeout(&self.queued, queue, self.idle_for);
            queue = back;
            queue.idle -= 1;
            if waited.timed_out() && queue.jobs.is_empty() {
                queue.workers -= 1;
                return;
            }
        }
    }
}

/// `e`, saying that `pending` teardowns (where there are any) still wait
/// for the device.
fn pending_said(e: Error, pending: usize) -> Error {
    if pending == 0 {
        return e;
    }
    let note = format!(
        " ({pending} teardowns of this process, frees among them, still wait for the device's \
         queued work: its memory comes back once that work has run)"
    );
    match e {
        Error::Vendor(mut v) => {
            v.message.push_str(&note);
            Error::Vendor(v)
        }
        Error::OutOfMemory { requested, detail } => Error::OutOfMemory {
            requested,
            detail: detail + &note,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::thread::ThreadId;

    /// A pool of the test's own: what the other tests hand over does not
    /// change its counts.
    fn pool() -> &'static Pool {
        Box::leak(Box::new(Pool::new(IDLE)))
    }

    /// A teardown that says on which thread it ran, once `gate` lets it go.
    fn gated(gate: mpsc::Receiver<()>, tell: mpsc::Sender<ThreadId>) -> impl FnOnce() + Send {
        move || {
            let _ = gate.recv();
            let _ = tell.send(std::thread::current().id());
        }
    }

    /// A teardown that says on which thread it ran.
    fn telling(tell: &mpsc::Sender<ThreadId>) -> impl FnOnce() + Send {
        let tell = tell.clone();
        move || {
            let _ = tell.send(std::thread::current().id());
        }
    }

    fn told(rx: &mpsc::Receiver<ThreadId>) -> ThreadId {
        rx.recv_timeout(Duration::from_secs(30)).unwrap()
    }

    #[test]
    fn a_teardown_that_waits_finishes_after_the_drop_returned() {
        let pool = pool();
        let (open, gate) = mpsc::channel::<()>();
        let (tell, rx) = mpsc::channel();
        pool.after_work("test-teardown", gated(gate, tell));
        assert_eq!(
            pool.unfinished.load(Ordering::Acquire),
            1,
            "returned after the grace, still waiting"
        );
        open.send(()).unwrap();
        assert_ne!(told(&rx), std::thread::current().id(), "on a worker");
        until_finished(pool);
    }

    /// Wait until `pool` counts every teardown finished.
    fn until_finished(pool: &Pool) {
        let end = std::time::Instant::now() + Duration::from_secs(30);
        while pool.unfinished.load(Ordering::Acquire) != 0 {
            assert!(std::time::Instant::now() < end, "counted finished");
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_teardown_that_needs_no_wait_is_done_when_the_drop_returns() {
        let pool = pool();
        let (tell, rx) = mpsc::channel();
        pool.after_work("test-quick", telling(&tell));
        assert_eq!(pool.unfinished.load(Ordering::Acquire), 0);
        assert_ne!(told(&rx), std::thread::current().id(), "on a worker");
    }

    #[test]
    fn a_stuck_teardown_holds_back_no_other_and_an_idle_worker_is_reused() {
        let pool = pool();
        let (open, gate) = mpsc::channel::<()>();
        let (tell, rx) = mpsc::channel();
        pool.after_work("test-stuck", gated(gate, tell.clone()));
        pool.after_work("test-first", telling(&tell));
        let first = told(&rx);
        // Its worker tells before it waits again: wait until it does, so
        // the next job finds it idle.
        until_idle(pool, 1);
        pool.after_work("test-second", telling(&tell));
        assert_eq!(told(&rx), first, "the idle worker took it");
        assert_eq!(pool.lock().workers, 2, "the stuck one's and the idle one");
        open.send(()).unwrap();
        assert_ne!(told(&rx), first, "the stuck one had a worker of its own");
    }

    /// Wait until `pool` has `n` idle workers.
    fn until_idle(pool: &Pool, n: usize) {
        let end = std::time::Instant::now() + Duration::from_secs(30);
        while pool.lock().idle != n {
            assert!(std::time::Instant::now() < end, "{n} workers wait again");
            std::thread::yield_now();
        }
    }

    #[test]
    fn teardowns_handed_over_at_once_each_get_an_idle_worker() {
        let pool = pool();
        let (tell, rx) = mpsc::channel();
        // Two workers, idle.
        let gates: Vec<_> = (0..2)
            .map(|_| {
                let (open, gate) = mpsc::channel::<()>();
                pool.after_work("test-warm", gated(gate, tell.clone()));
                open
            })
            .collect();
        for open in gates {
            open.send(()).unwrap();
            told(&rx);
        }
        until_idle(pool, 2);
        // One that sticks, then one right behind it, before any worker
        // woke: the second goes to the other idle worker, not behind the
        // first, and no new worker starts.
        let (open, gate) = mpsc::channel::<()>();
        pool.after_work("test-stuck", gated(gate, tell.clone()));
        pool.after_work("test-behind", telling(&tell));
        told(&rx);
        assert_eq!(pool.lock().workers, 2);
        open.send(()).unwrap();
        told(&rx);
    }

    #[test]
    fn a_teardown_that_panics_is_counted_finished_and_its_worker_lives_on() {
        let pool = pool();
        let (tell, rx) = mpsc::channel();
        pool.after_work("test-panics", || panic!("a teardown that panics"));
        // Unwinding (and printing) may take longer than the grace.
        until_finished(pool);
        until_idle(pool, 1);
        pool.after_work("test-after", telling(&tell));
        told(&rx);
        assert_eq!(pool.lock().workers, 1, "the same worker");
    }

    fn full() -> Error {
        Error::OutOfMemory {
            requested: 1,
            detail: "full".into(),
        }
    }

    fn is_full(e: &Error) -> bool {
        matches!(e, Error::OutOfMemory { .. })
    }

    #[test]
    fn an_allocation_that_finds_the_memory_taken_tries_again_once_a_teardown_freed_it() {
        let pool = pool();
        let freed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (open, gate) = mpsc::channel::<()>();
        let f = Arc::clone(&freed);
        pool.after_work("test-free", move || {
            let _ = gate.recv();
            f.store(true, Ordering::Release);
        });
        let mut attempts = 0;
        let opener = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            open.send(()).unwrap();
        });
        let got = pool.when_freed(Duration::from_secs(30), is_full, || {
            attempts += 1;
            if freed.load(Ordering::Acquire) {
                Ok(attempts)
            } else {
                Err(full())
            }
        });
        opener.join().unwrap();
        assert!(matches!(got, Ok(n) if n >= 2), "{got:?}");
    }

    #[test]
    fn a_teardown_that_never_finishes_ends_the_wait_with_the_error_saying_so() {
        let pool = pool();
        let (open, gate) = mpsc::channel::<()>();
        pool.after_work("test-stuck", move || {
            let _ = gate.recv();
        });
        let got: Result<()> = pool.when_freed(Duration::from_millis(50), is_full, || Err(full()));
        match got {
            Err(Error::OutOfMemory { detail, .. }) => {
                assert!(detail.starts_with("full ("), "{detail}");
                assert!(detail.contains("1 teardowns"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        // A vendor's error says it too.
        let vendor = pending_said(
            Error::Vendor(crate::VendorError {
                backend: "cuda".into(),
                code: 2,
                name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
                message: "cuMemAlloc_v2: out of memory".into(),
            }),
            3,
        );
        match vendor {
            Error::Vendor(v) => {
                assert_eq!((v.code, v.name.as_str()), (2, "CUDA_ERROR_OUT_OF_MEMORY"));
                assert!(v.message.contains("3 teardowns"), "{}", v.message);
            }
            other => panic!("{other:?}"),
        }
        open.send(()).unwrap();
    }

    #[test]
    fn other_errors_and_an_empty_pool_answer_at_once() {
        let pool = pool();
        let mut attempts = 0;
        let got: Result<()> = pool.when_freed(Duration::from_secs(30), is_full, || {
            attempts += 1;
            Err(full())
        });
        assert!(
            matches!(got, Err(Error::OutOfMemory { ref detail, .. }) if detail == "full"),
            "nothing pending, nothing said: {got:?}"
        );
        assert_eq!(attempts, 1);
        let got: Result<()> = pool.when_freed(Duration::from_secs(30), is_full, || {
            attempts += 1;
            Err(Error::invalid("not memory"))
        });
        assert!(matches!(got, Err(Error::InvalidArgument { .. })));
        assert_eq!(attempts, 2);
        // Another error while a teardown is pending: no wait for it (the
        // teardown finishes soon after, which would bring a second attempt
        // to a call that waited), and nothing said of it.
        let (open, gate) = mpsc::channel::<()>();
        pool.after_work("test-pending", move || {
            let _ = gate.recv();
        });
        let opener = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            open.send(()).unwrap();
        });
        let got: Result<()> = pool.when_freed(Duration::from_secs(30), is_full, || {
            attempts += 1;
            Err(Error::invalid("not memory"))
        });
        opener.join().unwrap();
        assert!(
            matches!(got, Err(Error::InvalidArgument { ref what }) if what == "not memory"),
            "{got:?}"
        );
        assert_eq!(attempts, 3, "tried once");
    }

    #[test]
    fn the_process_pool_counts_its_teardowns_and_workers() {
        // The only test here that hands teardowns to the process's pool.
        let gates: Vec<_> = (0..2)
            .map(|_| {
                let (open, gate) = mpsc::channel::<()>();
                after_work("test-process-pool", move || {
                    let _ = gate.recv();
                });
                open
            })
            .collect();
        assert_eq!(unfinished(), 2, "both wait");
        assert!(workers() >= 2, "each on a worker of its own");
        for open in gates {
            open.send(()).unwrap();
        }
        let end = Instant::now() + Duration::from_secs(30);
        while unfinished() != 0 {
            assert!(Instant::now() < end, "both finished");
            std::thread::yield_now();
        }
    }

    #[test]
    fn an_idle_worker_ends() {
        let pool: &'static Pool = Box::leak(Box::new(Pool::new(Duration::from_millis(20))));
        let (tell, rx) = mpsc::channel();
        pool.after_work("test-quick", telling(&tell));
        told(&rx);
        let end = std::time::Instant::now() + Duration::from_secs(30);
        while pool.lock().workers != 0 {
            assert!(std::time::Instant::now() < end, "the idle worker ended");
            std::thread::sleep(Duration::from_millis(5));
        }
        // The next teardown starts a worker again.
        pool.after_work("test-again", telling(&tell));
        told(&rx);
        assert_eq!(pool.unfinished.load(Ordering::Acquire), 0);
    }
}
