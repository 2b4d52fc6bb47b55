//! [`CudaReservation`]: a range of the process's device address space
//! (`cuMemAddressReserve`), the physical allocations mapped into it
//! (`cuMemMap`) and the access each device (and the host) has to them
//! (`cuMemSetAccess`), as this process set it.
//!
//! **Reads and writes** go through `cuMemcpyDtoH_v2` / `cuMemcpyHtoD_v2`,
//! never through the address: device memory is not host memory. Host NUMA
//! memory that was given host access is CPU-accessible at the address
//! (measured on an H200), but it is copied the same way too: one path for
//! every location, and no host mapping to keep coherent with the access
//! list. They are refused ([`Error::PermissionDenied`] or
//! [`Error::InvalidArgument`]) where a part is not mapped or this device
//! lacks the access, before the driver is called: a device copy through a
//! mapping without access faults and loses the context.
//!
//! **Unmap after stream work.** A kernel or copy queued on any stream of
//! the context may use the range through its address. So an unmap
//! (`Vmm::unmap`, or the drop of the reservation, which unmaps what is
//! left and frees the range with `cuMemAddressFree`) first synchronizes the
//! context (`cuCtxSynchronize`), then unmaps: the memory is never taken
//! from under queued work. The physical allocations a mapping holds are
//! released when their last holder drops, after the unmap. A drop never
//! waits for long: the teardown runs on a worker thread
//! ([`hal_core::kit::stream::teardown`]), so that work waiting on a notify a crashed
//! peer never signals cannot hang it.

use std::sync::Arc;

use hal_core::device::check_bounds;
use hal_core::kit::vmm::copies::ReservationByCopies;
use hal_core::kit::vmm::pieces::{Mapped, Pieces};
use hal_core::{AccessTarget, Result};

use crate::context::Primary;
use crate::ffi::result::{self, ctx, vmm};
use crate::ffi::CUdeviceptr;
use crate::memory::alloc::{copy_in, copy_out};
use crate::sync::quiet::QuietGuard;
use crate::vmm::physical::PhysInner;

/// A VMM address range reservation of one device's context: physical
/// allocations are mapped into it with [`VmmExt::map`](hal_core::VmmExt::map)
/// and made accessible with [`VmmExt::set_access`](hal_core::VmmExt::set_access).
#[must_use = "the address range is unmapped and released when this value drops"]
pub struct CudaReservation {
    pub(crate) primary: Arc<Primary>,
    /// The reserving device's ordinal: whose access reads and writes need.
    pub(crate) ordinal: u32,
    pub(crate) base: CUdeviceptr,
    pub(crate) len: u64,
    /// The mapped parts, each holding its physical allocation.
    pub(crate) pieces: Mapped<Arc<PhysInner>>,
}

impl std::fmt::Debug for CudaReservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaReservation")
            .field("base", &format_args!("{:#x}", self.base))
            .field("len", &self.len)
            .field("mapped", &self.pieces)
            .finish()
    }
}

impl CudaReservation {
    /// Wait for the context's queued work, then unmap `offset..offset + len`
    /// (the caller checked it is whole mappings). When the wait fails (the
    /// context holds an error of earlier work), `strict` returns that error
    /// and unmaps nothing; otherwise the error is logged and the range
    /// unmapped anyway: the failed work will not run again.
    pub(crate) fn unmap_after_work(&self, offset: u64, len: u64, strict: bool) -> Result<()> {
        let _ctx = self.primary.enter()?;
        let _quiet = wait_for_work(&self.primary, strict)?;
        unmap(&self.primary, self.base + offset, len)
    }
}

/// Wait for the current context's queued work (`cuCtxSynchronize`), once
/// no stream waits for a notify (`sync/quiet.rs`); the returned guard keeps new
/// waits out, so that the unmaps that follow (which may wait for the
/// device too) run with none queued. A failed wait is returned when
/// `strict`, else logged: the failed work will not run again.
fn wait_for_work(primary: &Primary, strict: bool) -> Result<QuietGuard<'_>> {
    let driver = &primary.driver;
    // Asked before the quiet, which it would hold for nothing.
    result::has(driver.ctx_synchronize())?;
    let quiet = primary.quiet.hold();
    // The caller made the context current on this thread.
    match ctx::synchronize(driver) {
        Err(e) if strict => Err(e),
        Err(e) => {
            log::warn!("unmapping after the context's work failed: {e}");
            Ok(quiet)
        }
        Ok(()) => Ok(quiet),
    }
}

