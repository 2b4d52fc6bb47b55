//! VMM on the host: physical allocations are sealed memfd chunks, a
//! reservation is a no-access range of address space (`PROT_NONE`,
//! `MAP_NORESERVE`), and mapping places a chunk over part of it
//! (`MAP_FIXED`). Chunks export with their descriptor, so an importer can map
//! the same memory into its own reservation, which is how a buffer grows
//! after it was shared: the exporter maps a new chunk at the end and exports
//! it; importers import it and map it at the same offset.
//!
//! A chunk is mapped with no access, as on every backend (`PROT_NONE`);
//! [`VmmExt::set_access`](hal_core::VmmExt::set_access) gives it with
//! `mprotect` (`Read` only, for a chunk imported read-only). The one device of this backend is the host,
//! so [`AccessTarget::Device`]`(0)` and [`AccessTarget::Host`] name the same
//! processors and share one access right. A chunk placed on a host NUMA
//! node ([`PhysicalLocation::HostNuma`]) carries a bind policy on its memfd
//! (`mbind` on a shared mapping sets the file's policy), so its pages come
//! from that node in every process that maps it.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

use hal_core::device::check_bounds;
use hal_core::exchange::sealed::take_sealed;
use hal_core::kit::export::Expect;
use hal_core::kit::os::lock::lock;
use hal_core::kit::os::{self, Prot, SharedMap};
use hal_core::vmm::check_grants;
use hal_core::{
    Access, AccessGrant, AccessTarget, BackendId, Error, ExportOptions, Exported, HandleError,
    HandleFlags, HandleKind, ImportOptions, NumaPolicy, Physical, PhysicalDesc, PhysicalLocation,
    Placement, Reservation, Result, ShareableHandle, SharedHandle,
};

use crate::memory::{new_handle, reopen_read_only};
use crate::view::{access_error, View};

/// A physical allocation: a sealed memfd chunk with no address until mapped.
#[derive(Debug, Clone)]
#[must_use = "the physical memory is released when this value drops"]
pub struct CpuPhysical {
    inner: Arc<PhysInner>,
}

#[derive(Debug)]
struct PhysInner {
    fd: OwnedFd,
    size: u64,
    read_only: bool,
    location: PhysicalLocation,
    handle: ShareableHandle,
}

fn check_pages(what: &str, v: u64) -> Result<()> {
    let page = View::page();
    if v % page != 0 {
        return Err(Error::invalid(format!(
            "{what} {v:#x} is not a multiple of the {page}-byte granularity"
        )));
    }
    Ok(())
}

impl CpuPhysical {
    pub(crate) fn allocate(desc: &PhysicalDesc) -> Result<CpuPhysical> {
        let size = desc.size;
        if size == 0 {
            return Err(Error::invalid("cannot allocate zero bytes"));
        }
        check_pages("physical size", size)?;
        let location = desc.location.unwrap_or(PhysicalLocation::Device(0));
        if let PhysicalLocation::Device(d @ 1..) = location {
            return Err(Error::invalid(format!(
                "device {d} does not exist: the CPU backend has device 0 only"
            )));
        }
        if desc.handle == ShareableHandle::Fabric {
            return Err(Error::unsupported(
                crate::id::BACKEND,
                "a fabric handle",
                "host memory is shared by POSIX descriptor only",
            ));
        }
        let fd = os::memfd("hal-cpu-shm-physical", size, None)?;
        if let PhysicalLocation::HostNuma(node) = location {
            // A bind policy set through a shared mapping is the file's own:
            // every later page of the memfd comes from `node`.
            let view = View::map(fd.as_fd(), size, 0, Prot::ReadWrite, 0, View::page(), None)?;
            let placement = Placement {
                numa: NumaPolicy::Bind(vec![node]),
                ..Placement::default()
            };
            crate::placement::apply(&view, &placement)?;
        }
        os::add_seals(fd.as_fd(), os::EXPORT_SEALS)?;
        Ok(CpuPhysical {
            inner: Arc::new(PhysInner {
                fd,
                size,
                read_only: false,
                location,
                handle: desc.handle,
            }),
        })
    }

