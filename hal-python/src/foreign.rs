//! DLPack capsules taken from other libraries (`obj.__dlpack__()`): what
//! `hal.share` reads the layout and the bytes of a NumPy array, a PyTorch
//! or CuPy tensor from.
#![allow(unsafe_code)]

use std::ptr::NonNull;

use hal::dlpack::{DLManagedTensorVersioned, DLTensor, DLPACK_FLAG_BITMASK_READ_ONLY};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::capsule::{DLManagedTensor, LEGACY, USED_LEGACY, USED_VERSIONED, VERSIONED};

/// The managed tensor a capsule held.
enum Taken {
    Versioned(NonNull<DLManagedTensorVersioned>),
    Legacy(NonNull<DLManagedTensor>),
}

/// A tensor taken from another library's capsule: ours until dropped, when
/// its deleter runs (the capsule was renamed `used_...`, so the capsule's
/// own destructor leaves it alone).
pub(crate) struct Foreign {
    taken: Taken,
}

// The tensor is only read while the GIL or the caller holds it.

impl Foreign {
    /// Take the tensor of `obj.__dlpack__()`, asking for a versioned
    /// capsule first (`max_version=(1, 0)`), then for a legacy one from
    /// producers that do not know the keyword.
    pub(crate) fn take(obj: &Bound<'_, PyAny>) -> PyResult<Foreign> {
        let py = obj.py();
        if !obj.hasattr("__dlpack__")? {
            return Err(PyTypeError::new_err(format!(
                "{} has no __dlpack__: share a NumPy array, a PyTorch or CuPy tensor, a hal \
                 Memory or Tensor, or any object of the Python array API",
                obj.get_type().name()?
            )));
        }
        let kwargs = PyDict::new(py);
        kwargs.set_item("max_version", (1, 0))?;
        let capsule = match obj.call_method("__dlpack__", (), Some(&kwargs)) {
            Ok(c) => c,
            Err(e) if e.is_instance_of::<PyTypeError>(py) => obj.call_method0("__dlpack__")?,
            Err(e) => return Err(e),
        };
        let raw = capsule.as_ptr();
        // SAFETY: `raw` is a live object (held by `capsule`); the capsule
        // functions check its type and name before reading its pointer, and
        // a capsule of either name holds the structure the DLPack standard
        // says. Renaming it makes this function its only owner.
        unsafe {
            if ffi::PyCapsule_IsValid(raw, VERSIONED.as_ptr()) == 1 {
                let ptr = ffi::PyCapsule_GetPointer(raw, VERSIONED.as_ptr());
                let ptr = NonNull::new(ptr.cast::<DLManagedTensorVersioned>())
                    .ok_or_else(|| PyValueError::new_err("a DLPack capsule holding NULL"))?;
                if ffi::PyCapsule_SetName(raw, USED_VERSIONED.as_ptr()) != 0 {
                    return Err(PyErr::fetch(py));
                }
                Ok(Foreign {
                    taken: Taken::Versioned(ptr),
                })
            } else if ffi::PyCapsule_IsValid(raw, LEGACY.as_ptr()) == 1 {
                let ptr = ffi::PyCapsule_GetPointer(raw, LEGACY.as_ptr());
                let ptr = NonNull::new(ptr.cast::<DLManagedTensor>())
                    .ok_or_else(|| PyValueError::new_err("a DLPack capsule holding NULL"))?;
                if ffi::PyCapsule_SetName(raw, USED_LEGACY.as_ptr()) != 0 {
                    return Err(PyErr::fetch(py));
                }
                Ok(Foreign {
                    taken: Taken::Legacy(ptr),
                })
            } else {
                Err(PyTypeError::new_err(
                    "__dlpack__ gave no DLPack capsule (dltensor_versioned or dltensor), or one \
                     already taken",
                ))
            }
        }
    }

    /// The tensor.
    pub(crate) fn tensor(&self) -> &DLTensor {
        // SAFETY: the structure lives until its deleter runs in `drop`.
        unsafe {
            match self.taken {
                Taken::Versioned(p) => &(*p.as_ptr()).dl_tensor,
                Taken::Legacy(p) => &(*p.as_ptr()).dl_tensor,
            }
        }
    }

    /// Whether the producer marked the tensor read-only (versioned only).
    pub(crate) fn read_only(&self) -> bool {
        match self.taken {
            // SAFETY: as in `tensor`.
            Taken::Versioned(p) => unsafe {
                (*p.as_ptr()).flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0
            },
            Taken::Legacy(_) => false,
        }
    }

    /// The extents.
    pub(crate) fn shape(&self) -> Vec<i64> {
        let t = self.tensor();
        array(t.shape, t.ndim)
    }

    /// The strides in elements, None for compact row-major.
    pub(crate) fn strides(&self) -> Option<Vec<i64>> {
        let t = self.tensor();
        if t.strides.is_null() {
            None
        } else {
            Some(array(t.strides, t.ndim))
        }
    }
}

/// `ndim` elements at `ptr` (empty when none).
fn array(ptr: *const i64, ndim: i32) -> Vec<i64> {
    match usize::try_from(ndim) {
        Ok(n) if n > 0 && !ptr.is_null() => {
            // SAFETY: DLPack's shape and strides arrays hold `ndim`
            // elements while the tensor lives.
            unsafe { std::slice::from_raw_parts(ptr, n) }.to_vec()
        }
        _ => Vec::new(),
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        // SAFETY: this value owns the tensor (the capsule was renamed) and
        // calls its deleter exactly once.
        unsafe {
            match self.taken {
                Taken::Versioned(p) => {
                    if let Some(deleter) = (*p.as_ptr()).deleter {
                        deleter(p.as_ptr());
                    }
                }
                Taken::Legacy(p) => {
                    if let Some(deleter) = (*p.as_ptr()).deleter {
                        deleter(p.as_ptr());
                    }
                }
            }
        }
    }
}
