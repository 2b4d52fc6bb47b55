//! Memory allocated through the driver: device memory (`cuMemAlloc`),
//! pinned host memory (`cuMemAllocHost`) and managed memory
//! (`cuMemAllocManaged`), freed on drop with the device's context pushed.
//!
//! **A free may wait for the device.** `cuMemFree_v2` and `cuMemFreeHost`
//! "may perform implicit synchronization" (the driver API's words): they
//! may wait for all the work queued in the context, which may wait for a
//! notify a crashed peer never signals. So a drop frees through
//! [`hal_core::teardown::after_work`]: it returns within
//! [`hal_core::teardown::GRACE`], and the memory is freed once the work has
//! run. Until then the memory is not back: an allocation the driver refuses
//! for lack of memory (`CUDA_ERROR_OUT_OF_MEMORY`) while such frees are
//! pending waits for them, at most [`hal_core::teardown::PATIENCE`], and
//! tries again ([`hal_core::teardown::when_freed`]); past that its error
//! says how many still wait.

use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

use hal_core::device::check_bounds;
use hal_core::{Allocation, Location, Memory, Result};

use crate::context::Primary;
use crate::exports::Exports;
use crate::sys::CUdeviceptr;

/// True for the driver's refusal for lack of memory.
pub(crate) fn out_of_memory(e: &hal_core::Error) -> bool {
    matches!(e, hal_core::Error::Vendor(v) if v.code == hal_core::vendor::cuda::OUT_OF_MEMORY.code)
}

/// Memory this process allocated on a CUDA device.
#[must_use = "the memory is freed when this value drops"]
pub struct CudaAllocation {
    pub(crate) primary: Arc<Primary>,
    /// The address (a device pointer; for host memory also the host's).
    pub(crate) ptr: CUdeviceptr,
    pub(crate) len: u64,
    pub(crate) location: Location,
    /// The device counts importers (`Capabilities::LEASES`).
    pub(crate) counts_importers: bool,
    /// Its importers' leases and buffer id, made at the first export.
    pub(crate) exports: OnceLock<Exports>,
    /// Allocated here, and freed when this value drops; false for memory
    /// adopted by address (`adopt.rs`), which its owner frees.
    pub(crate) owned: bool,
}

// SAFETY: the allocation is a driver address range; it is only passed to
// the driver or, for host and managed memory, copied with bounds checks.
unsafe impl Send for CudaAllocation {}
// SAFETY: see `Send`.
unsafe impl Sync for CudaAllocation {}

impl std::fmt::Debug for CudaAllocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaAllocation")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("location", &self.location)
            .finish()
    }
}

impl CudaAllocation {
    /// What its exports share, made at the first (`buffer_id` is the
    /// driver's id of the allocation, `base` its first byte).
    pub(crate) fn exports(&self, buffer_id: u64, base: CUdeviceptr) -> Result<&Exports> {
        if let Some(e) = self.exports.get() {
            return Ok(e);
        }
        let made = crate::exports::new_exports(buffer_id)?;
        // A concurrent export may have won the race; its table is kept.
        if self.exports.set(made).is_ok() {
            if let Some(e) = self.exports.get() {
                crate::exports::kept(e, base);
            }
        }
        self.exports
            .get()
            .ok_or_else(|| hal_core::Error::invalid("lease table vanished"))
    }
}

