//! Where a memory reference of the backend leads: the home pages of a
//! shared managed buffer, reached by the host, or the inner GPU's memory.

use std::sync::Arc;

use hal_core::{Device, MemRef, Memory};

use crate::memory::HomePages;

/// One side of a stream operation.
pub enum Side<'a, D: Device> {
    /// Home pages of a shared managed buffer, held for queued work.
    Home(Arc<dyn HomePages>),
    /// The inner GPU's memory.
    Inner(MemRef<'a, D>),
}

/// Memory a host step reaches from another thread: home pages it holds,
/// or the inner GPU's memory, which the caller keeps alive until the
/// stream ran the step (the contract's rule for queued work).
pub enum Reach {
    /// Home pages, held.
    Home(Arc<dyn HomePages>),
    /// The inner GPU's memory.
    Inner(InnerRef),
}

/// The inner GPU's memory, borrowed past the call that queued the step.
pub struct InnerRef(*const (dyn Memory + 'static));

// SAFETY: `Memory` is `Send + Sync`; the pointer is only dereferenced while
// the memory lives (the queued-work rule stated on `Reach::Inner`).
unsafe impl Send for InnerRef {}

impl Reach {
    /// The side as a reach.
    pub fn of<D: Device>(side: Side<'_, D>) -> Reach {
        match side {
            Side::Home(h) => Reach::Home(h),
            Side::Inner(m) => {
                let m: &dyn Memory = m.memory();
                // SAFETY: only the lifetime is erased; the queued-work rule
                // (the caller keeps the memory alive until the stream ran
                // the step) bounds every use.
                let m: &'static dyn Memory = unsafe { std::mem::transmute(m) };
                Reach::Inner(InnerRef(m))
            }
        }
    }

    /// True for home pages.
    pub fn is_home(&self) -> bool {
        matches!(self, Reach::Home(_))
    }

    /// The memory.
    pub fn memory(&self) -> &dyn Memory {
        match self {
            Reach::Home(h) => h.memory(),
            // SAFETY: see `InnerRef`: the memory outlives the step.
            Reach::Inner(InnerRef(p)) => unsafe { &**p },
        }
    }
}
