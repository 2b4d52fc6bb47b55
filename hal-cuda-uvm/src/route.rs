//! Where a memory reference of the backend leads: the home pages of a
//! shared managed buffer, reached by the host, or the inner GPU's memory.
//!
//! A host step holds the home pages it works on; it never holds the inner
//! GPU's memory, which only GPU work queued at the call reaches (through a
//! staging buffer the step holds, see `UvmDevice::copy_async`).

use std::sync::Arc;

use hal_core::{Device, MemRef};

use crate::memory::HomePages;

/// One side of a stream operation.
pub enum Side<'a, D: Device> {
    /// Home pages of a shared managed buffer, held for queued work.
    Home(Arc<dyn HomePages>),
    /// The inner GPU's memory.
    Inner(MemRef<'a, D>),
}
