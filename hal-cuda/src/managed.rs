//! Managed memory and host registration: what the driver calls
//! `cuMemAllocManaged`, `cuMemAdvise`, `cuMemPrefetchAsync` and
//! `cuMemHostRegister`, with the rules the H200 measured.
//!
//! - Managed memory is allocated (`CU_MEM_ATTACH_GLOBAL`) and advised or
//!   prefetched; it is never exported (`cuIpcGetMemHandle` answers
//!   `CUDA_ERROR_INVALID_VALUE`, measured): sharing it across processes is
//!   the `cuda-uvm` backend's work.
//! - Registered host memory (`hostreg.rs`) ends its registration when the
//!   value the caller holds drops.

use std::sync::Arc;

use cudarc::driver::sys::CUmemLocationType;
use hal_core::os::HostRange;
use hal_core::{Advice, Error, Location, RegisteredHost, Result};

use crate::context::Primary;
use crate::sys::{CUdeviceptr, CUmemLocation, CUstream};

/// `CU_MEM_ATTACH_GLOBAL`.
pub(crate) const ATTACH_GLOBAL: u32 = 1;

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
    let dptr = {
        let _ctx = primary.enter()?;
        crate::hostreg::register(&primary.driver, &range)?
    };
    let owner = Arc::clone(primary);
    Ok(RegisteredHost::new(range, dptr, move |r| {
        let done = owner
            .enter()
            .and_then(|_ctx| crate::hostreg::unregister(&owner.driver, r.ptr().cast()));
        if let Err(e) = done {
            log::warn!("unregistering host memory at {:#x}: {e}", r.addr());
        }
    }))
}
