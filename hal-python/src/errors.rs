//! The exceptions: `hal.Error` and one subclass per error kind of the
//! contract (`hal_core::Error`), each carrying the vendor's code and name
//! where a vendor runtime gave them.

use hal::{Error, HandleError};
use pyo3::prelude::*;

use exc::*;

/// The exception classes, named as Python sees them.
#[allow(missing_docs)]
pub(crate) mod exc {
    use pyo3::create_exception;
    use pyo3::exceptions::PyException;

    create_exception!(
        hal,
        Error,
        PyException,
        "Any failure of hal. `code` and `name` are the vendor's error code and \
         symbolic name (`CUDA_ERROR_INVALID_VALUE`, ...) where a vendor runtime \
         answered, else None; `kind` names the error kind."
    );
    create_exception!(
        hal,
        UnavailableError,
        Error,
        "The backend cannot be used on this machine (vendor library missing, no device)."
    );
    create_exception!(
        hal,
        UnsupportedError,
        Error,
        "The backend or the device cannot perform the operation."
    );
    create_exception!(
        hal,
        InvalidHandleError,
        Error,
        "A handle text that could not be decoded, or of another kind than the call expects."
    );
    create_exception!(
        hal,
        MisalignedError,
        Error,
        "A range that does not cover whole pages."
    );
    create_exception!(
        hal,
        PermissionDeniedError,
        Error,
        "This process may not use the resource (not on the export's pid list, read-only, ...)."
    );
    create_exception!(
        hal,
        NotFoundError,
        Error,
        "The named resource (backend, region, device) does not exist."
    );
    create_exception!(
        hal,
        AlreadyExistsError,
        Error,
        "An exclusive create found the name taken."
    );
    create_exception!(
        hal,
        OutOfMemoryError,
        Error,
        "The device or the host could not provide the memory."
    );
    create_exception!(hal, TimeoutError, Error, "A wait did not complete in time.");
    create_exception!(
        hal,
        ClosedError,
        Error,
        "The resource was closed, by this process or by its peer."
    );
    create_exception!(
        hal,
        BusyError,
        Error,
        "The resource is still held by importers."
    );
    create_exception!(
        hal,
        InvalidArgumentError,
        Error,
        "An argument is out of range or inconsistent."
    );
    create_exception!(
        hal,
        VendorError,
        Error,
        "A vendor runtime returned an error code: see `code` and `name`."
    );
    create_exception!(hal, IoError, Error, "An operating-system call failed.");
    create_exception!(
        hal,
        ForkedError,
        Error,
        "The object was made by the process this one was forked from: open the backend \
         again in this process and make the object anew."
    );
}

/// The error kinds, by their name in Python, for the module's namespace.
pub(crate) fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<exc::Error>())?;
    m.add("UnavailableError", py.get_type::<UnavailableError>())?;
    m.add("UnsupportedError", py.get_type::<UnsupportedError>())?;
    m.add("InvalidHandleError", py.get_type::<InvalidHandleError>())?;
    m.add("MisalignedError", py.get_type::<MisalignedError>())?;
    m.add(
        "PermissionDeniedError",
        py.get_type::<PermissionDeniedError>(),
    )?;
    m.add("NotFoundError", py.get_type::<NotFoundError>())?;
    m.add("AlreadyExistsError", py.get_type::<AlreadyExistsError>())?;
    m.add("OutOfMemoryError", py.get_type::<OutOfMemoryError>())?;
    m.add("TimeoutError", py.get_type::<TimeoutError>())?;
    m.add("ClosedError", py.get_type::<ClosedError>())?;
    m.add("BusyError", py.get_type::<BusyError>())?;
    m.add(
        "InvalidArgumentError",
        py.get_type::<InvalidArgumentError>(),
    )?;
    m.add("VendorError", py.get_type::<VendorError>())?;
    m.add("IoError", py.get_type::<IoError>())?;
    m.add("ForkedError", py.get_type::<ForkedError>())?;
    Ok(())
}

/// The Python exception of an error of the contract, with `kind`, `code`
/// and `name` set.
pub(crate) fn to_py(error: Error) -> PyErr {
    let message = error.to_string();
    to_py_saying(error, message)
}

/// [`to_py`] with the binding's own `message`, where the contract's words
/// would send a Python user to another binding's call.
pub(crate) fn to_py_saying(error: Error, message: String) -> PyErr {
    let (err, kind) = match &error {
        Error::Unavailable { .. } => (UnavailableError::new_err(message), "unavailable"),
        Error::Unsupported { .. } => (UnsupportedError::new_err(message), "unsupported"),
        Error::InvalidHandle(_) => (InvalidHandleError::new_err(message), "invalid-handle"),
        Error::Misaligned { .. } => (MisalignedError::new_err(message), "misaligned"),
        Error::PermissionDenied { .. } => {
            (PermissionDeniedError::new_err(message), "permission-denied")
        }
        Error::NotFound { .. } => (NotFoundError::new_err(message), "not-found"),
        Error::AlreadyExists { .. } => (AlreadyExistsError::new_err(message), "already-exists"),
        Error::OutOfMemory { .. } => (OutOfMemoryError::new_err(message), "out-of-memory"),
        Error::Timeout { .. } => (exc::TimeoutError::new_err(message), "timeout"),
        Error::Closed { .. } => (ClosedError::new_err(message), "closed"),
        Error::Busy { .. } => (BusyError::new_err(message), "busy"),
        Error::InvalidArgument { .. } => {
            (InvalidArgumentError::new_err(message), "invalid-argument")
        }
        Error::Vendor(_) => (VendorError::new_err(message), "vendor"),
        Error::Io { .. } => (IoError::new_err(message), "io"),
        Error::Forked { .. } => (ForkedError::new_err(message), "forked"),
        _ => (exc::Error::new_err(message), "other"),
    };
    let (code, name) = match &error {
        Error::Vendor(v) => (Some(v.code), Some(v.name.clone())),
        _ => (None, None),
    };
    Python::with_gil(|py| {
        let value = err.value(py);
        // Setting attributes on a fresh exception instance cannot fail but
        // for memory; the exception is raised either way.
        let _ = value.setattr("kind", kind);
        let _ = value.setattr("code", code);
        let _ = value.setattr("name", name);
    });
    err
}

/// `to_py` for a handle the decoder refused.
pub(crate) fn handle_error(error: HandleError) -> PyErr {
    to_py(Error::InvalidHandle(error))
}

/// An `InvalidArgumentError` saying `what`.
pub(crate) fn invalid(what: impl Into<String>) -> PyErr {
    to_py(Error::invalid(what.into()))
}

/// Results of the contract, as Python results.
pub(crate) trait OrRaise<T> {
    /// The value, or the typed exception of the error.
    fn or_raise(self) -> PyResult<T>;
}

impl<T> OrRaise<T> for hal::Result<T> {
    fn or_raise(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
