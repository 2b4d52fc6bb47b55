//! The simulated device: every operation of the contract, with the vendors'
//! rules enforced.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use hal_core::exchange::Taken;
use hal_core::handle::wire::MAX_PIDS;
use hal_core::os::{self, Prot, SharedMap};
use hal_core::{
    Access, AllocDesc, ByteRange, Capabilities, Device, DeviceInfo, Error, EventFlags,
    ExportOptions, Exported, FdSource, Granularity, Handle, HandleError, HandleFlags, HandleKind,
    HugePages, ImportOptions, ImportPlacement, Importers, Location, Result, SharedHandle,
};

use crate::backend::{lock, DevRef};
use crate::fault::{FaultOp, Faults};
use crate::memory::{
    Backing, DeviceMemory, ImportRegion, MockAllocation, MockMapping, Payload, Release,
};
use crate::profile::{Api, Profile, Vendor};
use crate::stream::{MockStream, Op};
use crate::sync::{MockEvent, MockNotify, SYNC_LEN};
use crate::vmm::{check_granular, MockPhysical, MockReservation};

/// A simulated device of a [`MockBackend`](crate::MockBackend).
///
/// Besides the [`Device`] operations it offers what the vendors have and the
/// contract does not: [`MockDevice::enable_peer_access`], stream copies
/// ([`MockDevice::write_async`], [`MockDevice::copy_async`]), and views of
/// the simulator's state for tests.
#[derive(Clone)]
pub struct MockDevice {
    dev: DevRef,
    info: DeviceInfo,
}

impl std::fmt::Debug for MockDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockDevice")
            .field("backend", &self.dev.name())
            .field("ordinal", &self.dev.ordinal)
            .finish()
    }
}

/// Which kind of export an allow-list policy is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ListKind {
    /// Kinds the vendor keeps a pid allow-list for (Ascend memory keys,
    /// notify keys and VMM shareable handles).
    Listed,
    /// IPC events: no vendor has an allow-list for them.
    Unlisted,
}

impl MockDevice {
    pub(crate) fn new(dev: DevRef) -> MockDevice {
        let info = dev.state().info.clone();
        MockDevice { dev, info }
    }

    /// The profile the device follows.
    pub fn profile(&self) -> &Profile {
        self.dev.profile()
    }

    /// The physical device behind this ordinal: the ordinal itself unless
    /// the profile lists visible devices ([`Profile::with_visible_devices`]).
    pub fn physical_device(&self) -> u32 {
        self.dev
            .profile()
            .physical_device(self.dev.ordinal)
            .unwrap_or(self.dev.ordinal)
    }

    /// The fault injection of the device's backend instance.
    pub fn faults(&self) -> &Faults {
        &self.dev.shared.faults
    }

    /// Bytes of device memory in use (allocations, pool chunks, physical
    /// allocations, and memory whose release waits for importers).
    pub fn memory_used(&self) -> u64 {
        self.dev.state().used()
    }