    /// True when the chunk was imported read-only (it maps read-only).
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    pub(crate) fn export(&self, opts: &ExportOptions) -> Result<Exported> {
        if opts.range.is_some() {
            return Err(Error::invalid(
                "a physical allocation is exported whole; a range is not allowed",
            ));
        }
        if self.inner.read_only && !opts.read_only {
            return Err(Error::PermissionDenied {
                pid: None,
                reason: "the physical allocation was imported read-only; re-export it read-only"
                    .into(),
            });
        }
        if self.inner.handle == ShareableHandle::None {
            return Err(Error::invalid(
                "the physical allocation was made without a shareable handle type; allocate it \
                 with PhysicalDesc::handle(ShareableHandle::PosixFd) to export it",
            ));
        }
        let mut handle = new_handle(HandleKind::Physical, opts)?;
        handle.size = self.inner.size;
        // The NUMA node travels in the handle's address field, which a
        // physical handle does not otherwise use (0: the device itself).
        if let PhysicalLocation::HostNuma(node) = self.inner.location {
            handle.address = u64::from(node) + 1;
        }
        let fd = if opts.read_only {
            reopen_read_only(self.inner.fd.as_fd())?
        } else {
            os::dup(self.inner.fd.as_fd())?
        };
        Exported::new(handle, vec![fd])
    }

    pub(crate) fn import(mut shared: SharedHandle, _opts: &ImportOptions) -> Result<CpuPhysical> {
        shared
            .handle
            .expect(HandleKind::Physical, BackendId::CpuShm)?;
        let size = shared.handle.size;
        if size == 0 || size % View::page() != 0 {
            return Err(HandleError::Malformed {
                field: "size",
                detail: format!("{size:#x} is not whole pages"),
            }
            .into());
        }
        let mut read_only = shared.handle.flags.contains(HandleFlags::READ_ONLY);
        let expect = Expect {
            what: "a CPU physical handle",
            min_size: size,
            read_only: false,
            leased: false,
        };
        let [fd] = take_sealed::<1>(&mut shared, &expect)?.fds;
        // A read-only export sends a read-only descriptor (no write seal:
        // the exporter keeps writing).
        if !os::access_mode(fd.as_fd())?.writable() {
            read_only = true;
        }
        let location = match shared.handle.address {
            0 => PhysicalLocation::Device(0),
            n => PhysicalLocation::HostNuma(u32::try_from(n - 1).map_err(|_| {
                HandleError::Malformed {
                    field: "address",
                    detail: "a CPU physical handle's NUMA node does not fit 32 bits".into(),
                }
            })?),
        };
        Ok(CpuPhysical {
            inner: Arc::new(PhysInner {
                fd,
                size,
                read_only,
                location,
                handle: ShareableHandle::PosixFd,
            }),
        })
    }
}

impl Physical for CpuPhysical {
    fn size(&self) -> u64 {
        self.inner.size
    }

    fn location(&self) -> PhysicalLocation {
        self.inner.location
    }

    fn handle_type(&self) -> ShareableHandle {
        self.inner.handle
    }
}

#[derive(Debug, Clone)]
struct Piece {
    offset: u64,
    len: u64,
    access: Access,
    read_only: bool,
    // Keeps the chunk's descriptor (not needed by the mapping, but it names
    // the memory while mapped).
    _phys: Arc<PhysInner>,
}

/// An address range reservation: no memory until chunks are mapped into it.
///
/// # VMM
///
/// Granularity is the page (minimum) and 2 MiB (recommended). A physical
/// allocation is a sealed memfd chunk; a reservation is `PROT_NONE` address
/// space; map places a chunk over part of it (`MAP_FIXED`), set_access is
/// `mprotect`. Chunks export with their descriptor (verified on import like
/// memory), which is how a buffer grows after it was shared
/// (`hal_core::growable`).
#[derive(Debug)]
#[must_use = "the address range is unmapped and released when this value drops"]
pub struct CpuReservation {
    map: SharedMap,
    len: u64,
    pieces: Mutex<Vec<Piece>>,
}

fn prot_of(a: Access) -> Prot {
    match a {
        Access::None => Prot::None,
        Access::Read => Prot::Read,
        Access::ReadWrite => Prot::ReadWrite,
    }
}

