//! Initialisation, the driver version and the device queries.

use std::ffi::{c_char, c_int, c_uint};

use cudarc::driver::sys::{CUdevice, CUdevice_attribute, CUresult, CUuuid};
use hal_core::kit::vendor::{cuda, Code};
use hal_core::{Capabilities, Device};

use crate::abi::{guard, non_null, put};
use crate::state::{driver, init, Dev};

/// The version `cuDriverGetVersion` answers (the CUDA 12.8 API this
/// library's signatures follow).
pub const DRIVER_VERSION: c_int = 12080;

/// One past the last device attribute number of driver 580 (CUDA 13.0's
/// `CU_DEVICE_ATTRIBUTE_MAX`): numbers from 1 below it are answered, others
/// are `CUDA_ERROR_INVALID_VALUE`.
pub const ATTRIBUTE_LIMIT: c_int = 148;

/// `CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`
/// (CUDA 13.0; the 12.8 enum has no name for it).
pub const HOST_NUMA_VMM_SUPPORTED: c_int = cuda::ATTRIBUTE_HOST_NUMA_VMM_SUPPORTED;

/// Initialises the driver (`flags` must be 0) and the simulated devices.
#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    guard("cuInit", || {
        if flags != 0 {
            return Err(cuda::INVALID_VALUE);
        }
        init()
    })
}

/// Gives the driver's CUDA version, 12080; works before `cuInit`.
#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(driver_version: *mut c_int) -> CUresult {
    // SAFETY: `driver_version` is null or valid for a write (the caller's contract).
    guard("cuDriverGetVersion", || unsafe {
        put(driver_version, DRIVER_VERSION)
    })
}

/// Gives the number of devices this process sees.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    guard("cuDeviceGetCount", || {
        let n = c_int::try_from(driver()?.devices.len()).map_err(|_| cuda::UNKNOWN)?;
        // SAFETY: `count` is null or valid for a write (the caller's contract).
        unsafe { put(count, n) }
    })
}

/// Gives the device handle of ordinal `ordinal` (the ordinal itself).
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    guard("cuDeviceGet", || {
        driver()?.dev(ordinal)?;
        // SAFETY: `device` is null or valid for a write (the caller's contract).
        unsafe { put(device, ordinal) }
    })
}

/// Copies the device's name, NUL-terminated and cut to `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    guard("cuDeviceGetName", || {
        let d = driver()?.dev(dev)?;
        non_null(name)?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l > 0)
            .ok_or(cuda::INVALID_VALUE)?;
        let text = d.device.info().name.as_bytes();
        let n = text.len().min(len - 1);
        // SAFETY: `name` is not null and valid for `len` bytes (the caller's
        // contract); `n < len`, so the copy and the NUL fit.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), name, n);
            name.add(n).write(0);
        }
        Ok(())
    })
}

/// The UUID of `dev` as the driver's `CUuuid`.
fn uuid_of(d: &Dev) -> CUuuid {
    let mut out = CUuuid { bytes: [0; 16] };
    for (o, b) in out.bytes.iter_mut().zip(d.device.info().uuid) {
        *o = c_char::from_ne_bytes([b]);
    }
    out
}

/// Gives the device's UUID (the simulator's, the same in every process).
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    guard("cuDeviceGetUuid_v2", || {
        let d = driver()?.dev(dev)?;
        // SAFETY: `uuid` is null or valid for a write (the caller's contract).
        unsafe { put(uuid, uuid_of(d)) }
    })
}

/// Gives the device's UUID, as [`cuDeviceGetUuid_v2`].
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    // SAFETY: forwarded caller's contract.
    unsafe { cuDeviceGetUuid_v2(uuid, dev) }
}

/// Gives the device's memory in bytes.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    guard("cuDeviceTotalMem_v2", || {
        let d = driver()?.dev(dev)?;
        let total = usize::try_from(d.device.info().total_memory).map_err(|_| cuda::UNKNOWN)?;
        // SAFETY: `bytes` is null or valid for a write (the caller's contract).
        unsafe { put(bytes, total) }
    })
}

/// `PAGEABLE_MEMORY_ACCESS`: 0 as on the H200 measured (no HMM), 1 with
/// `HAL_MOCK_LIBCUDA_PAGEABLE_MEMORY_ACCESS=1`, to stand in for an HMM or ATS
/// machine.
fn pageable() -> c_int {
    c_int::from(crate::switches::pageable_memory_access())
}

/// Gives a device attribute (`attrib` is a `CUdevice_attribute` number).
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    pi: *mut c_int,
    attrib: c_int,
    dev: CUdevice,
) -> CUresult {
    guard("cuDeviceGetAttribute", || {
        let d = driver()?.dev(dev)?;
        let value = attribute(d, attrib)?;
        // SAFETY: `pi` is null or valid for a write (the caller's contract).
        unsafe { put(pi, value) }
    })
}

/// The value of attribute number `attrib` on `d`: an H200's where the
/// measurement or the data sheet gives it, the profile's capabilities for
/// what the simulator can lack, 0 for the other numbers below
/// [`ATTRIBUTE_LIMIT`].
fn attribute(d: &Dev, attrib: c_int) -> Result<c_int, Code> {
    use CUdevice_attribute as A;
    if !(1..ATTRIBUTE_LIMIT).contains(&attrib) {
        return Err(cuda::INVALID_VALUE);
    }
    if let Some(v) = crate::switches::attribute(attrib) {
        return Ok(v);
    }
    let caps = d.device.info().capabilities;
    let has = |c: Capabilities| c_int::from(caps.contains(c));
    let physical = c_int::try_from(d.device.physical_device()).unwrap_or(c_int::MAX);
    let table: &[(A, c_int)] = &[
        (A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024),
        (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024),
        (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024),
        (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64),
        (A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, c_int::MAX),
        (A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535),
        (A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535),
        (A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152),
        (A::CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536),
        (A::CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32),
        (A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536),
        (A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132),
        (A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1),
        (A::CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, 0),
        (A::CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1),
        (A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, physical),
        (A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 0),
        (A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0),
        (A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048),
        (A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1),
        (A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9),
        (A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0),
        (
            A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY,
            has(Capabilities::MANAGED_MEMORY),
        ),
        (A::CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, 0),
        (A::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, pageable()),
        (
            A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
            has(Capabilities::MANAGED_MEMORY),
        ),
        (
            A::CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
            1,
        ),
        (
            A::CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED,
            has(Capabilities::HOST_REGISTRATION),
        ),
        (
            A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            has(Capabilities::VMM),
        ),
        (
            A::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
            has(Capabilities::VMM),
        ),
        (
            A::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED,
            has(Capabilities::VMM),
        ),
        (A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1),
        (A::CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, 9),
        (A::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 1),
        (A::CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 1),
        (
            A::CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED,
            has(Capabilities::IPC_EVENT),
        ),
    ];
    // CUDA 13.0 numbers that the 12.8 enum lacks.
    let numbered: &[(c_int, c_int)] = &[
        // CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
        (HOST_NUMA_VMM_SUPPORTED, has(Capabilities::HOST_NUMA_VMM)),
    ];
    Ok(table
        .iter()
        .map(|&(a, v)| (a as c_int, v))
        .chain(numbered.iter().copied())
        .find(|&(a, _)| a == attrib)
        .map_or(0, |(_, v)| v))
}
