//! Tensors: a layout over memory, exported as a tensor handle to another
//! process, or lent as a DLPack tensor in this one.

use std::ffi::c_char;
use std::sync::Arc;

use hal_facade::dlpack::{
    DLDataType, DLManagedTensorVersioned, DLTensor, DlpackTensor, TensorHandle, TensorSpec,
    MAX_NDIM,
};
use hal_facade::Memory;

use crate::device::{need, put};
use crate::last_error::call;
use crate::memory::{hal_memory, import_memory, MemoryObj, MEMORIES};
use crate::options::{hal_export_options, hal_import_options, import_read_only};
use crate::status::{hal_status, Failure};
use crate::text::{give_text, str_arg};

/// The layout `layout` describes: its dtype, shape, strides (NULL: compact
/// row-major) and byte offset; its data pointer and device are not read.
///
/// # Safety
///
/// `layout` is not NULL and points to a `DLTensor` whose `shape` (and
/// `strides`, when not NULL) hold `ndim` elements.
unsafe fn spec_of(layout: *const DLTensor) -> Result<TensorSpec, Failure> {
    // SAFETY: per this function's contract.
    let t = unsafe { &*layout };
    let ndim = usize::try_from(t.ndim)
        .ok()
        .filter(|n| *n <= MAX_NDIM)
        .ok_or_else(|| {
            Failure::invalid(format!(
                "`layout->ndim` is {}: from 0 to {MAX_NDIM} dimensions",
                t.ndim
            ))
        })?;
    let array = |ptr: *mut i64, what: &str| -> Result<Vec<i64>, Failure> {
        if ndim == 0 {
            return Ok(Vec::new());
        }
        if ptr.is_null() {
            return Err(Failure::null(what));
        }
        // SAFETY: not NULL and `ndim` elements long per the contract.
        Ok(unsafe { std::slice::from_raw_parts(ptr, ndim) }.to_vec())
    };
    let mut spec =
        TensorSpec::new(t.dtype, &array(t.shape, "layout->shape")?).with_byte_offset(t.byte_offset);
    if !t.strides.is_null() {
        spec = spec.with_strides(&array(t.strides, "layout->strides")?);
    }
    Ok(spec)
}

/// Export memory this process allocated as a tensor: `out_text` is a tensor
/// handle's text (`hal1t.` ...): the memory's handle with the dtype, shape,
/// strides and byte offset of `layout`, for `hal_import_tensor` in another
/// process. The layout must fit in the memory (`HAL_ERR_INVALID_ARGUMENT`).
/// Free the text with `hal_string_free`.
///
/// # Safety
///
/// `layout` is NULL or a `DLTensor` whose `shape` and `strides` (when not
/// NULL) hold `ndim` elements; `options` is NULL or a valid
/// `hal_export_options`; `out_text` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_export_tensor(
    memory: *mut hal_memory,
    layout: *const DLTensor,
    options: *const hal_export_options,
    out_text: *mut *mut c_char,
) -> hal_status {
    call("hal_export_tensor", || {
        need(out_text, "out_text")?;
        if layout.is_null() {
            return Err(Failure::null("layout"));
        }
        let memory = MEMORIES.get(memory as usize, "memory")?;
        // SAFETY: not NULL, valid per the contract.
        let spec = unsafe { spec_of(layout) }?;
        // SAFETY: per the contract.
        let handle = unsafe { crate::memory::export(&memory, options) }?;
        let tensor = TensorHandle::new(handle, &spec)?;
        // SAFETY: checked not NULL above.
        unsafe { give_text(out_text, tensor.to_text()) };
        Ok(())
    })
}

/// Import a tensor another process exported with `hal_export_tensor`: the
/// memory is imported (as `hal_import` does) and lent as a DLPack tensor
/// with the exporter's dtype, shape, strides and byte offset. Call the
/// tensor's `deleter` exactly once to release the import.
///
/// # Safety
///
/// `text` is NULL or a NUL-terminated string; `options` is NULL or a valid
/// `hal_import_options`; `out` is NULL or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_import_tensor(
    text: *const c_char,
    options: *const hal_import_options,
    out: *mut *mut DLManagedTensorVersioned,
) -> hal_status {
    call("hal_import_tensor", || {
        need(out, "out")?;
        // SAFETY: per the contract.
        let text = unsafe { str_arg(text, "text") }?;
        // SAFETY: per the contract.
        let read_only = unsafe { import_read_only(options) }?;
        let tensor = TensorHandle::from_text(text)?;
        let mut spec = tensor.spec();
        spec.read_only |= read_only;
        let memory = import_memory(tensor.memory, read_only)?;
        let device = Arc::clone(&memory.device);
        let lent = DlpackTensor::new(Arc::new(memory), device.device.info(), &spec)?;
        // SAFETY: checked not NULL above.
        unsafe { put(out, lent.into_raw(), "out") }
    })
}

/// Lend memory in hand as a DLPack tensor of `layout` (NULL: one dimension
/// of `uint8`, the whole memory). The tensor keeps the memory alive until
/// its `deleter` is called, even after `hal_memory_release`.
///
/// # Safety
///
/// `layout` is NULL or a `DLTensor` whose `shape` and `strides` (when not
/// NULL) hold `ndim` elements; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_to_dlpack(
    memory: *mut hal_memory,
    layout: *const DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
) -> hal_status {
    call("hal_to_dlpack", || {
        need(out, "out")?;
        let memory: Arc<MemoryObj> = MEMORIES.get(memory as usize, "memory")?;
        let spec = if layout.is_null() {
            let len = i64::try_from(memory.len())
                .map_err(|_| Failure::invalid("the memory is too large for one dimension"))?;
            TensorSpec::new(DLDataType::U8, &[len])
        } else {
            // SAFETY: not NULL, valid per the contract.
            unsafe { spec_of(layout) }?
        };
        let device = Arc::clone(&memory.device);
        let lent = DlpackTensor::new(memory, device.device.info(), &spec)?;
        // SAFETY: checked not NULL above.
        unsafe { put(out, lent.into_raw(), "out") }
    })
}
