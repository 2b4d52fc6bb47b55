//! Tensors: a layout (dtype, shape, strides, byte offset) over memory,
//! opened from a tensor handle (`hal.open_tensor`) and lent to array
//! libraries through DLPack.

use std::sync::Arc;

use hal::dlpack::{DLDataType, TensorHandle, TensorSpec};
use hal::HandleError;
use pyo3::prelude::*;

use crate::capsule;
use crate::errors::{handle_error, to_py_saying, OrRaise};
use crate::memory::Memory;
use crate::memory_obj::{import_memory, MemoryObj, TextsGiven};

/// A tensor over hal memory: what `hal.open_tensor` gives. Its
/// `__dlpack__` lends the memory with the exporter's dtype, shape, strides
/// and byte offset (`numpy.from_dlpack(t)`, `torch.from_dlpack(t)`,
/// `cupy.from_dlpack(t)`), without a copy.
#[pyclass(module = "hal", frozen)]
pub struct Tensor {
    pub(crate) memory: Arc<MemoryObj>,
    pub(crate) spec: TensorSpec,
}

impl Drop for Tensor {
    fn drop(&mut self) {
        Python::with_gil(|py| self.memory.warn_if_texts_outlive(py, "Tensor", None));
    }
}

/// The NumPy-style name of a DLPack data type (`"float32"`, `"uint8"`,
/// `"bfloat16"`, ...), or `"code:bits:lanes"` for others.
pub(crate) fn dtype_name(dtype: DLDataType) -> String {
    let base = match dtype.code {
        0 => "int",
        1 => "uint",
        2 => "float",
        4 => "bfloat",
        5 => "complex",
        6 if dtype.bits == 8 => return "bool".into(),
        _ => "",
    };
    if base.is_empty() || dtype.lanes != 1 {
        format!("{}:{}:{}", dtype.code, dtype.bits, dtype.lanes)
    } else {
        format!("{base}{}", dtype.bits)
    }
}

#[pymethods]
impl Tensor {
    /// The memory the tensor lies in.
    #[getter]
    fn memory(&self) -> Memory {
        Memory {
            inner: Arc::clone(&self.memory),
        }
    }

    /// The element type: `"float32"`, `"int64"`, `"uint8"`, `"bool"`, ...
    #[getter]
    fn dtype(&self) -> String {
        dtype_name(self.spec.dtype)
    }

    /// The extents.
    #[getter]
    fn shape(&self) -> Vec<i64> {
        self.spec.shape.clone()
    }

    /// The strides in elements (None: compact row-major).
    #[getter]
    fn strides(&self) -> Option<Vec<i64>> {
        self.spec.strides.clone()
    }

    /// Bytes from the start of the memory to the first element.
    #[getter]
    fn byte_offset(&self) -> u64 {
        self.spec.byte_offset
    }

    /// Whether consumers must not write.
    #[getter]
    fn read_only(&self) -> bool {
        self.spec.read_only || hal::Memory::is_read_only(&*self.memory)
    }

    /// A DLPack capsule of the tensor, per the Python array API standard
    /// (versioned when `max_version >= (1, 0)`).
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = stream;
        capsule::lend(
            py,
            Arc::clone(&self.memory),
            &self.spec,
            max_version,
            dl_device,
            copy,
        )
    }

    /// `(device_type, device_id)` of DLPack.
    fn __dlpack_device__(&self) -> PyResult<(i32, i32)> {
        capsule::device_of(&self.memory, &self.spec)
    }

    fn __repr__(&self) -> String {
        format!(
            "<hal.Tensor {} {:?} strides {} at byte {}>",
            self.dtype(),
            self.spec.shape,
            match &self.spec.strides {
                Some(s) => format!("{s:?}"),
                None => "compact".into(),
            },
            self.spec.byte_offset
        )
    }
}

/// Open a tensor another process shared (`hal.share`, or a C or Rust
/// program's tensor handle, `hal1t.` ...): the memory is imported and the
/// result's `__dlpack__` gives the exporter's dtype, shape, strides and
/// byte offset. `read_only`: consumers get a read-only tensor and writes
/// through `memory` are refused.
#[pyfunction]
#[pyo3(signature = (text, read_only=false))]
pub(crate) fn open_tensor(py: Python<'_>, text: &str, read_only: bool) -> PyResult<Tensor> {
    let handle = TensorHandle::from_text(text.trim()).map_err(|e| match e {
        HandleError::WrongKind { .. } => {
            let message = format!(
                "invalid handle: {e}: hal.open_tensor opens the tensor handles of hal.share \
                 (`hal1t.` ...); import this one with hal.import_handle"
            );
            to_py_saying(hal::Error::InvalidHandle(e), message)
        }
        e => handle_error(e),
    })?;
    let mut spec = handle.spec();
    spec.read_only |= read_only;
    let memory = py
        .allow_threads(|| import_memory(handle.memory, read_only))
        .or_raise()?;
    Ok(Tensor {
        memory: Arc::new(memory),
        spec,
    })
}
