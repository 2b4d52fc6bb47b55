//! Memory: `Device.allocate`, imports, and the `Memory` class with
//! `read`, `write`, `export`, the buffer protocol and DLPack.
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::sync::Arc;

use hal::device::check_bounds;
use hal::dlpack::{DLDataType, TensorSpec};
use hal::{Error, Location};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::bytes::bytes_of;
use crate::capsule;
use crate::errors::{invalid, to_py, OrRaise};
use crate::live;
use crate::memory_obj::{MemoryObj, TextsGiven};
use crate::options::export_options;
use crate::timeout::duration;

/// Memory: allocated here (`Device.allocate`) or imported from another
/// process (`hal.import_handle`). `len(m)` is its size in bytes: for an
/// allocation the size asked for, though the backend may round the
/// allocation up to whole pages underneath; for an import the whole
/// memory the exporter exported. Host memory supports the buffer protocol
/// (`memoryview(m)`, zero-copy) and every memory `__dlpack__` (a 1-D
/// `uint8` tensor), both of `len(m)` bytes. The memory is freed (or
/// unmapped), and its exports end, once this object and every view and
/// tensor made from it are gone.
#[pyclass(module = "hal", frozen)]
pub struct Memory {
    pub(crate) inner: Arc<MemoryObj>,
}

impl Memory {
    pub(crate) fn new(obj: MemoryObj) -> Memory {
        Memory {
            inner: remembered(obj),
        }
    }

    /// The memory as Python sees it (`len(m)` bytes) as a 1-D `uint8`
    /// tensor.
    fn bytes_spec(&self) -> PyResult<TensorSpec> {
        bytes_spec(&self.inner)
    }
}

/// A new memory object, remembered among the live allocations (see
/// [`live`]).
pub(crate) fn remembered(obj: MemoryObj) -> Arc<MemoryObj> {
    let inner = Arc::new(obj);
    live::remember(&inner);
    inner
}

/// The `len(m)` bytes of `memory` as a 1-D `uint8` tensor.
pub(crate) fn bytes_spec(memory: &MemoryObj) -> PyResult<TensorSpec> {
    let len = i64::try_from(memory.size())
        .map_err(|_| invalid("the memory is too large for one dimension"))?;
    Ok(TensorSpec::new(DLDataType::U8, &[len]))
}

impl Drop for Memory {
    fn drop(&mut self) {
        Python::with_gil(|py| self.inner.warn_if_texts_outlive(py, "Memory", None));
    }
}

#[pymethods]
impl Memory {
    /// The size asked for (`Device.allocate`), or an import's whole size.
    fn __len__(&self) -> usize {
        self.inner.size() as usize
    }

