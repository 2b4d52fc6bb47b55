//! The memory objects under every simulated resource: sealed memfds mapped
//! into the process, imported regions, and aligned mappings.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use hal_core::exchange::Lease;
use hal_core::kit::export::sealed_memfd;
use hal_core::kit::os::{self, Prot, SharedMap};
use hal_core::Result;

/// A sealed memfd and this process's mapping of all of it: the pages of
/// one allocation, one pool chunk, or one physical allocation.
pub(crate) struct Backing {
    fd: OwnedFd,
    map: SharedMap,
    size: u64,
}

impl Backing {
    /// A new zeroed backing of `size` bytes mapped (read-write) at an
    /// `align`-aligned address. Its size is sealed now; the first export
    /// seals the rest ([`os::seal_for_export`]), so that a read-only first
    /// export can still seal it against writes by anyone but this mapping.
    pub(crate) fn create(label: &str, size: u64, align: u64) -> Result<Arc<Backing>> {
        let fd = sealed_memfd(label, size, os::SIZE_SEALS)?;
        let map = SharedMap::map_aligned(fd.as_fd(), size, 0, align, Prot::ReadWrite)?;
        Ok(Arc::new(Backing { fd, map, size }))
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub(crate) fn map(&self) -> &SharedMap {
        &self.map
    }
}

/// Something that holds memory stream work can copy into or out of: a
/// mapping of the simulator's, or host memory registered with it.
pub(crate) trait Holder: Send + Sync {
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()>;
    fn write(&self, offset: u64, src: &[u8]) -> Result<()>;
}

impl Holder for Backing {
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.map.read(offset, dst)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.map.write(offset, src)
    }
}

/// Registered host memory: the caller's pages, reached where they are; the
/// clone a queued operation holds keeps the registration until it ran.
impl Holder for hal_core::kit::RegisteredHost {
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        hal_core::Memory::read(self, offset, dst)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        hal_core::Memory::write(self, offset, src)
    }
}

impl Holder for ImportRegion {
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.memory().read(offset, dst)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.memory().write(offset, src)
    }
}

/// What an imported region reaches.
pub(crate) enum RegionMemory {
    /// A mapping of the exporter's memory object made for this import.
    Mapped(SharedMap),
    /// The exporter's own memory: an import in the exporting process,
    /// short-circuited to the allocation it names (the vendors refuse to
    /// open a process's own handle, CUDA with `CUDA_ERROR_INVALID_CONTEXT`).
    Original(Arc<Backing>),
}

/// An imported span of another allocation, mapped in this process.
pub(crate) struct ImportRegion {
    pub(crate) memory: RegionMemory,
    /// The importer's lease; released when the last mapping of the region closes.
    pub(crate) _lease: Option<Lease>,
}

impl ImportRegion {
    /// The mapping the region's offsets count from.
    pub(crate) fn memory(&self) -> &SharedMap {
        match &self.memory {
            RegionMemory::Mapped(map) => map,
            RegionMemory::Original(backing) => backing.map(),
        }
    }
}
