//! `hal.share`: any object with `__dlpack__` as a tensor handle another
//! process opens with `hal.open_tensor`; zero-copy where the bytes already
//! lie in hal memory this process allocated, or in CUDA device memory of
//! another library (a PyTorch or CuPy tensor) that the backend adopts by
//! address; else copied once into a new shareable allocation.
#![allow(unsafe_code)]

use std::sync::Arc;

use hal::dlpack::{DLDataType, DLDeviceType, TensorHandle, TensorSpec};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::device::Device;
use crate::errors::{invalid, to_py, OrRaise};
use crate::foreign::Foreign;
use crate::live;
use crate::memory::{bytes_spec, remembered, Memory};
use crate::memory_obj::{MemoryObj, TextsGiven};
use crate::options::export_options;
use crate::tensor::Tensor;
use hal::objects::{open_device, DeviceObj};

/// What `hal.share` gives: the tensor handle's `text` (also `str(s)`),
/// whether the bytes were `copied` into a new allocation (False: the
/// handle names the object's own memory), and that `memory`. Keep it (or,
/// when not copied, the original memory) alive while other processes open
/// the handle: the export ends when the memory goes, and a
/// `ResourceWarning` says so when the last of them is collected while the
/// text is still held (`str(hal.share(a))` gives a dead handle).
#[pyclass(module = "hal", frozen)]
pub struct Shared {
    text: Py<PyString>,
    #[pyo3(get)]
    copied: bool,
    memory: Arc<MemoryObj>,
    spec: TensorSpec,
}

impl Drop for Shared {
    fn drop(&mut self) {
        Python::with_gil(|py| {
            self.memory
                .warn_if_texts_outlive(py, "Shared", Some(&self.text))
        });
    }
}

#[pymethods]
impl Shared {
    /// The tensor handle's text (`hal1t.` ...), for `hal.open_tensor`.
    #[getter]
    fn text(&self, py: Python<'_>) -> Py<PyString> {
        self.text.clone_ref(py)
    }

    /// The memory the handle names.
    #[getter]
    fn memory(&self) -> Memory {
        Memory {
            inner: Arc::clone(&self.memory),
        }
    }

    /// The shared tensor in this process (over `memory`, with the
    /// handle's layout): what the other processes open, to read and write
    /// here (`torch.from_dlpack(shared.tensor)`).
    #[getter]
    fn tensor(&self) -> Tensor {
        Tensor {
            memory: Arc::clone(&self.memory),
            spec: self.spec.clone(),
        }
    }

    fn __str__(&self, py: Python<'_>) -> Py<PyString> {
        self.text.clone_ref(py)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "<hal.Shared {} {}>",
            if self.copied { "copied" } else { "zero-copy" },
            self.text.bind(py)
        )
    }
}

/// The bytes a tensor reaches from its first element: `(lowest, span)`.
/// Negative strides are refused (a tensor handle has none).
fn span_of(dtype: DLDataType, shape: &[i64], strides: Option<&[i64]>) -> PyResult<u64> {
    if shape.contains(&0) {
        return Ok(0);
    }
    let item = dtype.element_size();
    let mut last: u64 = 0;
    let compact;
    let strides = match strides {
        Some(s) => s,
        None => {
            let mut s = vec![1i64; shape.len()];
            for i in (0..shape.len().saturating_sub(1)).rev() {
                s[i] = s[i + 1].saturating_mul(shape[i + 1]);
            }
            compact = s;
            &compact
        }
    };
    for (&extent, &stride) in shape.iter().zip(strides) {
        if stride < 0 {
            return Err(invalid(format!(
                "strides {strides:?} go backwards, which a tensor handle cannot say: share a \
                 copy with forward strides (numpy.ascontiguousarray(a), t.contiguous())"
            )));
        }
        let reach = (extent as u64 - 1)
            .checked_mul(stride as u64)
            .ok_or_else(|| invalid("the tensor's extent overflows 64 bits"))?;
        last = last
            .checked_add(reach)
            .ok_or_else(|| invalid("the tensor's extent overflows 64 bits"))?;
    }
    last.checked_add(1)
        .and_then(|elements| elements.checked_mul(item))
        .ok_or_else(|| invalid("the tensor's extent overflows 64 bits"))
}