impl CpuReservation {
    pub(crate) fn reserve(size: u64, align: u64) -> Result<CpuReservation> {
        if size == 0 {
            return Err(Error::invalid("cannot reserve zero bytes"));
        }
        check_pages("reservation size", size)?;
        let page = View::page();
        if align != 0 && (!align.is_power_of_two() || align % page != 0) {
            return Err(Error::invalid(format!(
                "alignment {align:#x} is not a power-of-two multiple of {page}"
            )));
        }
        Ok(CpuReservation {
            map: SharedMap::reserve_aligned(size, align)?,
            len: size,
            pieces: Mutex::new(Vec::new()),
        })
    }

    fn pieces(&self) -> MutexGuard<'_, Vec<Piece>> {
        lock(&self.pieces)
    }

    pub(crate) fn map_physical(
        &self,
        offset: u64,
        phys: &CpuPhysical,
        phys_offset: u64,
        len: u64,
    ) -> Result<()> {
        check_pages("offset", offset)?;
        check_pages("offset in the physical allocation", phys_offset)?;
        check_pages("length", len)?;
        if len == 0 {
            return Err(Error::invalid("cannot map zero bytes"));
        }
        check_bounds(phys_offset, len, phys.inner.size)?;
        check_bounds(offset, len, self.len)?;
        let mut pieces = self.pieces();
        if let Some(p) = pieces
            .iter()
            .find(|p| p.offset < offset + len && offset < p.offset + p.len)
        {
            return Err(Error::AlreadyExists {
                what: format!(
                    "a mapping at {:#x}+{:#x} of the reservation overlaps {offset:#x}+{len:#x}; \
                     unmap it first",
                    p.offset, p.len
                ),
            });
        }
        let read_only = phys.inner.read_only;
        // As on every backend, a new mapping gives no access until
        // `set_access` grants it (a read-only chunk can be given `Read` only).
        let access = Access::None;
        self.map
            .map_over(
                offset,
                phys.inner.fd.as_fd(),
                phys_offset,
                len,
                prot_of(access),
            )
            .map_err(access_error)?;
        pieces.push(Piece {
            offset,
            len,
            access,
            read_only,
            _phys: phys.inner.clone(),
        });
        pieces.sort_by_key(|p| p.offset);
        Ok(())
    }

    /// Split the pieces at `at` so that no piece straddles it.
    fn split_at(pieces: &mut Vec<Piece>, at: u64) {
        if let Some(i) = pieces
            .iter()
            .position(|p| p.offset < at && at < p.offset + p.len)
        {
            let mut tail = pieces[i].clone();
            tail.len = pieces[i].offset + pieces[i].len - at;
            tail.offset = at;
            pieces[i].len = at - pieces[i].offset;
            pieces.insert(i + 1, tail);
        }
    }

    /// Indices of the pieces covering `offset..offset+len` exactly, or an
    /// error naming the first unmapped byte.
    fn covering(pieces: &[Piece], offset: u64, len: u64) -> Result<std::ops::Range<usize>> {
        let end = offset + len;
        let first = pieces.iter().position(|p| p.offset + p.len > offset);
        let mut at = offset;
        let mut i = first.unwrap_or(pieces.len());
        let begin = i;
        while at < end {
            match pieces.get(i) {
                Some(p) if p.offset <= at => {
                    at = p.offset + p.len;
                    i += 1;
                }
                _ => {
                    return Err(Error::invalid(format!(
                        "nothing is mapped at offset {at:#x} of the reservation"
                    )))
                }
            }
        }
        Ok(begin..i)
    }

    pub(crate) fn unmap(&self, offset: u64, len: u64) -> Result<()> {
        check_pages("offset", offset)?;
        check_pages("length", len)?;
        check_bounds(offset, len, self.len)?;
        if len == 0 {
            return Ok(());
        }
        let mut pieces = self.pieces();
        Self::covering(&pieces, offset, len)?;
        Self::split_at(&mut pieces, offset);
        Self::split_at(&mut pieces, offset + len);
        self.map.unmap_part(offset, len)?;
        pieces.retain(|p| p.offset + p.len <= offset || p.offset >= offset + len);
        Ok(())
    }

    pub(crate) fn set_access(&self, offset: u64, len: u64, access: Access) -> Result<()> {
        check_pages("offset", offset)?;
        check_pages("length", len)?;
        check_bounds(offset, len, self.len)?;
        if len == 0 {
            return Ok(());
        }
        let mut pieces = self.pieces();
        let range = Self::covering(&pieces, offset, len)?;
        if access == Access::ReadWrite && pieces[range].iter().any(|p| p.read_only) {
            return Err(Error::PermissionDenied {
                pid: None,
                reason: "part of the range maps a chunk imported read-only; it cannot be made \
                         writable"
                    .into(),
            });
        }
        Self::split_at(&mut pieces, offset);
        Self::split_at(&mut pieces, offset + len);
        self.map
            .protect(offset, len, prot_of(access))
            .map_err(access_error)?;
        for p in pieces
            .iter_mut()
            .filter(|p| p.offset >= offset && p.offset + p.len <= offset + len)
        {
            p.access = access;
        }
        Ok(())
    }

    /// The one access right a grant list gives: device 0 and the host are
    /// the same processors here, so both may be named only with one right.
    pub(crate) fn granted(grants: &[AccessGrant]) -> Result<Access> {
        check_grants(grants, 1)?;
        let first = grants[0].access;
        if grants.iter().any(|g| g.access != first) {
            return Err(Error::invalid(
                "device 0 of the CPU backend is the host: give AccessTarget::Device(0) and \
                 AccessTarget::Host the same access, or name one of them",
            ));
        }
        Ok(first)
    }

    /// The access of the mapped byte at `offset` (any target: see
    /// [`CpuReservation::granted`]).
    pub(crate) fn access_at(&self, offset: u64, target: AccessTarget) -> Result<Access> {
        if let AccessTarget::Device(d @ 1..) = target {
            return Err(Error::invalid(format!(
                "device {d} does not exist: the CPU backend has device 0 only"
            )));
        }
        check_bounds(offset, 1, self.len)?;
        let pieces = self.pieces();
        let range = Self::covering(&pieces, offset, 1)?;
        Ok(pieces[range.start].access)
    }

    fn check_access(&self, pieces: &[Piece], offset: u64, len: u64, write: bool) -> Result<()> {
        check_bounds(offset, len, self.len)?;
        if len == 0 {
            return Ok(());
        }
        let range = Self::covering(pieces, offset, len)?;
        for p in &pieces[range] {
            let ok = match p.access {
                Access::None => false,
                Access::Read => !write,
                Access::ReadWrite => true,
            };
            if !ok {
                return Err(Error::PermissionDenied {
                    pid: None,
                    reason: format!(
                        "the mapping at offset {:#x} of the reservation allows {:?}",
                        p.offset, p.access
                    ),
                });
            }
        }
        Ok(())
    }
}

