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
/// returned value drops, on the thread that drops it.
///
/// `cuMemHostUnregister` waits for the work queued on the device and,
/// meanwhile, holds the process's other driver calls but `cuStreamQuery`
/// (driver 580, measured): it starts only once no stream
/// of the context waits for a notify (`quiet.rs`), so the drop may wait
/// for such a wait to pass. Dropped by a thread that must still signal a
/// notify a stream waits for, it waits for ever, as a bare
/// `cuMemHostUnregister` would.
pub(crate) fn register(primary: &Arc<Primary>, range: HostRange) -> Result<RegisteredHost> {
    let dptr = registered(primary, &range)?;
    let owner = Arc::clone(primary);
    Ok(RegisteredHost::new(range, dptr, move |r| {
        unregister(&owner, r.addr())
    }))
}

/// Register `range`, mapped as long as `keep` lives; the registration ends
/// when the returned value drops, on a teardown worker
/// (`hal_core::teardown::after_work`), so that the drop returns even while
/// a stream waits for a notify the dropping thread has yet to signal
/// (`register`'s rule), and `keep` drops after it.
pub(crate) fn register_kept(
    primary: &Arc<Primary>,
    range: HostRange,
    keep: impl Send + Sync + 'static,
) -> Result<RegisteredHost> {
    let dptr = registered(primary, &range)?;
    let owner = Arc::clone(primary);
    Ok(RegisteredHost::new(range, dptr, move |r| {
        let at = r.addr();
        hal_core::teardown::after_work("hal-cuda-unregister", move || {
            unregister(&owner, at);
            drop(keep);
        });
    }))
}

/// `cuMemHostRegister` of `range` with `primary`'s context pushed: the
/// device address of its first byte.
fn registered(primary: &Primary, range: &HostRange) -> Result<u64> {
    let _ctx = primary.enter()?;
    crate::hostreg::register(&primary.driver, range)
}

/// End the registration of the host memory at `at`, once no stream waits
/// for a notify (`register`'s rule); a failure is logged (nothing is left
/// to undo).
fn unregister(owner: &Primary, at: u64) {
    let done = owner.enter().and_then(|_ctx| {
        let _quiet = owner.quiet.hold();
        crate::hostreg::unregister(&owner.driver, at as usize as *mut std::ffi::c_void)
    });
    if let Err(e) = done {
        log::warn!("unregistering host memory at {at:#x}: {e}");
    }
}