/// Copy the bytes of a CUDA tensor into `dst` with the library that made
/// it (PyTorch or CuPy), then wait for the copy.
fn copy_on_device(obj: &Bound<'_, PyAny>, dst: Tensor) -> PyResult<()> {
    let py = obj.py();
    let module: String = obj.get_type().getattr("__module__")?.extract()?;
    let root = module.split('.').next().unwrap_or_default();
    let dst = Bound::new(py, dst)?;
    match root {
        "torch" => {
            let torch = py.import("torch")?;
            let view = torch.call_method1("from_dlpack", (dst,))?;
            view.call_method1("copy_", (obj,))?;
            torch.getattr("cuda")?.call_method0("synchronize")?;
        }
        "cupy" => {
            let cupy = py.import("cupy")?;
            let view = cupy.call_method1("from_dlpack", (dst,))?;
            view.set_item(py.Ellipsis(), obj)?;
            cupy.getattr("cuda")?
                .getattr("runtime")?
                .call_method0("deviceSynchronize")?;
        }
        _ => {
            return Err(to_py(hal::Error::unsupported(
                hal::BackendId::Cuda,
                "share",
                format!(
                    "copying CUDA memory of a {module} object: share PyTorch or CuPy tensors, \
                     or hal memory (Device.allocate on \"cuda\")"
                ),
            )))
        }
    }
    Ok(())
}

/// Share `obj` (anything with `__dlpack__`: a NumPy array, a PyTorch or
/// CuPy tensor, a hal `Memory` or `Tensor`) with other processes: the
/// result's `text` is a tensor handle (`hal1t.` ...) that
/// `hal.open_tensor` opens with the same dtype, shape, strides and byte
/// offset. Zero-copy (`copied` False) when the bytes lie in hal memory this
/// process allocated (a `Memory`, or an array made from one with
/// `numpy.from_dlpack`); otherwise they are copied once into a new
/// allocation (`copied` True): host arrays into CPU shared memory (or
/// `device`'s memory, host memory where it has it), CUDA tensors of
/// PyTorch or CuPy into CUDA device memory of their device, copied by their
/// own library. `importers`, `read_only`: as for `Memory.export`. Negative
/// strides are refused (`InvalidArgumentError`).
#[pyfunction]
#[pyo3(signature = (obj, importers=None, read_only=false, device=None))]
pub(crate) fn share(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    importers: Option<&Bound<'_, PyAny>>,
    read_only: bool,
    device: Option<&Device>,
) -> PyResult<Shared> {
    let opts = export_options(importers, read_only)?;
    if let Ok(memory) = obj.downcast::<Memory>() {
        let memory = Arc::clone(&memory.get().inner);
        let spec = bytes_spec(&memory)?;
        return finish(py, memory, spec, &opts, false);
    }
    let foreign = Foreign::take(obj)?;
    let t = foreign.tensor();
    let (dtype, shape, strides) = (t.dtype, foreign.shape(), foreign.strides());
    let dl_device = (t.device.device_type.0, t.device.device_id);
    let span = span_of(dtype, &shape, strides.as_deref())?;
    let start = (t.data as usize as u64)
        .checked_add(t.byte_offset)
        .ok_or_else(|| invalid("the tensor's byte offset overflows"))?;
    let mut spec = TensorSpec::new(dtype, &shape);
    if let Some(s) = &strides {
        spec = spec.with_strides(s);
    }
    if foreign.read_only() {
        spec = spec.read_only();
    }
    if let Some((memory, offset)) = live::find(dl_device, start, span) {
        drop(foreign);
        return finish(py, memory, spec.with_byte_offset(offset), &opts, false);
    }
    let size = span.max(1);
    let host = dl_device.0 == DLDeviceType::CPU.0 || dl_device.0 == DLDeviceType::CUDA_HOST.0;
    if host {
        let target: Arc<DeviceObj> = match device {
            Some(d) => Arc::clone(&d.inner),
            None => Arc::new(
                open_device(Some("cpu-shm"), 0)
                    .or_else(|_| open_device(None, 0))
                    .or_raise()?,
            ),
        };
        // Host memory where the device has it; device memory (written
        // through the backend) otherwise.
        let info = target.device.info();
        let pages = whole_pages(&target, size);
        let desc = if info
            .capabilities
            .contains(hal::Capabilities::MEMORY_IS_HOST)
        {
            hal::AllocDesc::host(pages)
        } else {
            hal::AllocDesc::device(info.ordinal, pages)
        };
        let alloc = target.device.allocate(&desc).or_raise()?;
        let memory = remembered(MemoryObj::allocation(target, alloc).with_size(size));
        if span > 0 {
            let len = usize::try_from(span).map_err(|_| invalid("the tensor is too large"))?;
            // SAFETY: the producer lends `span` bytes from `start` (the
            // layout was checked to reach no further) while its tensor
            // (`foreign`) is held, which it is until after this copy.
            let bytes = unsafe { std::slice::from_raw_parts(start as usize as *const u8, len) };
            py.allow_threads(|| hal::Memory::write(&*memory, 0, bytes))
                .or_raise()?;
        }
        drop(foreign);
        return finish(py, memory, spec, &opts, true);
    }
    if dl_device.0 == DLDeviceType::CUDA.0 {
        let target: Arc<DeviceObj> = match device {
            Some(d) => Arc::clone(&d.inner),
            None => {
                let ordinal =
                    u32::try_from(dl_device.1).map_err(|_| invalid("a negative CUDA device id"))?;
                Arc::new(open_device(Some("cuda"), ordinal).or_raise()?)
            }
        };
        // Adopted while the producer's tensor is held (`foreign`); kept
        // allocated afterwards by `obj`, which the adopted memory holds.
        let adopted = adopt(obj, &target, start, span, &spec, &opts);
        drop(foreign);
        if let Some(shared) = adopted {
            return Ok(shared);
        }
        let ordinal = target.device.info().ordinal;
        let alloc = target
            .device
            .allocate(&hal::AllocDesc::device(ordinal, whole_pages(&target, size)))
            .or_raise()?;
        let memory = remembered(MemoryObj::allocation(target, alloc).with_size(size));
        let dst = Tensor {
            memory: Arc::clone(&memory),
            spec: spec.clone(),
        };
        copy_on_device(obj, dst)?;
        return finish(py, memory, spec, &opts, true);
    }
    // No backend of hal has this device: the tensor is not one `share` takes.
    Err(to_py(hal::Error::invalid(format!(
        "share of a tensor on DLPack device {dl_device:?}: hal shares host (kDLCPU) and CUDA \
         (kDLCUDA) tensors, and its own memory"
    ))))
}

