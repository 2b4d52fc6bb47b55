//! [`AscendPhysical`]: a VMM physical allocation (`aclrtMallocPhysical`,
//! or `aclrtMemImportFromShareableHandle` for an import), freed with
//! `aclrtFreePhysical` when its last holder drops.
//!
//! A physical allocation has no address until it is mapped, so no stream
//! work can use it on its own: every mapping of it holds it
//! ([`crate::vmm::reservation`]), and a mapping is unmapped only after the
//! device's work has run. The free therefore needs no wait of its own.

use std::sync::{Arc, OnceLock};

use hal_core::exchange::Lease;
use hal_core::lease::LeaseTable;
use hal_core::{PhysicalLocation, ShareableHandle};

use crate::context::Ctx;
use crate::ffi::result::vmm;
use crate::ffi::sys::MemHandle;

/// A VMM physical allocation: memory with no address until mapped into an
/// [`AscendReservation`](crate::AscendReservation).
#[derive(Debug)]
#[must_use = "the physical memory is released when this value drops"]
pub struct AscendPhysical {
    pub(crate) inner: Arc<PhysInner>,
}

/// The allocation's runtime handle and what is known of it; shared by the
/// value and every mapping of it.
pub(crate) struct PhysInner {
    pub(crate) ctx: Arc<Ctx>,
    /// The `aclrtDrvMemHandle`.
    pub(crate) handle: MemHandle,
    pub(crate) size: u64,
    pub(crate) location: PhysicalLocation,
    pub(crate) made_for: ShareableHandle,
    /// True for an import: the runtime refuses to export it again.
    pub(crate) imported: bool,
    /// Its importers' leases, made at the first export.
    pub(crate) leases: OnceLock<Arc<LeaseTable>>,
    /// An import's lease from the exporter's broker, held as long as the
    /// imported allocation.
    pub(crate) _lease: Option<Lease>,
}

impl std::fmt::Debug for PhysInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AscendPhysical")
            .field("device", &self.ctx.ordinal)
            .field("handle", &format_args!("{:#x}", self.handle.addr()))
            .field("size", &self.size)
            .field("location", &self.location)
            .field("imported", &self.imported)
            .finish()
    }
}

impl Drop for PhysInner {
    fn drop(&mut self) {
        // Freed once, by its one owner; no mapping of it is left (each
        // holds this value).
        let addr = self.handle.addr();
        let handle = self.handle.take();
        let freed = self.ctx.call(|| vmm::free_physical(&self.ctx.rt, handle));
        if let Err(e) = freed {
            log::warn!("freeing Ascend physical memory {addr:#x}: {e}");
        }
    }
}

hal_core::physical_by_inner!(AscendPhysical);
