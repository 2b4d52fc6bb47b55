//! Who a sample is for, and the subscribers that are gone: the mask of
//! active subscribers a publish gives a sample, a subscriber's bit cleared
//! from every slot, and dead subscribers' entries reaped so that the slots
//! they held return to the pool.

use std::sync::atomic::Ordering;

use super::layout::{self, Control, SubState, MAX_SUBSCRIBERS, QUEUED};
use crate::kit::os;
use crate::Result;

/// The bits of the active subscribers.
pub(super) fn active_mask(control: &Control) -> Result<u32> {
    Ok(control.mask()?.load(Ordering::Acquire) & !QUEUED)
}

/// Clear subscriber `i`'s bit from every slot whose sample `keep` does not
/// want kept (given the slot's sample word);
/// wakes the publisher when a slot freed.
pub(super) fn clear_bit(control: &Control, i: usize, keep: impl Fn(u64) -> bool) -> Result<()> {
    let bit = 1u32 << i;
    let mut freed = false;
    for slot in 0..control.slots() {
        let word = control.sample_word(slot)?;
        let mut seen = word.load(Ordering::Acquire);
        loop {
            let (_, pending) = layout::split(seen);
            if pending & bit == 0 || pending == QUEUED || keep(seen) {
                break;
            }
            let new = layout::with_pending(seen, pending & !bit);
            match word.compare_exchange(seen, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    freed |= pending & !bit == 0;
                    break;
                }
                Err(now) => seen = now,
            }
        }
    }
    if freed {
        control.bump_released()?;
    }
    Ok(())
}

/// Free the entries of subscribers whose process is gone and the slots
/// they held, and clear every bit of an entry that is not active (a
/// subscriber that left, or one still joining, holds no sample). Called by
/// the publisher, whose publishes are the only writers of new bits.
pub(super) fn reap(control: &Control) -> Result<()> {
    let mask = control.mask()?;
    for i in 0..MAX_SUBSCRIBERS {
        let (pid, start, state) = control.subscriber(i)?;
        match state {
            SubState::Active if os::process_alive(pid, start) => {}
            SubState::Active | SubState::Joining if !os::process_alive(pid, start) => {
                mask.fetch_and(!(1 << i), Ordering::AcqRel);
                clear_bit(control, i, |_| false)?;
                control.set_subscriber_state(i, SubState::Free)?;
            }
            _ => {
                mask.fetch_and(!(1 << i), Ordering::AcqRel);
                clear_bit(control, i, |_| false)?;
            }
        }
    }
    Ok(())
}
