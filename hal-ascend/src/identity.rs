//! What a device is: its UUID (`aclrtDeviceGetUuid`, required), its SoC
//! name (`aclrtGetSocName`) and its memory (`aclrtGetMemInfo`). The last two
//! are optional queries: a runtime without one leaves that field empty
//! (an empty name, 0 bytes of memory) and says so once in the log, instead
//! of losing the backend.

use std::ffi::CStr;
use std::sync::Once;

use hal_core::Result;

use crate::bindings::{aclrtUuid, ACL_HBM_MEM};
use crate::sys::Runtime;

/// The 16 bytes that name device `ordinal` (`aclrtDeviceGetUuid`).
pub(crate) fn uuid(rt: &Runtime, ordinal: u32) -> Result<[u8; 16]> {
    let f = rt.device_get_uuid()?;
    let mut uuid = aclrtUuid { bytes: [0; 16] };
    // SAFETY: `uuid` is a valid place for an `aclrtUuid`.
    rt.check("aclrtDeviceGetUuid", unsafe {
        f(ordinal as i32, &mut uuid)
    })?;
    Ok(uuid.bytes.map(|b| b as u8))
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
    let Ok(f) = rt.get_soc_name() else {
        warn_once(&MISSING, rt, "aclrtGetSocName", "name");
        return String::new();
    };
    // SAFETY: takes nothing; returns null or a NUL-terminated string the
    // runtime keeps.
    let p = unsafe { f() };
    if p.is_null() {
        return String::new();
    }
    // SAFETY: not null and NUL-terminated (the runtime's contract).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The current device's total high-bandwidth memory in bytes
/// (`aclrtGetMemInfo` of `ACL_HBM_MEM`); 0, with one warning, when the
/// runtime lacks the call.
pub(crate) fn total_memory(rt: &Runtime) -> Result<u64> {
    static MISSING: Once = Once::new();
    let Ok(f) = rt.get_mem_info() else {
        warn_once(&MISSING, rt, "aclrtGetMemInfo", "total memory");
        return Ok(0);
    };
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: both are valid places; ACL_HBM_MEM is an `aclrtMemAttr`.
    let status = unsafe { f(ACL_HBM_MEM, &mut free, &mut total) };
    rt.check("aclrtGetMemInfo", status)?;
    Ok(total as u64)
}