    /// Allocations dropped while importers held them, whose memory is kept
    /// until the importers close.
    pub fn deferred_frees(&self) -> usize {
        self.dev
            .state()
            .deferred
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// True when this device may access the memory of device `peer`.
    /// Peers are this process's ordinals, as everywhere in the simulator.
    pub fn peer_access_enabled(&self, peer: u32) -> bool {
        lock(&self.dev.state().peers).contains(&peer)
    }

    /// Let this device access the memory of device `peer`
    /// (`cuCtxEnablePeerAccess`, `aclrtDeviceEnablePeerAccess`): imports of
    /// `peer`'s memory onto this device then need no
    /// [`ImportOptions::peer_access`]. CUDA refuses a second enable with
    /// `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`.
    pub fn enable_peer_access(&self, peer: u32) -> Result<()> {
        self.dev
            .require(Capabilities::PEER_ACCESS, "enable_peer_access")?;
        self.dev.enter(Api::EnablePeerAccess, None)?;
        let vendor = self.dev.vendor();
        if peer as usize >= self.dev.shared.devices.len() || peer == self.dev.ordinal {
            return Err(self.dev.err(
                vendor.invalid_device(),
                format!(
                    "{}: device {peer} is not a peer of device {} ({})",
                    Api::EnablePeerAccess.symbol(vendor),
                    self.dev.ordinal,
                    self.dev.shared.device_count()
                ),
            ));
        }
        let fresh = lock(&self.dev.state().peers).insert(peer);
        if !fresh && vendor == Vendor::Cuda {
            return Err(self.dev.err(
                crate::codes::cuda::PEER_ACCESS_ALREADY_ENABLED,
                format!(
                    "cuCtxEnablePeerAccess: device {} already accesses device {peer}",
                    self.dev.ordinal
                ),
            ));
        }
        Ok(())
    }

    /// Queue a copy of host bytes into `dst` at `offset` on `stream`
    /// (`cuMemcpyHtoDAsync`, `aclrtMemcpyAsync`).
    pub fn write_async(
        &self,
        stream: &MockStream,
        dst: &impl DeviceMemory,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<()> {
        self.dev.check_owner(&stream.dev, "stream", true)?;
        let span = dst.span();
        self.dev.check_owner(&span.dev, "memory", false)?;
        if span.peer_only {
            return Err(Error::unsupported(
                self.dev.name(),
                Api::MemcpyAsync.symbol(self.dev.vendor()),
                "memory imported onto another device takes only device-to-device copies \
                 (copy_async)",
            ));
        }
        writable(&span)?;
        hal_core::device::check_bounds(offset, data.len() as u64, span.len)?;
        self.dev.enter(Api::MemcpyAsync, None)?;
        stream.push(Op::Write {
            dst: span,
            offset,
            data,
        });
        Ok(())
    }

    /// Queue a device-to-device copy of `len` bytes on `stream`
    /// (`cuMemcpyAsync`, `aclrtMemcpyAsync` with `ACL_MEMCPY_DEVICE_TO_DEVICE`).
    /// The only use Ascend allows of memory imported onto another device.
    pub fn copy_async(
        &self,
        stream: &MockStream,
        dst: &impl DeviceMemory,
        dst_offset: u64,
        src: &impl DeviceMemory,
        src_offset: u64,
        len: u64,
    ) -> Result<()> {
        self.dev.check_owner(&stream.dev, "stream", true)?;
        let (dst, src) = (dst.span(), src.span());
        self.dev
            .check_owner(&dst.dev, "destination memory", false)?;
        self.dev.check_owner(&src.dev, "source memory", false)?;
        writable(&dst)?;
        hal_core::device::check_bounds(dst_offset, len, dst.len)?;
        hal_core::device::check_bounds(src_offset, len, src.len)?;
        self.dev.enter(Api::MemcpyAsync, None)?;
        stream.push(Op::Copy {
            dst,
            dst_offset,
            src,
            src_offset,
            len,
        });
        Ok(())
    }

    fn label(&self) -> String {
        format!("hal-mock-{}-{}", self.dev.profile().name, self.dev.ordinal)
    }

    fn on(&self, ordinal: u32) -> DevRef {
        DevRef {
            shared: Arc::clone(&self.dev.shared),
            ordinal,
        }
    }

    /// Export an event's or a notify's shared block (`fd`) as a handle of `kind`.
    fn export_sync(
        &self,
        kind: HandleKind,
        ordinal: u32,
        opts: &ExportOptions,
        list: ListKind,
        fd: OwnedFd,
    ) -> Result<Exported> {
        let payload = Payload {
            kind: kind.to_wire(),
            fd_offset: 0,
            map_len: SYNC_LEN,
            view: 0,
            buffer_id: os::random_id(),
            alloc_offset: 0,
        };
        let handle = self.handle(kind, Location::Device(ordinal), 0, 0, opts, list, payload)?;
        Exported::new(handle, vec![fd])
    }

    /// A new handle of this device with the pid policy of `importers`.
    #[allow(clippy::too_many_arguments)]
    fn handle(
        &self,
        kind: HandleKind,
        location: Location,
        size: u64,
        offset: u64,
        opts: &ExportOptions,
        list: ListKind,
        payload: Payload,
    ) -> Result<Handle> {
        let caps = self.dev.caps();
        let vendor = self.dev.vendor();
        let mut flags = HandleFlags::default();
        let mut allowed_pids = Vec::new();
        let listed = list == ListKind::Listed && caps.contains(Capabilities::PID_ALLOW_LIST);
        match &opts.importers {
            Importers::Anyone => flags.insert(HandleFlags::ANY_IMPORTER),
            Importers::BackendDefault => {
                if !(listed && caps.contains(Capabilities::PID_ALLOW_LIST_DEFAULT_ON)) {
                    flags.insert(HandleFlags::ANY_IMPORTER);
                }
            }
            Importers::Pids(pids) => {
                if !listed {
                    return Err(Error::unsupported(
                        self.dev.name(),
                        "export to a pid allow-list",
                        format!(
                            "{} keeps no pid allow-list for {} handles; export with \
                             Importers::Anyone or BackendDefault and control who receives the \
                             handle",
                            vendor_name(vendor),
                            kind.name()
                        ),
                    ));
                }
                if pids.len() > MAX_PIDS {
                    return Err(Error::invalid(format!(
                        "{} importer pids, at most {MAX_PIDS} fit in a handle",
                        pids.len()
                    )));
                }
                allowed_pids = pids.clone();
            }
        }
        if opts.read_only {
            flags.insert(HandleFlags::READ_ONLY);
        }
        if kind == HandleKind::Event && !caps.contains(Capabilities::IPC_EVENT_QUERY) {
            flags.insert(HandleFlags::NO_QUERY);
        }
        let (creator_pid, creator_start) = os::self_identity();
        Ok(Handle {
            kind,
            backend: self.dev.backend(),
            device: self.dev.ordinal,
            device_uuid: self.info.uuid,
            location,
            size,
            offset,
            address: 0,
            creator_pid,
            creator_start,
            creator_pid_ns: os::pid_namespace(),
            object_id: os::random_id(),
            flags,
            pid_kind: hal_core::PidKind::Os,
            allowed_pids,
            fds: FdSource::None,
            payload: payload.encode(vendor),
        })
    }

    fn check_export_opts(&self, opts: &ExportOptions, what: &str) -> Result<()> {
        if opts.range.is_some() {
            return Err(Error::invalid(format!("an {what} export takes no range")));
        }
        if opts.read_only {
            return Err(Error::invalid(format!(
                "an {what} cannot be exported read-only"
            )));
        }
        Ok(())
    }

    /// Resolve an import: the exporter's device (by UUID) and the target
    /// device (the options' device, else the exporter's). With `peer_rule`,
    /// a different target needs peer access.
    fn resolve(&self, h: &Handle, opts: &ImportOptions, peer_rule: bool) -> Result<(u32, u32)> {
        let vendor = self.dev.vendor();
        let devices = &self.dev.shared.devices;
        // By UUID, never by the handle's ordinal: the exporter may number
        // the devices differently (another visible-device list).
        let source = devices
            .iter()
            .position(|d| d.info.uuid == h.device_uuid)
            .ok_or_else(|| self.unknown_device(h))? as u32;
        let target = opts.device.unwrap_or(source);
        if target as usize >= devices.len() {
            return Err(self.dev.err(
                vendor.invalid_device(),
                format!(
                    "cannot import onto device {target}: no such device ({})",
                    self.dev.shared.device_count()
                ),
            ));
        }
        self.on(target).alive()?;
        if peer_rule && target != source {
            self.dev
                .require(Capabilities::PEER_ACCESS, "import onto another device")?;
            if !opts.peer_access && !lock(&devices[target as usize].peers).contains(&source) {
                let (flag, call) = match vendor {
                    Vendor::Cuda => (
                        "CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS",
                        "cuCtxEnablePeerAccess",
                    ),
                    Vendor::Ascend => (
                        "ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS",
                        "aclrtDeviceEnablePeerAccess",
                    ),
                };
                return Err(self.dev.err(
                    vendor.peer_not_enabled(),
                    format!(
                        "importing memory of device {source} onto device {target} needs peer \
                         access: set ImportOptions::peer_access ({flag}) or call \
                         enable_peer_access({source}) on device {target} first ({call})"
                    ),
                ));
            }
        }
        Ok((source, target))
    }

    /// The invalid-device error for a handle whose device UUID is not one
    /// of this process's devices: a device of the profile that this process
    /// does not see, or no device of the profile at all.
    fn unknown_device(&self, h: &Handle) -> Error {
        let profile = self.dev.profile();
        let uuid = os::hex(&h.device_uuid);
        let hidden = (0..profile.devices).find(|&p| profile.device_uuid(p) == h.device_uuid);
        let detail = match hidden {
            Some(physical) => format!(
                "is physical device {physical} of profile `{}`, which this process does not see \
                 ({}): make it visible (Profile::with_visible_devices, \
                 HAL_MOCK_VISIBLE_DEVICES, as CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES \
                 do on hardware)",
                profile.name,
                self.dev.shared.device_count()
            ),
            None => format!(
                "is not a device of profile `{}` here: build the same profile, with the same \
                 device count, in both processes",
                profile.name
            ),
        };
        self.dev.err(
            self.dev.vendor().invalid_device(),
            format!(
                "the handle's device (uuid {uuid}, ordinal {} in the exporter) {detail}",
                h.device
            ),
        )
    }

    /// The descriptors of an import, `count` of them. Descriptors that came
    /// attached (not from the exporter's broker, which checks the pid
    /// itself) are refused when the handle's allow-list excludes this
    /// process, unless this process made the export: the allow-list governs
    /// other processes, as the broker, which always serves its own process,
    /// does.
    fn take_fds(&self, shared: &mut SharedHandle, count: usize) -> Result<Vec<OwnedFd>> {
        Ok(self.take_fds_leased(shared, count)?.fds)
    }

    /// The descriptors of an import and the importer's lease, when the
    /// exporter counts importers.
    fn take_fds_leased(&self, shared: &mut SharedHandle, count: usize) -> Result<Taken> {
        let attached = !shared.fds.is_empty();
        let taken = hal_core::exchange::take_fds_leased(shared)?;
        let fds = &taken.fds;
        let me = os::pid();
        let h = &shared.handle;
        let exporter = (h.creator_pid, h.creator_start) == os::self_identity();
        if attached
            && !exporter
            && self.dev.caps().contains(Capabilities::PID_ALLOW_LIST)
            && !h.allows(me)
        {
            return Err(Error::PermissionDenied {
                pid: Some(me),
                reason: format!(
                    "pid {me} is not on the export's allow-list: the exporter adds it with \
                     allow_importers ({}) or exports with Importers::Anyone \
                     (DISABLE_PID_VALIDATION)",
                    set_pid_api(shared.handle.kind).symbol(self.dev.vendor())
                ),
            });
        }
        if fds.len() != count {
            return Err(HandleError::Descriptors(format!(
                "{} descriptor(s) for a {} handle of `{}`, which carries {count}",
                fds.len(),
                shared.handle.kind.name(),
                self.dev.name()
            ))
            .into());
        }
        Ok(taken)
    }

    fn allocate_in_pool(
        &self,
        len: u64,
        align: u64,
        location: Location,
        page: u64,
    ) -> Result<Option<MockAllocation>> {
        let Some(sub) = &self.dev.profile().suballocation else {
            return Ok(None);
        };
        if !matches!(location, Location::Device(_))
            || page != self.dev.profile().page_size()
            || len >= sub.max_size
            || align > page
        {
            return Ok(None);
        }
        let align = align.max(sub.quantum);
        let state = self.dev.state();
        let mut pool = lock(&state.pool);
        let slot = match pool.take(len, align) {
            Some(slot) => slot,
            None => {
                state.charge(self.dev.vendor(), sub.chunk_size)?;
                match Backing::create(&format!("{}-pool", self.label()), sub.chunk_size, page) {
                    Ok(b) => pool.add(b),
                    Err(e) => {
                        state.refund(sub.chunk_size);
                        return Err(e);
                    }
                }
                pool.take(len, align).ok_or_else(|| {
                    Error::invalid("a fresh pool chunk cannot hold the allocation")
                })?
            }
        };
        Ok(Some(MockAllocation {
            dev: self.dev.clone(),
            backing: Arc::clone(&slot.backing),
            offset: slot.offset,
            len,
            location,
            page,
            buffer_id: os::random_id(),
            lease: OnceLock::new(),
            release: Some(Release {
                dev: self.dev.clone(),
                backing: slot.backing,
                slot: Some((slot.chunk, slot.offset, len)),
                charged: 0,
            }),
        }))
    }
}

/// The vendor call that adds importer pids to an export of `kind`.
fn set_pid_api(kind: HandleKind) -> Api {
    match kind {
        HandleKind::Notify => Api::NotifySetImportPid,
        HandleKind::Physical => Api::MemSetPidShareable,
        _ => Api::IpcSetImportPid,
    }
}

fn vendor_name(vendor: Vendor) -> &'static str {
    match vendor {
        Vendor::Cuda => "CUDA",
        Vendor::Ascend => "Ascend",
    }
}

/// Refuse a data descriptor whose open mode does not allow the mapping the
/// handle asks for (read-write, or read-only with `READ_ONLY`), before
/// mapping it: [`Error::PermissionDenied`], as the cpu-shm backend answers,
/// rather than the `mmap` `EACCES`.
fn check_data_access(data: BorrowedFd<'_>, read_only: bool) -> Result<()> {
    let mode = os::access_mode(data)?;
    let problem = if !mode.readable() {
        "the memory's descriptor was opened write-only, and a mapping needs to read it"
    } else if !read_only && !mode.writable() {
        "the memory's descriptor is read-only but the handle is writable (no READ_ONLY flag): \
         send the exporter's read-write descriptor, or import from the handle text alone so \
         that the exporter's broker serves it"
    } else {
        return Ok(());
    };
    Err(Error::PermissionDenied {
        pid: None,
        reason: problem.into(),
    })
}

fn writable(span: &crate::memory::sealed::Span) -> Result<()> {
    if span.writable {
        Ok(())
    } else {
        Err(Error::PermissionDenied {
            pid: None,
            reason: "the destination was imported read-only".into(),
        })
    }
}

impl Device for MockDevice {
    type Allocation = MockAllocation;
    type Mapping = MockMapping;
    type Stream = MockStream;
    type Event = MockEvent;
    type Notify = MockNotify;
    type Physical = MockPhysical;
    type Reservation = MockReservation;

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    // --- memory -------------------------------------------------------------

