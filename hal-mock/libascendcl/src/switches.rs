//! What the stand-in's devices are and lack, read once per process from
//! the environment, so that a test can stand in for an NPU that denies a
//! capability while the runtime would still do it if asked (a backend that
//! asks the runtime first passes; one that assumes fails):
//!
//! - [`SOC_VAR`] (`HAL_ASCEND_STANDIN_SOC=Ascend310P3`): the name
//!   `aclrtGetSocName` gives (default [`DEFAULT_SOC`], an Atlas A2 SoC).
//! - [`DENY_VAR`] (`HAL_ASCEND_STANDIN_DENY=peer,ipc-event`): `peer`: no
//!   device reaches another's memory: `aclrtDeviceCanAccessPeer` answers 0,
//!   and `aclrtDeviceEnablePeerAccess` and every import onto another device
//!   answer `ACL_ERROR_RT_FEATURE_NOT_SUPPORT`; `ipc-event`: the SoC has no
//!   IPC events: `aclrtIpcGetEventHandle` and `aclrtIpcOpenEventHandle`
//!   answer `ACL_ERROR_RT_FEATURE_NOT_SUPPORT`.

use std::sync::OnceLock;

use hal_core::kit::vendor::acl;

use crate::refusal::{refuse, Refusal};
use crate::state::Runtime;

/// The variable naming the SoC `aclrtGetSocName` gives.
pub const SOC_VAR: &str = "HAL_ASCEND_STANDIN_SOC";

/// The variable listing what the devices deny (`peer`, `ipc-event`).
pub const DENY_VAR: &str = "HAL_ASCEND_STANDIN_DENY";

/// The SoC name without [`SOC_VAR`]: an Atlas A2 chip, one of those whose
/// runtime documents IPC events.
pub const DEFAULT_SOC: &str = "Ascend910B3";

/// The switches of this process.
struct Switches {
    soc: std::ffi::CString,
    no_peer: bool,
    no_ipc_event: bool,
}

fn switches() -> &'static Switches {
    static SWITCHES: OnceLock<Switches> = OnceLock::new();
    SWITCHES.get_or_init(|| {
        let soc = std::env::var(SOC_VAR)
            .ok()
            .and_then(|s| std::ffi::CString::new(s).ok())
            .unwrap_or_else(|| std::ffi::CString::new(DEFAULT_SOC).unwrap_or_default());
        let deny = std::env::var(DENY_VAR).unwrap_or_default();
        let has = |what: &str| deny.split(',').map(str::trim).any(|d| d == what);
        Switches {
            soc,
            no_peer: has("peer"),
            no_ipc_event: has("ipc-event"),
        }
    })
}

/// The SoC name `aclrtGetSocName` gives.
pub(crate) fn soc_name() -> &'static std::ffi::CStr {
    &switches().soc
}

/// True when device `a` can reach the memory of device `b`.
pub(crate) fn can_access_peer(a: u32, b: u32) -> bool {
    a != b && !switches().no_peer
}

/// The refusal of using peer access where the devices deny it.
pub(crate) fn peer_denied(what: &str) -> Result<(), Refusal> {
    if switches().no_peer {
        return Err(refuse(
            acl::RT_FEATURE_NOT_SUPPORT,
            format!("{what}: these devices have no peer access ({DENY_VAR})"),
        ));
    }
    Ok(())
}

/// The refusal of an import onto device `on` of memory on the device with
/// `uuid` (another device) where the devices deny peer access.
pub(crate) fn cross_device(
    rt: &Runtime,
    on: u32,
    uuid: &[u8; 16],
    what: &str,
) -> Result<(), Refusal> {
    match source(rt, uuid) {
        Some(s) if s != on => peer_denied(what),
        _ => Ok(()),
    }
}

/// This process's ordinal of the device with `uuid`.
pub(crate) fn source(rt: &Runtime, uuid: &[u8; 16]) -> Option<u32> {
    (0..rt.devices.len() as u32).find(|&o| hal_core::Device::info(rt.device(o)).uuid == *uuid)
}

/// The refusal of an IPC event call where the SoC has none.
pub(crate) fn ipc_event(what: &str) -> Result<(), Refusal> {
    if switches().no_ipc_event {
        return Err(refuse(
            acl::RT_FEATURE_NOT_SUPPORT,
            format!("{what}: this SoC has no IPC events ({DENY_VAR})"),
        ));
    }
    Ok(())
}
