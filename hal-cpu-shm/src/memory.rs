//! Allocations and mappings of host memory: anonymous regions (sealed
//! memfds), named regions (`shm_open`) and file-backed regions, their export
//! and import, and the per-process import cache.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hal_core::kit::export::{self, HandleSpec};
use hal_core::kit::os::{self, Prot};
use hal_core::lease::{LeaseTable, DEFAULT_SLOTS};
use hal_core::{
    AllocDesc, Allocation, BackendId, ByteRange, Error, ExportOptions, Exported, Handle,
    HandleFlags, HandleKind, HugePages, Importers, Location, Memory, Result,
};

use crate::id::BACKEND;
use crate::info::host_info;
use crate::named::region::NamedRegion;
use crate::view::View;
use crate::{io, placement};

/// What kind of region an allocation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionKind {
    /// An anonymous region: a memfd, shared by passing its descriptor.
    Anonymous,
    /// A named region: the POSIX shared memory object `/NAME`.
    Named,
    /// A region mapped from a regular file.
    FileBacked,
}

#[derive(Debug, Default)]
struct ExportState {
    sealed: bool,
    leases: Option<Arc<LeaseTable>>,
}

#[derive(Debug)]
enum Backing {
    Memfd {
        fd: OwnedFd,
        export: Mutex<ExportState>,
    },
    Named(NamedRegion),
    File {
        fd: OwnedFd,
        path: PathBuf,
    },
}

pub(crate) use hal_core::kit::os::lock::lock;

/// Host memory this process allocated, created or opened: an anonymous
/// region ([`Device::allocate`](hal_core::Device::allocate)), a named region
/// ([`crate::named`]) or a file-backed region ([`crate::file`]).
///
/// Dropping it unmaps it. An anonymous region's memory lives on while an
/// importer maps it; a named region created here is unlinked on drop unless it
/// was created with [`NamedOptions::keep`](crate::named::NamedOptions::keep).
#[derive(Debug)]
#[must_use = "the memory is freed when this value drops"]
pub struct CpuAllocation {
    view: View,
    len: u64,
    read_only: bool,
    backing: Backing,
}

impl CpuAllocation {
    /// Allocate an anonymous region.
    pub(crate) fn anonymous(desc: &AllocDesc) -> Result<CpuAllocation> {
        match desc.location {
            Location::Host => {}
            other => {
                return Err(Error::unsupported(
                    BACKEND,
                    "allocate",
                    format!("CPU shared memory has only {}, not {other}", Location::Host),
                ))
            }
        }
        if desc.size == 0 {
            return Err(Error::invalid("cannot allocate zero bytes"));
        }
        let (huge, unit) = match desc.placement.huge_pages {
            HugePages::Explicit(sz) => (Some(sz), sz),
            _ => (None, View::page()),
        };
        let len = View::round_up(desc.size, unit)?;
        let fd = os::memfd("hal-cpu-shm", len, huge)?;
        let view = View::map(fd.as_fd(), len, 0, Prot::ReadWrite, desc.align, unit, None).map_err(
            |e| match (huge, e) {
                (Some(sz), Error::OutOfMemory { requested, detail }) => Error::OutOfMemory {
                    requested,
                    detail: format!(
                        "{detail}: not enough free explicit huge pages of {sz} bytes; reserve \
                         some in /sys/kernel/mm/hugepages/hugepages-{}kB/nr_hugepages (or \
                         /proc/sys/vm/nr_hugepages), or use HugePages::Transparent",
                        sz / 1024
                    ),
                },
                (_, e) => e,
            },
        )?;
        placement::apply(&view, &desc.placement)?;
        Ok(CpuAllocation {
            view,
            len,
            read_only: false,
            backing: Backing::Memfd {
                fd,
                export: Mutex::new(ExportState::default()),
            },
        })
    }

    pub(crate) fn from_named(view: View, len: u64, read_only: bool, region: NamedRegion) -> Self {
        CpuAllocation {
            view,
            len,
            read_only,
            backing: Backing::Named(region),
        }
    }

    pub(crate) fn from_file(
        view: View,
        len: u64,
        read_only: bool,
        fd: OwnedFd,
        path: PathBuf,
    ) -> Self {
        CpuAllocation {
            view,
            len,
            read_only,
            backing: Backing::File { fd, path },
        }
    }