    fn allocate(&self, desc: &AllocDesc) -> Result<MockAllocation> {
        let vendor = self.dev.vendor();
        let api = match desc.location {
            Location::Device(_) => Api::MemAlloc,
            Location::Host => Api::MemAllocHost,
            Location::Managed => {
                self.dev
                    .require(Capabilities::MANAGED_MEMORY, "allocate managed memory")?;
                Api::MemAllocManaged
            }
        };
        self.dev.enter(api, Some(FaultOp::Allocate))?;
        if let Location::Device(d) = desc.location {
            if d != self.dev.ordinal {
                return Err(Error::invalid(format!(
                    "allocation for device {d} requested on device {}: allocate on device {d}",
                    self.dev.ordinal
                )));
            }
        }
        if desc.size == 0 {
            return Err(self.dev.err(
                vendor.invalid_value(),
                format!("{}: size 0", api.symbol(vendor)),
            ));
        }
        if desc.align != 0 && !desc.align.is_power_of_two() {
            return Err(Error::invalid(format!(
                "alignment {} is not a power of two",
                desc.align
            )));
        }
        let small = self.dev.profile().page_size();
        let page = match desc.placement.huge_pages {
            HugePages::None | HugePages::Transparent => small,
            HugePages::Explicit(p) if self.info.page_sizes.contains(&p) => p,
            HugePages::Explicit(p) => {
                return Err(Error::invalid(format!(
                    "page size {p:#x} is not one of the device's page sizes {:?}",
                    self.info.page_sizes
                )))
            }
        };
        let rounding = if page > small {
            page
        } else {
            self.dev.profile().alloc_rounding
        };
        let len = desc
            .size
            .checked_next_multiple_of(rounding)
            .ok_or_else(|| Error::invalid("allocation size overflows"))?;
        if let Some(a) = self.allocate_in_pool(len, desc.align, desc.location, page)? {
            return Ok(a);
        }
        let size = len.next_multiple_of(page.max(os::page_size()));
        // Pinned host memory is not the device's.
        let charged = if desc.location == Location::Host {
            0
        } else {
            size
        };
        let state = self.dev.state();
        state.charge(vendor, charged)?;
        let backing = match Backing::create(&self.label(), size, desc.align.max(page)) {
            Ok(b) => b,
            Err(e) => {
                state.refund(charged);
                return Err(e);
            }
        };
        Ok(MockAllocation {
            dev: self.dev.clone(),
            backing: Arc::clone(&backing),
            offset: 0,
            len,
            location: desc.location,
            page,
            buffer_id: os::random_id(),
            lease: OnceLock::new(),
            release: Some(Release {
                dev: self.dev.clone(),
                backing,
                slot: None,
                charged,
            }),
        })
    }

