//! The memory object behind a Python `Memory`: an allocation of this
//! process or a mapping of another's, with its exports and its device.

use std::sync::Arc;

use pyo3::prelude::*;

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
}

impl MemoryObj {
    pub(crate) fn allocation(device: Arc<DeviceObj>, alloc: Box<dyn DynAllocation>) -> Self {
        MemoryObj {
            exports: KeptExports::default(),
            held: Backing::Allocation(alloc),
            device,
            read_only: false,
        }
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
            held: Backing::Adopted(Adopted::new(alloc, owner)),
            device,
            read_only: false,
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
                self.device.backend.name(),
                "export",
                "this memory was imported; only memory this process allocated is exported \
                 (share the handle text it was imported from instead)",
            ));
        };
        let exported = self.device.device.export_memory(alloc, opts)?;
        Ok(self.exports.keep(exported))
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
            held: Backing::Mapping(mapping),
            device,
            read_only,
        }
    }
}
