//! The memory object behind a Python `Memory`: an allocation of this
//! process or a mapping of another's, with its exports and its device.

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyString;

use hal::dynamic::{DynAllocation, DynMapping};
use hal::kit::export::KeptExports;
use hal::{Error, Handle, ImportOptions, Location, SharedHandle};

use crate::registry::{device_for, DeviceObj};

/// What a memory object holds.
pub(crate) enum Backing {
    /// Memory this process allocated.
    Allocation(Box<dyn DynAllocation>),
    /// Memory of another library of this process (a PyTorch or CuPy CUDA
    /// tensor), adopted by address.
    Adopted(Adopted),
    /// Memory another process exported.
    Mapping(Box<dyn DynMapping>),
}

/// Memory another library of this process allocated, adopted by address
/// ([`hal::Device::adopt_memory`]), with the Python object that keeps it
/// allocated (the tensor). When it drops while importers still map the
/// memory, a thread of its own waits for them before the owner is let go:
/// the library would otherwise reuse or free memory another process reads.
pub(crate) struct Adopted(Arc<AdoptedInner>);

/// Declared in drop order: the adopted allocation, then its owner.
struct AdoptedInner {
    alloc: Box<dyn DynAllocation>,
    _owner: Py<PyAny>,
}

impl Adopted {
    pub(crate) fn new(alloc: Box<dyn DynAllocation>, owner: Py<PyAny>) -> Adopted {
        Adopted(Arc::new(AdoptedInner {
            alloc,
            _owner: owner,
        }))
    }
}

impl Drop for Adopted {
    fn drop(&mut self) {
        // The exports were dropped first (`MemoryObj`'s field order), so no
        // importer is added now; only those that hold it are waited for.
        if self.0.alloc.importers().unwrap_or(0) == 0 {
            return;
        }
        let inner = Arc::clone(&self.0);
        let spawned = hal::kit::os::thread::spawn("hal-py-adopted", move || {
            // No deadline: releasing the owner earlier would let the
            // library reuse memory another process maps.
            let _ = inner.alloc.wait_unleased(None);
            // Without the GIL the owner's reference is released the next
            // time a thread takes it.
            drop(inner);
        });
        if spawned.is_err() {
            // No thread to wait with: keep the owner for the process's life
            // rather than let it go under an importer.
            std::mem::forget(Arc::clone(&self.0));
        }
    }
}

/// A memory object. Its exports are declared first so that they drop (and
/// stop serving importers) before the memory does.
pub(crate) struct MemoryObj {
    exports: KeptExports,
    pub held: Backing,
    pub device: Arc<DeviceObj>,
    /// Writes through this object are refused (an import asked for it).
    read_only: bool,
    /// The bytes Python sees (`len(m)`, the buffer, `__dlpack__`): the size
    /// `Device.allocate` was asked for, though the backend may have rounded
    /// the allocation up to whole pages underneath; the whole memory
    /// otherwise.
    size: u64,
    /// The handle texts of this memory's exports given out to Python, to
    /// tell whether one is still held when the memory (and so the export)
    /// goes.
    texts: Mutex<Vec<Py<PyString>>>,
}

impl MemoryObj {
    pub(crate) fn allocation(device: Arc<DeviceObj>, alloc: Box<dyn DynAllocation>) -> Self {
        MemoryObj {
            exports: KeptExports::default(),
            size: alloc.len(),
            held: Backing::Allocation(alloc),
            device,
            read_only: false,
            texts: Mutex::default(),
        }
    }

    /// Python sees the first `size` bytes only (the size asked for, where
    /// the backend rounded the allocation up).
    pub(crate) fn with_size(mut self, size: u64) -> Self {
        self.size = size.min(self.memory().len());
        self
    }

    /// The bytes Python sees: `len(m)`, the buffer and `__dlpack__`.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Memory of another library of this process, adopted by address and
    /// kept allocated by `owner` (see [`Adopted`]).
    pub(crate) fn adopted(
        device: Arc<DeviceObj>,
        alloc: Box<dyn DynAllocation>,
        owner: Py<PyAny>,
    ) -> Self {
        MemoryObj {
            exports: KeptExports::default(),
            size: alloc.len(),
            held: Backing::Adopted(Adopted::new(alloc, owner)),
            device,
            read_only: false,
            texts: Mutex::default(),
        }
    }