    fn export_memory(&self, alloc: &MockAllocation, opts: &ExportOptions) -> Result<Exported> {
        self.dev.check_owner(&alloc.dev, "allocation", true)?;
        self.dev
            .require(Capabilities::IPC_MEMORY, "export_memory")?;
        let vendor = self.dev.vendor();
        match alloc.location {
            Location::Device(_) => {}
            Location::Managed => {
                if !self.dev.caps().contains(Capabilities::IPC_MANAGED_MEMORY) {
                    return Err(Error::unsupported(
                        self.dev.name(),
                        "export managed memory",
                        format!(
                            "managed memory ({}) cannot be exported through IPC ({} answers \
                             invalid value); share host memory instead (hal-cuda-uvm, cpu-shm)",
                            Api::MemAllocManaged.symbol(vendor),
                            Api::IpcGetMem.symbol(vendor)
                        ),
                    ));
                }
            }
            Location::Host => {
                return Err(Error::unsupported(
                    self.dev.name(),
                    "export host memory",
                    format!(
                        "{} exports device memory only; share host memory with the cpu-shm \
                         backend",
                        Api::IpcGetMem.symbol(vendor)
                    ),
                ))
            }
        }
        if opts.read_only && !self.dev.caps().contains(Capabilities::READ_ONLY_EXPORT) {
            return Err(Error::unsupported(
                self.dev.name(),
                "read-only export",
                format!(
                    "{} maps imported memory read-write; {} has no read-only IPC export",
                    Api::IpcOpenMem.symbol(vendor),
                    vendor_name(vendor)
                ),
            ));
        }
        self.dev.enter(Api::IpcGetMem, Some(FaultOp::Export))?;
        let range = opts.range.unwrap_or(ByteRange::new(0, alloc.len));
        // Bounds first, then whole pages of the allocation's page size, in
        // the device's address space (a sub-allocation's start counts).
        range.check(alloc.len, 0)?;
        let start = alloc.offset + range.offset;
        if start % alloc.page != 0 || range.len % alloc.page != 0 {
            return Err(Error::Misaligned {
                offset: range.offset,
                len: range.len,
                page_size: alloc.page,
            });
        }
        let payload = match vendor {
            // The base allocation is opened whole; the handle names the range in it.
            Vendor::Cuda => Payload {
                kind: HandleKind::Memory.to_wire(),
                fd_offset: alloc.offset,
                map_len: alloc.len.next_multiple_of(os::page_size()),
                view: range.offset,
                buffer_id: alloc.buffer_id,
                alloc_offset: alloc.offset,
            },
            // The key names exactly the range.
            Vendor::Ascend => Payload {
                kind: HandleKind::Memory.to_wire(),
                fd_offset: start,
                map_len: range.len,
                view: 0,
                buffer_id: alloc.buffer_id,
                alloc_offset: alloc.offset,
            },
        };
        let handle = self.handle(
            HandleKind::Memory,
            alloc.location,
            range.len,
            range.offset,
            opts,
            ListKind::Listed,
            payload,
        )?;
        if opts.read_only && !alloc.owns_its_memory() {
            return Err(Error::unsupported(
                self.dev.name(),
                "read-only export of a pooled allocation",
                format!(
                    "the allocation of {} bytes shares a pool chunk (one memory object) with \
                     other allocations, which a read-only export would seal against writes \
                     too; allocate at least {} bytes, so that it has memory of its own, to \
                     export it read-only",
                    alloc.len,
                    self.dev
                        .profile()
                        .suballocation
                        .as_ref()
                        .map_or(0, |s| s.max_size)
                ),
            ));
        }
        os::seal_for_export(alloc.backing.fd(), opts.read_only)?;
        let data = if opts.read_only {
            os::reopen_read_only(alloc.backing.fd())?
        } else {
            os::dup(alloc.backing.fd())?
        };
        let leases = Arc::clone(alloc.lease_table()?);
        Exported::with_leases(handle, vec![data], leases)
    }

