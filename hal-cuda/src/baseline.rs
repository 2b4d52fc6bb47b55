//! Bare driver calls that benchmarks measure hal against in the same run
//! (`halctl bench --backend cuda`): the floor, with none of hal's work.
//!
//! This module exists for `halctl bench` only, behind the non-default
//! feature `baselines`; programs use the contract's operations. The bare
//! stream memory operations (`CudaDevice::bare_stream_wait_value32` and
//! `bare_stream_write_value32`) are defined with the device, as their
//! callers' promise on the address is the device's to pass on.

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use hal_core::Result;

use crate::context::Primary;
use crate::device::CudaDevice;
use crate::ffi::result::{mem, vmm};
use crate::ffi::{CUdeviceptr, CUmemGenericAllocationHandle};
use crate::memory::ipc::Opened;
use crate::memory::raw::RawIpcHandle;

/// One bare `cuIpcOpenMemHandle_v2` (no cache, no lease, no checks),
/// closed with `cuIpcCloseMemHandle` when dropped.
pub struct BareOpen(Opened);

impl BareOpen {
    /// The device pointer the driver gave (the allocation's base).
    pub fn base(&self) -> u64 {
        self.0.base
    }
}

impl std::fmt::Debug for BareOpen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BareOpen")
            .field("base", &format_args!("{:#x}", self.0.base))
            .finish()
    }
}

impl CudaDevice {
    /// Open `raw`'s 64 bytes with nothing but the driver call, this
    /// device's context pushed around it: what an import of an IPC handle
    /// already in hand costs at the least. For benchmarks; programs use
    /// [`CudaDevice::import_raw`] or `import_memory`.
    pub fn bare_ipc_open(&self, raw: &RawIpcHandle) -> Result<BareOpen> {
        crate::memory::ipc::open_bare(&self.primary, &raw.bytes).map(BareOpen)
    }
}

/// A bare VMM import of a descriptor already in hand:
/// `cuMemImportFromShareableHandle`, `cuMemAddressReserve`, `cuMemMap`,
/// `cuMemSetAccess` (read-write for this device), nothing else. Dropping
/// it unmaps, frees the range and releases the handle.
pub struct BareVmm {
    primary: Arc<Primary>,
    handle: CUmemGenericAllocationHandle,
    base: u64,
    size: u64,
}

impl BareVmm {
    /// The mapped range's first address.
    pub fn base(&self) -> u64 {
        self.base
    }
}

impl std::fmt::Debug for BareVmm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BareVmm")
            .field("base", &format_args!("{:#x}", self.base))
            .field("size", &self.size)
            .finish()
    }
}

impl Drop for BareVmm {
    fn drop(&mut self) {
        if self.primary.forked() {
            // A forked child: the context is the parent's; leave it be.
            return;
        }
        let driver = &self.primary.driver;
        let undone = self.primary.enter().and_then(|_ctx| {
            if self.base != 0 {
                // The range was reserved and mapped by `bare_vmm_import`, once.
                vmm::unmap(driver, self.base, self.size as usize)?;
                vmm::free_range(driver, self.base, self.size as usize)?;
            }
            // The handle came from cuMemImportFromShareableHandle, once.
            vmm::release(driver, self.handle)
        });
        if let Err(e) = undone {
            log::warn!("undoing a bare VMM import: {e}");
        }
    }
}

impl CudaDevice {
    /// Import the POSIX descriptor `fd` of a physical allocation of `size`
    /// bytes, reserve a range, map it and give this device read-write
    /// access, with nothing but the driver calls: what a VMM import of a
    /// descriptor already in hand costs at the least. For benchmarks;
    /// programs use `import_physical`, `reserve`, `map` and `set_access_for`.
    pub fn bare_vmm_import(&self, fd: BorrowedFd<'_>, size: u64) -> Result<BareVmm> {
        let driver = &self.primary.driver;
        let _ctx = self.primary.enter()?;
        let handle = vmm::import_fd(driver, fd)?;
        // From here the value undoes what was done when dropped.
        let mut bare = BareVmm {
            primary: Arc::clone(&self.primary),
            handle,
            base: 0,
            size,
        };
        let base = vmm::reserve(driver, size as usize, 0)?;
        // The range was just reserved for `size` bytes and the handle is
        // live; offset 0.
        if let Err(e) = vmm::map(driver, base, size as usize, 0, handle) {
            // Reserved above, and nothing is mapped.
            let _ = vmm::free_range(driver, base, size as usize);
            return Err(e);
        }
        bare.base = base;
        let grant = hal_core::AccessGrant {
            target: hal_core::AccessTarget::Device(hal_core::Device::info(self).ordinal),
            access: hal_core::Access::ReadWrite,
        };
        let desc = crate::vmm::ops::access_desc(&grant);
        vmm::set_access(driver, base, size as usize, &[desc])?;
        Ok(bare)
    }
}

/// One bare `cuMemAlloc_v2` of device memory, freed with nothing but
/// `cuMemFree_v2` (this device's context pushed around it) by
/// [`BareAlloc::free`], or when dropped: what freeing device memory costs
/// at the least, against the drop of a `CudaAllocation`.
pub struct BareAlloc {
    primary: Arc<Primary>,
    ptr: CUdeviceptr,
}

impl std::fmt::Debug for BareAlloc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BareAlloc")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .finish()
    }
}

impl BareAlloc {
    /// Free it with `cuMemFree_v2`, here and now.
    pub fn free(mut self) -> Result<()> {
        let ptr = std::mem::take(&mut self.ptr);
        bare_free(&self.primary, ptr)
    }
}

impl Drop for BareAlloc {
    fn drop(&mut self) {
        if self.primary.forked() {
            // A forked child: the context is the parent's; leave it be.
            return;
        }
        if self.ptr != 0 {
            if let Err(e) = bare_free(&self.primary, self.ptr) {
                log::warn!("freeing a bare allocation: {e}");
            }
        }
    }
}

fn bare_free(primary: &Primary, ptr: CUdeviceptr) -> Result<()> {
    let _ctx = primary.enter()?;
    // `ptr` came from cuMemAlloc_v2 in `bare_alloc` and is freed once:
    // `free` and the drop take it.
    mem::free(&primary.driver, ptr)
}

impl CudaDevice {
    /// Allocate `size` bytes of device memory with nothing but
    /// `cuMemAlloc_v2`. For benchmarks; programs use `allocate`.
    pub fn bare_alloc(&self, size: u64) -> Result<BareAlloc> {
        let size = usize::try_from(size)
            .ok()
            .filter(|&s| s != 0)
            .ok_or_else(|| {
                hal_core::Error::invalid(format!("a bare allocation of {size} bytes"))
            })?;
        let _ctx = self.primary.enter()?;
        let ptr = mem::alloc(&self.primary.driver, size)?;
        Ok(BareAlloc {
            primary: Arc::clone(&self.primary),
            ptr,
        })
    }
}
