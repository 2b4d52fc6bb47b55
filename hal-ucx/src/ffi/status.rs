//! What UCX's status codes mean to hal: the pointer-or-status that the
//! `_nbx` calls return (the `UCS_PTR_*` macros of `ucs/type/status.h`,
//! which bindgen cannot translate), the codes' names, and the error each
//! becomes. The codes keep their numbers and names
//! ([`hal_core::VendorError`]); a connection that failed is
//! [`Error::Closed`], with the code's name in it.

use std::ffi::{c_void, CStr};

use hal_core::{Error, Result};

use super::bindings::*;
use super::sys::{ucx_id, Ucx};

/// What an `_nbx` call returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Issued {
    /// Done at once, with this status.
    Done(ucs_status_t),
    /// A request: its callback runs when it completes.
    Pending(*mut c_void),
}

/// Decode a `ucs_status_ptr_t` as `UCS_PTR_IS_PTR` / `UCS_PTR_RAW_STATUS`
/// define it: a pointer is any value other than NULL and the last 100
/// (`UCS_ERR_LAST` negated) addresses, which are negated statuses.
pub(crate) fn issued(ptr: ucs_status_ptr_t) -> Issued {
    let raw = ptr as usize;
    let last = UCS_ERR_LAST as isize as usize;
    // UCS_PTR_IS_PTR: (ptr - 1) < (UCS_ERR_LAST - 1), unsigned.
    if raw.wrapping_sub(1) < last.wrapping_sub(1) {
        Issued::Pending(ptr)
    } else {
        // UCS_PTR_RAW_STATUS: (ucs_status_t)(intptr_t)ptr.
        Issued::Done(raw as isize as ucs_status_t)
    }
}

macro_rules! names {
    ($( $c:ident ),* $(,)?) => {
        /// The header's name of `status`.
        pub(crate) fn name(status: ucs_status_t) -> &'static str {
            $( if status == $c { return stringify!($c); } )*
            if (UCS_ERR_LAST_LINK_FAILURE..=UCS_ERR_FIRST_LINK_FAILURE).contains(&status) {
                return "UCS_ERR_LINK_FAILURE";
            }
            if (UCS_ERR_LAST_ENDPOINT_FAILURE..=UCS_ERR_FIRST_ENDPOINT_FAILURE).contains(&status) {
                return "UCS_ERR_ENDPOINT_FAILURE";
            }
            "UCS_ERR_UNKNOWN"
        }
    };
}

names!(
    UCS_OK,
    UCS_INPROGRESS,
    UCS_ERR_NO_MESSAGE,
    UCS_ERR_NO_RESOURCE,
    UCS_ERR_IO_ERROR,
    UCS_ERR_NO_MEMORY,
    UCS_ERR_INVALID_PARAM,
    UCS_ERR_UNREACHABLE,
    UCS_ERR_INVALID_ADDR,
    UCS_ERR_NOT_IMPLEMENTED,
    UCS_ERR_MESSAGE_TRUNCATED,
    UCS_ERR_NO_PROGRESS,
    UCS_ERR_BUFFER_TOO_SMALL,
    UCS_ERR_NO_ELEM,
    UCS_ERR_SOME_CONNECTS_FAILED,
    UCS_ERR_NO_DEVICE,
    UCS_ERR_BUSY,
    UCS_ERR_CANCELED,
    UCS_ERR_SHMEM_SEGMENT,
    UCS_ERR_ALREADY_EXISTS,
    UCS_ERR_OUT_OF_RANGE,
    UCS_ERR_TIMED_OUT,
    UCS_ERR_EXCEEDS_LIMIT,
    UCS_ERR_UNSUPPORTED,
    UCS_ERR_REJECTED,
    UCS_ERR_NOT_CONNECTED,
    UCS_ERR_CONNECTION_RESET,
    UCS_ERR_ENDPOINT_TIMEOUT,
);

/// True when `status` says the connection is gone: the peer closed it,
/// died, or cannot be reached.
pub(crate) fn is_disconnect(status: ucs_status_t) -> bool {
    matches!(
        status,
        UCS_ERR_CONNECTION_RESET
            | UCS_ERR_NOT_CONNECTED
            | UCS_ERR_UNREACHABLE
            | UCS_ERR_CANCELED
            | UCS_ERR_REJECTED
            | UCS_ERR_IO_ERROR
    ) || (UCS_ERR_LAST_ENDPOINT_FAILURE..=UCS_ERR_FIRST_LINK_FAILURE).contains(&status)
}