    fn allow_importers(&self, exported: &mut Exported, pids: &[u32]) -> Result<()> {
        let h = exported.handle();
        if h.backend != self.dev.backend() {
            return Err(HandleError::WrongBackend {
                expected: self.dev.name(),
                found: h.backend.name(),
            }
            .into());
        }
        self.dev
            .require(Capabilities::PID_ALLOW_LIST, "allow_importers")?;
        if h.kind == HandleKind::Event {
            return Err(Error::unsupported(
                self.dev.name(),
                "allow_importers",
                "IPC event handles have no pid allow-list",
            ));
        }
        let api = set_pid_api(h.kind);
        self.dev.enter(api, None)?;
        if h.allowed_pids.len() + pids.len() > MAX_PIDS {
            return Err(Error::invalid(format!(
                "at most {MAX_PIDS} importer pids fit in a handle"
            )));
        }
        exported.add_importers(pids)
    }

    fn import_memory(&self, mut shared: SharedHandle, opts: &ImportOptions) -> Result<MockMapping> {
        let backend = self.dev.backend();
        shared.handle.expect(HandleKind::Memory, backend)?;
        self.dev
            .require(Capabilities::IPC_MEMORY, "import_memory")?;
        let vendor = self.dev.vendor();
        if opts.placement == ImportPlacement::ExporterAddress {
            self.dev.require(
                Capabilities::FIXED_ADDRESS_IMPORT,
                "import at the exporter's address",
            )?;
        }
        let payload = Payload::decode(vendor, &shared.handle)?;
        payload.check_memory_window(vendor, &shared.handle)?;
        let (source, target) = self.resolve(&shared.handle, opts, true)?;
        let on = self.on(target);
        on.enter(Api::IpcOpenMem, Some(FaultOp::Import))?;
        let h = &shared.handle;
        let read_only = h.flags.contains(HandleFlags::READ_ONLY);
        let location = match h.location {
            Location::Device(_) => Location::Device(source),
            other => other,
        };
        let mapping = |region: Arc<ImportRegion>, handle: Handle| MockMapping {
            dev: on.clone(),
            region,
            view: payload.view,
            len: handle.size,
            handle,
            location,
            read_only,
            peer_only: vendor == Vendor::Ascend && target != source,
        };
        let key = (payload.buffer_id, target, read_only);
        if vendor == Vendor::Cuda {
            // A second open of the same allocation in this process returns
            // the same mapping, reference counted.
            let hit = lock(&self.dev.shared.import_cache)
                .get(&key)
                .and_then(Weak::upgrade)
                .filter(|r| r.map.len() as u64 >= payload.map_len);
            if let Some(region) = hit {
                let handle = shared.handle.clone();
                return Ok(mapping(region, handle));
            }
        }
        let taken = self.take_fds_leased(&mut shared, 1)?;
        let checked = taken.checked;
        let [data]: [OwnedFd; 1] = taken
            .fds
            .try_into()
            .map_err(|_| Error::from(HandleError::Descriptors("one descriptor".into())))?;
        let end = payload.fd_offset + payload.map_len;
        if read_only {
            os::verify_read_only_memfd(data.as_fd(), end)?;
        } else {
            os::verify_sealed_memfd(data.as_fd(), end)?;
        }
        check_data_access(data.as_fd(), read_only)?;
        let prot = if read_only {
            Prot::Read
        } else {
            Prot::ReadWrite
        };
        let map = SharedMap::map(data.as_fd(), payload.map_len, payload.fd_offset, prot, None)?;
        let region = Arc::new(ImportRegion {
            map,
            _lease: taken.lease,
        });
        // Only descriptors from a checked source are cached: a forged
        // handle naming a genuine buffer id with a peer's descriptors must
        // not answer later imports of the genuine buffer.
        if vendor == Vendor::Cuda && checked {
            let mut cache = lock(&self.dev.shared.import_cache);
            cache.retain(|_, w| w.strong_count() > 0);
            cache.insert(key, Arc::downgrade(&region));
        }
        Ok(mapping(region, shared.handle))
    }

