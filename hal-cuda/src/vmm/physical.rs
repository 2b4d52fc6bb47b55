//! [`CudaPhysical`]: a VMM physical allocation (`cuMemCreate`, or
//! `cuMemImportFromShareableHandle` for an import), released with
//! `cuMemRelease` when the last owner drops.
//!
//! A physical allocation has no address until it is mapped, so no stream
//! work can use it on its own: every mapping of it holds it
//! (`reservation.rs`), and a mapping is unmapped only after the
//! context's work has run. The release therefore needs no wait of its own.

use std::os::fd::OwnedFd;
use std::sync::{Arc, OnceLock};

use hal_core::kit::vmm::physical::{PhysicalByRecord, PhysicalRecord};
use hal_core::lease::LazyLeases;

use crate::context::Primary;
use crate::ffi::result::vmm;
use crate::ffi::CUmemGenericAllocationHandle;

/// A VMM physical allocation: memory with no address until mapped into a
/// [`CudaReservation`](crate::CudaReservation).
#[derive(Debug)]
#[must_use = "the physical memory is released when this value drops"]
pub struct CudaPhysical {
    pub(crate) inner: Arc<PhysInner>,
}

impl CudaPhysical {
    /// How many importers hold this allocation now (0 before its first
    /// export). Importers whose process died are not counted.
    pub fn importers(&self) -> usize {
        self.inner.leases.count()
    }
}

impl PhysicalByRecord for CudaPhysical {
    fn record(&self) -> &PhysicalRecord {
        &self.inner.record
    }
}

/// The allocation's driver handle and what is known of it; shared by the
/// value and every mapping of it.
pub(crate) struct PhysInner {
    pub(crate) primary: Arc<Primary>,
    pub(crate) handle: CUmemGenericAllocationHandle,
    /// Its POSIX descriptor, exported once (`cuMemExportToShareableHandle`
    /// took 762 µs for 64 MiB on an H200, measured with plain driver calls:
    /// `shared/vendor/cuda.md`) and duplicated for every export.
    pub(crate) fd: OnceLock<OwnedFd>,
    /// Its size and location.
    pub(crate) record: PhysicalRecord,
    /// Its importers\' leases, made at its first export.
    pub(crate) leases: LazyLeases,
}

impl std::fmt::Debug for PhysInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaPhysical")
            .field("handle", &format_args!("{:#x}", self.handle))
            .field("record", &self.record)
            .field("importers", &self.leases.count())
            .finish()
    }
}

impl Drop for PhysInner {
    fn drop(&mut self) {
        if self.primary.forked() {
            // A forked child: the context is the parent's; leave it be.
            return;
        }
        // The handle came from cuMemCreate or cuMemImportFromShareableHandle
        // and is released once, by its one owner; no mapping of it is left
        // (each holds this value).
        let released = self
            .primary
            .enter()
            .and_then(|_ctx| vmm::release(&self.primary.driver, self.handle));
        if let Err(e) = released {
            log::warn!("releasing CUDA physical memory {:#x}: {e}", self.handle);
        }
    }
}
