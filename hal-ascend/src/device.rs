//! [`AscendDevice`]: one device of the runtime and the operations of the
//! contract this backend offers (memory and memory keys, streams, events
//! and IPC events, notifies, VMM). What it does not offer (pinned host
//! memory, managed memory) answers [`Error::Unsupported`], and its
//! capabilities say so.

use std::any::Any;
use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

use hal_core::kit::stream::methods::{self, Span, StreamCalls, StreamCopy, VendorStream};
use hal_core::kit::vendor::needs::Offered;
use hal_core::kit::vmm::forward::VmmByCalls;
use hal_core::kit::RegisteredHost;
use hal_core::{
    AllocDesc, Capabilities, Device, DeviceInfo, Error, EventFlags, ExportOptions, Exported,
    HandleKind, ImportOptions, Location, MemRef, NotifyFlags, Result, SharedHandle,
};

use crate::context::{Ctx, DeviceRef};
use crate::ffi::result::{self, event, mem};
use crate::ffi::sys::StreamHandle;
use crate::memory::alloc::AscendAllocation;
use crate::memory::mapping::AscendMapping;
use crate::memory::raw::RawIpcKey;
use crate::sync::event::AscendEvent;
use crate::sync::notify::{AscendNotify, NotifyInner};
use crate::sync::stream::AscendStream;
use crate::vmm::physical::AscendPhysical;
use crate::vmm::reservation::AscendReservation;

/// An Ascend device.
pub struct AscendDevice {
    ctx: Arc<Ctx>,
    info: DeviceInfo,
}

impl std::fmt::Debug for AscendDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.info.fmt_device("AscendDevice", f)
    }
}

impl AscendDevice {
    pub(crate) fn new(ctx: Arc<Ctx>, info: DeviceInfo) -> AscendDevice {
        AscendDevice { ctx, info }
    }

    /// Refuse host-side work on memory that takes only device-to-device copies.
    fn host_side(&self, mem: MemRef<'_, Self>, what: &str) -> Result<()> {
        if matches!(mem, MemRef::Mapping(m) if m.device_copies_only()) {
            return Err(Error::unsupported(
                hal_core::BackendId::Ascend,
                what,
                "memory imported onto another device takes only asynchronous device-to-device \
                 copies (Device::copy_async)",
            ));
        }
        Ok(())
    }

    /// The device's context and information, as its operations take them.
    fn parts(&self) -> DeviceRef<'_> {
        DeviceRef {
            ctx: &self.ctx,
            info: &self.info,
        }
    }
}

impl AscendDevice {
    /// The raw key of `range` of `alloc` (the whole allocation by
    /// default), for a library that opens it itself with
    /// `aclrtIpcMemImportByKey` (a torch_npu-style peer): the key names the
    /// whole allocation, which must be whole pages (`Error::Misaligned`
    /// otherwise); `importers` are admitted by the runtime's pid allow-list
    /// (bare tgids, [`Device::process_id`]), or anyone. Such importers are
    /// not counted: keep `alloc` alive until they closed the key. See
    /// [`RawIpcKey`](crate::RawIpcKey).
    pub fn export_raw(
        &self,
        alloc: &AscendAllocation,
        range: Option<hal_core::ByteRange>,
        importers: &hal_core::Importers,
    ) -> Result<RawIpcKey> {
        self.enter("export_raw", Capabilities::IPC_MEMORY)?;
        if alloc.ctx.ordinal != self.ctx.ordinal {
            return Err(Error::invalid(
                "the allocation belongs to another Ascend device: export it through that device",
            ));
        }
        crate::memory::raw::export(&self.ctx, alloc, range, importers)
    }

    /// Open a raw key that another library made (the 65 key bytes, an
    /// offset and a size) on this device; the range is checked against the
    /// memory the runtime opened. With `opts.peer_access` the key is taken
    /// to name memory of another device (`ENABLE_PEER_ACCESS`; the mapping
    /// takes only device-to-device copies). Dropping the mapping closes the
    /// key (`aclrtIpcMemClose`).
    pub fn import_raw(&self, raw: &RawIpcKey, opts: &ImportOptions) -> Result<AscendMapping> {
        self.enter("import_raw", Capabilities::IPC_MEMORY)?;
        crate::memory::raw::import(&self.ctx, &self.info, raw, opts)
    }
}

