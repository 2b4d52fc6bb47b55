//! The backend and its one device, the host.

use std::path::Path;
use std::time::Duration;

use hal_core::{
    Access, AllocDesc, Availability, Backend, BackendId, Device, DeviceInfo, Error, EventFlags,
    ExportOptions, Exported, Granularity, ImportOptions, MemRef, Result, SharedHandle, Vmm,
    WaitOptions,
};

use crate::file;
use crate::info::host_info;
use crate::mapping::CpuMapping;
use crate::memory::CpuAllocation;
use crate::named::{self, NamedOptions};
use crate::sync::{CpuEvent, CpuNotify, CpuStream};
use crate::vmm::{CpuPhysical, CpuReservation};

/// The CPU shared-memory backend: always available on Linux, with one device,
/// ordinal 0, the host.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuShm;

impl CpuShm {
    /// The backend.
    pub fn new() -> Self {
        CpuShm
    }

    /// Open the host device (ordinal 0).
    pub fn host(&self) -> CpuDevice {
        CpuDevice::new()
    }
}

impl Backend for CpuShm {
    type Device = CpuDevice;

    fn id(&self) -> BackendId {
        BackendId::CpuShm
    }

    fn availability(&self) -> Availability {
        if cfg!(target_os = "linux") {
            Availability::Available
        } else {
            Availability::Unavailable {
                reason: "hal-cpu-shm needs Linux (memfd seals, futexes)".into(),
                searched: Vec::new(),
            }
        }
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        Ok(vec![host_info().clone()])
    }

    fn open(&self, ordinal: u32) -> Result<CpuDevice> {
        if ordinal != 0 {
            return Err(Error::NotFound {
                what: format!(
                    "device {ordinal} of backend cpu-shm (it has one device, 0, the host)"
                ),
            });
        }
        Ok(CpuDevice::new())
    }
}