    // --- streams, events, notifies -----------------------------------------

    fn create_stream(&self) -> Result<MockStream> {
        self.dev.enter(Api::StreamCreate, None)?;
        MockStream::create(&self.dev)
    }

    fn synchronize(&self, stream: &MockStream, timeout: Option<Duration>) -> Result<()> {
        self.dev.check_owner(&stream.dev, "stream", true)?;
        self.dev
            .enter(Api::StreamSynchronize, Some(FaultOp::Wait))?;
        stream.synchronize(timeout)
    }

    fn create_event(&self, flags: EventFlags) -> Result<MockEvent> {
        let vendor = self.dev.vendor();
        if flags.interprocess {
            self.dev
                .require(Capabilities::IPC_EVENT, "create an IPC event")?;
        }
        self.dev.enter(Api::EventCreate, None)?;
        if flags.interprocess && flags.timing {
            let why = match vendor {
                Vendor::Cuda => {
                    "cuEventCreate: CU_EVENT_INTERPROCESS requires CU_EVENT_DISABLE_TIMING \
                     (create the IPC event without timing)"
                }
                Vendor::Ascend => {
                    "aclrtCreateEventExWithFlag: ACL_EVENT_IPC must be used alone, not OR-ed \
                     with ACL_EVENT_TIME_LINE (create the IPC event without timing)"
                }
            };
            return Err(self.dev.err(vendor.invalid_value(), why));
        }
        MockEvent::create(&self.dev, flags)
    }

    fn record_event(&self, stream: &MockStream, event: &MockEvent) -> Result<()> {
        self.dev.check_owner(&stream.dev, "stream", true)?;
        self.dev.check_owner(&event.dev, "event", false)?;
        self.dev.enter(Api::EventRecord, None)?;
        let seq = event.sync.next_record()?;
        stream.push(Op::Record {
            sync: Arc::clone(&event.sync),
            seq,
        });
        Ok(())
    }