impl AscendDevice {
    /// The entry guard of an operation that needs `needs`: in a child
    /// forked after the runtime was initialised, [`Error::Forked`]; then,
    /// unless the device offers every flag of `needs`, the refusal of
    /// `operation` (the entry point the runtime lacks, or what the device
    /// answers). Each runtime call the operation makes then goes through
    /// `Ctx::call`, which makes the device current on the calling thread.
    fn enter(&self, operation: &str, needs: Capabilities) -> Result<()> {
        self.ctx
            .rt
            .origin
            .check(format_args!("Ascend device {}", self.ctx.ordinal))?;
        self.require(needs, operation)
    }
}

impl Offered for AscendDevice {
    fn offered(&self) -> Capabilities {
        self.info.capabilities
    }

    /// Names the entry point this runtime lacks for `capability`.
    fn refusal(&self, operation: &str, capability: Capabilities) -> Error {
        self.ctx.rt.absent(operation, capability)
    }
}

impl StreamCalls for AscendDevice {
    fn check_stream(&self, stream: &AscendStream) -> Result<()> {
        if stream.ctx.ordinal != self.ctx.ordinal || !Arc::ptr_eq(&stream.ctx.rt, &self.ctx.rt) {
            return Err(Error::invalid(
                "the stream belongs to another Ascend device: queue work on a stream of this device",
            ));
        }
        Ok(())
    }

    fn queue_copy(&self, stream: &AscendStream, copy: StreamCopy<'_, Self>) -> Result<()> {
        let to = copy.dst.address(copy.dst_offset, copy.len)?;
        let from = copy.src.address(copy.src_offset, copy.len)?;
        let len = copy.len as usize;
        // Both ranges lie inside live device memory (bounds checked), which
        // the caller keeps alive while the stream runs.
        self.ctx
            .call(|| mem::copy_async(&self.ctx.rt, to, from, len, &stream.raw))
    }

    fn queue_write(&self, stream: &AscendStream, dst: Span<'_, Self>, data: Vec<u8>) -> Result<()> {
        self.host_side(dst.mem, "write_async")?;
        let to = dst.address()?;
        if data.is_empty() {
            return Ok(());
        }
        self.ctx.call(|| {
            let mut held = stream.holding();
            // SAFETY: the destination lies inside live device memory; the bytes
            // are held by the stream (their heap buffer does not move, and
            // nothing writes it) until it ran the copy.
            unsafe { mem::copy_from_host_async(&self.ctx.rt, to, &data, &stream.raw)? };
            held.hold(data);
            Ok(())
        })
    }

    fn queue_fill(&self, stream: &AscendStream, dst: Span<'_, Self>, value: u8) -> Result<()> {
        self.host_side(dst.mem, "memset_async")?;
        let to = dst.address()?;
        let len = dst.len as usize;
        // The range lies inside live device memory.
        self.ctx
            .call(|| mem::memset_async(&self.ctx.rt, to, value, len, &stream.raw))
    }
}

impl Device for AscendDevice {
    // Each associated type stands beside the operations that make it.
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// This process's bare tgid (`aclrtDeviceGetBareTgid`): the host's pid
    /// even inside a container, which is what allow-lists hold.
    fn process_id(&self) -> Result<u32> {
        let t = result::device::bare_tgid(&self.ctx.rt)?;
        u32::try_from(t).map_err(|_| Error::invalid(format!("the runtime gave bare tgid {t}")))
    }

    type Allocation = AscendAllocation;
    fn allocate(&self, desc: &AllocDesc) -> Result<AscendAllocation> {
        desc.check_for(self.info.ordinal)?;
        match desc.location {
            Location::Device(_) => {}
            Location::Host => {
                return Err(Error::unsupported(
                    hal_core::BackendId::Ascend,
                    "allocate host memory",
                    "this backend allocates device memory only (aclrtMalloc)",
                ))
            }
            Location::Managed => {
                return Err(self.refusal("allocate managed memory", Capabilities::MANAGED_MEMORY))
            }
        }
        AscendAllocation::allocate(&self.ctx, desc.size, desc.align, desc.placement.huge_pages)
    }