impl Drop for CudaAllocation {
    /// Returns without waiting for the context's queued work for longer
    /// than [`hal_core::teardown::GRACE`], and, where importers still map
    /// the memory, without waiting for them: the memory is freed once both
    /// are done.
    fn drop(&mut self) {
        if self.primary.forked() {
            // A forked child: the context is the parent's; leave it be.
            return;
        }
        if !self.owned {
            // Adopted: its owner frees it, once `wait_unleased` says no
            // importer maps it (`Device::adopt_memory`'s promise).
            if let Some(e) = self.exports.get() {
                crate::exports::forget(e.buffer_id);
            }
            return;
        }
        let (primary, ptr, location) = (Arc::clone(&self.primary), self.ptr, self.location);
        let Some(e) = self.exports.get() else {
            free_after_work(primary, ptr, location);
            return;
        };
        crate::exports::forget(e.buffer_id);
        if e.leases.count() == 0 {
            free_after_work(primary, ptr, location);
            return;
        }
        // Importers still map it: freeing now would pull the memory from
        // under them (undefined behaviour in CUDA), so the release waits
        // for their leases on a thread of its own.
        let leases = Arc::clone(&e.leases);
        let spawned = hal_core::os::thread::spawn("hal-cuda-deferred-free", move || {
            if let Err(e) = leases.wait_empty(None) {
                log::warn!("waiting for the importers of CUDA memory at {ptr:#x}: {e}");
            }
            release(&primary, ptr, location);
        });
        if let Err(e) = spawned {
            log::warn!(
                "CUDA memory at {:#x} is still imported and no thread could wait for its \
                 importers ({e}); it is left allocated",
                self.ptr
            );
        }
    }
}

/// Free the memory at `ptr` on a teardown worker: the free may wait for
/// the context's queued work (the module's rule).
fn free_after_work(primary: Arc<Primary>, ptr: CUdeviceptr, location: Location) {
    hal_core::teardown::after_work("hal-cuda-free", move || release(&primary, ptr, location));
}

/// Free the memory at `ptr` with its context pushed.
fn release(primary: &Primary, ptr: CUdeviceptr, location: Location) {
    let driver = &primary.driver;
    let Ok(_ctx) = primary.enter() else {
        log::warn!("freeing CUDA memory at {ptr:#x}: its context cannot be pushed");
        return;
    };
    // The free may wait for the device: never while a stream waits for a
    // notify (`quiet.rs`).
    let _quiet = primary.quiet.hold();
    let result = match location {
        Location::Host => driver.mem_free_host().and_then(|f| {
            // SAFETY: `ptr` came from cuMemAllocHost and is freed once.
            driver.check("cuMemFreeHost", unsafe { f(ptr as *mut c_void) })
        }),
        _ => driver.mem_free().and_then(|f| {
            // SAFETY: `ptr` came from cuMemAlloc or cuMemAllocManaged and
            // is freed once.
            driver.check("cuMemFree_v2", unsafe { f(ptr) })
        }),
    };
    if let Err(e) = result {
        log::warn!("freeing CUDA memory at {ptr:#x}: {e}");
    }
}

impl Memory for CudaAllocation {
    fn addr(&self) -> u64 {
        self.ptr
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn location(&self) -> Location {
        self.location
    }

    fn host_ptr(&self) -> Option<*mut u8> {
        match self.location {
            Location::Host | Location::Managed => Some(self.ptr as *mut u8),
            Location::Device(_) => None,
        }
    }

    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        copy_out(&self.primary, self.ptr, self.len, offset, dst)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        copy_in(&self.primary, self.ptr, self.len, offset, src)
    }
}

/// The answer of the lease calls on a device without
/// `Capabilities::LEASES` (a driver without the IPC entry points).
fn no_leases(operation: &str) -> hal_core::Error {
    hal_core::Error::unsupported(
        "cuda",
        operation,
        "the driver has no legacy IPC entry points, so nothing is exported and no importer \
         is counted (Capabilities::LEASES is absent)",
    )
}

impl Allocation for CudaAllocation {
    fn importers(&self) -> Result<usize> {
        if !self.counts_importers {
            return Err(no_leases("importers"));
        }
        Ok(self.exports.get().map_or(0, |e| e.leases.count()))
    }

