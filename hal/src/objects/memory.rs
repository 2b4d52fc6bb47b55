//! Memory as a door holds it: an allocation of this process, memory
//! adopted by address, or a mapping of another process's export, with its
//! exports kept as long as it lives.

use std::sync::Arc;

use hal_core::dynamic::{DynAllocation, DynMapping};
use hal_core::{
    Error, ExportOptions, Handle, ImportOptions, Location, Memory, Result, SharedHandle,
};

use super::adopted::{Adopted, Owner};
use super::device::{device_for, DeviceObj};
use super::kept::KeptExports;

/// What a memory object holds.
pub enum Backing {
    /// Memory this process allocated.
    Allocation(Box<dyn DynAllocation>),
    /// Memory another library of this process allocated, adopted by address.
    Adopted(Adopted),
    /// Memory another process exported.
    Mapping(Box<dyn DynMapping>),
}

/// A memory object, and `X`, what the door adds to it (the Python package:
/// the handle texts it gave out; the C library: nothing). Its exports are
/// declared first so that they drop (and stop serving importers) before the
/// memory does.
pub struct MemoryObj<X = ()> {
    exports: KeptExports,
    /// What it holds.
    pub held: Backing,
    /// Its device.
    pub device: Arc<DeviceObj>,
    /// Writes through this object are refused, for this reason (an import
    /// asked for it, in the words of the door that asked).
    refuse_writes: Option<&'static str>,
    /// The bytes the door shows: the size asked for, though the backend may
    /// have rounded the allocation up to whole pages underneath; the whole
    /// memory otherwise.
    size: u64,
    /// What the door adds.
    pub door: X,
}

impl<X: Default> MemoryObj<X> {
    fn new(device: Arc<DeviceObj>, held: Backing, size: u64) -> Self {
        MemoryObj {
            exports: KeptExports::default(),
            held,
            device,
            refuse_writes: None,
            size,
            door: X::default(),
        }
    }

    /// `alloc`, memory this process allocated on `device`.
    pub fn allocation(device: Arc<DeviceObj>, alloc: Box<dyn DynAllocation>) -> Self {
        let size = alloc.len();
        Self::new(device, Backing::Allocation(alloc), size)
    }

    /// `alloc`, memory of another library of this process adopted by
    /// address on `device`, kept allocated by `owner` (see [`Adopted`]).
    pub fn adopted(
        device: Arc<DeviceObj>,
        alloc: Box<dyn DynAllocation>,
        owner: Option<Owner>,
    ) -> Self {
        let size = alloc.len();
        Self::new(device, Backing::Adopted(Adopted::new(alloc, owner)), size)
    }

    /// `mapping`, memory another process exported, imported on `device`;
    /// `refuse_writes`: writes are refused, with that reason.
    pub fn mapping(
        device: Arc<DeviceObj>,
        mapping: Box<dyn DynMapping>,
        refuse_writes: Option<&'static str>,
    ) -> Self {
        let size = mapping.len();
        let mut obj = Self::new(device, Backing::Mapping(mapping), size);
        obj.refuse_writes = refuse_writes;
        obj
    }
}

impl<X> MemoryObj<X> {
    /// The door shows the first `size` bytes only (the size asked for, where
    /// the backend rounded the allocation up).
    pub fn with_size(mut self, size: u64) -> Self {
        self.size = size.min(self.memory().len());
        self
    }

    /// The bytes the door shows (see [`MemoryObj::with_size`]).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The allocation (this process's own or adopted), or None for an
    /// import.
    pub fn own_allocation(&self) -> Option<&dyn DynAllocation> {
        match &self.held {
            Backing::Allocation(a) => Some(&**a),
            Backing::Adopted(a) => Some(a.allocation()),
            Backing::Mapping(_) => None,
        }
    }

    fn memory(&self) -> &dyn Memory {
        match &self.held {
            Backing::Allocation(a) => &**a,
            Backing::Adopted(a) => a.allocation(),
            Backing::Mapping(m) => &**m,
        }
    }

    /// Export the memory with `opts`; the export lives as long as the
    /// object. An import is not exported again: [`Error::Unsupported`].
    pub fn export(&self, opts: &ExportOptions) -> Result<Handle> {
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
}

impl<X: Send + Sync> Memory for MemoryObj<X> {
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
        self.refuse_writes.is_some() || self.memory().is_read_only()
    }
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.memory().read(offset, dst)
    }
    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        if let Some(how) = self.refuse_writes {
            return Err(Error::PermissionDenied {
                pid: None,
                reason: format!("this memory was imported read-only ({how})"),
            });
        }
        self.memory().write(offset, src)
    }
}

/// Import the memory handle `handle` on its backend and device;
/// `refuse_writes`: writes through it are refused, with that reason (how
/// the caller asked for a read-only import, in its door's words).
pub fn import_memory<X: Default>(
    handle: Handle,
    refuse_writes: Option<&'static str>,
) -> Result<MemoryObj<X>> {
    let device = Arc::new(device_for(&handle)?);
    let mapping = device
        .device
        .import_memory(SharedHandle::from(handle), &ImportOptions::default())?;
    Ok(MemoryObj::mapping(device, mapping, refuse_writes))
}

#[cfg(all(test, feature = "cpu-shm"))]
mod tests {
    use super::*;
    use crate::objects::open_device;
    use hal_core::AllocDesc;

    fn host(size: u64) -> MemoryObj {
        let device = Arc::new(open_device(Some("cpu-shm"), 0).unwrap());
        let alloc = device.device.allocate(&AllocDesc::host(size)).unwrap();
        MemoryObj::allocation(device, alloc)
    }

    #[test]
    fn an_allocation_exports_and_its_import_reads_it() {
        let memory = host(4096).with_size(100);
        assert_eq!(memory.size(), 100);
        assert!(memory.len() >= 4096);
        memory.write(0, b"hello").unwrap();
        let handle = memory.export(&ExportOptions::default()).unwrap();
        let imported: MemoryObj = import_memory(handle, None).unwrap();
        assert!(imported.own_allocation().is_none());
        let mut bytes = [0u8; 5];
        imported.read(0, &mut bytes).unwrap();
        assert_eq!(&bytes, b"hello");
        let err = imported.export(&ExportOptions::default()).unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    }

    #[test]
    fn a_read_only_import_refuses_writes_with_the_reason_given() {
        let memory = host(4096);
        let handle = memory.export(&ExportOptions::default()).unwrap();
        let imported: MemoryObj = import_memory(handle, Some("as asked")).unwrap();
        assert!(imported.is_read_only());
        let err = imported.write(0, b"x").unwrap_err();
        assert!(err.to_string().contains("(as asked)"), "{err}");
    }
}
