//! The right to call into a node's worker: one thread holds it at a time.
//!
//! UCX 1.13's TCP transport broke its own assertions when one thread
//! released a reception while another sent, on a worker made for many
//! threads; so every call into the worker, and every pass over what its
//! callbacks queued, is made by the thread that holds the baton. The
//! progress thread holds it while it works and lets go before it sleeps;
//! on a node with a spin ([`crate::NodeOptions::spin`]) a caller that
//! finds it free calls the worker itself instead of asking the progress
//! thread and waiting to be woken (two thread hand-offs fewer per call),
//! and a caller that waits for an answer drives the worker while it
//! waits.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

thread_local! {
    /// A byte whose address names this thread while it lives.
    static MARK: u8 = const { 0 };
}

/// This thread's token: nonzero, and no other live thread's.
fn token() -> usize {
    MARK.with(|m| m as *const u8 as usize)
}

/// The baton.
#[derive(Default)]
pub(crate) struct Baton {
    lock: Mutex<()>,
    /// The holder's token, or 0.
    holder: AtomicUsize,
}

/// The baton, held: let go when dropped.
pub(crate) struct Held<'a> {
    baton: &'a Baton,
    _guard: MutexGuard<'a, ()>,
}

impl Baton {
    /// True when this thread holds it.
    pub(crate) fn held_here(&self) -> bool {
        self.holder.load(Ordering::Acquire) == token()
    }

    /// Take it when it is free; `None` when another thread holds it (or
    /// this one: a holder takes nothing twice).
    pub(crate) fn try_take(&self) -> Option<Held<'_>> {
        let guard = match self.lock.try_lock() {
            Ok(g) => g,
            // A panicking holder left nothing half-done that the lock
            // guards: the lock guards no data.
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        Some(self.mark(guard))
    }

    /// Take it, waiting for the holder to let go.
    pub(crate) fn take(&self) -> Held<'_> {
        let guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.mark(guard)
    }

    fn mark<'a>(&'a self, guard: MutexGuard<'a, ()>) -> Held<'a> {
        self.holder.store(token(), Ordering::Release);
        Held {
            baton: self,
            _guard: guard,
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // Cleared before the lock is let go (the guard drops after this).
        self.baton.holder.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time() {
        let b = Baton::default();
        assert!(!b.held_here());
        let held = b.try_take().expect("free");
        assert!(b.held_here());
        assert!(b.try_take().is_none(), "taken twice");
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(!b.held_here(), "another thread is not the holder");
                assert!(b.try_take().is_none());
            });
        });
        drop(held);
        assert!(!b.held_here());
        let again = std::thread::scope(|s| s.spawn(|| b.try_take().is_some()).join());
        assert!(matches!(again, Ok(true)), "free again once let go");
        let _h = b.take();
        assert!(b.held_here());
    }
}
