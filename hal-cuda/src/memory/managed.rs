//! Managed memory: what the driver calls `cuMemAllocManaged`,
//! `cuMemAdvise` and `cuMemPrefetchAsync`, with the rules the H200
//! measured. Managed memory is allocated (`CU_MEM_ATTACH_GLOBAL`) and
//! advised or prefetched; it is never exported (`cuIpcGetMemHandle`
//! answers `CUDA_ERROR_INVALID_VALUE`, measured): sharing it across
//! processes is the `cuda-uvm` backend's work.

use cudarc::driver::sys::CUmemLocationType;
use hal_core::{Advice, Error, Location, Result};

use crate::context::Primary;
use crate::ffi::result::mem;
use crate::ffi::{CUdeviceptr, CUmemLocation, Stream};

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
    let _ctx = primary.enter()?;
    mem::advise(&primary.driver, ptr, len as usize, code, loc)
}

/// `cuMemPrefetchAsync_v2` of `ptr..ptr + len` to `to` on `stream`.
pub(crate) fn prefetch(
    primary: &Primary,
    stream: Stream,
    ptr: CUdeviceptr,
    len: u64,
    to: Location,
) -> Result<()> {
    let loc = location(to)?;
    let _ctx = primary.enter()?;
    mem::prefetch(&primary.driver, ptr, len as usize, loc, stream)
}
