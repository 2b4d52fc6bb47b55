//! Host registration with the device, the driver's calls and their rules
//! (the context current on the calling thread):
//!
//! - host memory is registered `PORTABLE | DEVICEMAP`
//!   (`cuMemHostRegister_v2`), and the device reaches it at the pointer
//!   `cuMemHostGetDevicePointer_v2` gives (the host address itself on the
//!   H200, measured);
//! - the driver refuses a range that overlaps a registration
//!   (`CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`);
//! - a registration ends with `cuMemHostUnregister`, before the range is
//!   unmapped.

use std::ffi::c_void;

use hal_core::os::HostRange;
use hal_core::Result;

use crate::sys::{CUdeviceptr, Driver};

/// `CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP`.
const REGISTER_FLAGS: u32 = 0x1 | 0x2;

/// Register `range` with the current context's device: the device's
/// address of it. The caller unregisters it with [`unregister`], once,
/// before the range is unmapped.
pub(crate) fn register(driver: &Driver, range: &HostRange) -> Result<CUdeviceptr> {
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

/// End the registration at `ptr` made by [`register`]
/// (`cuMemHostUnregister`).
pub(crate) fn unregister(driver: &Driver, ptr: *mut c_void) -> Result<()> {
    let f = driver.mem_host_unregister()?;
    // SAFETY: `ptr` was registered by `register` and is unregistered once,
    // by the owner of that registration.
    driver.check("cuMemHostUnregister", unsafe { f(ptr) })
}
