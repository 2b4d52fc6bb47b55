//! Strings across the boundary: C strings in, strings the library allocates
//! out (freed with `hal_string_free`).

use std::collections::HashSet;
use std::ffi::{c_char, CStr, CString};
use std::sync::{LazyLock, Mutex};

use crate::last_error::call;
use crate::status::Failure;

/// The strings handed out and not freed yet, so that `hal_string_free`
/// frees only those, once.
static STRINGS: LazyLock<Mutex<HashSet<usize>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

fn strings() -> std::sync::MutexGuard<'static, HashSet<usize>> {
    STRINGS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The UTF-8 text of the C string `ptr` (argument `argument`).
///
/// # Safety
///
/// `ptr` is NULL or points to a NUL-terminated string that stays valid and
/// unchanged during the call.
pub(crate) unsafe fn str_arg<'a>(ptr: *const c_char, argument: &str) -> Result<&'a str, Failure> {
    if ptr.is_null() {
        return Err(Failure::null(argument));
    }
    // SAFETY: not NULL, and NUL-terminated and valid per this function's contract.
    let text = unsafe { CStr::from_ptr(ptr) };
    text.to_str()
        .map_err(|e| Failure::invalid(format!("`{argument}` is not UTF-8: {e}")))
}

/// Write a string the caller frees with `hal_string_free` to `out`.
///
/// # Safety
///
/// `out` is a valid pointer to write a `char *` to (checked not NULL by
/// the caller).
pub(crate) unsafe fn give_text(out: *mut *mut c_char, text: String) {
    let text = CString::new(text.replace('\0', "\\0")).unwrap_or_default();
    let ptr = text.into_raw();
    strings().insert(ptr as usize);
    // SAFETY: per this function's contract.
    unsafe { out.write(ptr) };
}

/// Free a string this library handed out (`hal_export`, `hal_backends`,
/// ...). NULL is ignored. A pointer that is no such string, or one freed
/// already, is left alone and recorded as this thread's last error
/// (`hal_last_error`), never freed twice.
///
/// # Safety
///
/// None beyond C's: the pointer is looked up before it is used.
#[no_mangle]
pub unsafe extern "C" fn hal_string_free(text: *mut c_char) {
    if text.is_null() {
        return;
    }
    call("hal_string_free", || {
        if !strings().remove(&(text as usize)) {
            return Err(Failure::new(
                crate::status::hal_status::HAL_ERR_INVALID_OBJECT,
                "not a string this library handed out, or one freed already",
            ));
        }
        // SAFETY: the pointer came from `CString::into_raw` in `give_text`
        // and was in the set of live strings, which it has now left: it is
        // freed exactly once.
        drop(unsafe { CString::from_raw(text) });
        Ok(())
    });
}
