//! How a publisher waits for a free slot and a subscriber for a sample:
//! poll, spin briefly, then sleep on a futex word of the control region,
//! waking at least every [`LOOK_EVERY`] to look after the peers (dead
//! subscribers reaped, a dead publisher noticed).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::kit::os;
use crate::wait::CLOCK_EVERY;
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
    // What is there already costs no clock read.
    if let Some(v) = poll()? {
        return Ok(v);
    }
    let start = Instant::now();
    let mut looked: Option<Instant> = None;
    let mut spinning = spin > Duration::ZERO;
    let mut polls: u32 = 0;
    loop {
        if let Some(v) = poll()? {
            return Ok(v);
        }
        // While spinning, the clock is read every CLOCK_EVERY polls.
        if spinning {
            polls = polls.wrapping_add(1);
            if polls % CLOCK_EVERY != 0 {
                std::hint::spin_loop();
                continue;
            }
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
        spinning = false;
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

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    fn words() -> (AtomicU32, AtomicU32) {
        (AtomicU32::new(0), AtomicU32::new(0))
    }

    #[test]
    fn what_is_there_is_taken_without_a_look() {
        let (word, sleepers) = words();
        let looks = Cell::new(0);
        let v = park_until(
            &word,
            &sleepers,
            Duration::ZERO,
            Some(Duration::ZERO),
            || "nothing".into(),
            || Ok(Some(7)),
            || {
                looks.set(looks.get() + 1);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!((v, looks.get()), (7, 0));
    }

    #[test]
    fn a_spinner_finds_what_comes_between_two_clock_reads() {
        let (word, sleepers) = words();
        for after in [
            1,
            CLOCK_EVERY - 1,
            CLOCK_EVERY,
            CLOCK_EVERY + 1,
            5 * CLOCK_EVERY,
        ] {
            let polls = Cell::new(0u32);
            let v = park_until(
                &word,
                &sleepers,
                Duration::from_secs(60),
                Some(Duration::from_secs(60)),
                || "a value".into(),
                || {
                    polls.set(polls.get() + 1);
                    Ok((polls.get() > after).then_some(polls.get()))
                },
                || panic!("a spinner looks after its peers only once it stops spinning"),
            )
            .unwrap();
            assert_eq!(v, after + 1, "found on the first poll that sees it");
        }
    }

    /// Wait for a value that never comes on words nobody changes: the
    /// wait's error and how many polls it made.
    fn nothing_comes(
        spin: Duration,
        timeout: Option<Duration>,
        look: impl FnMut() -> Result<()>,
    ) -> (Error, u32) {
        let (word, sleepers) = words();
        let polls = Cell::new(0u32);
        let e = park_until(
            &word,
            &sleepers,
            spin,
            timeout,
            || "a sample that never comes".into(),
            || {
                polls.set(polls.get() + 1);
                Ok(None::<()>)
            },
            look,
        )
        .unwrap_err();
        assert_eq!(sleepers.load(Ordering::SeqCst), 0, "uncounted");
        (e, polls.get())
    }

    #[test]
    fn a_spinner_still_times_out() {
        // The spin outlasts the timeout: the clock, read every few polls,
        // ends the wait all the same.
        let started = Instant::now();
        let (e, _) = nothing_comes(
            Duration::from_secs(60),
            Some(Duration::from_millis(20)),
            || Ok(()),
        );
        assert!(
            matches!(&e, Error::Timeout { after, what } if *after == Duration::from_millis(20)
                && what == "a sample that never comes"),
            "{e:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "ended by the timeout, not the spin"
        );
    }

    #[test]
    fn without_a_spin_the_first_miss_looks_and_a_look_ends_the_wait() {
        let (e, polls) = nothing_comes(Duration::ZERO, None, || {
            Err(Error::invalid("the peer is gone"))
        });
        assert!(e.to_string().contains("the peer is gone"), "{e}");
        // The first poll, then one in the loop: no spinning between.
        assert_eq!(polls, 2);
    }

    #[test]
    fn a_sleeper_looks_again_every_look_every() {
        // Nobody wakes the sleeper: it naps at most LOOK_EVERY and looks
        // after its peers each time; the third look's error ends the wait
        // long before the timeout.
        let mut looks = 0;
        let (e, _) = nothing_comes(Duration::ZERO, Some(Duration::from_secs(30)), || {
            looks += 1;
            if looks == 3 {
                return Err(Error::invalid("third look"));
            }
            Ok(())
        });
        assert!(e.to_string().contains("third look"), "{e}");
    }

    #[test]
    fn a_sleeper_wakes_for_a_change_and_uncounts_itself() {
        let (word, sleepers) = words();
        let ready = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while sleepers.load(Ordering::SeqCst) == 0 {
                    std::thread::yield_now();
                }
                ready.store(true, Ordering::SeqCst);
                word.fetch_add(1, Ordering::SeqCst);
                os::futex_wake(&word, u32::MAX);
            });
            let v = park_until(
                &word,
                &sleepers,
                Duration::ZERO,
                Some(Duration::from_secs(60)),
                || "the change".into(),
                || Ok(ready.load(Ordering::SeqCst).then_some(1)),
                || Ok(()),
            )
            .unwrap();
            assert_eq!(v, 1);
        });
        assert_eq!(sleepers.load(Ordering::SeqCst), 0);
    }
}
