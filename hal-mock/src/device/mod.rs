//! The simulated device: every operation of the contract, with the vendors'
//! rules enforced. This file holds the device itself and what its
//! operations share (handles, import resolution, descriptors); the
//! operations live by concern in `alloc.rs` (memory), `streams.rs`
//! (streams, events, notifies) and `vmm.rs`, and `contract.rs` ties them to
//! the [`Device`](hal_core::Device) trait.

#[allow(unsafe_code)]
mod adopt;
mod alloc;
#[allow(unsafe_code)]
mod contract;
mod driver;
#[allow(unsafe_code)]
mod streams;
mod vmm;

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;

use hal_core::exchange::Taken;
use hal_core::kit::export::{self, check_fd_count, HandleSpec};
use hal_core::kit::os;
use hal_core::{
    Capabilities, DeviceInfo, Error, ExportOptions, Exported, Handle, HandleFlags, HandleKind,
    ImportOptions, Importers, Location, Result, SharedHandle,
};

use crate::fault::Faults;
use crate::memory::sealed::Span;
use crate::memory::{DeviceMemory, Payload};
use crate::profile::Profile;
use crate::rules;
use crate::state::{lock, DevRef};
use crate::stream::{MockStream, Op};
use crate::sync::{SyncWords, SYNC_LEN};
use crate::vendor::Api;

/// A simulated device of a [`MockBackend`](crate::MockBackend).
///
/// Besides the [`Device`](hal_core::Device) operations it offers what the vendors have and the
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
pub(crate) enum ListKind {
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

    /// This device's primary context: what every simulated vendor call of
    /// the device pushes on the calling thread for its duration (see
    /// [`context`](crate::context)).
    pub fn context(&self) -> crate::context::Context {
        self.dev.context()
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
        match rules::peer_enable_again(vendor) {
            Some(code) if !fresh => Err(self.dev.err(
                code,
                format!(
                    "{}: device {} already accesses device {peer}",
                    Api::EnablePeerAccess.symbol(vendor),
                    self.dev.ordinal
                ),
            )),
            _ => Ok(()),
        }
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
        self.write_span(stream, dst.span(), offset, data)
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
        self.copy_spans(stream, dst.span(), dst_offset, src.span(), src_offset, len)
    }