    fn stream_wait_event(&self, stream: &MockStream, event: &MockEvent) -> Result<()> {
        self.dev.check_owner(&stream.dev, "stream", true)?;
        self.dev.check_owner(&event.dev, "event", false)?;
        self.dev.enter(Api::StreamWaitEvent, None)?;
        let target = event.sync.last_record()?;
        stream.push(Op::WaitEvent {
            sync: Arc::clone(&event.sync),
            target,
        });
        Ok(())
    }

    fn export_event(&self, event: &MockEvent, opts: &ExportOptions) -> Result<Exported> {
        self.dev.check_owner(&event.dev, "event", false)?;
        self.dev.require(Capabilities::IPC_EVENT, "export_event")?;
        let vendor = self.dev.vendor();
        if event.imported {
            return Err(Error::invalid(
                "an imported event is exported again by its creator, not by an importer",
            ));
        }
        self.check_export_opts(opts, "event")?;
        self.dev.enter(Api::IpcGetEvent, Some(FaultOp::Export))?;
        if !event.flags.interprocess {
            return Err(self.dev.err(
                vendor.invalid_value(),
                format!(
                    "{}: the event was not created with {} (EventFlags::interprocess)",
                    Api::IpcGetEvent.symbol(vendor),
                    vendor.ipc_event_flag()
                ),
            ));
        }
        self.export_sync(
            HandleKind::Event,
            event.dev.ordinal,
            opts,
            ListKind::Unlisted,
            event.sync.dup_fd()?,
        )
    }

    fn import_event(&self, mut shared: SharedHandle, opts: &ImportOptions) -> Result<MockEvent> {
        shared
            .handle
            .expect(HandleKind::Event, self.dev.backend())?;
        self.dev.require(Capabilities::IPC_EVENT, "import_event")?;
        Payload::decode(self.dev.vendor(), &shared.handle)?;
        let (_, target) = self.resolve(&shared.handle, opts, false)?;
        let on = self.on(target);
        on.enter(Api::IpcOpenEvent, Some(FaultOp::Import))?;
        let fd = self.take_fds(&mut shared, 1)?.remove(0);
        MockEvent::open(&on, fd)
    }

    fn create_notify(&self) -> Result<MockNotify> {
        self.dev.enter(Api::NotifyCreate, None)?;
        MockNotify::create(&self.dev)
    }

    fn record_notify(&self, stream: &MockStream, notify: &MockNotify) -> Result<()> {
        self.dev.check_owner(&stream.dev, "stream", true)?;
        self.dev.check_owner(&notify.dev, "notify", false)?;
        self.dev.enter(Api::NotifyRecord, None)?;
        stream.push(Op::Signal {
            sync: Arc::clone(&notify.sync),
        });
        Ok(())
    }

    fn stream_wait_notify(
        &self,
        stream: &MockStream,
        notify: &MockNotify,
        timeout: Option<Duration>,
    ) -> Result<()> {
        self.dev.check_owner(&stream.dev, "stream", true)?;
        self.dev.check_owner(&notify.dev, "notify", false)?;
        notify.check_waiter()?;
        self.dev.enter(Api::NotifyWait, None)?;
        stream.push(Op::WaitNotify {
            sync: Arc::clone(&notify.sync),
            timeout,
        });
        Ok(())
    }

    fn export_notify(&self, notify: &MockNotify, opts: &ExportOptions) -> Result<Exported> {
        self.dev.check_owner(&notify.dev, "notify", false)?;
        self.dev
            .require(Capabilities::IPC_NOTIFY, "export_notify")?;
        if !notify.creator {
            return Err(Error::invalid(
                "an imported notify is exported again by its creator, not by an importer",
            ));
        }
        self.check_export_opts(opts, "notify")?;
        self.dev.enter(Api::NotifyExport, Some(FaultOp::Export))?;
        self.export_sync(
            HandleKind::Notify,
            notify.dev.ordinal,
            opts,
            ListKind::Listed,
            notify.sync.dup_fd()?,
        )
    }

    fn import_notify(&self, mut shared: SharedHandle, opts: &ImportOptions) -> Result<MockNotify> {
        shared
            .handle
            .expect(HandleKind::Notify, self.dev.backend())?;
        self.dev
            .require(Capabilities::IPC_NOTIFY, "import_notify")?;
        Payload::decode(self.dev.vendor(), &shared.handle)?;
        // Ascend's notify import has its own ENABLE_PEER_ACCESS flag; the
        // CUDA-like notify is host memory, reachable from every device.
        let peer_rule = self.dev.vendor() == Vendor::Ascend;
        let (_, target) = self.resolve(&shared.handle, opts, peer_rule)?;
        let on = self.on(target);
        on.enter(Api::NotifyImport, Some(FaultOp::Import))?;
        let fd = self.take_fds(&mut shared, 1)?.remove(0);
        MockNotify::open(&on, fd)
    }

    // --- VMM ------------------------------------------------------------------

