//! DLPack capsules lent to consumers (`__dlpack__`): versioned
//! (`dltensor_versioned`, DLPack 1.x) when the consumer asks for them with
//! `max_version >= (1, 0)`, legacy (`dltensor`) otherwise.
//!
//! A consumer that takes the tensor renames the capsule
//! (`used_dltensor_versioned`, `used_dltensor`) and calls the tensor's
//! deleter when it is done. A capsule still under its first name when it is
//! collected was never taken: its destructor calls the deleter, so the
//! memory object a tensor keeps alive is let go either way, exactly once.
#![allow(unsafe_code)]

use std::ffi::{c_void, CStr};
use std::ptr::NonNull;
use std::sync::Arc;

use hal::dlpack::{
    dl_device, DLDevice, DLDeviceType, DLManagedTensorVersioned, DLTensor, DlpackTensor, TensorSpec,
};
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::errors::OrRaise;
use crate::memory_obj::MemoryObj;

/// The name of a versioned capsule.
pub(crate) const VERSIONED: &CStr = c"dltensor_versioned";
/// The name of a legacy capsule.
pub(crate) const LEGACY: &CStr = c"dltensor";
/// The name a consumer gives a versioned capsule it took.
pub(crate) const USED_VERSIONED: &CStr = c"used_dltensor_versioned";
/// The name a consumer gives a legacy capsule it took.
pub(crate) const USED_LEGACY: &CStr = c"used_dltensor";

/// `DLManagedTensor`: the legacy (DLPack 0.x) managed tensor, which has no
/// version and no flags.
#[repr(C)]
pub(crate) struct DLManagedTensor {
    /// The tensor.
    pub dl_tensor: DLTensor,
    /// The producer's context.
    pub manager_ctx: *mut c_void,
    /// Releases the tensor and this structure; may be null.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// A legacy tensor made from a versioned one: the legacy structure first,
/// then the versioned tensor whose arrays it points to and whose deleter
/// frees the memory object.
#[repr(C)]
struct LegacyHolder {
    managed: DLManagedTensor,
    inner: NonNull<DLManagedTensorVersioned>,
}

/// The deleter of legacy tensors made here.
///
/// # Safety
///
/// `managed` is null or a pointer made by [`legacy`] whose deleter has not
/// run yet.
unsafe extern "C" fn delete_legacy(managed: *mut DLManagedTensor) {
    if managed.is_null() {
        return;
    }
    // SAFETY: per the contract, `manager_ctx` is the `Box<LegacyHolder>`
    // made by `legacy`, released here exactly once; its `inner` is a live
    // versioned tensor that only this holder deletes.
    let _ = std::panic::catch_unwind(|| unsafe {
        let holder = Box::from_raw((*managed).manager_ctx.cast::<LegacyHolder>());
        drop(DlpackTensor::from_raw(holder.inner));
    });
}

/// The legacy form of `tensor`, which it takes over (null only if the
/// tensor was: never, `into_raw` gives a live pointer).
fn legacy(tensor: DlpackTensor) -> *mut DLManagedTensor {
    let t = tensor.tensor();
    let dl_tensor = DLTensor {
        data: t.data,
        device: t.device,
        ndim: t.ndim,
        dtype: t.dtype,
        shape: t.shape,
        strides: t.strides,
        byte_offset: t.byte_offset,
    };
    let Some(inner) = NonNull::new(tensor.into_raw()) else {
        return std::ptr::null_mut();
    };
    let holder = Box::into_raw(Box::new(LegacyHolder {
        managed: DLManagedTensor {
            dl_tensor,
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_legacy),
        },
        inner,
    }));
    // SAFETY: `holder` comes from `Box::into_raw` just above; nothing else
    // points to it yet.
    unsafe {
        (*holder).managed.manager_ctx = holder.cast();
        std::ptr::addr_of_mut!((*holder).managed)
    }
}

/// The destructor of versioned capsules: deletes a tensor no consumer took.
///
/// # Safety
///
/// Called by Python with a capsule made by [`lend`].
unsafe extern "C" fn drop_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: `PyCapsule_IsValid` only reads the capsule's name; a capsule
    // still called `dltensor_versioned` holds the tensor `lend` put there,
    // not taken by a consumer, deleted here once.
    let _ = std::panic::catch_unwind(|| unsafe {
        if ffi::PyCapsule_IsValid(capsule, VERSIONED.as_ptr()) == 1 {
            let ptr = ffi::PyCapsule_GetPointer(capsule, VERSIONED.as_ptr());
            if let Some(ptr) = NonNull::new(ptr.cast::<DLManagedTensorVersioned>()) {
                drop(DlpackTensor::from_raw(ptr));
            }
        }
    });
}

