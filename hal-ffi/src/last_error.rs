//! This thread's message of its last failure, and the wrapper every entry
//! point runs its body in.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::status::{hal_status, Failure};

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Record `message` as this thread's last failure.
pub(crate) fn set_last_error(message: &str) {
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST.with(|last| *last.borrow_mut() = text);
}

/// The message of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

/// Run the body of entry point `name`: a failure or a panic becomes a
/// status, and its message (prefixed with `name`) this thread's last error.
pub(crate) fn call(name: &str, body: impl FnOnce() -> Result<(), Failure>) -> hal_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => hal_status::HAL_OK,
        Ok(Err(failure)) => {
            set_last_error(&format!("{name}: {}", failure.message));
            failure.status
        }
        Err(payload) => {
            set_last_error(&format!(
                "{name}: the library panicked: {}",
                panic_message(&*payload)
            ));
            hal_status::HAL_ERR_PANIC
        }
    }
}

/// The message of this thread's last failed call, starting with the name of
/// the function that failed; the vendor's code and name are in it where the
/// error came from a vendor runtime. An empty string when no call of this
/// thread failed yet. Never NULL.
///
/// The pointer stays valid until this thread's next call of this library
/// that fails; copy the text to keep it.
#[no_mangle]
pub extern "C" fn hal_last_error() -> *const c_char {
    catch_unwind(|| LAST.with(|last| last.borrow().as_ptr())).unwrap_or(c"".as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: hal_last_error never answers NULL, and its text lives
        // until this thread's next failure.
        unsafe { CStr::from_ptr(hal_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_a_status_and_a_message() {
        let status = call("hal_test", || panic!("boom"));
        assert_eq!(status, hal_status::HAL_ERR_PANIC);
        assert!(last().contains("hal_test: the library panicked: boom"));
        let status = call("hal_test", || Err(Failure::null("out")));
        assert_eq!(status, hal_status::HAL_ERR_NULL_ARGUMENT);
        assert_eq!(last(), "hal_test: `out` is NULL");
        // A success leaves the last failure's message in place.
        assert_eq!(call("hal_test", || Ok(())), hal_status::HAL_OK);
        assert_eq!(last(), "hal_test: `out` is NULL");
    }
}
