//! Driver results as hal's errors: a `CUresult` other than success becomes
//! a [`VendorError`] with the code's number and its name as the driver
//! gives it (`cuGetErrorName`), or as `hal_core::vendor::cuda` knows it
//! when the driver has no name for it.

use std::ffi::{c_char, CStr};

use hal_core::vendor::cuda;
use hal_core::{Error, Result, VendorError};

use crate::sys::{Driver, Status};

/// `CUDA_SUCCESS`.
pub(crate) const SUCCESS: Status = 0;
/// `CUDA_ERROR_NOT_READY`: queued work has not completed.
pub(crate) const NOT_READY: Status = 600;

impl Driver {
    /// `Ok` for success, the vendor error of `status` otherwise; `call`
    /// names the entry point for the message.
    pub(crate) fn check(&self, call: &str, status: Status) -> Result<()> {
        if status == SUCCESS {
            return Ok(());
        }
        Err(self.error(call, status))
    }

    /// The vendor error of a failed `call`.
    pub(crate) fn error(&self, call: &str, status: Status) -> Error {
        let known = cuda::code(i64::from(status));
        let name = self
            .describe(status, Driver::get_error_name)
            .or_else(|| known.map(|c| c.name.to_string()))
            .unwrap_or_else(|| format!("CUresult {status}"));
        let text = self
            .describe(status, Driver::get_error_string)
            .unwrap_or_else(|| "no description from the driver".into());
        Error::Vendor(VendorError {
            backend: "cuda".into(),
            code: i64::from(status),
            name,
            message: format!("{call}: {text}"),
        })
    }

    /// What `lookup` (`cuGetErrorName` or `cuGetErrorString`) says of `status`.
    fn describe(
        &self,
        status: Status,
        lookup: fn(&Driver) -> Result<unsafe extern "C" fn(Status, *mut *const c_char) -> Status>,
    ) -> Option<String> {
        let f = lookup(self).ok()?;
        let mut out: *const c_char = std::ptr::null();
        // SAFETY: `out` is a valid place for the driver to store a pointer.
        if unsafe { f(status, &mut out) } != SUCCESS || out.is_null() {
            return None;
        }
        // SAFETY: on success the driver stored a pointer to a static,
        // NUL-terminated string.
        Some(
            unsafe { CStr::from_ptr(out) }
                .to_string_lossy()
                .into_owned(),
        )
    }
}
