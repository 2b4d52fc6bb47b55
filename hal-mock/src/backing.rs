//! The memory objects under every simulated resource: sealed memfds mapped
//! into the process, imported regions, and aligned mappings.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use hal_core::exchange::Lease;
use hal_core::export::sealed_memfd;
use hal_core::os::{self, Prot, SharedMap};
use hal_core::{Error, Result};

/// Map `len` bytes of `fd` (or reserve them, without `fd`) at an address
/// aligned to `align`.
pub(crate) fn map_aligned(fd: Option<BorrowedFd<'_>>, len: u64, align: u64) -> Result<SharedMap> {
    let map_at = |at: Option<u64>| match fd {
        Some(fd) => SharedMap::map(fd, len, 0, Prot::ReadWrite, at),
        None => SharedMap::reserve(len, at),
    };
    if align <= os::page_size() {
        return map_at(None);
    }
    // Reserve room for the aligned range, release it, and map there; another
    // thread may take the range in between, so try a few times.
    for _ in 0..16 {
        let probe_len = len
            .checked_add(align)
            .ok_or_else(|| Error::invalid("size plus alignment overflows"))?;
        let probe = SharedMap::reserve(probe_len, None)?;
        let at = (probe.as_ptr() as u64).next_multiple_of(align);
        drop(probe);
        match map_at(Some(at)) {
            Err(Error::AlreadyExists { .. }) => continue,
            other => return other,
        }
    }
    Err(Error::OutOfMemory {
        requested: len,
        detail: format!("no {align:#x}-aligned address range of {len:#x} bytes stayed free"),
    })
}

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
        let map = map_aligned(Some(fd.as_fd()), size, align)?;
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

/// Something that holds a mapping stream work can copy into or out of.
pub(crate) trait Holder: Send + Sync {
    fn map(&self) -> &SharedMap;
}

impl Holder for Backing {
    fn map(&self) -> &SharedMap {
        &self.map
    }
}

impl Holder for ImportRegion {
    fn map(&self) -> &SharedMap {
        self.memory()
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
