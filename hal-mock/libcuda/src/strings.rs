//! `cuGetErrorName` and `cuGetErrorString`: static NUL-terminated strings
//! for every `CUresult` cudarc knows.

use std::collections::HashMap;
use std::ffi::{c_char, c_uint, CStr, CString};
use std::sync::OnceLock;

use cudarc::driver::sys::CUresult;
use hal_core::kit::vendor::cuda;

use crate::abi::{guard, put};
use crate::error::VARIANTS;

/// The driver's description of the codes the stand-in answers (`cuda.h`);
/// other codes are described by their name.
fn description(r: CUresult) -> Option<&'static CStr> {
    use CUresult::*;
    Some(match r {
        CUDA_SUCCESS => c"no error",
        CUDA_ERROR_INVALID_VALUE => c"invalid argument",
        CUDA_ERROR_OUT_OF_MEMORY => c"out of memory",
        CUDA_ERROR_NOT_INITIALIZED => c"initialization error",
        CUDA_ERROR_DEINITIALIZED => c"driver shutting down",
        CUDA_ERROR_DEVICE_UNAVAILABLE => c"CUDA-capable device(s) is/are busy or unavailable",
        CUDA_ERROR_NO_DEVICE => c"no CUDA-capable device is detected",
        CUDA_ERROR_INVALID_DEVICE => c"invalid device ordinal",
        CUDA_ERROR_INVALID_CONTEXT => c"invalid device context",
        CUDA_ERROR_ALREADY_MAPPED => c"resource already mapped",
        CUDA_ERROR_NOT_MAPPED => c"resource not mapped",
        CUDA_ERROR_PEER_ACCESS_UNSUPPORTED => {
            c"peer access is not supported between these two devices"
        }
        CUDA_ERROR_INVALID_HANDLE => c"invalid resource handle",
        CUDA_ERROR_NOT_READY => c"device not ready",
        CUDA_ERROR_ILLEGAL_ADDRESS => c"an illegal memory access was encountered",
        CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => c"peer access is already enabled",
        CUDA_ERROR_PEER_ACCESS_NOT_ENABLED => c"peer access has not been enabled",
        CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED => {
            c"part or all of the requested memory range is already mapped"
        }
        CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED => {
            c"pointer does not correspond to a registered memory region"
        }
        CUDA_ERROR_NOT_PERMITTED => c"operation not permitted",
        CUDA_ERROR_NOT_SUPPORTED => c"operation not supported",
        CUDA_ERROR_UNKNOWN => c"unknown error",
        _ => return None,
    })
}

/// The NUL-terminated name and description of every known code, made once
/// and kept for the life of the process (the pointers handed out stay
/// valid).
fn strings() -> &'static HashMap<u32, (CString, CString)> {
    static STRINGS: OnceLock<HashMap<u32, (CString, CString)>> = OnceLock::new();
    STRINGS.get_or_init(|| {
        VARIANTS
            .iter()
            .filter_map(|&r| {
                let name = CString::new(format!("{r:?}")).ok()?;
                let text = match description(r) {
                    Some(d) => d.to_owned(),
                    None => name.clone(),
                };
                Some((r as u32, (name, text)))
            })
            .collect()
    })
}

/// Hand out the name (`which` false) or description of `error`.
///
/// # Safety
///
/// `out` is null or valid for a write of a pointer.
unsafe fn error_text(error: c_uint, out: *mut *const c_char, which: bool) -> CUresult {
    let entry = if which {
        "cuGetErrorString"
    } else {
        "cuGetErrorName"
    };
    guard(entry, || {
        let (name, text) = strings().get(&error).ok_or(cuda::INVALID_VALUE)?;
        let s = if which { text } else { name };
        // SAFETY: `out` is null (refused by `put`) or valid, the caller's contract.
        unsafe { put(out, s.as_ptr()) }
    })
}

/// Gives the symbolic name of a `CUresult` (`CUDA_ERROR_INVALID_VALUE`).
///
/// `error` is taken as its number, not as cudarc's enum: a number outside
/// the enum must be answered, not be undefined behaviour (same ABI).
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: c_uint, p_str: *mut *const c_char) -> CUresult {
    // SAFETY: forwarded caller's contract.
    unsafe { error_text(error, p_str, false) }
}

/// Gives the driver's description of a `CUresult` ("invalid argument").
///
/// `error` is taken as its number, as in [`cuGetErrorName`].
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: c_uint, p_str: *mut *const c_char) -> CUresult {
    // SAFETY: forwarded caller's contract.
    unsafe { error_text(error, p_str, true) }
}