impl Reservation for CpuReservation {
    fn base(&self) -> u64 {
        self.map.as_ptr() as u64
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        let pieces = self.pieces();
        self.check_access(&pieces, offset, dst.len() as u64, false)?;
        self.map.read(offset, dst)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        let pieces = self.pieces();
        self.check_access(&pieces, offset, src.len() as u64, true)?;
        self.map.write(offset, src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(offset: u64, len: u64) -> Piece {
        Piece {
            offset,
            len,
            access: Access::ReadWrite,
            read_only: false,
            _phys: Arc::new(PhysInner {
                fd: os::memfd("piece", 4096, None).unwrap(),
                size: 4096,
                read_only: false,
                location: PhysicalLocation::Device(0),
                handle: ShareableHandle::PosixFd,
            }),
        }
    }

    #[test]
    fn covering_and_splitting() {
        let mut v = vec![piece(0, 100), piece(100, 50), piece(200, 100)];
        assert_eq!(CpuReservation::covering(&v, 0, 150).unwrap(), 0..2);
        assert_eq!(CpuReservation::covering(&v, 120, 10).unwrap(), 1..2);
        assert!(
            CpuReservation::covering(&v, 100, 101).is_err(),
            "gap at 150"
        );
        assert!(
            CpuReservation::covering(&v, 300, 1).is_err(),
            "past the last"
        );
        CpuReservation::split_at(&mut v, 250);
        assert_eq!(
            v.iter().map(|p| (p.offset, p.len)).collect::<Vec<_>>(),
            [(0, 100), (100, 50), (200, 50), (250, 50)]
        );
        CpuReservation::split_at(&mut v, 100);
        assert_eq!(v.len(), 4, "a boundary already");
    }
}
