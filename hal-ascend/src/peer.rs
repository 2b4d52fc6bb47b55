//! Peer access between the devices of this process (`vendor/ascend.md`,
//! "Semantics": importing onto another device than the memory's needs
//! `ENABLE_PEER_ACCESS` or `aclrtDeviceEnablePeerAccess` first):
//!
//! - `PEER_ACCESS` is claimed for a device only where the runtime says it
//!   reaches another device's memory (`aclrtDeviceCanAccessPeer`), never
//!   because there are two devices; a runtime without the call gets no
//!   claim;
//! - an import onto another device is refused before the runtime is
//!   called where the device has no peer access;
//! - where the import has no flag of its own (VMM physical memory), the
//!   importing device enables peer access to the memory's device
//!   (`aclrtDeviceEnablePeerAccess`, which the runtime accepts again for a
//!   pair already enabled) before the import.

use hal_core::{Capabilities, DeviceInfo, Error, Result};

use crate::context::Ctx;
use crate::ffi::result;
use crate::ffi::sys::Runtime;

/// True when device `device` can reach the memory of device `peer`
/// (`aclrtDeviceCanAccessPeer`).
pub(crate) fn can_access(rt: &Runtime, device: u32, peer: u32) -> Result<bool> {
    result::device::can_access_peer(rt, device, peer)
}

/// True when device `ordinal` of `count` reaches the memory of at least
/// one other device, as the runtime says; false without the call.
pub(crate) fn claimed(rt: &Runtime, ordinal: u32, count: u32) -> Result<bool> {
    if rt.device_can_access_peer().is_err() {
        return Ok(false);
    }
    for peer in (0..count).filter(|&p| p != ordinal) {
        if can_access(rt, ordinal, peer)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Refuse an import onto device `info` of memory on another device when
/// `info` has no peer access: the entry point the runtime lacks for it,
/// else what the runtime answered.
pub(crate) fn require(rt: &Runtime, info: &DeviceInfo, operation: &str) -> Result<()> {
    if info.capabilities.contains(Capabilities::PEER_ACCESS) {
        return Ok(());
    }
    if !rt.offers(&crate::needs::PEER) {
        return Err(rt.absent(operation, Capabilities::PEER_ACCESS));
    }
    Err(hal_core::kit::vendor::needs::capability_absent(
        "ascend",
        operation,
        Capabilities::PEER_ACCESS,
        Some(hal_core::kit::vendor::needs::Why::DeviceSays {
            attribute: "aclrtDeviceCanAccessPeer (for every other device)",
            value: 0,
        }),
    ))
}

/// This process's ordinal of the device whose UUID is `uuid`.
pub(crate) fn ordinal_of(rt: &Runtime, uuid: &[u8; 16]) -> Result<u32> {
    let count = result::device::count(rt)?;
    for o in 0..count {
        if crate::identity::uuid(rt, o)? == *uuid {
            return Ok(o);
        }
    }
    Err(Error::NotFound {
        what: format!(
            "the Ascend device with UUID {}: this process does not see it (ASCEND_RT_VISIBLE_DEVICES)",
            hal_core::kit::os::hex(uuid)
        ),
    })
}

/// Let the device of `ctx` reach the memory of device `peer`
/// (`aclrtDeviceEnablePeerAccess`), after asking the runtime that it can.
pub(crate) fn enable(ctx: &Ctx, peer: u32) -> Result<()> {
    let rt = &ctx.rt;
    if !can_access(rt, ctx.ordinal, peer)? {
        return Err(Error::unsupported(
            "ascend",
            "peer access",
            format!(
                "the runtime says device {} cannot reach the memory of device {peer} \
                 (aclrtDeviceCanAccessPeer): use memory of the same device",
                ctx.ordinal
            ),
        ));
    }
    // The importing device is current.
    ctx.call(|| result::device::enable_peer_access(rt, peer))
}
