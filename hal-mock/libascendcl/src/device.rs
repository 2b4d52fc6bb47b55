//! Initialisation, devices, the current device, peer access and the last
//! error's text.

use std::ffi::{c_char, c_int};

use hal_core::kit::vendor::acl;
use hal_core::Device;

use crate::abi::{guard, put, AclError};
use crate::error::sim;
use crate::refusal::refuse;
use crate::state::{finalize, init, runtime, set_current};
use crate::tgid::bare_tgid;

/// `ACL_HBM_MEM`: the device's high-bandwidth memory (`aclrtMemAttr`).
const HBM_MEM: c_int = 1;

/// Initialises the runtime (`configPath` may be null);
/// `ACL_ERROR_REPEAT_INITIALIZE` when it already is.
#[no_mangle]
pub unsafe extern "C" fn aclInit(_config_path: *const c_char) -> AclError {
    guard("aclInit", init)
}

/// Finalises the runtime: later calls answer `ACL_ERROR_UNINITIALIZE`.
#[no_mangle]
pub unsafe extern "C" fn aclFinalize() -> AclError {
    guard("aclFinalize", finalize)
}

/// The text of this thread's last error, or null.
#[no_mangle]
pub unsafe extern "C" fn aclGetRecentErrMsg() -> *const c_char {
    std::panic::catch_unwind(|| {
        crate::abi::count("aclGetRecentErrMsg");
        crate::abi::last_message()
    })
    .unwrap_or(std::ptr::null())
}

/// Makes `device_id` this thread's current device.
#[no_mangle]
pub unsafe extern "C" fn aclrtSetDevice(device_id: i32) -> AclError {
    guard("aclrtSetDevice", || {
        let rt = runtime()?;
        set_current(rt.device_id(device_id)?);
        Ok(())
    })
}

/// This thread's current device; `ACL_ERROR_RT_CONTEXT_NULL` before
/// `aclrtSetDevice`.
#[no_mangle]
pub unsafe extern "C" fn aclrtGetDevice(device_id: *mut i32) -> AclError {
    guard("aclrtGetDevice", || {
        let rt = runtime()?;
        let o = rt.current()?;
        // SAFETY: valid for a write or null (the caller's contract).
        unsafe { put(device_id, o as i32) }
    })
}

/// The number of devices this process sees.
#[no_mangle]
pub unsafe extern "C" fn aclrtGetDeviceCount(count: *mut u32) -> AclError {
    guard("aclrtGetDeviceCount", || {
        let n = runtime()?.devices.len() as u32;
        // SAFETY: valid for a write or null (the caller's contract).
        unsafe { put(count, n) }
    })
}

/// The chip's name: [`switches::SOC_VAR`](crate::switches::SOC_VAR), else
/// [`DEFAULT_SOC`](crate::switches::DEFAULT_SOC).
#[no_mangle]
pub unsafe extern "C" fn aclrtGetSocName() -> *const c_char {
    std::panic::catch_unwind(|| {
        crate::abi::count("aclrtGetSocName");
        crate::switches::soc_name().as_ptr()
    })
    .unwrap_or(std::ptr::null())
}

/// How many times the entry point named `symbol` was called in this
/// process: this stand-in's own symbol (no runtime has it), with which
/// tests show that every entry point a backend resolves is exercised.
/// 0 for a null or unknown name.
#[no_mangle]
pub unsafe extern "C" fn halStandinCalls(symbol: *const c_char) -> u64 {
    if symbol.is_null() {
        return 0;
    }
    std::panic::catch_unwind(|| {
        // SAFETY: not null and NUL-terminated (the caller's contract).
        let s = unsafe { std::ffi::CStr::from_ptr(symbol) };
        s.to_str().map_or(0, crate::abi::calls)
    })
    .unwrap_or(0)
}

/// `aclrtUuid`: 16 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AclrtUuid {
    /// The UUID's bytes.
    pub bytes: [c_char; 16],
}

/// The 16 bytes that name device `device_id` on this host, the same in
/// every process whatever its visible-device list.
#[no_mangle]
pub unsafe extern "C" fn aclrtDeviceGetUuid(device_id: i32, uuid: *mut AclrtUuid) -> AclError {
    guard("aclrtDeviceGetUuid", || {
        let rt = runtime()?;
        let o = rt.device_id(device_id)?;
        let id = rt.device(o).info().uuid;
        // SAFETY: valid for a write of 16 bytes or null (the caller's contract).
        unsafe {
            put(
                uuid,
                AclrtUuid {
                    bytes: id.map(|b| b as c_char),
                },
            )
        }
    })
}

/// Whether device `device_id` can reach the memory of `peer_device_id`:
/// 1, or 0 where the devices deny peer access
/// ([`DENY_VAR`](crate::switches::DENY_VAR)) or the two are one device.
#[no_mangle]
pub unsafe extern "C" fn aclrtDeviceCanAccessPeer(
    can_access_peer: *mut i32,
    device_id: i32,
    peer_device_id: i32,
) -> AclError {
    guard("aclrtDeviceCanAccessPeer", || {
        let rt = runtime()?;
        let a = rt.device_id(device_id)?;
        let b = rt.device_id(peer_device_id)?;
        let can = i32::from(crate::switches::can_access_peer(a, b));
        // SAFETY: valid for a write or null (the caller's contract).
        unsafe { put(can_access_peer, can) }
    })
}

/// Free and total bytes of the current device's memory (`ACL_HBM_MEM`).
#[no_mangle]
pub unsafe extern "C" fn aclrtGetMemInfo(
    attr: c_int,
    free: *mut usize,
    total: *mut usize,
) -> AclError {
    guard("aclrtGetMemInfo", || {
        let rt = runtime()?;
        let o = rt.current()?;
        if attr != HBM_MEM {
            return Err(refuse(
                acl::INVALID_PARAM,
                format!("memory attribute {attr}"),
            ));
        }
        let dev = rt.device(o);
        let all = dev.info().total_memory;
        let left = all.saturating_sub(dev.memory_used());
        // SAFETY: valid for writes or null (the caller's contract).
        unsafe {
            put(free, left as usize)?;
            put(total, all as usize)
        }
    })
}

/// This process's bare tgid: what exporters put on their allow-lists.
#[no_mangle]
pub unsafe extern "C" fn aclrtDeviceGetBareTgid(pid: *mut i32) -> AclError {
    guard("aclrtDeviceGetBareTgid", || {
        runtime()?;
        let t = bare_tgid(std::process::id()) as i32;
        // SAFETY: valid for a write or null (the caller's contract).
        unsafe { put(pid, t) }
    })
}

/// Lets the current device reach memory of `peer_device_id` (`flags` 0).
#[no_mangle]
pub unsafe extern "C" fn aclrtDeviceEnablePeerAccess(peer_device_id: i32, flags: u32) -> AclError {
    guard("aclrtDeviceEnablePeerAccess", || {
        let rt = runtime()?;
        let o = rt.current()?;
        let peer = rt.device_id(peer_device_id)?;
        if flags != 0 {
            return Err(refuse(acl::INVALID_PARAM, "flags must be 0"));
        }
        crate::switches::peer_denied("aclrtDeviceEnablePeerAccess")?;
        sim(rt.device(o).enable_peer_access(peer))
    })
}

/// Waits until every stream of the current device has run its work.
#[no_mangle]
pub unsafe extern "C" fn aclrtSynchronizeDevice() -> AclError {
    guard("aclrtSynchronizeDevice", || {
        let rt = runtime()?;
        let o = rt.current()?;
        sim(rt.device(o).synchronize_device(None))
    })
}