/// The destructor of legacy capsules: deletes a tensor no consumer took.
///
/// # Safety
///
/// Called by Python with a capsule made by [`lend`].
unsafe extern "C" fn drop_legacy(capsule: *mut ffi::PyObject) {
    // SAFETY: as in `drop_versioned`, for the legacy structure `legacy`
    // made, whose deleter is `delete_legacy`.
    let _ = std::panic::catch_unwind(|| unsafe {
        if ffi::PyCapsule_IsValid(capsule, LEGACY.as_ptr()) == 1 {
            let ptr = ffi::PyCapsule_GetPointer(capsule, LEGACY.as_ptr()).cast::<DLManagedTensor>();
            if !ptr.is_null() {
                if let Some(deleter) = (*ptr).deleter {
                    deleter(ptr);
                }
            }
        }
    });
}

/// The DLPack device `(type, id)` a tensor of `spec` over `memory` has.
pub(crate) fn device_of(memory: &MemoryObj, spec: &TensorSpec) -> PyResult<(i32, i32)> {
    let device = match spec.device {
        Some(d) => d,
        None => dl_device(memory.device.device.info(), hal::Memory::location(memory)).or_raise()?,
    };
    Ok((device.device_type.0, device.device_id))
}

/// A capsule lending `memory` as a tensor of `spec` (the arguments of
/// `__dlpack__` checked as the array API standard asks).
pub(crate) fn lend<'py>(
    py: Python<'py>,
    memory: Arc<MemoryObj>,
    spec: &TensorSpec,
    max_version: Option<(u32, u32)>,
    dl_device: Option<(i32, i32)>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyAny>> {
    if copy == Some(true) {
        return Err(PyBufferError::new_err(
            "copy=True: hal lends its memory without copying; copy in the consumer \
             (numpy.array(numpy.from_dlpack(x)), tensor.clone())",
        ));
    }
    let here = device_of(&memory, spec)?;
    let mut spec = spec.clone();
    if let Some(asked) = dl_device {
        // Host-visible memory of a device (managed, pinned host memory) is
        // lent as CPU memory to a consumer that asks for the CPU.
        let host = hal::Memory::host_ptr(&*memory).is_some();
        if asked == (DLDeviceType::CPU.0, 0) && host {
            spec.device = Some(DLDevice::CPU);
        } else if asked != here {
            return Err(PyBufferError::new_err(format!(
                "dl_device={asked:?}: the memory is on DLPack device {here:?} and hal does not \
                 copy it across devices"
            )));
        }
    }
    let versioned = max_version.is_some_and(|(major, _)| major >= 1);
    if !versioned && (spec.read_only || hal::Memory::is_read_only(&*memory)) {
        // A legacy tensor has no read-only flag: its consumer would write
        // into memory mapped read-only.
        return Err(PyBufferError::new_err(
            "the memory is read-only and a legacy DLPack capsule cannot say so: ask for a \
             versioned one (max_version=(1, 0); NumPy 2.1, PyTorch 2.6 and CuPy 14 do)",
        ));
    }
    let device = Arc::clone(&memory.device);
    let tensor = DlpackTensor::new(memory, device.device.info(), &spec).or_raise()?;
    let (ptr, name, destructor): (*mut c_void, &CStr, ffi::PyCapsule_Destructor) = if versioned {
        (tensor.into_raw().cast(), VERSIONED, drop_versioned)
    } else {
        (legacy(tensor).cast(), LEGACY, drop_legacy)
    };
    if ptr.is_null() {
        return Err(PyBufferError::new_err("the tensor could not be lent"));
    }
    // SAFETY: `ptr` is a live tensor the capsule now owns; the name is a
    // static string; the destructor matches the name.
    let capsule = unsafe { ffi::PyCapsule_New(ptr, name.as_ptr(), Some(destructor)) };
    if capsule.is_null() {
        // The capsule was not made: delete the tensor here.
        // SAFETY: `ptr` is still owned by this function.
        unsafe {
            if versioned {
                if let Some(p) = NonNull::new(ptr.cast::<DLManagedTensorVersioned>()) {
                    drop(DlpackTensor::from_raw(p));
                }
            } else {
                delete_legacy(ptr.cast());
            }
        }
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference, just made.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule) })
}