/// The host device: allocates, exports and imports host memory, events and
/// notifies, and does VMM with memfd chunks.
///
/// # Anonymous regions: memfd and seals
///
/// [`Device::allocate`](hal_core::Device::allocate) creates a memfd
/// (`MFD_CLOEXEC | MFD_ALLOW_SEALING`) of the size rounded up to whole pages
/// and maps it shared. Only [`Location::Host`](hal_core::Location::Host)
/// exists here; device and managed locations are
/// [`Error::Unsupported`](hal_core::Error::Unsupported). Nothing is allocated
/// until touched: a 64 GiB region of which 1 MiB is touched costs about 1 MiB.
///
/// The first export seals the memfd against shrinking and growing
/// (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`); from then on nobody, the
/// exporter included, can change its size. An export covers whole pages (a
/// misaligned range is [`Error::Misaligned`](hal_core::Error::Misaligned),
/// never widened) and carries one descriptor, the data memfd, which the
/// exporter's descriptor broker serves, so the handle text alone is enough
/// to import from another process (`hal_core::exchange`). The
/// handle holds the exporter's address for fixed-address imports, the
/// creator's pid and start time, and a random object id.
/// `Importers::BackendDefault` means anyone; a pid allow-list is enforced by
/// the broker (pids of the exporter's pid namespace). A read-only export
/// sends a descriptor reopened `O_RDONLY`, and its first export seals the memfd
/// against writes (`F_SEAL_FUTURE_WRITE`): the exporter's own mapping keeps
/// writing, and no other mapping or descriptor, in any process, can ever
/// write it (not one reopened read-write through `/proc/PID/fd`, not
/// `mprotect`). An allocation is therefore exported either writable or
/// read-only, as its first export decides; the other kind is refused with
/// [`Error::PermissionDenied`](hal_core::Error::PermissionDenied). An importer
/// refuses a read-only handle whose memfd lacks that seal.
///
/// An import verifies the descriptor **before** mapping it: a memfd, sealed
/// against shrinking and growing, at least as large as the handle's range. An
/// unsealed or short descriptor is refused
/// ([`HandleError::Descriptors`](hal_core::HandleError::Descriptors)), so no
/// peer can make the importer die of `SIGBUS` by truncating. With
/// [`ImportPlacement::ExporterAddress`](hal_core::ImportPlacement) the mapping
/// goes at the exporter's address (`MAP_FIXED_NOREPLACE`) so pointer-rich
/// structures work unchanged, or fails with
/// [`Error::AlreadyExists`](hal_core::Error::AlreadyExists) when that range is
/// taken. Each importing mapping holds a lease that the exporter's broker
/// registered in the allocation's [`LeaseTable`](hal_core::lease::LeaseTable)
/// (kept by the exporter, never sent):
/// [`Allocation::importers`](hal_core::Allocation::importers) counts them (dead
/// importers excluded) and
/// [`Allocation::wait_unleased`](hal_core::Allocation::wait_unleased) waits for
/// none. Importing the same handle again in one process returns the existing
/// mapping ([`CpuMapping`](crate::CpuMapping) is a cheap reference-counted
/// clone) with no system call beyond closing the descriptors that came with the
/// handle. Only imports whose descriptors came from a checked source (the
/// creator's own broker, or this process's own registration) are kept for
/// reuse, and a reuse must match the whole handle: a handle that names a
/// genuine object but carries a peer's descriptors never answers a later
/// import. Anonymous regions leave nothing behind: the memory goes with the
/// last descriptor and mapping, whatever way the processes end.
///
/// # Placement
///
/// [`Placement`](hal_core::Placement) hints are honoured: NUMA bind,
/// interleave or preferred (`mbind`; an unknown node is an
/// [`Error::InvalidArgument`](hal_core::Error::InvalidArgument) naming the
/// nodes there are), transparent huge pages (`madvise(MADV_HUGEPAGE)`, advice
/// the kernel may ignore), explicit huge pages (`MFD_HUGETLB`, with an
/// [`Error::OutOfMemory`](hal_core::Error::OutOfMemory) that says how to
/// reserve some when none are free) and prefaulting (`MADV_POPULATE_WRITE`,
/// else a touch of every page).
#[derive(Debug, Clone)]
pub struct CpuDevice {
    info: &'static DeviceInfo,
    /// The process that opened it: a child forked from it is refused (see
    /// [`Error::Forked`](hal_core::Error::Forked)).
    origin: hal_core::kit::os::Origin,
}

impl Default for CpuDevice {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuDevice {
    /// The host device.
    pub fn new() -> Self {
        CpuDevice {
            info: host_info(),
            origin: hal_core::kit::os::Origin::here(),
        }
    }

    /// The entry guard every operation of the device passes first: in a
    /// child forked after the device was opened, [`Error::Forked`]. The host
    /// has no vendor context to make current, and every operation is
    /// offered, so there is nothing else to check.
    #[inline]
    fn enter(&self) -> Result<()> {
        self.origin.check("the cpu-shm device")
    }

    /// Create a named region: see [`named::create_named`].
    pub fn create_named(
        &self,
        name: &str,
        size: u64,
        opts: &NamedOptions,
    ) -> Result<CpuAllocation> {
        named::create_named(name, size, opts)
    }

    /// Open a named region: see [`named::open_named`].
    pub fn open_named(&self, name: &str, expected_size: Option<u64>) -> Result<CpuAllocation> {
        named::open_named(name, expected_size)
    }

    /// Create a file-backed region: see [`file::create_file_backed`].
    pub fn create_file_backed(&self, path: impl AsRef<Path>, size: u64) -> Result<CpuAllocation> {
        file::create_file_backed(path, size)
    }

