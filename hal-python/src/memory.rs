//! Memory: `Device.allocate`, imports, and the `Memory` class with
//! `read`, `write`, `export`, the buffer protocol and DLPack.

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

use hal::dlpack::{DLDataType, TensorSpec};
use hal::dynamic::{DynAllocation, DynMapping};
use hal::{Error, Exported, Handle, ImportOptions, Location, SharedHandle};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::bytes::bytes_of;
use crate::capsule;
use crate::device::{device_for, DeviceObj};
use crate::errors::{invalid, OrRaise};
use crate::live;
use crate::options::export_options;

/// What a memory object holds.
pub(crate) enum Held {
    /// Memory this process allocated.
    Allocation(Box<dyn DynAllocation>),
    /// Memory another process exported.
    Mapping(Box<dyn DynMapping>),
}

/// A memory object. Its exports are declared first so that they drop (and
/// stop serving importers) before the memory does.
pub(crate) struct MemoryObj {
    exports: Mutex<Vec<Exported>>,
    pub held: Held,
    pub device: Arc<DeviceObj>,
    /// Writes through this object are refused (an import asked for it).
    read_only: bool,
}

impl MemoryObj {
    pub(crate) fn allocation(device: Arc<DeviceObj>, alloc: Box<dyn DynAllocation>) -> Self {
        MemoryObj {
            exports: Mutex::new(Vec::new()),
            held: Held::Allocation(alloc),
            device,
            read_only: false,
        }
    }

    fn memory(&self) -> &dyn hal::Memory {
        match &self.held {
            Held::Allocation(a) => &**a,
            Held::Mapping(m) => &**m,
        }
    }

    /// Export the memory; the export lives as long as the object.
    pub(crate) fn export(&self, opts: &hal::ExportOptions) -> hal::Result<Handle> {
        let Held::Allocation(alloc) = &self.held else {
            return Err(Error::unsupported(
                self.device.backend.name(),
                "export",
                "this memory was imported; only memory this process allocated is exported \
                 (share the handle text it was imported from instead)",
            ));
        };
        let exported = self.device.device.export_memory(&**alloc, opts)?;
        let handle = exported.handle().clone();
        self.exports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(exported);
        Ok(handle)
    }
}

impl hal::Memory for MemoryObj {
    fn addr(&self) -> u64 {
        self.memory().addr()
    }
    fn len(&self) -> u64 {
        self.memory().len()
    }
    fn location(&self) -> Location {
        self.memory().location()
    }
    fn host_ptr(&self) -> Option<*mut u8> {
        self.memory().host_ptr()
    }
    fn is_read_only(&self) -> bool {
        self.read_only || self.memory().is_read_only()
    }
    fn read(&self, offset: u64, dst: &mut [u8]) -> hal::Result<()> {
        self.memory().read(offset, dst)
    }
    fn write(&self, offset: u64, src: &[u8]) -> hal::Result<()> {
        if self.read_only {
            return Err(Error::PermissionDenied {
                pid: None,
                reason: "this memory was imported read-only (import_handle(..., read_only=True))"
                    .into(),
            });
        }
        self.memory().write(offset, src)
    }
}

/// Import the memory handle `handle` on its backend and device.
pub(crate) fn import_memory(handle: Handle, read_only: bool) -> hal::Result<MemoryObj> {
    let device = Arc::new(device_for(&handle)?);
    let mapping = device
        .device
        .import_memory(SharedHandle::from(handle), &ImportOptions::default())?;
    Ok(MemoryObj::mapping(device, mapping, read_only))
}

impl MemoryObj {
    pub(crate) fn mapping(
        device: Arc<DeviceObj>,
        mapping: Box<dyn DynMapping>,
        read_only: bool,
    ) -> Self {
        MemoryObj {
            exports: Mutex::new(Vec::new()),
            held: Held::Mapping(mapping),
            device,
            read_only,
        }
    }
}

