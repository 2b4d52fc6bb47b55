//! Memory allocated through the driver: device memory (`cuMemAlloc`),
//! pinned host memory (`cuMemAllocHost`) and managed memory
//! (`cuMemAllocManaged`), freed on drop with the device's context pushed.

use std::ffi::c_void;
use std::sync::Arc;

use hal_core::device::check_bounds;
use hal_core::{Allocation, Location, Memory, Result};

use crate::context::Primary;
use crate::sys::CUdeviceptr;

/// Memory this process allocated on a CUDA device.
pub struct CudaAllocation {
    pub(crate) primary: Arc<Primary>,
    /// The address (a device pointer; for host memory also the host's).
    pub(crate) ptr: CUdeviceptr,
    pub(crate) len: u64,
    pub(crate) location: Location,
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

impl Drop for CudaAllocation {
    fn drop(&mut self) {
        let driver = &self.primary.driver;
        let Ok(_ctx) = self.primary.enter() else {
            log::warn!(
                "freeing CUDA memory at {:#x}: its context cannot be pushed",
                self.ptr
            );
            return;
        };
        let result = match self.location {
            Location::Host => driver.mem_free_host().and_then(|f| {
                // SAFETY: `ptr` came from cuMemAllocHost and is freed once.
                driver.check("cuMemFreeHost", unsafe { f(self.ptr as *mut c_void) })
            }),
            _ => driver.mem_free().and_then(|f| {
                // SAFETY: `ptr` came from cuMemAlloc or cuMemAllocManaged
                // and is freed once.
                driver.check("cuMemFree_v2", unsafe { f(self.ptr) })
            }),
        };
        if let Err(e) = result {
            log::warn!("freeing CUDA memory at {:#x}: {e}", self.ptr);
        }
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
        check_bounds(offset, dst.len() as u64, self.len)?;
        let driver = &self.primary.driver;
        let _ctx = self.primary.enter()?;
        let f = driver.memcpy_dtoh()?;
        // SAFETY: the source range lies inside this live allocation (bounds
        // checked); `dst` is a distinct host buffer of that length.
        let status = unsafe { f(dst.as_mut_ptr().cast(), self.ptr + offset, dst.len()) };
        driver.check("cuMemcpyDtoH_v2", status)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        check_bounds(offset, src.len() as u64, self.len)?;
        let driver = &self.primary.driver;
        let _ctx = self.primary.enter()?;
        let f = driver.memcpy_htod()?;
        // SAFETY: the destination range lies inside this live allocation;
        // `src` is a distinct host buffer of that length.
        let status = unsafe { f(self.ptr + offset, src.as_ptr().cast(), src.len()) };
        driver.check("cuMemcpyHtoD_v2", status)
    }
}

/// Leases count importers of exported memory, which this backend does not
/// export yet.
fn no_leases(operation: &str) -> hal_core::Error {
    hal_core::Error::unsupported(
        "cuda",
        operation,
        "this backend does not export memory yet, so it counts no importers \
         (Capabilities::LEASES is absent)",
    )
}

impl Allocation for CudaAllocation {
    fn importers(&self) -> Result<usize> {
        Err(no_leases("importers"))
    }

    fn wait_unleased(&self, _timeout: Option<std::time::Duration>) -> Result<()> {
        Err(no_leases("wait_unleased"))
    }
}