    fn granularity(&self, which: Granularity) -> Result<u64> {
        self.dev.require(Capabilities::VMM, "granularity")?;
        self.dev.enter(Api::Granularity, None)?;
        Ok(self.info.granularity(which))
    }

    fn allocate_physical(&self, size: u64) -> Result<MockPhysical> {
        self.dev.require(Capabilities::VMM, "allocate_physical")?;
        self.dev.enter(Api::MemCreate, Some(FaultOp::Allocate))?;
        check_granular(&self.dev, "physical allocation size", size, false)?;
        MockPhysical::create(&self.dev, size)
    }

    fn reserve(&self, size: u64, align: u64) -> Result<MockReservation> {
        self.dev.require(Capabilities::VMM, "reserve")?;
        self.dev.enter(Api::AddressReserve, None)?;
        check_granular(&self.dev, "reservation size", size, false)?;
        check_granular(&self.dev, "reservation alignment", align, true)?;
        MockReservation::create(&self.dev, size, align.max(self.info.granularity_min))
    }

    fn map(
        &self,
        reservation: &MockReservation,
        offset: u64,
        physical: &MockPhysical,
    ) -> Result<()> {
        self.dev
            .check_owner(&reservation.dev, "reservation", true)?;
        self.dev
            .check_owner(&physical.dev, "physical allocation", false)?;
        self.dev.require(Capabilities::VMM, "map")?;
        self.dev.enter(Api::MemMap, None)?;
        check_granular(&self.dev, "mapping offset", offset, true)?;
        let size = physical.mem.size;
        if offset
            .checked_add(size)
            .is_none_or(|end| end > reservation.len)
        {
            return Err(self.dev.err(
                self.dev.vendor().invalid_value(),
                format!(
                    "mapping {size:#x} bytes at {offset:#x} runs past the {:#x}-byte reservation",
                    reservation.len
                ),
            ));
        }
        reservation.map_mem(offset, &physical.mem)
    }

    fn unmap(&self, reservation: &MockReservation, offset: u64, len: u64) -> Result<()> {
        self.dev
            .check_owner(&reservation.dev, "reservation", true)?;
        self.dev.require(Capabilities::VMM, "unmap")?;
        self.dev.enter(Api::MemUnmap, None)?;
        check_granular(&self.dev, "unmap offset", offset, true)?;
        check_granular(&self.dev, "unmap length", len, false)?;
        hal_core::device::check_bounds(offset, len, reservation.len)?;
        reservation.unmap_range(offset, len)
    }

    fn set_access(
        &self,
        reservation: &MockReservation,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<()> {
        self.dev
            .check_owner(&reservation.dev, "reservation", true)?;
        self.dev.require(Capabilities::VMM, "set_access")?;
        self.dev.enter(Api::MemSetAccess, None)?;
        check_granular(&self.dev, "access offset", offset, true)?;
        check_granular(&self.dev, "access length", len, false)?;
        hal_core::device::check_bounds(offset, len, reservation.len)?;
        reservation.set_range_access(offset, len, access)
    }

    fn export_physical(&self, physical: &MockPhysical, opts: &ExportOptions) -> Result<Exported> {
        self.dev
            .check_owner(&physical.dev, "physical allocation", false)?;
        self.dev.require(Capabilities::VMM, "export_physical")?;
        if physical.imported {
            return Err(Error::invalid(
                "an imported physical allocation is exported again by its creator",
            ));
        }
        self.check_export_opts(opts, "physical allocation")?;
        self.dev
            .enter(Api::MemExportShareable, Some(FaultOp::Export))?;
        let size = physical.mem.size;
        let payload = Payload {
            kind: HandleKind::Physical.to_wire(),
            fd_offset: 0,
            map_len: size,
            view: 0,
            buffer_id: os::random_id(),
            alloc_offset: 0,
        };
        let handle = self.handle(
            HandleKind::Physical,
            Location::Device(physical.dev.ordinal),
            size,
            0,
            opts,
            ListKind::Listed,
            payload,
        )?;
        Exported::new(handle, vec![os::dup(physical.mem.fd.as_fd())?])
    }

    fn import_physical(
        &self,
        mut shared: SharedHandle,
        opts: &ImportOptions,
    ) -> Result<MockPhysical> {
        shared
            .handle
            .expect(HandleKind::Physical, self.dev.backend())?;
        self.dev.require(Capabilities::VMM, "import_physical")?;
        let payload = Payload::decode(self.dev.vendor(), &shared.handle)?;
        let size = shared.handle.size;
        if payload.map_len != size || shared.handle.offset != 0 {
            return Err(HandleError::Malformed {
                field: "size",
                detail: "a physical handle names the whole allocation".into(),
            }
            .into());
        }
        let (_, target) = self.resolve(&shared.handle, opts, false)?;
        let on = self.on(target);
        on.enter(Api::MemImportShareable, Some(FaultOp::Import))?;
        check_granular(&on, "imported physical size", size, false)?;
        let fd = self.take_fds(&mut shared, 1)?.remove(0);
        os::verify_sealed_memfd(fd.as_fd(), size)?;
        // Physical handles are always read-write: a read-only descriptor is
        // refused here, not later at `map`.
        check_data_access(fd.as_fd(), false)?;
        Ok(MockPhysical::imported(&on, fd, size))
    }
}
