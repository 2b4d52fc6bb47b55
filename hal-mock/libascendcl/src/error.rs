//! The simulator's errors as `aclError` codes of `hal_core::kit::vendor::acl`.

use hal_core::kit::vendor::{acl, Code};
use hal_core::Error;

use crate::refusal::{refuse, Refusal};

/// The vendor code a simulator error stands for: its own code when it is a
/// vendor error, else the runtime's nearest answer.
pub(crate) fn code_of(err: &Error) -> Code {
    match err {
        Error::Vendor(v) => acl::code(v.code).unwrap_or(acl::RT_INTERNAL_ERROR),
        Error::InvalidArgument { .. } | Error::Misaligned { .. } | Error::NotFound { .. } => {
            acl::RT_PARAM_INVALID
        }
        Error::InvalidHandle(_) => acl::RT_INVALID_HANDLE,
        Error::OutOfMemory { .. } => acl::RT_MEMORY_ALLOCATION,
        Error::Unsupported { .. } => acl::RT_FEATURE_NOT_SUPPORT,
        Error::PermissionDenied { .. } => acl::RT_NO_PERMISSION,
        Error::Timeout { .. } => acl::RT_WAIT_TIMEOUT,
        _ => acl::RT_INTERNAL_ERROR,
    }
}

/// Convert a simulator result into a runtime answer, keeping its text.
pub(crate) fn sim<T>(r: hal_core::Result<T>) -> Result<T, Refusal> {
    r.map_err(|e| refuse(code_of(&e), e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_the_runtime_codes() {
        assert_eq!(
            code_of(&Error::Misaligned {
                offset: 1,
                len: 2,
                page_size: 4096
            }),
            acl::RT_PARAM_INVALID
        );
        assert_eq!(
            code_of(&acl::RT_NO_DEVICE.error(hal_core::BackendId::MockAscend, "x")),
            acl::RT_NO_DEVICE
        );
        assert_eq!(
            code_of(&Error::PermissionDenied {
                pid: None,
                reason: "y".into()
            }),
            acl::RT_NO_PERMISSION
        );
    }
}
