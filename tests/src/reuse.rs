//! Address reuse: tests that a freed allocation's handle never leads to
//! the allocation that took its address next.

use std::time::{Duration, Instant};

/// Allocate with `allocate` until an allocation lands at `freed_at` (the
/// backend may free on a worker, so the address comes back a little
/// later), for at most two seconds; that allocation, held by the caller
/// so that the address stays taken, or `None` when the backend gave
/// other addresses.
pub fn allocation_at<A, E: std::fmt::Debug>(
    freed_at: u64,
    mut allocate: impl FnMut() -> Result<A, E>,
    addr: impl Fn(&A) -> u64,
) -> Option<A> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let again = allocate().expect("an allocation while waiting for a freed address");
        if addr(&again) == freed_at {
            return Some(again);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