    fn export_memory(&self, alloc: &AscendAllocation, opts: &ExportOptions) -> Result<Exported> {
        self.enter("export_memory", Capabilities::IPC_MEMORY)?;
        if alloc.ctx.ordinal != self.ctx.ordinal {
            return Err(Error::invalid(
                "the allocation belongs to another Ascend device: export it through that device",
            ));
        }
        crate::memory::ipc::export(self.parts(), alloc, opts)
    }

    fn allow_importers(&self, exported: &mut Exported, pids: &[u32]) -> Result<()> {
        self.enter("allow_importers", Capabilities::PID_ALLOW_LIST)?;
        let h = exported.handle();
        h.expect(h.kind, hal_core::BackendId::Ascend)?;
        let tgids = crate::memory::ipc::tgids(pids)?;
        match h.kind {
            HandleKind::Memory => {
                let k = crate::memory::ipc::from_payload(&h.payload)?;
                crate::memory::ipc::set_import_pids(&self.ctx, &k, &tgids)?;
            }
            HandleKind::Notify => crate::sync::notify::allow(&self.ctx, &h.payload, &tgids)?,
            HandleKind::Physical => crate::vmm::allow(&self.ctx, &h.payload, &tgids)?,
            _ => {
                return Err(Error::unsupported(
                    hal_core::BackendId::Ascend,
                    "allow_importers",
                    "only memory keys, notify keys and physical handles have a pid allow-list",
                ))
            }
        }
        exported.add_importers(pids)
    }

    type HostRegistration = RegisteredHost;
    unsafe fn register_host(&self, _ptr: *mut u8, _len: u64) -> Result<RegisteredHost> {
        Err(self.refusal("register_host", Capabilities::HOST_REGISTRATION))
    }

