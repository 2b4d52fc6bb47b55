//! Peer access: memory of one device used from another.
//!
//! A handle names its device by UUID (`cuDeviceGetUuid_v2`), never by
//! ordinal alone: a process that sees the devices in another order
//! (`CUDA_VISIBLE_DEVICES`) finds the exporter's device by its UUID. An
//! import onto a device other than the memory's
//! needs `ImportOptions::peer_access` and a pair of devices that
//! `cuDeviceCanAccessPeer` says can reach each other; another process's
//! memory is then opened with `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS` in the
//! importing device's context, and this process's own memory is reached
//! after `cuCtxEnablePeerAccess` from the importing device's context
//! (`CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED` is success here).

use std::ffi::c_int;
use std::sync::Arc;

use hal_core::kit::vendor::cuda;
use hal_core::{Error, Result};

use crate::context::Primary;
use crate::ffi::result::{self, ctx, device};
use crate::ffi::{CUdevice, Driver};

/// The device of this process with `uuid`, if it sees one.
pub(crate) fn device_of_uuid(driver: &Driver, uuid: &[u8; 16]) -> Result<Option<CUdevice>> {
    for ordinal in 0..device::count(driver)? {
        let dev = device::get(driver, ordinal)?;
        if device::uuid(driver, dev)? == *uuid {
            return Ok(Some(dev));
        }
    }
    Ok(None)
}

/// True when device `dev` can access the memory of device `peer`.
pub(crate) fn can_access(driver: &Driver, dev: CUdevice, peer: CUdevice) -> Result<bool> {
    device::can_access_peer(driver, dev, peer)
}

/// True when device `dev` can reach at least one other device.
pub(crate) fn has_peers(driver: &Driver, dev: CUdevice, count: c_int) -> bool {
    result::has(driver.ctx_enable_peer_access()).is_ok()
        && (0..count).any(|peer| peer != dev && can_access(driver, dev, peer).unwrap_or(false))
}

/// Refuse an import of memory on device `source` onto `target` (this
/// process's device) when they cannot reach each other.
pub(crate) fn check(driver: &Driver, target: CUdevice, source: CUdevice) -> Result<()> {
    if can_access(driver, target, source)? {
        return Ok(());
    }
    Err(Error::unsupported(
        hal_core::BackendId::Cuda,
        "an import onto another device",
        format!(
            "device {target} cannot access the memory of device {source} \
             (cuDeviceCanAccessPeer answered 0): import through device {source}"
        ),
    ))
}

/// Let `target`'s context access `source`'s memory; the source's primary
/// context is retained for as long as the returned value lives.
pub(crate) fn enable(target: &Primary, source: CUdevice) -> Result<Arc<Primary>> {
    let driver = Arc::clone(&target.driver);
    let source = Arc::new(Primary::retain(driver, source)?);
    result::has(target.driver.ctx_enable_peer_access())?;
    let _ctx = target.enter()?;
    // The source's context is retained while `source` lives.
    match ctx::enable_peer_access(&target.driver, source.raw()) {
        Err(e) if cuda::PEER_ACCESS_ALREADY_ENABLED.matches(&e) => Ok(source),
        Err(e) => Err(e),
        Ok(()) => Ok(source),
    }
}