    /// Refused with [`Error::Busy`](hal_core::Error::Busy) while importers
    /// map it: CUDA leaves freeing memory another process has open
    /// undefined. Dropping instead frees it once they are gone.
    fn free(self) -> std::result::Result<(), hal_core::FreeError<Self>> {
        let holders = self.exports.get().map_or(0, |e| e.leases.count());
        if holders > 0 {
            let what = format!(
                "CUDA memory at {:#x} ({} bytes; importers close it with cuIpcCloseMemHandle \
                 before cuMemFree_v2)",
                self.ptr, self.len
            );
            return Err(hal_core::FreeError {
                resource: self,
                error: hal_core::Error::Busy { what, holders },
            });
        }
        drop(self);
        Ok(())
    }

    fn wait_unleased(&self, timeout: Option<std::time::Duration>) -> Result<()> {
        if !self.counts_importers {
            return Err(no_leases("wait_unleased"));
        }
        match self.exports.get() {
            Some(e) => e.leases.wait_empty(timeout),
            None => Ok(()),
        }
    }
}

/// Copy `dst.len()` bytes at `offset` of the live device range
/// `base..base + len` into `dst` (`cuMemcpyDtoH`), with the context pushed.
pub(crate) fn copy_out(
    primary: &Primary,
    base: CUdeviceptr,
    len: u64,
    offset: u64,
    dst: &mut [u8],
) -> Result<()> {
    check_bounds(offset, dst.len() as u64, len)?;
    let driver = &primary.driver;
    let _ctx = primary.enter()?;
    let f = driver.memcpy_dtoh()?;
    // SAFETY: the source lies inside the live device range (bounds checked;
    // the caller holds the memory); `dst` is a distinct host buffer of that
    // length.
    let status = unsafe { f(dst.as_mut_ptr().cast(), base + offset, dst.len()) };
    driver.check("cuMemcpyDtoH_v2", status)
}

/// Copy `src` to `offset` of the live device range `base..base + len`
/// (`cuMemcpyHtoD`), with the context pushed, and wait until the bytes are
/// in device memory.
///
/// `cuMemcpyHtoD` from pageable memory returns once the bytes are staged,
/// before the DMA to device memory has finished: later work of this process
/// on the legacy stream sees them, another process does not. Measured on an
/// H200 (driver 580): a child that wrote imported memory this way and then
/// rang a notify left its parent reading the old bytes. The legacy stream
/// is synchronized after the copy; this crate's own streams are
/// non-blocking, so the wait never stands behind their queued work.
pub(crate) fn copy_in(
    primary: &Primary,
    base: CUdeviceptr,
    len: u64,
    offset: u64,
    src: &[u8],
) -> Result<()> {
    check_bounds(offset, src.len() as u64, len)?;
    let driver = &primary.driver;
    let _ctx = primary.enter()?;
    let f = driver.memcpy_htod()?;
    // SAFETY: the destination lies inside the live device range (bounds
    // checked); `src` is a distinct host buffer of that length.
    let status = unsafe { f(base + offset, src.as_ptr().cast(), src.len()) };
    driver.check("cuMemcpyHtoD_v2", status)?;
    let sync = driver.stream_synchronize()?;
    // SAFETY: the null stream is the context's legacy default stream, which
    // the pushed context has; nothing else is passed.
    let status = unsafe { sync(std::ptr::null_mut()) };
    driver.check("cuStreamSynchronize", status)
}

#[cfg(test)]
mod tests {
    use hal_core::vendor::cuda;
    use hal_core::{Error, VendorError};

    fn vendor(code: hal_core::vendor::Code) -> Error {
        Error::Vendor(VendorError {
            backend: "cuda".into(),
            code: code.code,
            name: code.name.into(),
            message: "cuMemAlloc_v2".into(),
        })
    }

    #[test]
    fn only_the_drivers_out_of_memory_is_a_lack_of_memory() {
        assert!(super::out_of_memory(&vendor(cuda::OUT_OF_MEMORY)));
        assert!(!super::out_of_memory(&vendor(cuda::INVALID_VALUE)));
        assert!(!super::out_of_memory(&Error::OutOfMemory {
            requested: 1,
            detail: "hal's own answer, not the driver's".into(),
        }));
    }
}
