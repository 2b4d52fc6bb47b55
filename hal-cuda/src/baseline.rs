//! Bare driver calls that benchmarks measure hal against in the same run
//! (`halctl bench --backend cuda`): the floor, with none of hal's work.

use crate::device::CudaDevice;
use crate::opened::Opened;
use crate::raw::RawIpcHandle;
use hal_core::Result;

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
        crate::ipc::open_bare(&self.primary, &raw.bytes).map(BareOpen)
    }
}

/// A bare VMM import of a descriptor already in hand:
/// `cuMemImportFromShareableHandle`, `cuMemAddressReserve`, `cuMemMap`,
/// `cuMemSetAccess` (read-write for this device), nothing else. Dropping
/// it unmaps, frees the range and releases the handle.
pub struct BareVmm {
    primary: std::sync::Arc<crate::context::Primary>,
    handle: crate::sys::CUmemGenericAllocationHandle,
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
                let unmap = driver.mem_unmap()?;
                // SAFETY: the range was mapped by `bare_vmm_import`, once.
                driver.check("cuMemUnmap", unsafe {
                    unmap(self.base, self.size as usize)
                })?;
                let free = driver.mem_address_free()?;
                // SAFETY: the range was reserved by `bare_vmm_import`, once.
                let status = unsafe { free(self.base, self.size as usize) };
                driver.check("cuMemAddressFree", status)?;
            }
            let release = driver.mem_release()?;
            // SAFETY: the handle came from cuMemImportFromShareableHandle, once.
            driver.check("cuMemRelease", unsafe { release(self.handle) })
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
    pub fn bare_vmm_import(&self, fd: std::os::fd::BorrowedFd<'_>, size: u64) -> Result<BareVmm> {
        use std::os::fd::AsRawFd;

        let driver = &self.primary.driver;
        let _ctx = self.primary.enter()?;
        let import = driver.mem_import_from_shareable_handle()?;
        let mut handle: crate::sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: `handle` is a valid place; a POSIX descriptor is passed as
        // the pointer's value and stays open for the call.
        let status = unsafe {
            import(
                &mut handle,
                std::ptr::without_provenance_mut(fd.as_raw_fd() as usize),
                crate::vmm::HANDLE_POSIX_FD,
            )
        };
        driver.check("cuMemImportFromShareableHandle", status)?;
        // From here the value undoes what was done when dropped.
        let mut bare = BareVmm {
            primary: std::sync::Arc::clone(&self.primary),
            handle,
            base: 0,
            size,
        };
        let reserve = driver.mem_address_reserve()?;
        let mut base = 0;
        // SAFETY: `base` is a valid place; no address hint, flags 0.
        let status = unsafe { reserve(&mut base, size as usize, 0, 0, 0) };
        driver.check("cuMemAddressReserve", status)?;
        let map = driver.mem_map()?;
        // SAFETY: the range was just reserved for `size` bytes and the
        // handle is live; offset and flags 0.
        if let Err(e) = driver.check("cuMemMap", unsafe {
            map(base, size as usize, 0, handle, 0)
        }) {
            let free = driver.mem_address_free()?;
            // SAFETY: the range was reserved above and nothing is mapped.
            let _ = unsafe { free(base, size as usize) };
            return Err(e);
        }
        bare.base = base;
        let grant = hal_core::AccessGrant {
            target: hal_core::AccessTarget::Device(hal_core::Device::info(self).ordinal),
            access: hal_core::Access::ReadWrite,
        };
        let desc = crate::vmm::access_desc(&grant);
        let set = driver.mem_set_access()?;
        // SAFETY: the range is mapped; one descriptor, valid for the call.
        let status = unsafe { set(base, size as usize, &desc, 1) };
        driver.check("cuMemSetAccess", status)?;
        Ok(bare)
    }
}

impl CudaDevice {
    /// Queue a bare `cuStreamWaitValue32` on `stream`: later work waits
    /// until the word at the device address `addr` equals `value`. What a
    /// stream's wait on a shared word costs at the least (hal's
    /// `stream_wait_notify` also resets the word and holds the notify).
    /// For benchmarks.
    ///
    /// # Safety
    ///
    /// `addr` is this device's address of a 4-byte aligned word of host
    /// memory registered with it, which stays registered and mapped until
    /// the stream ran the wait.
    pub unsafe fn bare_stream_wait_value32(
        &self,
        stream: &crate::CudaStream,
        addr: u64,
        value: u32,
    ) -> Result<()> {
        let driver = &self.primary.driver;
        let _ctx = self.primary.enter()?;
        let f = driver.stream_wait_value32()?;
        // SAFETY: the caller's promise on `addr`; `stream` is live.
        let status = unsafe { f(stream.raw, addr, value, crate::notify::WAIT_VALUE_EQ) };
        driver.check("cuStreamWaitValue32_v2", status)
    }

    /// Queue a bare `cuStreamWriteValue32` of `value` to the word at the
    /// device address `addr` on `stream`. For benchmarks.
    ///
    /// # Safety
    ///
    /// As [`CudaDevice::bare_stream_wait_value32`].
    pub unsafe fn bare_stream_write_value32(
        &self,
        stream: &crate::CudaStream,
        addr: u64,
        value: u32,
    ) -> Result<()> {
        let driver = &self.primary.driver;
        let _ctx = self.primary.enter()?;
        let f = driver.stream_write_value32()?;
        // SAFETY: the caller's promise on `addr`; `stream` is live.
        let status = unsafe { f(stream.raw, addr, value, 0) };
        driver.check("cuStreamWriteValue32_v2", status)
    }
}

/// One bare `cuMemAlloc_v2` of device memory, freed with nothing but
/// `cuMemFree_v2` (this device's context pushed around it) by
/// [`BareAlloc::free`], or when dropped: what freeing device memory costs
/// at the least, against the drop of a `CudaAllocation`.
pub struct BareAlloc {
    primary: std::sync::Arc<crate::context::Primary>,
    ptr: crate::sys::CUdeviceptr,
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

fn bare_free(primary: &crate::context::Primary, ptr: crate::sys::CUdeviceptr) -> Result<()> {
    let driver = &primary.driver;
    let _ctx = primary.enter()?;
    let free = driver.mem_free()?;
    // SAFETY: `ptr` came from cuMemAlloc_v2 in `bare_alloc` and is freed
    // once: `free` and the drop take it.
    driver.check("cuMemFree_v2", unsafe { free(ptr) })
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
        let driver = &self.primary.driver;
        let _ctx = self.primary.enter()?;
        let alloc = driver.mem_alloc()?;
        let mut ptr: crate::sys::CUdeviceptr = 0;
        // SAFETY: `ptr` is a valid place; the size is non-zero.
        driver.check("cuMemAlloc_v2", unsafe { alloc(&mut ptr, size) })?;
        Ok(BareAlloc {
            primary: std::sync::Arc::clone(&self.primary),
            ptr,
        })
    }
}
