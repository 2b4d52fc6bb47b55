//! Runtime results as hal's errors: an `aclError` other than success
//! becomes a [`VendorError`] with the code's number, its name from
//! `hal_core::vendor::acl`, and the runtime's own text of the failure
//! (`aclGetRecentErrMsg`).

use std::ffi::CStr;

use hal_core::vendor::acl;
use hal_core::{Error, Result, VendorError};

use crate::sys::{Runtime, Status};

/// `ACL_SUCCESS`.
pub(crate) const SUCCESS: Status = 0;

impl Runtime {
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
        let number = i64::from(status);
        let name = acl::name(number)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("aclError {status}"));
        let text = self
            .recent_message()
            .unwrap_or_else(|| "the runtime gave no message (aclGetRecentErrMsg)".into());
        Error::Vendor(VendorError {
            backend: "ascend".into(),
            code: number,
            name,
            message: message(call, &text),
        })
    }

    /// The text of the calling thread's last runtime error.
    fn recent_message(&self) -> Option<String> {
        let f = self.get_recent_err_msg().ok()?;
        // SAFETY: aclGetRecentErrMsg takes nothing and returns null or a
        // NUL-terminated string the runtime keeps for this thread.
        let p = unsafe { f() };
        if p.is_null() {
            return None;
        }
        // SAFETY: not null and NUL-terminated (above); copied at once.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

/// The text of a failed `call`: the runtime's own `text`, after the entry
/// point's name unless the runtime's text names it already.
fn message(call: &str, text: &str) -> String {
    if text.contains(call) {
        text.to_owned()
    } else {
        format!("{call}: {text}")
    }
}

/// True when `err` is the vendor's `code`.
pub(crate) fn is_code(err: &Error, code: hal_core::vendor::Code) -> bool {
    code.matches(err)
}

/// An import the runtime refused for want of permission
/// (`ACL_ERROR_RT_NO_PERMISSION`: this process's bare tgid is not on the
/// key's allow-list) as the contract's [`Error::PermissionDenied`], its
/// text keeping the vendor's code and name; other errors unchanged.
pub(crate) fn refused_import(e: Error) -> Error {
    if !is_code(&e, acl::RT_NO_PERMISSION) {
        return e;
    }
    Error::PermissionDenied {
        pid: None,
        reason: format!(
            "{e}; the exporter must add this process's bare tgid (Device::process_id) with \
             Device::allow_importers, or export to anyone"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::message;

    #[test]
    fn a_message_names_its_entry_point_once() {
        assert_eq!(
            message("aclrtMalloc", "out of memory"),
            "aclrtMalloc: out of memory"
        );
        assert_eq!(
            message(
                "aclrtIpcMemImportByKey",
                "aclrtIpcMemImportByKey: pid 7 is not allowed"
            ),
            "aclrtIpcMemImportByKey: pid 7 is not allowed"
        );
    }
}
