//! Memory allocated through the driver: device memory (`cuMemAlloc`),
//! pinned host memory (`cuMemAllocHost`) and managed memory
//! (`cuMemAllocManaged`), freed on drop with the device's context pushed.
//!
//! **A free may wait for the device.** `cuMemFree_v2` and `cuMemFreeHost`
//! "may perform implicit synchronization" (the driver API's words): they
//! may wait for all the work queued in the context, which may wait for a
//! notify a crashed peer never signals. So a drop frees through
//! [`hal_core::kit::stream::teardown::after_work`]: it returns within
//! [`hal_core::kit::stream::teardown::GRACE`], and the memory is freed once the work has
//! run. Until then the memory is not back: an allocation the driver refuses
//! for lack of memory (`CUDA_ERROR_OUT_OF_MEMORY`) while such frees are
//! pending waits for them, at most [`hal_core::kit::stream::teardown::PATIENCE`], and
//! tries again ([`hal_core::kit::stream::teardown::when_freed`]); past that its error
//! says how many still wait.
//!
//! **Exports.** The exporter's side of legacy IPC is kept with an
//! allocation ([`Exports`]): its importers' leases, and the registry of
//! this process's exported bases that a same-process import reaches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use hal_core::device::check_bounds;
use hal_core::kit::os::lock::lock;
use hal_core::lease::{LeaseTable, DEFAULT_SLOTS};
use hal_core::{Allocation, Location, Memory, Result};

use crate::context::Primary;
use crate::ffi::result::{mem, stream};
use crate::ffi::{CUdeviceptr, Stream};

/// `CU_MEM_ATTACH_GLOBAL`.
const ATTACH_GLOBAL: u32 = 1;

/// True for the driver's refusal for lack of memory.
pub(crate) fn out_of_memory(e: &hal_core::Error) -> bool {
    matches!(e, hal_core::Error::Vendor(v) if v.code == hal_core::kit::vendor::cuda::OUT_OF_MEMORY.code)
}

/// One driver allocation of `size` bytes at `location` (checked by the
/// caller), with the context pushed.
pub(crate) fn allocate(primary: &Primary, location: Location, size: usize) -> Result<CUdeviceptr> {
    let driver = &primary.driver;
    let _ctx = primary.enter()?;
    match location {
        Location::Device(_) => mem::alloc(driver, size),
        Location::Host => mem::alloc_host(driver, size),
        Location::Managed => mem::alloc_managed(driver, size, ATTACH_GLOBAL),
    }
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
        let made = Exports {
            leases: LeaseTable::new(DEFAULT_SLOTS)?,
            buffer_id,
        };
        // A concurrent export may have won the race; its table is kept.
        if self.exports.set(made).is_ok() {
            // One more live exporter of the allocation at `base`.
            lock(own()).entry(buffer_id).or_insert((base, 0)).1 += 1;
        }
        self.exports
            .get()
            .ok_or_else(|| hal_core::Error::invalid("lease table vanished"))
    }
}

impl Drop for CudaAllocation {
    /// Returns without waiting for the context's queued work for longer
    /// than [`hal_core::kit::stream::teardown::GRACE`], and, where importers still map
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
                forget(e.buffer_id);
            }
            return;
        }
        let (primary, ptr, location) = (Arc::clone(&self.primary), self.ptr, self.location);
        let Some(e) = self.exports.get() else {
            free_after_work(primary, ptr, location);
            return;
        };
        forget(e.buffer_id);
        if e.leases.count() == 0 {
            free_after_work(primary, ptr, location);
            return;
        }
        // Importers still map it: freeing now would pull the memory from
        // under them (undefined behaviour in CUDA), so the release waits
        // for their leases on a thread of its own.
        let leases = Arc::clone(&e.leases);
        let spawned = hal_core::kit::os::thread::spawn("hal-cuda-deferred-free", move || {
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
    hal_core::kit::stream::teardown::after_work("hal-cuda-free", move || {
        release(&primary, ptr, location)
    });
}

/// Free the memory at `ptr` with its context pushed.
fn release(primary: &Primary, ptr: CUdeviceptr, location: Location) {
    let driver = &primary.driver;
    let Ok(_ctx) = primary.enter() else {
        log::warn!("freeing CUDA memory at {ptr:#x}: its context cannot be pushed");
        return;
    };
    // The free may wait for the device: never while a stream waits for a
    // notify (`sync/quiet.rs`). `ptr` came from `allocate` and is freed
    // once.
    let _quiet = primary.quiet.hold();
    let result = match location {
        Location::Host => mem::free_host(driver, ptr),
        _ => mem::free(driver, ptr),
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
        hal_core::kit::memory::busy_free::unless_held(self, holders, |a| {
            format!(
                "CUDA memory at {:#x} ({} bytes; importers close it with cuIpcCloseMemHandle \
                 before cuMemFree_v2)",
                a.ptr, a.len
            )
        })
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
    let _ctx = primary.enter()?;
    mem::copy_from_device(&primary.driver, dst, base + offset)
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
    mem::copy_to_device(driver, base + offset, src)?;
    // The legacy stream of the pushed context.
    stream::synchronize(driver, Stream::LEGACY)
}

/// What an exported allocation keeps: its importers' leases and its id.
#[derive(Debug)]
pub(crate) struct Exports {
    pub(crate) leases: Arc<LeaseTable>,
    pub(crate) buffer_id: u64,
}

/// The bases of this process's exported allocations, by buffer id, each
/// with how many live [`CudaAllocation`]s export ranges of it (an
/// allocation and ranges of it adopted apart share the driver's buffer
/// id): what a same-process import reaches.
fn own() -> &'static Mutex<HashMap<u64, (CUdeviceptr, usize)>> {
    static OWN: OnceLock<Mutex<HashMap<u64, (CUdeviceptr, usize)>>> = OnceLock::new();
    OWN.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The base of this process's exported allocation `buffer_id`, while one
/// of its exporters lives.
pub(crate) fn own_base(buffer_id: u64) -> Option<CUdeviceptr> {
    lock(own()).get(&buffer_id).map(|&(base, _)| base)
}

/// The buffer ids of this process's allocations exported in raw form, by
/// the driver's 64 bytes: a raw import of one of them in this process
/// reaches the original (the driver refuses to open its own handles).
pub(crate) fn own_raw() -> &'static Mutex<HashMap<[u8; 64], u64>> {
    static OWN_RAW: OnceLock<Mutex<HashMap<[u8; 64], u64>>> = OnceLock::new();
    OWN_RAW.get_or_init(|| Mutex::new(HashMap::new()))
}

/// One exporter of allocation `buffer_id` less (it is being dropped); the
/// last one forgets the allocation.
fn forget(buffer_id: u64) {
    let mut own = lock(own());
    let Some(entry) = own.get_mut(&buffer_id) else {
        return;
    };
    entry.1 = entry.1.saturating_sub(1);
    if entry.1 == 0 {
        own.remove(&buffer_id);
        drop(own);
        lock(own_raw()).retain(|_, id| *id != buffer_id);
    }
}

#[cfg(test)]
mod tests {
    use hal_core::kit::vendor::cuda;
    use hal_core::{Error, VendorError};

    fn vendor(code: hal_core::kit::vendor::Code) -> Error {
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