/// UCX's message for `status`, when the library gives one.
fn message(ucx: &Ucx, status: ucs_status_t) -> String {
    let Ok(f) = ucx.ucs_status_string() else {
        return String::new();
    };
    // SAFETY: `ucs_status_string` takes any status and returns a static
    // NUL-terminated string (or NULL, checked).
    let p = unsafe { f(status) };
    if p.is_null() {
        return String::new();
    }
    // SAFETY: a non-NULL answer is a static NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// `Ok` for `UCS_OK`; otherwise the error `status` of `call` is, with
/// `what` saying what hal was doing.
pub(crate) fn check(ucx: &Ucx, status: ucs_status_t, call: &str, what: &str) -> Result<()> {
    if status == UCS_OK {
        return Ok(());
    }
    Err(error(ucx, status, call, what))
}

/// The error `status` of `call` is.
pub(crate) fn error(ucx: &Ucx, status: ucs_status_t, call: &str, what: &str) -> Error {
    let name = name(status);
    let text = message(ucx, status);
    if is_disconnect(status) {
        return Error::Closed {
            what: format!("{what}: the connection is gone ({call}: {name}, {text})"),
        };
    }
    if status == UCS_ERR_NO_MEMORY {
        return Error::OutOfMemory {
            requested: 0,
            detail: format!("{what}: {call} answered {name} ({text})"),
        };
    }
    // The kit has no table of `ucs_status_t`: the name is this crate's,
    // from UCX's header (`names!` above).
    hal_core::kit::vendor::error(
        ucx_id(),
        "ucs_status_t",
        i64::from(status),
        || Some(name.into()),
        format!("{call} ({what}): {text}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_and_statuses_are_told_apart_as_the_header_defines() {
        assert_eq!(issued(std::ptr::null_mut()), Issued::Done(UCS_OK));
        for s in [UCS_ERR_NO_MEMORY, UCS_ERR_CANCELED, UCS_ERR_LAST + 1, -1] {
            let p = s as isize as usize as *mut c_void;
            assert_eq!(issued(p), Issued::Done(s), "status {s}");
        }
        // UCS_ERR_LAST itself (-100) is a status by the macro's strict `<`.
        let at_last = UCS_ERR_LAST as isize as usize as *mut c_void;
        assert_eq!(issued(at_last), Issued::Done(UCS_ERR_LAST));
        for a in [1usize, 0x1000, 0x7fff_ffff_f000, usize::MAX - 100] {
            let p = a as *mut c_void;
            assert_eq!(issued(p), Issued::Pending(p), "address {a:#x}");
        }
    }

    /// The loaded UCX, or `None` (the test did not run) without one.
    fn ucx() -> Option<&'static Ucx> {
        match crate::ffi::sys::ucx() {
            Ok(u) => Some(u),
            Err(e) => {
                hal_core::testing::not_run(&format!("UCX cannot be loaded here: {e}"));
                None
            }
        }
    }

    #[test]
    fn statuses_become_errors_that_keep_ucx_s_number_name_and_words() {
        let Some(u) = ucx() else { return };
        assert!(check(u, UCS_OK, "ucp_x", "doing x").is_ok());
        match check(u, UCS_ERR_INVALID_PARAM, "ucp_x", "doing x") {
            Err(Error::Vendor(v)) => {
                assert_eq!((v.code, v.name.as_str()), (-5, "UCS_ERR_INVALID_PARAM"));
                assert!(v.message.contains("ucp_x (doing x)"), "{}", v.message);
                assert!(
                    v.message.to_lowercase().contains("invalid parameter"),
                    "{}",
                    v.message
                );
            }
            other => panic!("{other:?}"),
        }
        match error(u, UCS_ERR_CONNECTION_RESET, "ucp_y", "reading") {
            Error::Closed { what } => {
                assert!(
                    what.contains("reading") && what.contains("UCS_ERR_CONNECTION_RESET"),
                    "{what}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            error(u, UCS_ERR_NO_MEMORY, "ucp_z", "z"),
            Error::OutOfMemory { .. }
        ));
        assert!(!message(u, UCS_ERR_NO_MEMORY).is_empty());
    }

    #[test]
    fn codes_keep_their_header_names() {
        assert_eq!(name(UCS_OK), "UCS_OK");
        assert_eq!(name(UCS_ERR_CONNECTION_RESET), "UCS_ERR_CONNECTION_RESET");
        assert_eq!(name(UCS_ERR_ENDPOINT_TIMEOUT), "UCS_ERR_ENDPOINT_TIMEOUT");
        assert_eq!(name(-45), "UCS_ERR_LINK_FAILURE");
        assert_eq!(name(-61), "UCS_ERR_ENDPOINT_FAILURE");
        assert_eq!(name(-99), "UCS_ERR_UNKNOWN");
        assert!(is_disconnect(UCS_ERR_CONNECTION_RESET));
        assert!(is_disconnect(-45));
        assert!(!is_disconnect(UCS_ERR_NO_MEMORY));
        assert!(!is_disconnect(UCS_ERR_INVALID_PARAM));
    }
}