/// `cuMemUnmap` of `len` bytes at `at`, the context current.
fn unmap(primary: &Primary, at: CUdeviceptr, len: u64) -> Result<()> {
    // The range is whole mappings of a reservation (checked by the
    // callers), and the context's work that could use it has run.
    vmm::unmap(&primary.driver, at, len as usize)
}

/// What a dropped reservation still has to do once the context's work has
/// run: unmap what is mapped, let go of the physical allocations, free the
/// range.
struct Teardown {
    primary: Arc<Primary>,
    base: CUdeviceptr,
    len: u64,
    pieces: Pieces<Arc<PhysInner>>,
}

impl Teardown {
    fn run(self) {
        let Teardown {
            primary,
            base,
            len,
            pieces,
        } = self;
        let driver = &primary.driver;
        let done = primary.enter().and_then(|_ctx| {
            // Held until the range is freed: the unmaps, releases and the
            // free run with no stream wait queued.
            let _quiet = if pieces.list.is_empty() {
                None
            } else {
                match wait_for_work(&primary, false) {
                    Ok(held) => Some(held),
                    Err(e) => {
                        log::warn!("unmapping a dropped CUDA reservation without its wait: {e}");
                        None
                    }
                }
            };
            for (offset, mapped) in pieces.mappings() {
                if let Err(e) = unmap(&primary, base + offset, mapped) {
                    log::warn!(
                        "unmapping {mapped:#x} bytes at {:#x} of a CUDA reservation: {e}",
                        base + offset
                    );
                }
            }
            // The physical allocations go after their unmaps.
            drop(pieces);
            // The range came from cuMemAddressReserve with this length and
            // is freed once, by its one owner, after its unmaps.
            vmm::free_range(driver, base, len as usize)
        });
        if let Err(e) = done {
            log::warn!("freeing the CUDA reservation at {base:#x}: {e}");
        }
    }
}

impl Drop for CudaReservation {
    /// Returns without waiting for the context's queued work for longer
    /// than [`hal_core::kit::stream::teardown::GRACE`]: the unmaps, the physical
    /// allocations and the range go once that work has run
    /// ([`hal_core::kit::stream::teardown`]).
    fn drop(&mut self) {
        if self.primary.forked() {
            // A forked child: the context is the parent's; leave it be.
            return;
        }
        let teardown = Teardown {
            primary: Arc::clone(&self.primary),
            base: self.base,
            len: self.len,
            pieces: self.pieces.take(),
        };
        // Nothing mapped, nothing to wait for.
        let waits = !teardown.pieces.list.is_empty();
        hal_core::kit::stream::teardown::after_work_if(waits, "hal-cuda-unmap", move || {
            teardown.run()
        });
    }
}

impl ReservationByCopies for CudaReservation {
    fn range(&self) -> (u64, u64) {
        (self.base, self.len)
    }

    /// Refuse a copy of `len` bytes at `offset` unless every byte is mapped
    /// with the access it needs for this device.
    fn check_access(&self, offset: u64, len: u64, write: bool) -> Result<()> {
        check_bounds(offset, len, self.len)?;
        self.pieces
            .lock()
            .check_access(offset, len, AccessTarget::Device(self.ordinal), write)
    }

    /// The driver's copy out of the checked, non-empty range at `offset`.
    fn copy_out(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        copy_out(&self.primary, self.base, self.len, offset, dst)
    }

    /// The driver's copy into the checked, non-empty range at `offset`.
    fn copy_in(&self, offset: u64, src: &[u8]) -> Result<()> {
        copy_in(&self.primary, self.base, self.len, offset, src)
    }
}
