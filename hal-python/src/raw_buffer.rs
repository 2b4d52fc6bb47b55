//! Any C-contiguous buffer of Python's, as raw bytes: a NumPy array of any
//! dtype, a `bytearray`, a `memoryview`, `bytes`. Held (so that its owner
//! cannot move or free the bytes) until dropped; the GIL may be released
//! meanwhile, by a caller that keeps the buffer and passes on its address.
#![allow(unsafe_code)]

use std::ffi::c_int;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

/// A buffer of a Python object, exported to this module until dropped.
pub(crate) struct RawBuffer {
    // Boxed: Python may point into the structure (`shape`, `strides`).
    view: Box<ffi::Py_buffer>,
}

impl RawBuffer {
    /// The buffer of `obj`, C-contiguous, writable when `writable`.
    pub(crate) fn get(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<RawBuffer> {
        let mut flags: c_int = ffi::PyBUF_C_CONTIGUOUS;
        if writable {
            flags |= ffi::PyBUF_WRITABLE;
        }
        // SAFETY: an all-zero Py_buffer is what PyObject_GetBuffer fills.
        let mut view: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `obj` is a live object (the GIL is held: `Bound`), `view`
        // a structure to fill; on failure nothing is held and an exception
        // is set.
        if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) } != 0 {
            let why = PyErr::take(obj.py()).map_or_else(String::new, |e| e.to_string());
            let what = if writable {
                "a writable, C-contiguous buffer (a NumPy array, a bytearray, a hal.Memory)"
            } else {
                "a C-contiguous buffer (bytes, a NumPy array, a bytearray, a memoryview)"
            };
            return Err(PyBufferError::new_err(format!(
                "{} is not {what}: {why}",
                obj.get_type().name().map_or("?".into(), |n| n.to_string())
            )));
        }
        Ok(RawBuffer { view })
    }

    /// The address of the bytes, as a number a closure without the GIL
    /// may carry; they stay there while this buffer is held.
    pub(crate) fn addr(&self) -> usize {
        self.view.buf as usize
    }

    /// How many bytes.
    pub(crate) fn len(&self) -> usize {
        usize::try_from(self.view.len).unwrap_or(0)
    }
}

impl Drop for RawBuffer {
    fn drop(&mut self) {
        // SAFETY: the view was filled by PyObject_GetBuffer and is released
        // once, with the GIL held.
        Python::with_gil(|_| unsafe { ffi::PyBuffer_Release(&mut *self.view) });
    }
}