    /// Where the memory is: `"device"`, `"host"` or `"managed"`.
    #[getter]
    fn location(&self) -> &'static str {
        match hal::Memory::location(&*self.inner) {
            Location::Device(_) => "device",
            Location::Host => "host",
            Location::Managed => "managed",
        }
    }

    /// Whether writes are refused (an import asked for read-only, or the
    /// exporter exported it read-only).
    #[getter]
    fn read_only(&self) -> bool {
        hal::Memory::is_read_only(&*self.inner)
    }

    /// Whether the memory is this process's (allocated by hal, or another
    /// library's adopted by `hal.share`), False when it was imported.
    #[getter]
    fn allocated(&self) -> bool {
        self.inner.own_allocation().is_some()
    }

    /// The registry name of the memory's backend.
    #[getter]
    fn backend(&self) -> String {
        self.inner.device.backend.name()
    }

    /// The device's address of the memory (a `CUdeviceptr` on CUDA, the
    /// host address on CPU shared memory).
    #[getter]
    fn address(&self) -> u64 {
        hal::Memory::addr(&*self.inner)
    }

    /// `n` bytes at `offset`, copied out (any memory, device memory
    /// included). Out of range is `InvalidArgumentError`.
    fn read<'py>(&self, py: Python<'py>, offset: u64, n: usize) -> PyResult<Bound<'py, PyBytes>> {
        check_bounds(offset, n as u64, self.inner.size()).or_raise()?;
        let mut out = vec![0u8; n];
        py.allow_threads(|| hal::Memory::read(&*self.inner, offset, &mut out))
            .or_raise()?;
        Ok(PyBytes::new(py, &out))
    }

    /// Copy `data` (bytes or any buffer) to `offset`. Memory imported or
    /// exported read-only refuses (`PermissionDeniedError`).
    fn write(&self, py: Python<'_>, offset: u64, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = bytes_of(data)?;
        if !hal::Memory::is_read_only(&*self.inner) {
            // Within `len(m)`, as the read (read-only memory refuses
            // first, with its reason).
            check_bounds(offset, data.len() as u64, self.inner.size()).or_raise()?;
        }
        py.allow_threads(|| hal::Memory::write(&*self.inner, offset, &data))
            .or_raise()
    }

    /// Export memory this process allocated to other processes: the handle
    /// text (`hal1.` ...) is all another process needs to
    /// `hal.import_handle` it while this memory lives. The export ends
    /// with the memory: keep this object alive while others import (a
    /// `ResourceWarning` says when it is collected while the text is still
    /// held). `importers`: None (the default) or `"anyone"`, `"same-user"`,
    /// `"default"` (the backend's default: nobody until pids are added on
    /// Ascend) or a list of process ids (their `Device.process_id()`).
    /// `read_only`: importers map it read-only.
    #[pyo3(signature = (importers=None, read_only=false))]
    fn export<'py>(
        &self,
        py: Python<'py>,
        importers: Option<&Bound<'py, PyAny>>,
        read_only: bool,
    ) -> PyResult<Bound<'py, PyString>> {
        let opts = export_options(importers, read_only)?;
        let handle = self.inner.export(&opts).or_raise()?;
        let text = PyString::new(py, &handle.to_text());
        self.inner.gave_out(&text);
        Ok(text)
    }

    /// How many other processes hold an import of this allocation now.
    fn importers(&self) -> PyResult<usize> {
        match self.inner.own_allocation() {
            Some(a) => a.importers().or_raise(),
            None => Err(invalid("importers(): this memory was imported")),
        }
    }

    /// Wait (the GIL released) until no importer holds the allocation;
    /// `timeout` in seconds (None: forever). False when it timed out.
    #[pyo3(signature = (timeout=None))]
    fn wait_unleased(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let Some(a) = self.inner.own_allocation() else {
            return Err(invalid("wait_unleased(): this memory was imported"));
        };
        let timeout = duration(timeout)?;
        match py.allow_threads(|| a.wait_unleased(timeout)) {
            Ok(()) => Ok(true),
            Err(Error::Timeout { .. }) => Ok(false),
            Err(e) => Err(to_py(e)),
        }
    }

    /// A DLPack capsule of the memory as a 1-D `uint8` tensor, per the
    /// Python array API standard: a versioned capsule (`dltensor_versioned`)
    /// when `max_version >= (1, 0)`, else a legacy one (`dltensor`).
    /// hal's memory has no pending stream work, so `stream` needs no wait.
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
        let spec = self.bytes_spec()?;
        capsule::lend(
            py,
            Arc::clone(&self.inner),
            &spec,
            max_version,
            dl_device,
            copy,
        )
    }

    /// `(device_type, device_id)` of DLPack: `(1, 0)` for host memory
    /// (`kDLCPU`), `(2, n)` for CUDA device memory, ...
    fn __dlpack_device__(&self) -> PyResult<(i32, i32)> {
        capsule::device_of(&self.inner, &TensorSpec::new(DLDataType::U8, &[0]))
    }

    /// Buffer protocol: host-visible memory as a 1-D buffer of bytes,
    /// zero-copy (`memoryview(m)`, `numpy.frombuffer(m, ...)`).
    ///
    /// # Safety
    ///
    /// Called by Python with a valid `view` to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let inner = &slf.get().inner;
        let Some(ptr) = hal::Memory::host_ptr(&**inner) else {
            return Err(PyBufferError::new_err(
                "the memory is not host-visible (device memory): use read()/write() or \
                 __dlpack__ (torch.from_dlpack, cupy.from_dlpack)",
            ));
        };
        let read_only = hal::Memory::is_read_only(&**inner);
        let len = inner.size();
        let owner = slf.clone().into_any();
        // SAFETY: Python passes a valid `view`; host memory of `len` bytes
        // at `ptr` stays mapped while this object (the view's owner) lives,
        // writable unless it is read-only.
        unsafe { crate::buffer::fill_bytes(view, flags, owner, ptr, len, read_only) }
    }

    /// Buffer protocol: nothing to release (the view's object reference
    /// kept the memory alive).
    ///
    /// # Safety
    ///
    /// Called by Python with the view `__getbuffer__` filled.
    unsafe fn __releasebuffer__(&self, view: *mut pyo3::ffi::Py_buffer) {
        let _ = view;
    }

    fn __repr__(&self) -> String {
        format!(
            "<hal.Memory {} bytes, {} on {}{}>",
            self.__len__(),
            self.location(),
            self.backend(),
            if self.allocated() { "" } else { ", imported" }
        )
    }
}
