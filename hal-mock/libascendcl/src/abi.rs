//! What every entry point shares: the panic guard, the last error's text
//! and the output pointers.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::{c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use hal_core::kit::os::lock::lock;
use hal_core::kit::vendor::acl;

use crate::refusal::{refuse, Refusal};

/// An `aclError`.
pub(crate) type AclError = c_int;

/// How many times each entry point was called in this process.
static CALLS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

/// Count a call of `symbol`.
pub(crate) fn count(symbol: &'static str) {
    let mut calls = lock(&CALLS);
    *calls.entry(symbol).or_default() += 1;
}

/// How many times `symbol` was called in this process.
pub(crate) fn calls(symbol: &str) -> u64 {
    let calls = lock(&CALLS);
    calls.get(symbol).copied().unwrap_or(0)
}

thread_local! {
    /// The text of this thread's last error (`aclGetRecentErrMsg`).
    static LAST: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Run an entry point's body named `symbol`: its answer as an `aclError`,
/// and `ACL_ERROR_RT_INTERNAL_ERROR` if it panicked (a panic never unwinds
/// into C), or the failure [`FAIL_VAR`](crate::visible::FAIL_VAR) injects
/// into this call instead of running it. A failure's text is kept for
/// `aclGetRecentErrMsg`.
pub(crate) fn guard(symbol: &'static str, f: impl FnOnce() -> Result<(), Refusal>) -> AclError {
    count(symbol);
    let run = || {
        crate::visible::entry_fault(symbol)?;
        f()
    };
    let r = match catch_unwind(AssertUnwindSafe(run)) {
        Ok(r) => r,
        Err(_) => Err(refuse(acl::RT_INTERNAL_ERROR, "the runtime panicked")),
    };
    match r {
        Ok(()) => 0,
        Err(Refusal { code, text }) => {
            let line = format!("{symbol}: {} ({}) {text}", code.name, code.code);
            LAST.with(|l| {
                *l.borrow_mut() = CString::new(line.replace('\0', " ")).ok();
            });
            AclError::try_from(code.code).unwrap_or(AclError::MAX)
        }
    }
}

/// The pointer to this thread's last error text, or null when none.
pub(crate) fn last_message() -> *const std::ffi::c_char {
    LAST.with(|l| l.borrow().as_ref().map_or(std::ptr::null(), |c| c.as_ptr()))
}

/// Write `value` through the output pointer `out`;
/// `ACL_ERROR_INVALID_PARAM` when it is null.
///
/// # Safety
///
/// `out` is null or valid for one write of a `T`.
pub(crate) unsafe fn put<T>(out: *mut T, value: T) -> Result<(), Refusal> {
    // SAFETY: `out` is null or valid for one write (this fn's contract).
    unsafe {
        hal_mock::standin::put(out, value, || {
            refuse(acl::INVALID_PARAM, "a null output pointer")
        })
    }
}

/// Refuse a null pointer before doing anything.
pub(crate) fn non_null<T>(p: *const T, what: &str) -> Result<(), Refusal> {
    if p.is_null() {
        Err(refuse(acl::INVALID_PARAM, format!("{what} is null")))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_never_crosses_the_c_boundary() {
        let r = guard("aclrtMalloc", || panic!("a bug in the stand-in"));
        assert_eq!(i64::from(r), acl::RT_INTERNAL_ERROR.code);
        // SAFETY: the thread's last message is a NUL-terminated string.
        let text = unsafe { std::ffi::CStr::from_ptr(last_message()) };
        assert!(text.to_string_lossy().contains("aclrtMalloc"));
        assert_eq!(calls("aclrtMalloc"), 1);
        assert_eq!(guard("aclInit", || Ok(())), 0);
    }
}
