//! Managed memory and host registration: what the driver calls
//! `cuMemAllocManaged`, `cuMemAdvise`, `cuMemPrefetchAsync` and
//! `cuMemHostRegister`, with the rules the H200 measured.
//!
//! - Managed memory is allocated (`CU_MEM_ATTACH_GLOBAL`) and advised or
//!   prefetched; it is never exported (`cuIpcGetMemHandle` answers
//!   `CUDA_ERROR_INVALID_VALUE`, measured): sharing it across processes is
//!   the `cuda-uvm` backend's work.
//! - Registered host memory is registered `PORTABLE | DEVICEMAP`, and the
//!   device reaches it at the pointer `cuMemHostGetDevicePointer` gives (the
//!   host address itself on the H200, measured). The driver refuses a range
//!   that overlaps a registration (`CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`).

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys::CUmemLocationType;
use hal_core::os::HostRange;
use hal_core::{Advice, Error, Location, RegisteredHost, Result};

use crate::context::Primary;
use crate::sys::{CUdeviceptr, CUmemLocation, CUstream};

/// `CU_MEM_ATTACH_GLOBAL`.
pub(crate) const ATTACH_GLOBAL: u32 = 1;
/// `CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP`.
const REGISTER_FLAGS: u32 = 0x1 | 0x2;

/// The driver's location of `to`.
fn location(to: Location) -> Result<CUmemLocation> {
    Ok(match to {
        Location::Device(d) => CUmemLocation {
            type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: i32::try_from(d).map_err(|_| Error::invalid("device ordinal too large"))?,
        },
        Location::Host => CUmemLocation {
            type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
            id: 0,
        },
        Location::Managed => {
            return Err(Error::invalid(
                "managed memory is not a place pages move to: name a device or the host",
            ))
        }
    })
}

/// `cuMemAdvise_v2` of `advice` on `ptr..ptr + len`.
pub(crate) fn advise(primary: &Primary, ptr: CUdeviceptr, len: u64, advice: Advice) -> Result<()> {
    // CU_MEM_ADVISE_SET_READ_MOSTLY 1, SET_PREFERRED_LOCATION 3, SET_ACCESSED_BY 5.
    let (code, at) = match advice {
        Advice::ReadMostly => (1, Location::Host),
        Advice::PreferredLocation(l) => (3, l),
        Advice::AccessedBy(d) => (5, Location::Device(d)),
    };
    let loc = location(at)?;
    let driver = &primary.driver;
    let _ctx = primary.enter()?;
    let f = driver.mem_advise()?;
    // SAFETY: the range lies inside live managed memory (checked by the
    // caller); the advice and location are the driver's values.
    let status = unsafe { f(ptr, len as usize, code, loc) };
    driver.check("cuMemAdvise_v2", status)
}

/// `cuMemPrefetchAsync_v2` of `ptr..ptr + len` to `to` on `stream`.
pub(crate) fn prefetch(
    primary: &Primary,
    stream: CUstream,
    ptr: CUdeviceptr,
    len: u64,
    to: Location,
) -> Result<()> {
    let loc = location(to)?;
    let driver = &primary.driver;
    let _ctx = primary.enter()?;
    let f = driver.mem_prefetch_async()?;
    // SAFETY: the range lies inside live managed memory; the stream is a
    // live stream of this context.
    let status = unsafe { f(ptr, len as usize, loc, 0, stream) };
    driver.check("cuMemPrefetchAsync_v2", status)
}

/// Register `range` with the device; the registration ends when the
/// returned value drops.
pub(crate) fn register(primary: &Arc<Primary>, range: HostRange) -> Result<RegisteredHost> {
    let dptr = register_raw(primary, &range)?;
    let owner = Arc::clone(primary);
    Ok(RegisteredHost::new(range, dptr, move |r| {
        unregister(&owner, r.ptr().cast());
    }))
}

/// Register `range` with the device (`cuMemHostRegister_v2`): the device's
/// address of it. The caller unregisters it with [`unregister`], once,
/// before the range is unmapped.
pub(crate) fn register_raw(primary: &Primary, range: &HostRange) -> Result<CUdeviceptr> {
    let driver = &primary.driver;
    let _ctx = primary.enter()?;
    let reg = driver.mem_host_register()?;
    let device_pointer = driver.mem_host_get_device_pointer()?;
    let unregister = driver.mem_host_unregister()?;
    let p = range.ptr().cast::<c_void>();
    // SAFETY: the range is mapped, page-aligned and stays mapped while the
    // registration lives (`HostRange`'s contract, given by the caller).
    let status = unsafe { reg(p, range.len() as usize, REGISTER_FLAGS) };
    driver.check("cuMemHostRegister_v2", status)?;
    let mut dptr: CUdeviceptr = 0;
    // SAFETY: `p` was registered just above; `dptr` is a valid place.
    let status = unsafe { device_pointer(&mut dptr, p, 0) };
    if let Err(e) = driver.check("cuMemHostGetDevicePointer_v2", status) {
        // SAFETY: undo the registration made above.
        unsafe { unregister(p) };
        return Err(e);
    }
    Ok(dptr)
}

/// End the registration at `ptr` made by [`register_raw`]
/// (`cuMemHostUnregister`); a failure is logged.
pub(crate) fn unregister(primary: &Primary, ptr: *mut c_void) {
    let driver = &primary.driver;
    let done = primary.enter().and_then(|_ctx| {
        let f = driver.mem_host_unregister()?;
        // SAFETY: `ptr` was registered by `register_raw` and is
        // unregistered once, by the owner of that registration.
        driver.check("cuMemHostUnregister", unsafe { f(ptr) })
    });
    if let Err(e) = done {
        log::warn!("unregistering host memory at {:#x}: {e}", ptr as usize);
    }
}
