//! Dropping a vendor stream without waiting for its work.
//!
//! A stream's queued work may wait for a notify that another process
//! signals later, or never (the peer crashed). A `Drop` that waited for
//! that work would hang the dropping thread for as long. A backend's
//! stream whose work has not run when it is dropped gives itself to
//! [`defer`] instead: one thread of the process asks it from time to time
//! whether its work has run ([`Drained::drained`]) and drops it then, so
//! that it destroys the vendor's stream and lets go of what the work used
//! only after the device is done with them. The drop returns at once.
//!
//! Work that never runs keeps its stream and what it holds until the
//! process ends; after [`LATE`] the thread says so once in the log.
//!
//! ```
//! use hal_core::kit::stream::reaper::{defer, pending, Drained};
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::sync::Arc;
//!
//! struct Stream(Arc<AtomicBool>);
//! impl Drained for Stream {
//!     fn drained(&mut self) -> hal_core::Result<bool> {
//!         Ok(self.0.load(Ordering::Acquire))
//!     }
//! }
//!
//! let done = Arc::new(AtomicBool::new(false));
//! defer(Box::new(Stream(Arc::clone(&done))));
//! assert_eq!(pending(), 1);
//! done.store(true, Ordering::Release);
//! while pending() > 0 {
//!     std::thread::sleep(std::time::Duration::from_millis(1));
//! }
//! assert_eq!(Arc::strong_count(&done), 1, "the stream was dropped");
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::kit::os::lock::{lock, wait};

/// A dropped stream that finishes its work on its own.
pub trait Drained: Send + 'static {
    /// True once the work queued before the drop has run; an error (the
    /// stream failed) ends the wait as well. Never blocks.
    fn drained(&mut self) -> Result<bool>;
}

/// How long a deferred stream may wait before the log says so.
pub const LATE: Duration = Duration::from_secs(10);

/// The shortest and the longest pause between two looks at the streams.
const PAUSE: (Duration, Duration) = (Duration::from_micros(500), Duration::from_millis(20));

struct Item {
    stream: Box<dyn Drained>,
    since: Instant,
    told: bool,
}

struct Reaper {
    items: Mutex<Vec<Item>>,
    more: Condvar,
    /// Deferred and not yet dropped (some may be out of `items`, being asked).
    count: AtomicUsize,
}

fn reaper() -> &'static Reaper {
    static REAPER: OnceLock<Reaper> = OnceLock::new();
    REAPER.get_or_init(|| Reaper {
        items: Mutex::new(Vec::new()),
        more: Condvar::new(),
        count: AtomicUsize::new(0),
    })
}

/// Started once in this process; false when no thread could be started.
/// A child forked from a process whose reaper ran has no reaper thread
/// (threads do not survive fork) and its parent's dropped streams, whose
/// vendor context is the parent's: it forgets them and starts its own.
fn started() -> bool {
    static STARTED: Mutex<Option<(crate::kit::os::Origin, bool)>> = Mutex::new(None);
    let mut started = lock(&STARTED);
    if let Some((origin, ok)) = *started {
        if !origin.forked() {
            return ok;
        }
        let r = reaper();
        for item in std::mem::take(&mut *lock(&r.items)) {
            std::mem::forget(item);
        }
        r.count.store(0, Ordering::Release);
    }
    let ok = crate::kit::os::thread::spawn("hal-stream-reaper", run)
        .map_err(|e| log::warn!("no thread for dropped streams could be started: {e}"))
        .is_ok();
    *started = Some((crate::kit::os::Origin::here(), ok));
    ok
}

/// Let `stream` finish its work and drop it then, without blocking. Where
/// no thread can be started for that, the stream is leaked with a warning
/// (what its work uses stays valid).
pub fn defer(stream: Box<dyn Drained>) {
    if !started() {
        log::warn!("a dropped stream whose work has not run is left undestroyed");
        std::mem::forget(stream);
        return;
    }
    let r = reaper();
    r.count.fetch_add(1, Ordering::AcqRel);
    lock(&r.items).push(Item {
        stream,
        since: Instant::now(),
        told: false,
    });
    r.more.notify_one();
}

