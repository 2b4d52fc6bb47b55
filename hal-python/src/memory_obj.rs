//! The memory object behind a Python `Memory`: an allocation of this
//! process or a mapping of another's, with its exports and its device.

use std::sync::{Arc, Mutex};

use hal::dynamic::{DynAllocation, DynMapping};
use hal::{Error, Exported, Handle, ImportOptions, Location, SharedHandle};

use crate::registry::{device_for, DeviceObj};

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