/// Memory: allocated here (`Device.allocate`) or imported from another
/// process (`hal.import_handle`). `len(m)` is its size in bytes; host
/// memory supports the buffer protocol (`memoryview(m)`, zero-copy) and
/// every memory `__dlpack__` (a 1-D `uint8` tensor). The memory is freed
/// (or unmapped) once this object and every view and tensor made from it
/// are gone.
#[pyclass(module = "hal", frozen)]
pub struct Memory {
    pub(crate) inner: Arc<MemoryObj>,
}

impl Memory {
    pub(crate) fn new(obj: MemoryObj) -> Memory {
        let inner = Arc::new(obj);
        live::remember(&inner);
        Memory { inner }
    }

    /// The whole memory as a 1-D `uint8` tensor.
    fn bytes_spec(&self) -> PyResult<TensorSpec> {
        let len = i64::try_from(hal::Memory::len(&*self.inner))
            .map_err(|_| invalid("the memory is too large for one dimension"))?;
        Ok(TensorSpec::new(DLDataType::U8, &[len]))
    }
}

#[pymethods]
impl Memory {
    fn __len__(&self) -> usize {
        hal::Memory::len(&*self.inner) as usize
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

    /// Whether this process allocated the memory (False: imported).
    #[getter]
    fn allocated(&self) -> bool {
        matches!(self.inner.held, Held::Allocation(_))
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
        let mut out = vec![0u8; n];
        py.allow_threads(|| hal::Memory::read(&*self.inner, offset, &mut out))
            .or_raise()?;
        Ok(PyBytes::new(py, &out))
    }

    /// Copy `data` (bytes or any buffer) to `offset`. Memory imported or
    /// exported read-only refuses (`PermissionDeniedError`).
    fn write(&self, py: Python<'_>, offset: u64, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = bytes_of(data)?;
        py.allow_threads(|| hal::Memory::write(&*self.inner, offset, &data))
            .or_raise()
    }

    /// Export memory this process allocated to other processes: the handle
    /// text (`hal1.` ...) is all another process needs to
    /// `hal.import_handle` it while this memory lives. `importers`:
    /// `"anyone"` (None: the same), `"default"` (the backend's default: nobody until pids
    /// are added on Ascend) or a list of process ids (their
    /// `Device.process_id()`). `read_only`: importers map it read-only.
    #[pyo3(signature = (importers=None, read_only=false))]
    fn export(&self, importers: Option<&Bound<'_, PyAny>>, read_only: bool) -> PyResult<String> {
        let opts = export_options(importers, read_only)?;
        let handle = self.inner.export(&opts).or_raise()?;
        Ok(handle.to_text())
    }

    /// How many other processes hold an import of this allocation now.
    fn importers(&self) -> PyResult<usize> {
        match &self.inner.held {
            Held::Allocation(a) => a.importers().or_raise(),
            Held::Mapping(_) => Err(invalid("importers(): this memory was imported")),
        }
    }

    /// Wait (the GIL released) until no importer holds the allocation;
    /// `timeout` in seconds (None: forever). False when it timed out.
    #[pyo3(signature = (timeout=None))]
    fn wait_unleased(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let Held::Allocation(a) = &self.inner.held else {
            return Err(invalid("wait_unleased(): this memory was imported"));
        };
        let timeout = crate::notify::duration(timeout)?;
        match py.allow_threads(|| a.wait_unleased(timeout)) {
            Ok(()) => Ok(true),
            Err(Error::Timeout { .. }) => Ok(false),
            Err(e) => Err(crate::errors::to_py(e)),
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
        if read_only && (flags & pyo3::ffi::PyBUF_WRITABLE) != 0 {
            return Err(PyBufferError::new_err(
                "the memory is read-only: ask for a read-only buffer",
            ));
        }
        let len = isize::try_from(hal::Memory::len(&**inner))
            .map_err(|_| PyBufferError::new_err("the memory is too large for a buffer"))?;
        // SAFETY: Python passes a valid `Py_buffer` to fill; the fields
        // written are the ones a 1-D byte buffer needs. The object reference
        // stored in `obj` keeps the memory mapped until the view is released.
        unsafe {
            (*view).obj = slf.clone().into_any().into_ptr();
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
