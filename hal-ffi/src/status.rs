//! The status every entry point returns, and how errors map to it.

use hal_facade::{Error, HandleError};

/// What a call of this library answers: `HAL_OK`, or why it
/// failed. The values are stable: a value once given keeps its meaning, new
/// ones are only added. `hal_last_error()` gives this thread's message of the
/// failure, with the vendor's code and name where there is one.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum hal_status {
    /// Success.
    HAL_OK = 0,
    /// The backend cannot be used on this machine (vendor library missing, no device).
    HAL_ERR_UNAVAILABLE = 1,
    /// The backend or the device cannot perform the operation.
    HAL_ERR_UNSUPPORTED = 2,
    /// A handle text that could not be decoded, or of another kind than the call expects.
    HAL_ERR_INVALID_HANDLE = 3,
    /// A range that does not cover whole pages.
    HAL_ERR_MISALIGNED = 4,
    /// This process is not allowed to use the resource (not on the export's pid list, ...).
    HAL_ERR_PERMISSION_DENIED = 5,
    /// The named resource (backend, region, device) does not exist.
    HAL_ERR_NOT_FOUND = 6,
    /// An exclusive create found the name taken.
    HAL_ERR_ALREADY_EXISTS = 7,
    /// The device or the host could not provide the memory.
    HAL_ERR_OUT_OF_MEMORY = 8,
    /// A wait did not complete in time.
    HAL_ERR_TIMEOUT = 9,
    /// The resource was closed, by this process or by its peer.
    HAL_ERR_CLOSED = 10,
    /// The resource is still held by importers.
    HAL_ERR_BUSY = 11,
    /// An argument is out of range or inconsistent.
    HAL_ERR_INVALID_ARGUMENT = 12,
    /// A vendor runtime returned an error code (`hal_last_error()` has its code and name).
    HAL_ERR_VENDOR = 13,
    /// An operating-system call failed.
    HAL_ERR_IO = 14,
    /// The object was made by the process this one was forked from: open
    /// the backend again in the child (CUDA and Ascend contexts do not
    /// survive `fork()`).
    HAL_ERR_FORKED = 15,
    /// A pointer argument that must not be NULL was NULL.
    HAL_ERR_NULL_ARGUMENT = 100,
    /// A pointer that is no object of the expected type this library handed
    /// out (a forged pointer, or an object of another type).
    HAL_ERR_INVALID_OBJECT = 101,
    /// The object was released already: a second release, or a use after release.
    HAL_ERR_DOUBLE_RELEASE = 102,
    /// The library panicked inside the call; the call had no effect that can
    /// be relied on, and the process may go on.
    HAL_ERR_PANIC = 103,
    /// An error this version of the header has no value for.
    HAL_ERR_OTHER = 104,
}

/// A failed call: its status and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub status: hal_status,
    pub message: String,
}

impl Failure {
    pub(crate) fn new(status: hal_status, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn null(argument: &str) -> Failure {
        Failure::new(
            hal_status::HAL_ERR_NULL_ARGUMENT,
            format!("`{argument}` is NULL"),
        )
    }

    pub(crate) fn invalid(what: impl Into<String>) -> Failure {
        Failure::new(hal_status::HAL_ERR_INVALID_ARGUMENT, what)
    }
}

/// The status of an error of the contract.
pub(crate) fn status_of(error: &Error) -> hal_status {
    use hal_status::*;
    match error {
        Error::Unavailable { .. } => HAL_ERR_UNAVAILABLE,
        Error::Unsupported { .. } => HAL_ERR_UNSUPPORTED,
        Error::InvalidHandle(_) => HAL_ERR_INVALID_HANDLE,
        Error::Misaligned { .. } => HAL_ERR_MISALIGNED,
        Error::PermissionDenied { .. } => HAL_ERR_PERMISSION_DENIED,
        Error::NotFound { .. } => HAL_ERR_NOT_FOUND,
        Error::AlreadyExists { .. } => HAL_ERR_ALREADY_EXISTS,
        Error::OutOfMemory { .. } => HAL_ERR_OUT_OF_MEMORY,
        Error::Timeout { .. } => HAL_ERR_TIMEOUT,
        Error::Closed { .. } => HAL_ERR_CLOSED,
        Error::Busy { .. } => HAL_ERR_BUSY,
        Error::InvalidArgument { .. } => HAL_ERR_INVALID_ARGUMENT,
        Error::Vendor(_) => HAL_ERR_VENDOR,
        Error::Io { .. } => HAL_ERR_IO,
        Error::Forked { .. } => HAL_ERR_FORKED,
        _ => HAL_ERR_OTHER,
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure::new(status_of(&error), error.to_string())
    }
}

impl From<HandleError> for Failure {
    fn from(error: HandleError) -> Failure {
        Failure::from(Error::InvalidHandle(error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_kind_has_its_status() {
        let vendor = hal_facade::kit::vendor::cuda::INVALID_VALUE
            .error(hal_facade::BackendId::Cuda, "invalid argument");
        let failure = Failure::from(vendor);
        assert_eq!(failure.status, hal_status::HAL_ERR_VENDOR);
        assert!(failure.message.contains("1 (CUDA_ERROR_INVALID_VALUE)"));
        let failure = Failure::from(HandleError::BadMagic);
        assert_eq!(failure.status, hal_status::HAL_ERR_INVALID_HANDLE);
        assert_eq!(
            status_of(&Error::Timeout {
                after: std::time::Duration::ZERO,
                what: "x".into()
            }),
            hal_status::HAL_ERR_TIMEOUT
        );
        assert_eq!(
            status_of(&Error::invalid("x")),
            hal_status::HAL_ERR_INVALID_ARGUMENT
        );
        let forked = Failure::from(Error::Forked {
            what: "CUDA device 0".into(),
            made_in: 1,
            now: 2,
        });
        assert_eq!(forked.status, hal_status::HAL_ERR_FORKED);
        assert!(forked.message.contains("open the backend again"));
    }
}
