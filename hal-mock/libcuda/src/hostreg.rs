//! Registration of existing host memory (`cuMemHostRegister_v2`,
//! `cuMemHostGetDevicePointer_v2`, `cuMemHostUnregister`) on the
//! simulator's registrations: the device pointer is the host address
//! (measured on an H200), an overlapping range is
//! `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`, an unknown one at
//! unregistration `CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED`.

use std::ffi::{c_uint, c_void};

use cudarc::driver::sys::{CUdeviceptr, CUresult};
use hal_core::kit::vendor::cuda;
use hal_core::{Device, Memory};

use crate::abi::{guard, put};
use crate::context::current;
use crate::error::sim;
use crate::state::{driver, lock};

/// `CU_MEMHOSTREGISTER_PORTABLE | DEVICEMAP | IOMEMORY | READ_ONLY`.
const KNOWN_FLAGS: c_uint = 0x1 | 0x2 | 0x4 | 0x8;

/// Registers `bytesize` bytes of host memory at `p` (whole pages).
#[no_mangle]
pub unsafe extern "C" fn cuMemHostRegister_v2(
    p: *mut c_void,
    bytesize: usize,
    flags: c_uint,
) -> CUresult {
    guard("cuMemHostRegister_v2", || {
        let d = driver()?;
        let ordinal = current(d)?;
        if flags & !KNOWN_FLAGS != 0 || p.is_null() {
            return Err(cuda::INVALID_VALUE);
        }
        let len = u64::try_from(bytesize).map_err(|_| cuda::INVALID_VALUE)?;
        // SAFETY: the caller's contract: `p..p + bytesize` is host memory it
        // keeps mapped until it unregisters it.
        let reg = unsafe {
            d.devices[ordinal as usize]
                .device
                .register_host(p.cast(), len)
        };
        let reg = sim(reg)?;
        lock(&d.registered).insert(reg.addr(), reg);
        Ok(())
    })
}

/// The device pointer of registered host memory at `p` (`flags` must be 0).
#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    pdptr: *mut CUdeviceptr,
    p: *mut c_void,
    flags: c_uint,
) -> CUresult {
    guard("cuMemHostGetDevicePointer_v2", || {
        let d = driver()?;
        current(d)?;
        if flags != 0 {
            return Err(cuda::INVALID_VALUE);
        }
        let at = p as u64;
        let dptr = lock(&d.registered)
            .range(..=at)
            .next_back()
            .filter(|(start, reg)| at < *start + reg.len())
            .map(|(start, reg)| reg.addr() + (at - start))
            .ok_or(cuda::INVALID_VALUE)?;
        // SAFETY: `pdptr` is null or valid for one write (the caller's contract).
        unsafe { put(pdptr, dptr) }
    })
}

/// Unregisters the host memory registered at `p`.
/// Unless [`FREE_SYNCS_VAR`](crate::FREE_SYNCS_VAR) is 0, first waits
/// for the work queued on the current device, holding the driver
/// meanwhile, as driver 580 did (`held.rs`).
#[no_mangle]
pub unsafe extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CUresult {
    guard("cuMemHostUnregister", || {
        let d = driver()?;
        let ordinal = current(d)?;
        let _held = if crate::switches::free_synchronizes() {
            if !lock(&d.registered).contains_key(&(p as u64)) {
                return Err(cuda::HOST_MEMORY_NOT_REGISTERED);
            }
            // Outside the table's lock: the queued work may use it.
            let held = crate::held::hold();
            sim(d.devices[ordinal as usize].device.synchronize_device(None))?;
            Some(held)
        } else {
            None
        };
        let reg = lock(&d.registered).remove(&(p as u64));
        // Dropped outside the lock: the drop unregisters.
        reg.map(drop).ok_or(cuda::HOST_MEMORY_NOT_REGISTERED)
    })
}
