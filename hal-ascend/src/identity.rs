//! What a device is: its UUID (`aclrtDeviceGetUuid`, required), its SoC
//! name (`aclrtGetSocName`) and its memory (`aclrtGetMemInfo`). The last two
//! are optional queries: a runtime without one leaves that field empty
//! (an empty name, 0 bytes of memory) and says so once in the log, instead
//! of losing the backend.

use std::sync::Once;

use hal_core::kit::vendor::acl::entry;
use hal_core::Result;

use crate::ffi::result;
use crate::ffi::sys::Runtime;

/// The 16 bytes that name device `ordinal` (`aclrtDeviceGetUuid`).
pub(crate) fn uuid(rt: &Runtime, ordinal: u32) -> Result<[u8; 16]> {
    result::device::uuid(rt, ordinal)
}

/// Warn once per process that the runtime lacks the optional `symbol`.
fn warn_once(once: &Once, rt: &Runtime, symbol: &str, field: &str) {
    once.call_once(|| {
        log::warn!(
            "{} has no entry point {symbol}: the Ascend devices' {field} is left empty",
            rt.path().display()
        );
    });
}

/// The SoC name of the current device (`aclrtGetSocName`); empty, with
/// one warning, when the runtime lacks the call or answers null.
pub(crate) fn soc_name(rt: &Runtime) -> String {
    static MISSING: Once = Once::new();
    result::device::soc_name(rt).unwrap_or_else(|_| {
        warn_once(&MISSING, rt, entry::RT_GET_SOC_NAME, "name");
        String::new()
    })
}

/// The current device's total high-bandwidth memory in bytes
/// (`aclrtGetMemInfo` of `ACL_HBM_MEM`); 0, with one warning, when the
/// runtime lacks the call.
pub(crate) fn total_memory(rt: &Runtime) -> Result<u64> {
    static MISSING: Once = Once::new();
    Ok(result::device::total_memory(rt)?.unwrap_or_else(|| {
        warn_once(&MISSING, rt, entry::RT_GET_MEM_INFO, "total memory");
        0
    }))
}