/// The tensor at `start..start + span` of CUDA device memory another
/// library allocated, shared in place: the whole pages around it adopted by
/// address (inside the one driver allocation that holds them) and
/// exported, the tensor at its offset in them. None where the device
/// cannot adopt or export that memory (then it is copied); an importer
/// reaches the pages around the tensor too, as legacy CUDA IPC opens the
/// whole allocation for its importers anyway.
fn adopt(
    obj: &Bound<'_, PyAny>,
    target: &Arc<DeviceObj>,
    start: u64,
    span: u64,
    spec: &TensorSpec,
    opts: &hal::ExportOptions,
) -> Option<Shared> {
    let needed = hal::Capabilities::FOREIGN_MEMORY | hal::Capabilities::IPC_MEMORY;
    if !target.device.capabilities().contains(needed) {
        return None;
    }
    let page = target.device.info().page_size().max(1);
    let lo = start - start % page;
    let hi = start
        .checked_add(span.max(1))?
        .checked_next_multiple_of(page)?;
    // SAFETY: the backend checks that `lo..hi` lies inside one allocation
    // of this device's vendor runtime, and the allocation outlives the
    // adopted memory and every import of it: the producer's object `obj`,
    // which owns the tensor and so the allocation holding it, is kept by
    // the adopted memory until no importer maps it (`hal::objects::Adopted`).
    let alloc = unsafe { target.device.adopt_memory(lo, hi - lo) }.ok()?;
    let memory = remembered(MemoryObj::adopted(
        Arc::clone(target),
        alloc,
        Some(Box::new(obj.clone().unbind())),
    ));
    finish(
        obj.py(),
        memory,
        spec.clone().with_byte_offset(start - lo),
        opts,
        false,
    )
    .ok()
}

/// `size` rounded up to whole pages of `device`: exports cover whole pages.
fn whole_pages(device: &DeviceObj, size: u64) -> u64 {
    let page = device.device.info().page_size().max(1);
    size.div_ceil(page).saturating_mul(page)
}

/// Export `memory` and make the tensor handle of `spec` over it.
fn finish(
    py: Python<'_>,
    memory: Arc<MemoryObj>,
    spec: TensorSpec,
    opts: &hal::ExportOptions,
    copied: bool,
) -> PyResult<Shared> {
    let handle = memory.export(opts).or_raise()?;
    let text = PyString::new(py, &TensorHandle::new(handle, &spec).or_raise()?.to_text());
    memory.gave_out(&text);
    let text = text.unbind();
    Ok(Shared {
        text,
        copied,
        memory,
        spec,
    })
}
