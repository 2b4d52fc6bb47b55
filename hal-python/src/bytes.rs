//! Bytes in from Python: `bytes`, or anything with the buffer protocol.

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The bytes of `data`: a `bytes` object, or a copy of any C-contiguous
/// buffer (`bytearray`, `memoryview`, a NumPy array, ...).
pub(crate) fn bytes_of(data: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(bytes) = data.downcast::<PyBytes>() {
        return Ok(bytes.as_bytes().to_vec());
    }
    let buffer = PyBuffer::<u8>::get(data)?;
    buffer.to_vec(data.py())
}
