//! [`AscendPhysical`]: a VMM physical allocation (`aclrtMallocPhysical`,
//! or `aclrtMemImportFromShareableHandle` for an import), freed with
//! `aclrtFreePhysical` when its last holder drops.
//!
//! A physical allocation has no address until it is mapped, so no stream
//! work can use it on its own: every mapping of it holds it
//! ([`crate::vmm::reservation`]), and a mapping is unmapped only after the
//! device's work has run. The free therefore needs no wait of its own.

use std::sync::Arc;

use hal_core::kit::vmm::physical::{PhysicalByRecord, PhysicalRecord};
use hal_core::lease::LazyLeases;

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

impl AscendPhysical {
    /// How many importers hold this allocation now (0 before its first
    /// export). Importers whose process died are not counted.
    pub fn importers(&self) -> usize {
        self.inner.leases.count()
    }
}

impl PhysicalByRecord for AscendPhysical {
    fn record(&self) -> &PhysicalRecord {
        &self.inner.record
    }
}

/// The allocation's runtime handle and what is known of it; shared by the
/// value and every mapping of it.
pub(crate) struct PhysInner {
    pub(crate) ctx: Arc<Ctx>,
    /// The `aclrtDrvMemHandle`.
    pub(crate) handle: MemHandle,
    /// Its size, location and whether it is an import (the
    /// runtime refuses to export an import again).
    pub(crate) record: PhysicalRecord,
    /// Its importers\' leases, made at its first export.
    pub(crate) leases: LazyLeases,
}

impl std::fmt::Debug for PhysInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AscendPhysical")
            .field("device", &self.ctx.ordinal)
            .field("handle", &format_args!("{:#x}", self.handle.addr()))
            .field("record", &self.record)
            .field("importers", &self.leases.count())
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
