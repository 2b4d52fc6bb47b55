//! Where a memory reference of the backend leads, for stream work: to
//! memory the GPU reaches in stream order (its own, a registration of the
//! caller's, or home pages through their registration), or to home pages
//! only the host reaches here (unregistered: read-only views, and every
//! home under [`Strategy::Pageable`](crate::Strategy)).
//!
//! Work on GPU-reached memory is the GPU's own (pinned-speed copies, no
//! thread); the home pages behind a registration are held for it until
//! the stream ran it (`Device::hold_until_done`). Work on host-only pages
//! is a host step (`step.rs`) that holds the pages it works on; it never
//! holds the GPU's memory, which only GPU work queued at the call reaches
//! (through a staging buffer the step holds, see `UvmDevice::copy_async`).

use std::sync::Arc;

use hal_core::{Device, MemRef};

use crate::memory::HomePages;

/// One side of a stream operation.
pub enum Side<'a, D: Device> {
    /// Memory the GPU reaches, and the home pages queued work on it holds
    /// (when it is home pages reached through their registration).
    Gpu(MemRef<'a, D>, Option<Arc<dyn HomePages>>),
    /// Home pages only the host reaches here, held for queued work.
    Host(Arc<dyn HomePages>),
}
