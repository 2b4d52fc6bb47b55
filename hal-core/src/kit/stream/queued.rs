//! What work queued on a vendor stream uses from the host, held by the
//! stream until it ran that work.
//!
//! A stream runs later what it is given now: the bytes of a queued write,
//! the page of a notify it records or waits on. The value the caller owns
//! may be dropped before the stream gets there; the memory must not go
//! with it. A backend's stream keeps a [`QueuedUse`] and puts into it, while the
//! work is queued, whatever that work reaches; it lets go of everything
//! when the vendor says the stream is idle.
//!
//! The order matters: work is queued with the list locked
//! ([`QueuedUse::lock`]), and an idle query takes the same lock before it asks
//! the vendor, so an idle answer covers everything the list holds.
//!
//! ```
//! use hal_core::kit::stream::queued::QueuedUse;
//!
//! let held = QueuedUse::default();
//! {
//!     let mut queuing = held.lock();
//!     // ... queue work reading `bytes` on the vendor's stream ...
//!     let bytes = vec![1u8, 2, 3];
//!     queuing.hold(bytes);
//! }
//! assert_eq!(held.len(), 1);
//! // The vendor answered that the stream is idle:
//! held.lock().release();
//! assert!(held.is_empty());
//! ```

use crate::error::Result;
use crate::kit::os::lock::lock;
use std::any::Any;
use std::sync::{Mutex, MutexGuard};

/// Every time this many more values are held, a backend asks the stream
/// whether it is idle (a query that never waits) before queuing more, so
/// a stream that is never synchronized does not hold them forever, and a
/// stream that stays busy is not asked at every call. A stream that never
/// becomes idle holds what its work used until it is dropped.
pub const QUERY_AT: usize = 64;

/// The values a stream holds for its queued work: what that work uses from
/// the host, kept until the vendor says the stream ran it.
#[derive(Default)]
pub struct QueuedUse(Mutex<Vec<Box<dyn Any + Send>>>);

impl std::fmt::Debug for QueuedUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuedUse")
            .field("len", &self.len())
            .finish()
    }
}

/// The list locked: queue the work, then [`Holding::hold`] what it uses.
pub struct Holding<'a>(MutexGuard<'a, Vec<Box<dyn Any + Send>>>);

impl QueuedUse {
    /// Lock the list (a poisoned lock is taken over: the list stays valid).
    pub fn lock(&self) -> Holding<'_> {
        Holding(lock(&self.0))
    }

    /// How many values are held.
    pub fn len(&self) -> usize {
        self.lock().0.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when the stream should be asked whether it is idle before more
    /// is queued: at every [`QUERY_AT`] more held values.
    pub fn wants_query(&self) -> bool {
        let n = self.len();
        n > 0 && n % QUERY_AT == 0
    }

    /// Ask the vendor whether the stream is idle (`is_idle`, a query that
    /// never waits) with the list locked, and let go of everything it
    /// holds when it is: work is queued with the list locked, so an idle
    /// answer covers all of it.
    pub fn query(&self, is_idle: impl FnOnce() -> Result<bool>) -> Result<bool> {
        let mut held = self.lock();
        let idle = is_idle()?;
        if idle {
            held.release();
        }
        Ok(idle)
    }

    /// The list locked for queuing work; when [`wants_query`](Self::wants_query),
    /// the stream is first asked with `query` (its own idle query, which
    /// lets go of what an idle stream holds). An error of that query is
    /// the stream's, answered by its next wait, and is not returned here.
    pub fn holding(&self, query: impl FnOnce() -> Result<bool>) -> Holding<'_> {
        if self.wants_query() {
            let _ = query();
        }
        self.lock()
    }
}

impl Holding<'_> {
    /// Hold `value` until the stream is idle.
    pub fn hold<T: Send + 'static>(&mut self, value: T) {
        self.0.push(Box::new(value));
    }

    /// Let go of everything: the stream ran all the work queued so far.
    /// Values drop in the order they were held, so a backend layered on
    /// another can rely on the inner backend's values going first.
    pub fn release(&mut self) {
        self.0.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn values_live_until_released() {
        let held = QueuedUse::default();
        let value = Arc::new(7u32);
        held.lock().hold(Arc::clone(&value));
        assert_eq!(Arc::strong_count(&value), 2);
        assert!(!held.is_empty());
        held.lock().release();
        assert_eq!(Arc::strong_count(&value), 1);
        assert!(held.is_empty());
    }

    #[test]
    fn values_drop_in_the_order_they_were_held() {
        struct Noted(u8, Arc<std::sync::Mutex<Vec<u8>>>);
        impl Drop for Noted {
            fn drop(&mut self) {
                self.1.lock().unwrap().push(self.0);
            }
        }
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let held = QueuedUse::default();
        for n in [1, 2, 3] {
            held.lock().hold(Noted(n, Arc::clone(&order)));
        }
        held.lock().release();
        assert_eq!(*order.lock().unwrap(), [1, 2, 3]);
    }

    #[test]
    fn a_query_is_wanted_from_the_threshold_on() {
        let held = QueuedUse::default();
        for _ in 0..QUERY_AT - 1 {
            held.lock().hold(());
        }
        assert!(!held.wants_query());
        held.lock().hold(());
        assert!(held.wants_query());
        held.lock().hold(());
        assert!(
            !held.wants_query(),
            "a busy stream is not asked at every call"
        );
        for _ in 0..QUERY_AT - 1 {
            held.lock().hold(());
        }
        assert!(held.wants_query());
        assert!(!QueuedUse::default().wants_query());
    }
}