    /// What kind of region this is.
    pub fn kind(&self) -> RegionKind {
        match self.backing {
            Backing::Memfd { .. } => RegionKind::Anonymous,
            Backing::Named(_) => RegionKind::Named,
            Backing::File { .. } => RegionKind::FileBacked,
        }
    }

    /// The name of a named region.
    pub fn name(&self) -> Option<&str> {
        match &self.backing {
            Backing::Named(r) => Some(r.name()),
            _ => None,
        }
    }

    /// The path of a file-backed region.
    pub fn path(&self) -> Option<&Path> {
        match &self.backing {
            Backing::File { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The descriptor of the region (the memfd, the shared memory object or
    /// the file). Resizing it is refused once an anonymous region has been
    /// exported (its seals); resizing a named or file-backed region under its
    /// mappings makes direct accesses through [`Memory::host_ptr`] fault.
    pub fn fd(&self) -> BorrowedFd<'_> {
        match &self.backing {
            Backing::Memfd { fd, .. } | Backing::File { fd, .. } => fd.as_fd(),
            Backing::Named(r) => r.fd(),
        }
    }

    /// True once an anonymous region has been sealed by its first export.
    pub fn is_sealed(&self) -> bool {
        match &self.backing {
            Backing::Memfd { export, .. } => lock(export).sealed,
            _ => false,
        }
    }

    /// Flush a file-backed region's changes to its file (`fsync`); a no-op
    /// for the other kinds, which live in memory only.
    pub fn sync(&self) -> Result<()> {
        match &self.backing {
            Backing::File { fd, path } => nix::unistd::fsync(fd.as_raw_fd())
                .map_err(|e| Error::errno(format!("fsync of {}", path.display()), e)),
            _ => Ok(()),
        }
    }

    fn describe(&self) -> String {
        match &self.backing {
            Backing::Memfd { .. } => "anonymous region".into(),
            Backing::Named(r) => format!("named region {:?}", r.name()),
            Backing::File { path, .. } => format!("file-backed region {}", path.display()),
        }
    }

    fn leases(&self) -> Result<Option<Arc<LeaseTable>>> {
        match &self.backing {
            Backing::Memfd { export, .. } => Ok(lock(export).leases.clone()),
            _ => Err(Error::unsupported(
                BACKEND,
                "importers",
                format!(
                    "the {} is opened by name or path, so its importers are not counted; \
                     use an anonymous region for leases",
                    self.describe()
                ),
            )),
        }
    }

    /// Export a range of this allocation.
    ///
    /// An anonymous region is sealed by its first export, which also decides
    /// whether it is sealed against writes ([`os::seal_for_export`]):
    ///
    /// * a first export with [`ExportOptions::read_only`] adds
    ///   `F_SEAL_FUTURE_WRITE`. This allocation's own mapping keeps writing
    ///   (and [`Memory::write`] with it); nothing else can write the memory
    ///   ever again, in any process: a writable `mmap` of any descriptor of
    ///   it (the importer's, one reopened read-write through `/proc`, or
    ///   [`CpuAllocation::fd`] here) fails, `write(2)` fails, `mprotect`
    ///   cannot make a read-only mapping writable. Importers get an
    ///   `O_RDONLY` descriptor and check the seal before mapping. A later
    ///   writable export of this allocation is refused with
    ///   [`Error::PermissionDenied`].
    /// * a first writable export seals without it; a later read-only export
    ///   is refused with [`Error::PermissionDenied`] (its importers could
    ///   not be kept from writing: earlier ones hold a writable descriptor).
    ///
    /// A named region's read-only export binds only the library (any process
    /// of the owning user can open the name read-write); a file-backed
    /// region is not exported.
    pub(crate) fn export(&self, opts: &ExportOptions) -> Result<Exported> {
        let range = opts.range.unwrap_or(ByteRange::new(0, self.len));
        range.check(self.len, View::page())?;
        if self.read_only && !opts.read_only {
            return Err(Error::PermissionDenied {
                pid: None,
                reason: format!(
                    "the {} was opened read-only here; export it with read_only = true",
                    self.describe()
                ),
            });
        }
        let mut handle = new_handle(HandleKind::Memory, opts)?;
        handle.size = range.len;
        handle.offset = range.offset;
        handle.address = self.view.addr() + range.offset;
        handle.flags.insert(HandleFlags::HAS_ADDRESS);
        match &self.backing {
            Backing::Memfd { fd, export } => {
                let mut st = lock(export);
                os::seal_for_export(fd.as_fd(), opts.read_only)?;
                st.sealed = true;
                let leases = match &st.leases {
                    Some(t) => Arc::clone(t),
                    None => {
                        let t = LeaseTable::new(DEFAULT_SLOTS)?;
                        st.leases = Some(Arc::clone(&t));
                        t
                    }
                };
                drop(st);
                let data_fd = if opts.read_only {
                    reopen_read_only(fd.as_fd())?
                } else {
                    os::dup(fd.as_fd())?
                };
                Exported::with_leases(handle, vec![data_fd], leases)
            }
            Backing::Named(r) => {
                opts.importers.refuse_same_user(
                    BACKEND,
                    &format!(
                        "named region {:?} is opened by name, so no broker checks its importers; \
                         its 0600 mode already limits it to this user (Importers::Anyone \
                         reaches no other user)",
                        r.name()
                    ),
                )?;
                if let Importers::Pids(_) = opts.importers {
                    return Err(Error::unsupported(
                        BACKEND,
                        "export_memory with a pid allow-list",
                        format!(
                            "named region {:?} is opened by name by any process of its user; \
                             a pid allow-list cannot be enforced: export an anonymous region \
                             instead",
                            r.name()
                        ),
                    ));
                }
                handle.flags.insert(HandleFlags::NAMED);
                handle.payload = r.name().as_bytes().to_vec();
                Exported::new(handle, Vec::new())
            }
            Backing::File { path, .. } => Err(Error::unsupported(
                BACKEND,
                "export_memory of a file-backed region",
                format!(
                    "a regular file cannot be sealed against truncation, so its descriptor is \
                     not exported; share the path {} and open it with open_file_backed",
                    path.display()
                ),
            )),
        }
    }
}

/// A fresh handle of `kind` for this host, flags and importers from `opts`;
/// the backend's default importers are anyone.
pub(crate) fn new_handle(kind: HandleKind, opts: &ExportOptions) -> Result<Handle> {
    let spec = HandleSpec {
        kind,
        backend: BackendId::CpuShm,
        device: 0,
        device_uuid: host_info().uuid,
        location: Location::Host,
        default_allow_list: false,
    };
    export::new_handle(&spec, opts)
}

/// A new open file description of `fd`'s object, read-only: mappings of it
/// can never be made writable, not even with `mprotect`.
pub(crate) fn reopen_read_only(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    os::reopen_read_only(fd)
}

impl Memory for CpuAllocation {
    fn addr(&self) -> u64 {
        self.view.addr()
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn location(&self) -> Location {
        Location::Host
    }

    fn host_ptr(&self) -> Option<*mut u8> {
        Some(self.view.ptr())
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.view.check_origin()?;
        hal_core::device::check_bounds(offset, dst.len() as u64, self.len)?;
        match &self.backing {
            Backing::Memfd { .. } => self.view.read(offset, dst),
            Backing::Named(r) => io::read_at(r.fd(), offset, dst, &self.describe()),
            Backing::File { fd, .. } => io::read_at(fd.as_fd(), offset, dst, &self.describe()),
        }
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.view.check_origin()?;
        hal_core::device::check_bounds(offset, src.len() as u64, self.len)?;
        if self.read_only {
            return Err(read_only_error(&self.describe()));
        }
        match &self.backing {
            Backing::Memfd { .. } => self.view.write(offset, src),
            Backing::Named(r) => io::write_at(r.fd(), offset, src, &self.describe()),
            Backing::File { fd, .. } => io::write_at(fd.as_fd(), offset, src, &self.describe()),
        }
    }
}

pub(crate) fn read_only_error(what: &str) -> Error {
    Error::PermissionDenied {
        pid: None,
        reason: format!("the {what} is mapped read-only here; writes are refused"),
    }
}

impl Allocation for CpuAllocation {
    fn importers(&self) -> Result<usize> {
        Ok(self.leases()?.map_or(0, |t| t.count()))
    }

    fn wait_unleased(&self, timeout: Option<Duration>) -> Result<()> {
        match self.leases()? {
            Some(t) => t.wait_empty(timeout),
            None => Ok(()),
        }
    }
}