    /// The allocation (this process's own or adopted), or None for an
    /// import.
    pub(crate) fn own_allocation(&self) -> Option<&dyn DynAllocation> {
        match &self.held {
            Backing::Allocation(a) => Some(&**a),
            Backing::Adopted(a) => Some(&*a.0.alloc),
            Backing::Mapping(_) => None,
        }
    }

    fn memory(&self) -> &dyn hal::Memory {
        match &self.held {
            Backing::Allocation(a) => &**a,
            Backing::Adopted(a) => &*a.0.alloc,
            Backing::Mapping(m) => &**m,
        }
    }

    /// Export the memory; the export lives as long as the object.
    pub(crate) fn export(&self, opts: &hal::ExportOptions) -> hal::Result<Handle> {
        let Some(alloc) = self.own_allocation() else {
            return Err(Error::unsupported(
                self.device.backend.id(),
                "export",
                "this memory was imported; only memory this process allocated is exported \
                 (share the handle text it was imported from instead)",
            ));
        };
        let exported = self.device.device.export_memory(alloc, opts)?;
        Ok(self.exports.keep(exported))
    }

    /// Remember `text`, the handle text of an export of this memory given
    /// out to Python (see [`MemoryObj::warn_if_texts_outlive`]).
    pub(crate) fn gave_out(&self, text: &Bound<'_, PyString>) {
        let mut texts = self.texts.lock().unwrap_or_else(|e| e.into_inner());
        texts.push(text.clone().unbind());
    }

    /// Called as the last Python object over this memory (`holder`: a
    /// `Memory`, `Shared` or `Tensor`) goes: a `ResourceWarning`, as an
    /// unclosed file gives, when a handle text given out is still held
    /// elsewhere, since the exports end with the memory and the text then
    /// names nothing another process can import (`text =
    /// d.allocate(n).export()`, `str(hal.share(a))`). `own`: the text the
    /// holder itself keeps (a `Shared`'s), whose reference is not someone
    /// else's.
    pub(crate) fn warn_if_texts_outlive(
        self: &Arc<Self>,
        py: Python<'_>,
        holder: &str,
        own: Option<&Py<PyString>>,
    ) {
        // Other holders (another Python object, a DLPack capsule a consumer
        // took) keep the memory and its exports alive.
        if Arc::strong_count(self) > 1 {
            return;
        }
        let texts = std::mem::take(&mut *self.texts.lock().unwrap_or_else(|e| e.into_inner()));
        // The list holds one reference (and the holder one of its own);
        // anything more is someone's.
        let kept = |t: &Py<PyString>| 1 + isize::from(own.is_some_and(|o| o.is(t)));
        let Some(held) = texts.iter().find(|t| t.get_refcnt(py) > kept(t)) else {
            return;
        };
        let text = held.bind(py).to_string();
        drop(texts);
        // Collection can happen with an exception pending: keep it.
        let pending = PyErr::take(py);
        warn_resource(py, holder, &text);
        if let Some(p) = pending {
            p.restore(py);
        }
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
            exports: KeptExports::default(),
            size: mapping.len(),
            held: Backing::Mapping(mapping),
            device,
            read_only,
            texts: Mutex::default(),
        }
    }
}

/// The `ResourceWarning` of [`MemoryObj::warn_if_texts_outlive`], unless the
/// interpreter is exiting (the objects then go in no useful order).
fn warn_resource(py: Python<'_>, holder: &str, text: &str) {
    let finalizing = py
        .import("sys")
        .and_then(|sys| sys.call_method0("is_finalizing"))
        .and_then(|f| f.is_truthy())
        .unwrap_or(true);
    if finalizing {
        return;
    }
    let shown = match text.char_indices().nth(24) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    };
    let message = format!(
        "a hal.{holder} was collected while its handle text {shown} is still held: the export \
         ended with the memory, so that text no longer imports; keep the {holder} alive while \
         other processes import it"
    );
    let message = std::ffi::CString::new(message).unwrap_or_default();
    let category = py.get_type::<pyo3::exceptions::PyResourceWarning>();
    if let Err(e) = PyErr::warn(py, category.as_any(), &message, 1) {
        // An error filter turned the warning into an exception; a finalizer
        // cannot raise, so it is reported as unraisable.
        e.write_unraisable(py, None);
    }
}