    /// Open a file-backed region: see [`file::open_file_backed`].
    pub fn open_file_backed(&self, path: impl AsRef<Path>) -> Result<CpuAllocation> {
        file::open_file_backed(path)
    }
}

impl Device for CpuDevice {
    type Allocation = CpuAllocation;
    type Mapping = CpuMapping;
    type Stream = CpuStream;
    type Event = CpuEvent;
    type Notify = CpuNotify;
    type HostRegistration = hal_core::kit::RegisteredHost;

    fn info(&self) -> &DeviceInfo {
        self.info
    }

    unsafe fn register_host(
        &self,
        ptr: *mut u8,
        len: u64,
    ) -> Result<hal_core::kit::RegisteredHost> {
        self.enter()?;
        // SAFETY: the caller gives `register_host`'s promise: the range
        // stays mapped, readable and writable while the registration lives.
        let range = unsafe { hal_core::kit::os::HostRange::new(ptr, len) }?;
        crate::hostreg::register(range)
    }

    fn allocate(&self, desc: &AllocDesc) -> Result<CpuAllocation> {
        self.enter()?;
        CpuAllocation::anonymous(desc)
    }

    fn export_memory(&self, alloc: &CpuAllocation, opts: &ExportOptions) -> Result<Exported> {
        self.enter()?;
        alloc.export(opts)
    }

    fn allow_importers(&self, exported: &mut Exported, pids: &[u32]) -> Result<()> {
        self.enter()?;
        exported.add_importers(pids)
    }

