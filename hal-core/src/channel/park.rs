//! How a publisher waits for a free slot and a subscriber for a sample:
//! poll, spin briefly, then sleep on a futex word of the control file,
//! waking at least every [`LOOK_EVERY`] to look after the peers (dead
//! subscribers reaped, a dead publisher noticed).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::kit::os;
use crate::{Error, Result};

/// How often a waiter looks after its peers.
pub(super) const LOOK_EVERY: Duration = Duration::from_millis(10);

/// Wait until `poll` answers `Some`: it is tried, then tried again after
/// every change of `word` (whose wakers look at `sleepers`), for at most `timeout` (`None`: no limit);
/// `look` runs before each sleep that follows the spin and at least every
/// [`LOOK_EVERY`], and may end the wait with an error. `what` names the
/// wait in a timeout's error.
pub(super) fn park_until<T>(
    word: &AtomicU32,
    sleepers: &AtomicU32,
    spin: Duration,
    timeout: Option<Duration>,
    what: impl Fn() -> String,
    mut poll: impl FnMut() -> Result<Option<T>>,
    mut look: impl FnMut() -> Result<()>,
) -> Result<T> {
    let start = Instant::now();
    let mut looked: Option<Instant> = None;
    loop {
        if let Some(v) = poll()? {
            return Ok(v);
        }
        let elapsed = start.elapsed();
        if let Some(t) = timeout {
            if elapsed >= t {
                return Err(Error::Timeout {
                    after: t,
                    what: what(),
                });
            }
        }
        if elapsed < spin {
            // Spinning looks at what `poll` looks at only: the word is
            // another cache line, which the peer writes.
            std::hint::spin_loop();
            continue;
        }
        if looked.is_none_or(|at| at.elapsed() >= LOOK_EVERY) {
            look()?;
            looked = Some(Instant::now());
        }
        let nap = timeout.map_or(LOOK_EVERY, |t| t.saturating_sub(elapsed).min(LOOK_EVERY));
        // The word as it is before the last look: a change after it wakes
        // the sleep below, or makes it return at once.
        let seen = word.load(Ordering::Acquire);
        // Counted, then one more look: a waker that saw no sleeper made
        // its change before the count, and the look sees it.
        sleepers.fetch_add(1, Ordering::SeqCst);
        let found = poll();
        if !matches!(found, Ok(None)) {
            sleepers.fetch_sub(1, Ordering::SeqCst);
            if let Some(v) = found? {
                return Ok(v);
            }
        }
        os::futex_wait(word, seen, Some(nap));
        sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}
