//! What `hal.Sample` and `hal.remote.Sample` share: a sample read in place
//! ([`SampleObj`]), copied out with the GIL released, released unless a
//! view of it is alive, and lent to Python as a read-only buffer.
#![allow(unsafe_code)]

use std::ffi::c_int;

use hal::objects::{SampleObj, SampleSource};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::to_py;

/// `n` bytes of `sample` from `offset` (all that follow by default),
/// copied with the GIL released.
pub(crate) fn read<'py, S: SampleSource>(
    py: Python<'py>,
    sample: &SampleObj<S>,
    offset: u64,
    n: Option<u64>,
) -> PyResult<Bound<'py, PyBytes>> {
    let n = n.unwrap_or(sample.len().saturating_sub(offset));
    sample.check(offset, n).map_err(to_py)?;
    let mut out = vec![0u8; n as usize];
    py.allow_threads(|| sample.read(offset, &mut out))
        .map_err(to_py)?;
    Ok(PyBytes::new(py, &out))
}

/// Release `sample` now: `BufferError` while a view of it is alive; a
/// second call does nothing.
pub(crate) fn release<S: SampleSource>(sample: &SampleObj<S>) -> PyResult<()> {
    match sample.release() {
        Ok(done) => done.map_err(to_py),
        Err(views) => Err(PyBufferError::new_err(format!(
            "{views} view(s) of this sample are alive: release them (memoryview.release(), \
             del the arrays) before releasing it"
        ))),
    }
}

/// Fill `view` with the bytes of `sample`, read-only, its object `owner`
/// (the Python object that holds the sample); `BufferError` saying
/// `not_host` where its memory is not host-visible. The view is counted
/// until `__releasebuffer__` ([`SampleObj::drop_view`]).
///
/// # Safety
///
/// `view` is the valid `Py_buffer` Python passed to `__getbuffer__`, and
/// `owner` holds `sample` (and so its subscriber's memory) as long as it
/// lives.
pub(crate) unsafe fn lend<S: SampleSource>(
    owner: Bound<'_, PyAny>,
    sample: &SampleObj<S>,
    view: *mut pyo3::ffi::Py_buffer,
    flags: c_int,
    not_host: &'static str,
) -> PyResult<()> {
    let Some(host) = sample.host() else {
        return Err(PyBufferError::new_err(not_host));
    };
    sample.add_view().map_err(to_py)?;
    // SAFETY: Python passes a valid `view`; the sample's `len` bytes at
    // `host` are host memory of its subscriber's slots, which the sample
    // keeps (`Arc`) as long as the view's owner (which holds the sample)
    // lives; nothing writes the slot until the sample is released, which
    // `release` refuses while a view is counted.
    let filled = unsafe {
        crate::buffer::fill_bytes(view, flags, owner, host.cast_mut(), sample.len(), true)
    };
    if filled.is_err() {
        sample.drop_view();
    }
    filled
}
