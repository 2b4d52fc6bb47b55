//! Managed memory advice and prefetch (`cuMemAdvise_v2`,
//! `cuMemPrefetchAsync_v2`) on the simulator's managed memory; other memory
//! is `CUDA_ERROR_INVALID_VALUE`, as the driver answers (measured).

use std::ffi::c_uint;

use cudarc::driver::sys::{CUdeviceptr, CUmemLocation, CUmemLocationType, CUresult, CUstream};
use hal_core::kit::vendor::{cuda, Code};
use hal_core::{Advice, Device, Location};

use crate::abi::guard;
use crate::context::current;
use crate::error::sim;
use crate::state::{driver, Driver, Found, Kind};
use crate::stream::stream_of;

/// The managed allocation holding `ptr..ptr + n`.
fn managed(d: &Driver, ptr: CUdeviceptr, n: usize) -> Result<(Found, u64), Code> {
    let len = u64::try_from(n).map_err(|_| cuda::INVALID_VALUE)?;
    let found = d.find(ptr, len)?;
    if found.kind != Kind::Managed || len == 0 {
        return Err(cuda::INVALID_VALUE);
    }
    Ok((found, len))
}

/// The contract's location of a driver location.
fn location(loc: CUmemLocation) -> Result<Location, Code> {
    match loc.type_ {
        CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE => u32::try_from(loc.id)
            .map(Location::Device)
            .map_err(|_| cuda::INVALID_DEVICE),
        CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST => Ok(Location::Host),
        _ => Err(cuda::INVALID_VALUE),
    }
}

/// Advises how a range of managed memory will be used: SET_READ_MOSTLY (1),
/// SET_PREFERRED_LOCATION (3), SET_ACCESSED_BY (5); their UNSET forms (2,
/// 4, 6) are accepted and change nothing the simulator keeps.
#[no_mangle]
pub unsafe extern "C" fn cuMemAdvise_v2(
    dev_ptr: CUdeviceptr,
    count: usize,
    advice: c_uint,
    loc: CUmemLocation,
) -> CUresult {
    guard("cuMemAdvise_v2", || {
        let d = driver()?;
        let ordinal = current(d)?;
        let (found, len) = managed(d, dev_ptr, count)?;
        let advice = match advice {
            1 => Advice::ReadMostly,
            3 => Advice::PreferredLocation(location(loc)?),
            5 => match location(loc)? {
                Location::Device(n) => Advice::AccessedBy(n),
                _ => return Err(cuda::INVALID_DEVICE),
            },
            2 | 4 | 6 => return Ok(()),
            _ => return Err(cuda::INVALID_VALUE),
        };
        sim(d.devices[ordinal as usize]
            .device
            .advise(found.alloc.r(), found.offset, len, advice))
    })
}

/// Queues moving a range of managed memory to a device or the host.
#[no_mangle]
pub unsafe extern "C" fn cuMemPrefetchAsync_v2(
    dev_ptr: CUdeviceptr,
    count: usize,
    loc: CUmemLocation,
    flags: c_uint,
    h_stream: CUstream,
) -> CUresult {
    guard("cuMemPrefetchAsync_v2", || {
        if flags != 0 {
            return Err(cuda::INVALID_VALUE);
        }
        let d = driver()?;
        let (stream, ordinal) = stream_of(d, h_stream)?;
        let (found, len) = managed(d, dev_ptr, count)?;
        sim(d.devices[ordinal as usize].device.prefetch_async(
            &stream,
            found.alloc.r(),
            found.offset,
            len,
            location(loc)?,
        ))
    })
}