/// What a backend's stream `Drop` does with its idle query's answer:
/// when the work has not run, `rest` (the stream's parts, which the
/// dropping value gives up) goes to [`defer`] and the answer is true; when
/// it has run, or the query failed (logged as `what`'s failure), the drop
/// goes on as usual and the answer is false.
pub fn defer_unless_idle<S: Drained>(
    idle: Result<bool>,
    what: &str,
    rest: impl FnOnce() -> S,
) -> bool {
    match idle {
        Ok(true) => false,
        Ok(false) => {
            defer(Box::new(rest()));
            true
        }
        Err(e) => {
            log::warn!("{what} failed before it was dropped: {e}");
            false
        }
    }
}

/// How many dropped streams still wait for their work.
pub fn pending() -> usize {
    reaper().count.load(Ordering::Acquire)
}

fn run() {
    let r = reaper();
    let mut pause = PAUSE.0;
    loop {
        let mut items = lock(&r.items);
        while items.is_empty() {
            pause = PAUSE.0;
            items = wait(&r.more, items);
        }
        // Asked outside the lock, so that `defer` never waits for a driver.
        let mine = std::mem::take(&mut *items);
        drop(items);
        let mut waiting = Vec::with_capacity(mine.len());
        let mut finished = 0;
        for mut item in mine {
            match item.stream.drained() {
                Ok(false) => {
                    if !item.told && item.since.elapsed() >= LATE {
                        item.told = true;
                        log::warn!(
                            "a stream dropped {:?} ago still waits for its work (a notify \
                             nobody signalled?); it and what its work uses stay alive until \
                             the work runs",
                            item.since.elapsed()
                        );
                    }
                    waiting.push(item);
                    continue;
                }
                Ok(true) => {}
                Err(e) => log::warn!("a dropped stream failed before its work ran: {e}"),
            }
            // Destroys the vendor's stream and lets go of what it held.
            drop(item);
            finished += 1;
            r.count.fetch_sub(1, Ordering::AcqRel);
        }
        lock(&r.items).append(&mut waiting);
        pause = if finished > 0 {
            PAUSE.0
        } else {
            (pause * 2).min(PAUSE.1)
        };
        std::thread::sleep(pause);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU8;
    use std::sync::Arc;

    /// 0: busy, 1: done, 2: failed.
    struct Fake(Arc<AtomicU8>);

    impl Drained for Fake {
        fn drained(&mut self) -> Result<bool> {
            match self.0.load(Ordering::Acquire) {
                0 => Ok(false),
                1 => Ok(true),
                _ => Err(crate::Error::invalid("the stream failed")),
            }
        }
    }

    /// Wait until only the test holds `state` (the reaper dropped its stream).
    fn dropped(state: &Arc<AtomicU8>) -> bool {
        let end = Instant::now() + Duration::from_secs(20);
        while Arc::strong_count(state) > 1 {
            if Instant::now() > end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    #[test]
    fn a_stream_is_dropped_once_its_work_ran_or_failed_and_not_before() {
        let (busy, done, failed) = (
            Arc::new(AtomicU8::new(0)),
            Arc::new(AtomicU8::new(1)),
            Arc::new(AtomicU8::new(2)),
        );
        defer(Box::new(Fake(Arc::clone(&busy))));
        defer(Box::new(Fake(Arc::clone(&done))));
        defer(Box::new(Fake(Arc::clone(&failed))));
        assert!(dropped(&done), "a stream whose work ran is dropped");
        assert!(dropped(&failed), "a failed stream is dropped");
        assert!(pending() >= 1, "the busy stream is still pending");
        // Several looks later, the busy one is still kept.
        std::thread::sleep(PAUSE.1 * 3);
        assert_eq!(Arc::strong_count(&busy), 2, "kept while its work waits");
        busy.store(1, Ordering::Release);
        assert!(dropped(&busy), "dropped once its work ran");
    }
}