    type Mapping = AscendMapping;
    fn import_memory(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<AscendMapping> {
        self.enter("import_memory", Capabilities::IPC_MEMORY)?;
        crate::memory::ipc::import(self.parts(), shared, opts)
    }

    type Stream = AscendStream;
    fn create_stream(&self) -> Result<AscendStream> {
        AscendStream::create(&self.ctx)
    }

    fn synchronize(&self, stream: &Self::Stream, timeout: Option<Duration>) -> Result<()> {
        methods::synchronize(self, stream, timeout)
    }

    /// Held with the stream's other held values, let go once the stream is
    /// idle.
    fn hold_until_done(&self, stream: &Self::Stream, value: Box<dyn Any + Send>) -> Result<()> {
        methods::hold_until_done(self, stream, value)
    }

    fn copy_async(
        &self,
        stream: &Self::Stream,
        dst: MemRef<'_, Self>,
        dst_offset: u64,
        src: MemRef<'_, Self>,
        src_offset: u64,
        len: u64,
    ) -> Result<()> {
        methods::copy_async(self, stream, dst, dst_offset, src, src_offset, len)
    }

    fn write_async(
        &self,
        stream: &Self::Stream,
        dst: MemRef<'_, Self>,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<()> {
        methods::write_async(self, stream, dst, offset, data)
    }

    fn memset_async(
        &self,
        stream: &Self::Stream,
        dst: MemRef<'_, Self>,
        offset: u64,
        len: u64,
        value: u8,
    ) -> Result<()> {
        methods::memset_async(self, stream, dst, offset, len, value)
    }

    fn query_stream(&self, stream: &Self::Stream) -> Result<bool> {
        methods::query_stream(self, stream)
    }

    unsafe fn wrap_stream(&self, raw: *mut c_void) -> Result<AscendStream> {
        Ok(AscendStream {
            ctx: Arc::clone(&self.ctx),
            // SAFETY: `raw` is a live stream of this device's runtime that
            // outlives the returned value and the work queued through it
            // (this method's contract).
            raw: unsafe { StreamHandle::borrowed(raw) },
            held: Default::default(),
        })
    }

    fn synchronize_device(&self, timeout: Option<Duration>) -> Result<()> {
        let ctx = Arc::clone(&self.ctx);
        // aclrtSynchronizeDevice cannot time out: a timeout leaves it to
        // finish on its thread, where the device is current.
        let sync = move || ctx.call(|| result::device::synchronize(&ctx.rt));
        let what = "the Ascend device to finish its work";
        hal_core::kit::stream::off_thread::wait("hal-ascend-synchronize", what, timeout, sync)
    }

    type Event = AscendEvent;
    fn create_event(&self, flags: EventFlags) -> Result<AscendEvent> {
        if flags.interprocess {
            self.enter("an interprocess event", Capabilities::IPC_EVENT)?;
        }
        crate::sync::event::create(&self.ctx, flags)
    }

    fn record_event(&self, stream: &AscendStream, event: &AscendEvent) -> Result<()> {
        self.check_stream(stream)?;
        self.ctx
            .call(|| event::record(&self.ctx.rt, &event.inner.raw, &stream.raw))
    }

    fn stream_wait_event(&self, stream: &AscendStream, event: &AscendEvent) -> Result<()> {
        self.check_stream(stream)?;
        self.ctx
            .call(|| event::stream_wait(&self.ctx.rt, &stream.raw, &event.inner.raw))
    }

    fn export_event(&self, event: &AscendEvent, opts: &ExportOptions) -> Result<Exported> {
        self.enter("export_event", Capabilities::IPC_EVENT)?;
        crate::sync::event::export(&self.info, event, opts)
    }

    fn import_event(&self, shared: SharedHandle, _opts: &ImportOptions) -> Result<AscendEvent> {
        self.enter("import_event", Capabilities::IPC_EVENT)?;
        crate::sync::event::import(&self.ctx, shared)
    }

    type Notify = AscendNotify;
    fn create_notify_with(&self, flags: NotifyFlags) -> Result<AscendNotify> {
        self.enter("create_notify", Capabilities::IPC_NOTIFY)?;
        NotifyInner::create(&self.ctx, flags)
    }

    fn record_notify(&self, stream: &AscendStream, notify: &AscendNotify) -> Result<()> {
        self.check_stream(stream)?;
        let mut held = stream.holding();
        notify.inner.record(&stream.raw)?;
        // The stream records the notify later: it holds the notify until then.
        held.hold(Arc::clone(&notify.inner));
        Ok(())
    }

    /// The stream waits (and resets the notify) for at most `timeout`
    /// ([`vendor_timeout`](crate::vendor_timeout): `None` is the runtime's
    /// 0, forever); past it the stream's work fails with
    /// `ACL_ERROR_RT_WAIT_TIMEOUT`, answered by the next synchronize. Only
    /// the creating process may wait.
    fn stream_wait_notify(
        &self,
        stream: &AscendStream,
        notify: &AscendNotify,
        timeout: Option<Duration>,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let mut held = stream.holding();
        notify.inner.stream_wait(&stream.raw, timeout)?;
        // The stream waits on the notify later: it holds the notify until then.
        held.hold(Arc::clone(&notify.inner));
        Ok(())
    }

    fn export_notify(&self, notify: &AscendNotify, opts: &ExportOptions) -> Result<Exported> {
        notify.inner.export(&self.info, opts)
    }

    fn import_notify(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<AscendNotify> {
        self.enter("import_notify", Capabilities::IPC_NOTIFY)?;
        NotifyInner::import(&self.ctx, &self.info, shared, opts)
    }
}

impl VmmByCalls for AscendDevice {
    type Physical = AscendPhysical;
    type Reservation = AscendReservation;
    type Calls<'a> = DeviceRef<'a>;

    /// The VMM calls, or `Unsupported` naming `operation` without VMM.
    fn vmm(&self, operation: &str) -> Result<DeviceRef<'_>> {
        self.enter(operation, Capabilities::VMM)?;
        Ok(self.parts())
    }
}

impl hal_core::testing::ContextProbe for AscendDevice {
    fn current_context(&self) -> Result<Option<u64>> {
        Ok(Ctx::current(&self.ctx.rt)?.map(|d| d as u64 + 1))
    }
}