    fn import_memory(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<CpuMapping> {
        self.enter()?;
        CpuMapping::import(shared, opts)
    }

    fn import_memory_batch(
        &self,
        shared: Vec<SharedHandle>,
        opts: &ImportOptions,
    ) -> Vec<Result<CpuMapping>> {
        CpuMapping::import_batch(shared, opts)
    }

    fn create_stream(&self) -> Result<CpuStream> {
        self.enter()?;
        Ok(CpuStream::new())
    }

    fn synchronize(&self, _stream: &CpuStream, _timeout: Option<Duration>) -> Result<()> {
        self.enter()?;
        // Host-synchronous: everything queued has already run.
        Ok(())
    }

    /// Host-synchronous: the copy runs before the call returns, through the
    /// bounds- and protection-checked `read` and `write` of both sides.
    fn copy_async(
        &self,
        _stream: &CpuStream,
        dst: MemRef<'_, Self>,
        dst_offset: u64,
        src: MemRef<'_, Self>,
        src_offset: u64,
        len: u64,
    ) -> Result<()> {
        self.enter()?;
        let (dst, src) = (dst.memory(), src.memory());
        hal_core::device::check_bounds(src_offset, len, src.len())?;
        hal_core::device::check_bounds(dst_offset, len, dst.len())?;
        let len = usize::try_from(len)
            .map_err(|_| Error::invalid(format!("a copy of {len} bytes does not fit memory")))?;
        let mut buf = vec![0u8; len];
        src.read(src_offset, &mut buf)?;
        dst.write(dst_offset, &buf)
    }

    fn write_async(
        &self,
        _stream: &CpuStream,
        dst: MemRef<'_, Self>,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<()> {
        self.enter()?;
        dst.memory().write(offset, &data)
    }

    fn memset_async(
        &self,
        _stream: &CpuStream,
        dst: MemRef<'_, Self>,
        offset: u64,
        len: u64,
        value: u8,
    ) -> Result<()> {
        self.enter()?;
        let dst = dst.memory();
        hal_core::device::check_bounds(offset, len, dst.len())?;
        let len = usize::try_from(len)
            .map_err(|_| Error::invalid(format!("a memset of {len} bytes does not fit memory")))?;
        dst.write(offset, &vec![value; len])
    }

    fn query_stream(&self, _stream: &CpuStream) -> Result<bool> {
        self.enter()?;
        // Host-synchronous: everything queued has already run.
        Ok(true)
    }

    fn synchronize_device(&self, _timeout: Option<Duration>) -> Result<()> {
        self.enter()?;
        Ok(())
    }

    fn create_event(&self, flags: EventFlags) -> Result<CpuEvent> {
        self.enter()?;
        CpuEvent::create(flags)
    }

    fn record_event(&self, _stream: &CpuStream, event: &CpuEvent) -> Result<()> {
        self.enter()?;
        event.record()
    }

    fn stream_wait_event(&self, _stream: &CpuStream, event: &CpuEvent) -> Result<()> {
        self.enter()?;
        // Later work runs on this thread, so it waits here.
        hal_core::Event::wait(event, WaitOptions::default())
    }

    fn export_event(&self, event: &CpuEvent, opts: &ExportOptions) -> Result<Exported> {
        self.enter()?;
        event.export(opts)
    }

    fn import_event(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<CpuEvent> {
        self.enter()?;
        CpuEvent::import(shared, opts)
    }

    fn create_notify_with(&self, flags: hal_core::NotifyFlags) -> Result<CpuNotify> {
        self.enter()?;
        CpuNotify::create(flags)
    }

    fn record_notify(&self, _stream: &CpuStream, notify: &CpuNotify) -> Result<()> {
        self.enter()?;
        notify.record()
    }

    fn stream_wait_notify(
        &self,
        _stream: &CpuStream,
        notify: &CpuNotify,
        timeout: Option<Duration>,
    ) -> Result<()> {
        self.enter()?;
        notify.stream_wait(WaitOptions {
            timeout,
            ..WaitOptions::default()
        })
    }

    fn export_notify(&self, notify: &CpuNotify, opts: &ExportOptions) -> Result<Exported> {
        self.enter()?;
        notify.export(opts)
    }

    fn import_notify(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<CpuNotify> {
        self.enter()?;
        CpuNotify::import(shared, opts)
    }
}

impl Vmm for CpuDevice {
    type Physical = CpuPhysical;
    type Reservation = CpuReservation;

    fn granularity(&self, which: Granularity) -> Result<u64> {
        self.enter()?;
        Ok(self.info.granularity(which))
    }

    fn allocate_physical_with(&self, desc: &hal_core::PhysicalDesc) -> Result<CpuPhysical> {
        self.enter()?;
        hal_core::vmm::fabric_or_posix(crate::id::BACKEND, desc, CpuPhysical::allocate)
    }

    fn reserve(&self, size: u64, align: u64) -> Result<CpuReservation> {
        self.enter()?;
        CpuReservation::reserve(size, align)
    }

    fn map_range(
        &self,
        reservation: &CpuReservation,
        offset: u64,
        physical: &CpuPhysical,
        physical_offset: u64,
        len: u64,
    ) -> Result<()> {
        self.enter()?;
        reservation.map_physical(offset, physical, physical_offset, len)
    }

    fn unmap(&self, reservation: &CpuReservation, offset: u64, len: u64) -> Result<()> {
        self.enter()?;
        reservation.unmap(offset, len)
    }

    fn set_access_for(
        &self,
        reservation: &CpuReservation,
        offset: u64,
        len: u64,
        grants: &[hal_core::AccessGrant],
    ) -> Result<()> {
        self.enter()?;
        let access = CpuReservation::granted(grants)?;
        reservation.set_access(offset, len, access)
    }

    fn access(
        &self,
        reservation: &CpuReservation,
        offset: u64,
        target: hal_core::AccessTarget,
    ) -> Result<Access> {
        self.enter()?;
        reservation.access_at(offset, target)
    }

    fn export_physical(&self, physical: &CpuPhysical, opts: &ExportOptions) -> Result<Exported> {
        self.enter()?;
        physical.export(opts)
    }

    fn import_physical(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<CpuPhysical> {
        self.enter()?;
        CpuPhysical::import(shared, opts)
    }
}

impl hal_core::testing::ContextProbe for CpuDevice {
    /// The host has no vendor contexts: always `None`.
    fn current_context(&self) -> Result<Option<u64>> {
        Ok(None)
    }
}