    pub(super) fn write_span(
        &self,
        stream: &MockStream,
        span: Span,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<()> {
        self.host_side_target(stream, &span, offset, data.len() as u64, Api::MemcpyAsync)?;
        stream.push(Op::Write {
            dst: span,
            offset,
            data,
        });
        Ok(())
    }

    pub(super) fn memset_span(
        &self,
        stream: &MockStream,
        span: Span,
        offset: u64,
        len: u64,
        value: u8,
    ) -> Result<()> {
        self.host_side_target(stream, &span, offset, len, Api::MemsetAsync)?;
        stream.push(Op::Memset {
            dst: span,
            offset,
            len,
            value,
        });
        Ok(())
    }

    /// The checks of work that writes `len` bytes at `offset` of `span`
    /// from the host's side (a write of host bytes, a memset), then the
    /// vendor call `api`: the stream and the memory are this device's, the
    /// memory is not a peer-only import, it is writable and the range fits.
    fn host_side_target(
        &self,
        stream: &MockStream,
        span: &Span,
        offset: u64,
        len: u64,
        api: Api,
    ) -> Result<()> {
        self.dev.check_owner(&stream.dev, "stream", true)?;
        self.dev.check_owner(&span.dev, "memory", false)?;
        if span.peer_only {
            return Err(Error::unsupported(
                self.dev.backend(),
                api.symbol(self.dev.vendor()),
                "memory imported onto another device takes only device-to-device copies \
                 (copy_async)",
            ));
        }
        writable(span)?;
        hal_core::device::check_bounds(offset, len, span.len)?;
        self.dev.enter(api, None)
    }

    pub(super) fn copy_spans(
        &self,
        stream: &MockStream,
        dst: Span,
        dst_offset: u64,
        src: Span,
        src_offset: u64,
        len: u64,
    ) -> Result<()> {
        self.dev.check_owner(&stream.dev, "stream", true)?;
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
        sync: &SyncWords,
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
        Exported::with_leases(handle, vec![sync.dup_fd()?], sync.leases()?)
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
        let listed = list == ListKind::Listed && caps.contains(Capabilities::PID_ALLOW_LIST);
        opts.importers.refuse_same_user(
            self.dev.backend(),
            &format!("{} checks no importer's user", rules::vendor_name(vendor)),
        )?;
        if matches!(opts.importers, Importers::Pids(_)) && !listed {
            return Err(Error::unsupported(
                self.dev.backend(),
                "export to a pid allow-list",
                format!(
                    "{} keeps no pid allow-list for {} handles; export with Importers::Anyone or \
                     BackendDefault and control who receives the handle",
                    rules::vendor_name(vendor),
                    kind.name()
                ),
            ));
        }
        let spec = HandleSpec {
            kind,
            backend: self.dev.backend(),
            device: self.dev.ordinal,
            device_uuid: self.info.uuid,
            location,
            default_allow_list: listed && caps.contains(Capabilities::PID_ALLOW_LIST_DEFAULT_ON),
        };
        let mut handle = export::new_handle(&spec, opts)?;
        handle.size = size;
        handle.offset = offset;
        handle.payload = payload.encode(vendor);
        if kind == HandleKind::Event && !caps.contains(Capabilities::IPC_EVENT_QUERY) {
            handle.flags.insert(HandleFlags::NO_QUERY);
        }
        Ok(handle)
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
                let (flag, call) = rules::peer_access_flag(vendor);
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

    /// The descriptors of an import, `count` of them (see
    /// [`MockDevice::check_attached_allowed`]).
    fn take_fds(&self, shared: &mut SharedHandle, count: usize) -> Result<Vec<OwnedFd>> {
        Ok(self.take_fds_leased(shared, count)?.fds)
    }

    /// The descriptors of an import and the importer's lease, when the
    /// exporter counts importers.
    fn take_fds_leased(&self, shared: &mut SharedHandle, count: usize) -> Result<Taken> {
        self.check_attached_allowed(shared)?;
        let taken = hal_core::exchange::take_fds_leased(shared)?;
        check_fd_count(&self.what(shared.handle.kind), count, taken.fds.len())?;
        Ok(taken)
    }

    /// "a KIND handle of `BACKEND`", as errors about descriptors name it.
    fn what(&self, kind: HandleKind) -> String {
        format!("a {} handle of `{}`", kind.name(), self.dev.name())
    }

    /// Descriptors that came attached (not from the exporter's broker,
    /// which checks the pid itself) are refused when the handle's
    /// allow-list excludes this process, unless this process made the
    /// export: the allow-list governs other processes, as the broker, which
    /// always serves its own process, does.
    fn check_attached_allowed(&self, shared: &SharedHandle) -> Result<()> {
        let me = os::pid();
        let h = &shared.handle;
        let exporter = (h.creator_pid, h.creator_start) == os::self_identity();
        if !shared.fds.is_empty()
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
                    set_pid_api(h.kind).symbol(self.dev.vendor())
                ),
            });
        }
        Ok(())
    }
}

/// The vendor call that adds importer pids to an export of `kind`.
pub(crate) fn set_pid_api(kind: HandleKind) -> Api {
    match kind {
        HandleKind::Notify => Api::NotifySetImportPid,
        HandleKind::Physical => Api::MemSetPidShareable,
        _ => Api::IpcSetImportPid,
    }
}

/// Refuse a data descriptor whose open mode does not allow the mapping the
/// handle asks for (read-write, or read-only with `READ_ONLY`), before
/// mapping it: [`Error::PermissionDenied`], as the cpu-shm backend answers,
/// rather than the `mmap` `EACCES`.
pub(crate) fn check_data_access(data: BorrowedFd<'_>, read_only: bool) -> Result<()> {
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

fn writable(span: &Span) -> Result<()> {
    if span.writable {
        Ok(())
    } else {
        Err(Error::PermissionDenied {
            pid: None,
            reason: "the destination was imported read-only".into(),
        })
    }
}
