//! The buffer protocol's one shape in this package: a 1-D buffer of bytes
//! over host memory (`memoryview(obj)`, `numpy.frombuffer(obj, ...)`),
//! filled for `Memory`, a channel's `Loan` and its `Sample`.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};

use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;

/// Fill `view` with the `len` bytes at `ptr`, writable unless `read_only`,
/// its object `owner` (a new reference, released by Python with the view).
///
/// # Safety
///
/// `view` is the valid `Py_buffer` Python passed to `__getbuffer__`, and
/// the `len` bytes at `ptr` stay mapped (and, unless `read_only`, writable)
/// while `owner` lives.
pub(crate) unsafe fn fill_bytes(
    view: *mut pyo3::ffi::Py_buffer,
    flags: c_int,
    owner: Bound<'_, PyAny>,
    ptr: *mut u8,
    len: u64,
    read_only: bool,
) -> PyResult<()> {
    if read_only && (flags & pyo3::ffi::PyBUF_WRITABLE) != 0 {
        return Err(PyBufferError::new_err(
            "the memory is read-only: ask for a read-only buffer",
        ));
    }
    let len = isize::try_from(len).map_err(|_| PyBufferError::new_err("too large for a buffer"))?;
    // SAFETY: `view` is valid to fill (the caller's promise); the fields
    // written are the ones a 1-D byte buffer needs, and the reference
    // stored in `obj` keeps the bytes mapped until the view is released.
    unsafe {
        (*view).obj = owner.into_ptr();
        (*view).buf = ptr.cast::<c_void>();
        (*view).len = len;
        (*view).readonly = c_int::from(read_only);
        (*view).itemsize = 1;
        (*view).format = if (flags & pyo3::ffi::PyBUF_FORMAT) != 0 {
            c"B".as_ptr().cast_mut()
        } else {
            std::ptr::null_mut()
        };
        (*view).ndim = 1;
        (*view).shape = if (flags & pyo3::ffi::PyBUF_ND) == pyo3::ffi::PyBUF_ND {
            &mut (*view).len
        } else {
            std::ptr::null_mut()
        };
        (*view).strides = if (flags & pyo3::ffi::PyBUF_STRIDES) == pyo3::ffi::PyBUF_STRIDES {
            &mut (*view).itemsize
        } else {
            std::ptr::null_mut()
        };
        (*view).suboffsets = std::ptr::null_mut();
        (*view).internal = std::ptr::null_mut();
    }
    Ok(())
}
