//! [`AscendReservation`]: a range of the process's device address space
//! (`aclrtReserveMemAddress`), the physical allocations mapped into it
//! (`aclrtMapMem`) and the access each device has to them
//! (`aclrtMemSetAccess`), as this process set it (the runtime has no call
//! that answers it, so [`hal_core::kit::vmm::pieces`] keeps it).
//!
//! **Reads and writes** go through `aclrtMemcpy`, never through the
//! address: device memory is not host memory. They are refused
//! ([`Error::PermissionDenied`] or [`Error::InvalidArgument`]) where a part
//! is not mapped or this device lacks the access, before the runtime is
//! called.
//!
//! **Unmap after stream work.** Work queued on any stream of the device
//! may use the range through its address. So an unmap (`Vmm::unmap`,
//! or the drop of the reservation, which unmaps what is left and releases
//! the range with `aclrtReleaseMemAddress`) first synchronizes the device
//! (`aclrtSynchronizeDevice`), then unmaps each mapping (`aclrtUnmapMem`
//! names a mapping by its first address): the memory is never taken from
//! under queued work. The physical allocations a mapping holds are freed
//! when their last holder drops, after the unmap. A drop never waits for
//! long: the teardown runs on a worker thread ([`hal_core::kit::stream::teardown`]),
//! so that work waiting on a notify a crashed peer never signals cannot
//! hang it.

use std::sync::Arc;

use hal_core::device::check_bounds;
use hal_core::kit::vmm::copies::ReservationByCopies;
use hal_core::kit::vmm::pieces::{Mapped, Pieces};
use hal_core::{AccessTarget, Error, Result};

use crate::context::Ctx;
use crate::ffi::result::{device, mem, vmm};
use crate::vmm::physical::PhysInner;

/// A VMM address range reservation of one device: physical allocations
/// are mapped into it with [`VmmExt::map`](hal_core::VmmExt::map) and made
/// accessible with [`VmmExt::set_access`](hal_core::VmmExt::set_access).
#[must_use = "the address range is unmapped and released when this value drops"]
pub struct AscendReservation {
    pub(crate) ctx: Arc<Ctx>,
    /// What is mapped, with the access this process gave it (the runtime
    /// answers no access question).
    pub(crate) pieces: Mapped<Arc<PhysInner>>,
    pub(crate) base: u64,
    pub(crate) len: u64,
}

impl std::fmt::Debug for AscendReservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AscendReservation")
            .field("device", &self.ctx.ordinal)
            .field("base", &format_args!("{:#x}", self.base))
            .field("len", &self.len)
            .field("mapped", &self.pieces)
            .finish()
    }
}

impl AscendReservation {
    /// The reserving device, as an access target.
    pub(crate) fn me(&self) -> AccessTarget {
        AccessTarget::Device(self.ctx.ordinal)
    }

    /// Wait for the device's queued work, then unmap the whole mappings
    /// `mappings` (offset, length). When the wait fails, `strict` returns
    /// that error and unmaps nothing; otherwise the error is logged and the
    /// mappings unmapped anyway.
    pub(crate) fn unmap_after_work(&self, mappings: &[(u64, u64)], strict: bool) -> Result<()> {
        unmap_after_work(&self.ctx, self.base, mappings, strict)
    }
}

/// [`AscendReservation::unmap_after_work`] of the reservation at `base` of
/// `ctx`'s device.
fn unmap_after_work(ctx: &Ctx, base: u64, mappings: &[(u64, u64)], strict: bool) -> Result<()> {
    let rt = &ctx.rt;
    ctx.call(|| {
        // The device is current on this thread.
        if let Err(e) = device::synchronize(rt) {
            if strict {
                return Err(e);
            }
            log::warn!("unmapping after the device's work failed: {e}");
        }
        rt.unmap_mem()?;
        for &(offset, _) in mappings {
            // The first address of a mapping of this reservation, and the
            // device's work that could use it has run.
            vmm::unmap(rt, base + offset)?;
        }
        Ok(())
    })
}

/// What a dropped reservation still has to do once the device's work has
/// run: unmap what is mapped, let go of the physical allocations, release
/// the range.
struct Teardown {
    ctx: Arc<Ctx>,
    base: u64,
    pieces: Pieces<Arc<PhysInner>>,
}

impl Teardown {
    fn run(self) {
        let Teardown { ctx, base, pieces } = self;
        let mapped = pieces.mappings();
        if !mapped.is_empty() {
            if let Err(e) = unmap_after_work(&ctx, base, &mapped, false) {
                log::warn!("unmapping an Ascend reservation at {base:#x}: {e}");
            }
        }
        // The physical allocations go after their unmaps.
        drop(pieces);
        // The range came from aclrtReserveMemAddress and is released
        // once, by its one owner, after its unmaps.
        let released = ctx.call(|| vmm::release(&ctx.rt, base));
        if let Err(e) = released {
            log::warn!("releasing the Ascend reservation at {base:#x}: {e}");
        }
    }
}

impl Drop for AscendReservation {
    /// Returns without waiting for the device's queued work for longer
    /// than [`hal_core::kit::stream::teardown::GRACE`]: the unmaps, the physical
    /// allocations and the range go once that work has run
    /// ([`hal_core::kit::stream::teardown`]).
    fn drop(&mut self) {
        let teardown = Teardown {
            ctx: Arc::clone(&self.ctx),
            base: self.base,
            pieces: self.pieces.take(),
        };
        // Nothing mapped, nothing to wait for.
        let waits = !teardown.pieces.list.is_empty();
        hal_core::kit::stream::teardown::after_work_if(waits, "hal-ascend-unmap", move || {
            teardown.run()
        });
    }
}

impl ReservationByCopies for AscendReservation {
    fn range(&self) -> (u64, u64) {
        (self.base, self.len)
    }

    /// Refuse a copy of `len` bytes at `offset` unless every byte is mapped
    /// with the access it needs for this device.
    fn check_access(&self, offset: u64, len: u64, write: bool) -> Result<()> {
        check_bounds(offset, len, self.len)?;
        self.pieces
            .lock()
            .check_access(offset, len, self.me(), write)
    }

    /// Read the checked, non-empty range at `offset` (`aclrtMemcpy`
    /// device to host).
    fn copy_out(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        let at = self.base + offset;
        self.ctx.call(|| mem::copy_to_host(&self.ctx.rt, dst, at))
    }

    /// Write the checked, non-empty range at `offset` (`aclrtMemcpy` host
    /// to device).
    fn copy_in(&self, offset: u64, src: &[u8]) -> Result<()> {
        let at = self.base + offset;
        self.ctx.call(|| mem::copy_from_host(&self.ctx.rt, at, src))
    }
}

/// The error of a reservation used through another device.
pub(crate) fn foreign() -> Error {
    Error::invalid("the reservation belongs to another Ascend device: use it through that device")
}
