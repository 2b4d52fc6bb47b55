//! [`CudaDevice`]: one device of the driver, its primary context, and the
//! operations of the contract this backend offers (allocation, host
//! copies, streams, events; VMM through `vmm/ops.rs`). What it does not
//! offer answers [`Error::Unsupported`], and its capabilities say so.
//!
//! Work queued on a stream that reads or writes host memory later (a
//! write's bytes, a registration, a notify's page) is queued here, where
//! the stream is made to hold that memory until it ran the work.

use std::any::Any;
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::time::Duration;

use hal_core::kit::stream::methods::{self, Span, StreamCalls, StreamCopy, VendorStream};
use hal_core::kit::vendor::needs::Offered;
use hal_core::kit::vmm::forward::VmmByCalls;
use hal_core::kit::RegisteredHost;
use hal_core::{
    Advice, AllocDesc, Capabilities, Device, DeviceInfo, Error, EventFlags, ExportOptions,
    Exported, ImportOptions, Location, MemRef, NotifyFlags, Result, SharedHandle,
};

use crate::context::Primary;
use crate::ffi::result::{self, ctx, device, mem, stream};
use crate::ffi::{CUdevice, CUdeviceptr, Driver, Stream};
use crate::memory::alloc::CudaAllocation;
use crate::memory::host;
use crate::memory::ipc::CudaMapping;
use crate::memory::raw::RawIpcHandle;
use crate::sync::event::CudaEvent;
use crate::sync::notify::{CudaNotify, WAIT_VALUE_EQ};
use crate::sync::stream::CudaStream;
use crate::vmm::ops::Vmm;
use crate::vmm::physical::CudaPhysical;
use crate::vmm::reservation::CudaReservation;

/// `CU_STREAM_NON_BLOCKING`: no implicit order with the legacy stream.
const STREAM_NON_BLOCKING: u32 = 1;

/// A CUDA device: its primary context, retained while the device lives.
pub struct CudaDevice {
    pub(crate) primary: Arc<Primary>,
    info: DeviceInfo,
    /// `CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED`.
    fabric: bool,
    /// How many devices the driver sees (access lists name them).
    device_count: u32,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.info.fmt_device("CudaDevice", f)
    }
}

impl CudaDevice {
    pub(crate) fn open(driver: Arc<Driver>, dev: CUdevice, info: DeviceInfo) -> Result<CudaDevice> {
        use cudarc::driver::sys::CUdevice_attribute as A;
        let fabric = info.capabilities.contains(Capabilities::VMM)
            && device::attribute(
                &driver,
                dev,
                A::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED as c_int,
            )? != 0;
        let device_count = device::count(&driver)?;
        Ok(CudaDevice {
            primary: Arc::new(Primary::retain(driver, dev)?),
            info,
            fabric,
            device_count,
        })
    }

    fn driver(&self) -> &Driver {
        &self.primary.driver
    }

    /// The address of a managed-memory range, after the checks of the
    /// managed operations: the capability, managed memory (other memory is
    /// refused as the driver does, `CUDA_ERROR_INVALID_VALUE`), the range.
    fn managed_range(
        &self,
        operation: &str,
        mem: MemRef<'_, Self>,
        offset: u64,
        len: u64,
    ) -> Result<CUdeviceptr> {
        self.require(Capabilities::MANAGED_MEMORY, operation)?;
        let m = mem.memory();
        if m.location() != Location::Managed {
            return Err(Error::Vendor(hal_core::VendorError {
                backend: "cuda".into(),
                code: hal_core::kit::vendor::cuda::INVALID_VALUE.code,
                name: hal_core::kit::vendor::cuda::INVALID_VALUE.name.into(),
                message: format!(
                    "{operation}: the memory is {:?}, not managed memory",
                    m.location()
                ),
            }));
        }
        mem.address(offset, len)
    }

    /// How many exported allocations of other processes this process holds
    /// open on this device: each is opened once (`cuIpcOpenMemHandle_v2`)
    /// however many imports of its ranges are alive, and closed when the
    /// last of them drops.
    pub fn ipc_opens(&self) -> usize {
        crate::memory::ipc::open_count(self.primary.device)
    }

    /// The raw legacy IPC handle of `range` of `alloc` (the whole
    /// allocation by default), for a library that opens it itself with
    /// `cuIpcOpenMemHandle` (PyTorch's CUDA storage sharing sends these).
    /// Such importers are not counted: keep `alloc` alive until they
    /// closed it. See [`RawIpcHandle`](crate::RawIpcHandle).
    pub fn export_raw(
        &self,
        alloc: &CudaAllocation,
        range: Option<hal_core::ByteRange>,
    ) -> Result<RawIpcHandle> {
        self.require(Capabilities::IPC_MEMORY, "export_raw")?;
        if !Arc::ptr_eq(&alloc.primary, &self.primary) {
            return Err(Error::invalid(
                "the allocation belongs to another CUDA device: export it through that device",
            ));
        }
        crate::memory::raw::export(&self.primary, alloc, range)
    }

    /// Open a raw legacy IPC handle that another library made (the 64
    /// bytes of the base, an offset and a size) on this device. Opens
    /// share the per-process cache with hal's own imports; the range is
    /// checked against the allocation's size as the driver opened it.
    pub fn import_raw(&self, raw: &RawIpcHandle) -> Result<CudaMapping> {
        self.require(Capabilities::IPC_MEMORY, "import_raw")?;
        crate::memory::raw::import(&self.primary, &self.info, raw)
    }

    /// Queue the notify's signal on `stream` (`cuStreamWriteValue32` of
    /// 1); the caller makes the stream hold the notify until it ran it.
    fn queue_notify_record(&self, stream: &CudaStream, notify: &CudaNotify) -> Result<()> {
        let word = notify.device_word(&self.primary)?;
        let _ctx = self.primary.enter()?;
        // SAFETY: the word is in the notify's page, registered (and mapped)
        // as long as the notify lives and never unmapped before its
        // registration ended; the stream holds a clone of the notify until
        // it ran the write (`record_notify`).
        unsafe { stream::write_value32(self.driver(), stream.raw, word, 1, 0) }
    }

    /// Queue on `stream` a wait for the notify's signal and its reset
    /// (`cuStreamWaitValue32` equal to 1, then `cuStreamWriteValue32` of
    /// 0), tracked by the context's quiet (`sync/quiet.rs`); the caller
    /// makes the stream hold the notify until it passed.
    fn queue_notify_wait(&self, stream: &CudaStream, notify: &CudaNotify) -> Result<()> {
        let word = notify.device_word(&self.primary)?;
        let driver = self.driver();
        let _ctx = self.primary.enter()?;
        // Both entry points asked for before either is queued.
        result::has(driver.stream_wait_value32())?;
        result::has(driver.stream_write_value32())?;
        self.primary.quiet.track(driver, stream.raw, || {
            // SAFETY: as in `queue_notify_record`; the stream holds the
            // notify until it passed the wait and ran the reset
            // (`stream_wait_notify`).
            unsafe { stream::wait_value32(driver, stream.raw, word, 1, WAIT_VALUE_EQ) }?;
            // SAFETY: as above.
            unsafe { stream::write_value32(driver, stream.raw, word, 0, 0) }
        })
    }
}

/// The bare stream memory operations `halctl bench` measures hal's notifies
/// against (the rest of the baselines are in `baseline.rs`).
#[cfg(feature = "baselines")]
impl CudaDevice {
    /// Queue a bare `cuStreamWaitValue32` on `stream`: later work waits
    /// until the word at the device address `addr` equals `value`. What a
    /// stream's wait on a shared word costs at the least (hal's
    /// `stream_wait_notify` also resets the word and holds the notify).
    /// For benchmarks.
    ///
    /// # Safety
    ///
    /// `addr` is this device's address of a 4-byte aligned word of host
    /// memory registered with it, which stays registered and mapped until
    /// the stream ran the wait.
    pub unsafe fn bare_stream_wait_value32(
        &self,
        stream: &CudaStream,
        addr: u64,
        value: u32,
    ) -> Result<()> {
        let _ctx = self.primary.enter()?;
        // SAFETY: the caller's promise on `addr`.
        unsafe { stream::wait_value32(self.driver(), stream.raw, addr, value, WAIT_VALUE_EQ) }
    }

    /// Queue a bare `cuStreamWriteValue32` of `value` to the word at the
    /// device address `addr` on `stream`. For benchmarks.
    ///
    /// # Safety
    ///
    /// As [`CudaDevice::bare_stream_wait_value32`].
    pub unsafe fn bare_stream_write_value32(
        &self,
        stream: &CudaStream,
        addr: u64,
        value: u32,
    ) -> Result<()> {
        let _ctx = self.primary.enter()?;
        // SAFETY: the caller's promise on `addr`.
        unsafe { stream::write_value32(self.driver(), stream.raw, addr, value, 0) }
    }
}

/// The host address of byte `offset` of `mem` when it is host memory the
/// CPU copies in stream order (a registration, pinned host memory).
fn host_side(mem: MemRef<'_, CudaDevice>, offset: u64) -> Option<u64> {
    match mem {
        MemRef::Registered(r) => Some(r.range().addr() + offset),
        MemRef::Allocation(a) if hal_core::Memory::location(a) == Location::Host => {
            hal_core::Memory::host_ptr(a).map(|p| p as u64 + offset)
        }
        _ => None,
    }
}

/// Hold the registrations among `sides` with the stream: the driver reaches
/// their pages until it ran the work, so they stay registered until then
/// (the clone's drop unregisters when it is the last).
fn hold_registered<const N: usize>(
    held: &mut hal_core::kit::stream::queued::Holding<'_>,
    sides: [MemRef<'_, CudaDevice>; N],
) {
    for side in sides {
        if let MemRef::Registered(r) = side {
            held.hold(r.clone());
        }
    }
}

impl Offered for CudaDevice {
    fn offered(&self) -> Capabilities {
        self.info.capabilities
    }

    /// Names the entry point this driver lacks for `capability`, or else
    /// the attribute the device answers 0.
    fn refusal(&self, operation: &str, capability: Capabilities) -> Error {
        self.primary
            .driver
            .absent(operation, capability, self.primary.device)
    }
}

impl StreamCalls for CudaDevice {
    fn check_stream(&self, stream: &CudaStream) -> Result<()> {
        self.primary.check_origin()?;
        if !Arc::ptr_eq(&stream.primary, &self.primary) {
            return Err(Error::invalid(
                "the stream belongs to another CUDA device: queue work on a stream of this device",
            ));
        }
        Ok(())
    }

    fn queue_copy(&self, stream: &CudaStream, copy: StreamCopy<'_, Self>) -> Result<()> {
        let StreamCopy {
            dst,
            dst_offset,
            src,
            src_offset,
            len,
        } = copy;
        let to = dst.address(dst_offset, len)?;
        let from = src.address(src_offset, len)?;
        let driver = self.driver();
        let _ctx = self.primary.enter()?;
        let mut held = stream.holding();
        match (host_side(dst, dst_offset), host_side(src, src_offset)) {
            // Host to host: a host function, never a `cuMemcpyAsync` that
            // waits for the stream (`memory/host.rs`).
            (Some(to), Some(from)) if len > 0 => {
                // SAFETY: both ranges lie inside live host memory of this
                // device (bounds checked): pinned allocations the driver
                // keeps until the copy ran (their free waits for the
                // device), registrations the stream holds below.
                unsafe { host::queue_copy(driver, stream.raw, to, from, len) }?
            }
            _ => {
                // SAFETY: both ranges lie inside live memory of this device
                // (bounds checked): allocations and mappings the driver
                // keeps until the copy ran (a free waits for the device),
                // registrations the stream holds below.
                unsafe { mem::copy_async(driver, to, from, len as usize, stream.raw) }?;
            }
        }
        hold_registered(&mut held, [dst, src]);
        Ok(())
    }

    fn queue_write(&self, stream: &CudaStream, dst: Span<'_, Self>, data: Vec<u8>) -> Result<()> {
        let to = dst.address()?;
        let driver = self.driver();
        let _ctx = self.primary.enter()?;
        let mut held = stream.holding();
        // SAFETY: the destination lies inside live memory of this device (a
        // registration is held by the stream below); the bytes are held by
        // the stream (their heap buffer does not move) until it ran the
        // copy.
        unsafe { mem::copy_to_device_async(driver, to, data.as_ptr(), data.len(), stream.raw) }?;
        held.hold(data);
        hold_registered(&mut held, [dst.mem]);
        Ok(())
    }

    fn queue_fill(&self, stream: &CudaStream, dst: Span<'_, Self>, value: u8) -> Result<()> {
        let to = dst.address()?;
        let driver = self.driver();
        let _ctx = self.primary.enter()?;
        let mut held = stream.holding();
        // SAFETY: the range lies inside live memory of this device (a
        // registration is held by the stream below).
        unsafe { mem::set_async(driver, to, value, dst.len as usize, stream.raw) }?;
        hold_registered(&mut held, [dst.mem]);
        Ok(())
    }
}

impl Device for CudaDevice {
    // Each associated type stands beside the operations that make it.
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    type Allocation = CudaAllocation;
    fn allocate(&self, desc: &AllocDesc) -> Result<CudaAllocation> {
        self.primary.check_origin()?;
        desc.check_for(self.info.ordinal)?;
        let size = usize::try_from(desc.size).map_err(|_| Error::invalid("size too large"))?;
        if desc.location == Location::Managed {
            self.require(Capabilities::MANAGED_MEMORY, "allocate managed memory")?;
        }
        // Memory this process freed may still be on its way back
        // (`memory/alloc.rs`): a refusal for lack of it waits for those frees.
        let ptr = hal_core::kit::stream::teardown::when_freed(
            hal_core::kit::stream::teardown::PATIENCE,
            crate::memory::alloc::out_of_memory,
            || crate::memory::alloc::allocate(&self.primary, desc.location, size),
        )?;
        let alloc = CudaAllocation {
            primary: Arc::clone(&self.primary),
            ptr,
            len: desc.size,
            location: desc.location,
            counts_importers: self.info.capabilities.contains(Capabilities::LEASES),
            exports: std::sync::OnceLock::new(),
            owned: true,
        };
        if desc.align > 1 && ptr % desc.align != 0 {
            return Err(Error::invalid(format!(
                "the driver returned {ptr:#x}, not aligned to {:#x}; CUDA aligns allocations to \
                 at least 256 bytes",
                desc.align
            )));
        }
        Ok(alloc)
    }

    fn export_memory(&self, alloc: &CudaAllocation, opts: &ExportOptions) -> Result<Exported> {
        self.primary.check_origin()?;
        crate::memory::ipc::exportable(alloc)?;
        self.require(Capabilities::IPC_MEMORY, "export_memory")?;
        if !Arc::ptr_eq(&alloc.primary, &self.primary) {
            return Err(Error::invalid(
                "the allocation belongs to another CUDA device: export it through that device",
            ));
        }
        crate::memory::ipc::export(&self.primary, &self.info, alloc, opts)
    }

    unsafe fn adopt_memory(&self, addr: u64, len: u64) -> Result<CudaAllocation> {
        self.primary.check_origin()?;
        crate::memory::adopt::adopt(&self.primary, &self.info, addr, len)
    }

    fn allow_importers(&self, _exported: &mut Exported, _pids: &[u32]) -> Result<()> {
        self.primary.check_origin()?;
        Err(self.refusal("allow_importers", Capabilities::PID_ALLOW_LIST))
    }

    type HostRegistration = RegisteredHost;
    unsafe fn register_host(&self, ptr: *mut u8, len: u64) -> Result<RegisteredHost> {
        self.primary.check_origin()?;
        self.require(Capabilities::HOST_REGISTRATION, "register_host")?;
        // SAFETY: the caller gives `register_host`'s promise.
        let range = unsafe { hal_core::kit::os::HostRange::new(ptr, len) }?;
        crate::memory::registration::register(&self.primary, range)
    }

    fn advise(&self, mem: MemRef<'_, Self>, offset: u64, len: u64, advice: Advice) -> Result<()> {
        self.primary.check_origin()?;
        let ptr = self.managed_range("advise", mem, offset, len)?;
        crate::memory::managed::advise(&self.primary, ptr, len, advice)
    }

    fn prefetch_async(
        &self,
        stream: &CudaStream,
        mem: MemRef<'_, Self>,
        offset: u64,
        len: u64,
        to: Location,
    ) -> Result<()> {
        self.primary.check_origin()?;
        self.check_stream(stream)?;
        let ptr = self.managed_range("prefetch_async", mem, offset, len)?;
        crate::memory::managed::prefetch(&self.primary, stream.raw, ptr, len, to)
    }

    type Mapping = CudaMapping;
    fn import_memory(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<CudaMapping> {
        self.primary.check_origin()?;
        self.require(Capabilities::IPC_MEMORY, "import_memory")?;
        crate::memory::ipc::import(&self.primary, &self.info, shared, opts)
    }

    type Stream = CudaStream;
    fn create_stream(&self) -> Result<CudaStream> {
        self.primary.check_origin()?;
        let _ctx = self.primary.enter()?;
        let raw = stream::create(self.driver(), STREAM_NON_BLOCKING)?;
        Ok(CudaStream {
            primary: Arc::clone(&self.primary),
            raw,
            owned: true,
            held: Default::default(),
        })
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

    unsafe fn wrap_stream(&self, raw: *mut c_void) -> Result<CudaStream> {
        self.primary.check_origin()?;
        Ok(CudaStream {
            primary: Arc::clone(&self.primary),
            raw: Stream(raw.cast()),
            owned: false,
            held: Default::default(),
        })
    }

    fn synchronize_device(&self, timeout: Option<Duration>) -> Result<()> {
        self.primary.check_origin()?;
        let primary = Arc::clone(&self.primary);
        // cuCtxSynchronize cannot time out: a timeout leaves it to finish
        // on its thread.
        let what = "the CUDA device to finish its work";
        hal_core::kit::stream::off_thread::wait("hal-cuda-synchronize", what, timeout, move || {
            let _ctx = primary.enter()?;
            result::has(primary.driver.ctx_synchronize())?;
            // Only once no stream waits for a notify: the wait would hold
            // the driver until it was signalled (`sync/quiet.rs`).
            let _quiet = primary.quiet.hold();
            // The device's context is current on this thread.
            ctx::synchronize(&primary.driver)
        })
    }

    type Event = CudaEvent;
    fn create_event(&self, flags: EventFlags) -> Result<CudaEvent> {
        self.primary.check_origin()?;
        if flags.interprocess {
            self.require(Capabilities::IPC_EVENT, "an interprocess event")?;
        }
        crate::sync::event::create(&self.primary, flags)
    }

    /// Records the event; an interprocess event made past the cap on live
    /// IPC events (1000) is recorded and then the stream synchronized.
    fn record_event(&self, stream: &CudaStream, event: &CudaEvent) -> Result<()> {
        self.primary.check_origin()?;
        self.check_stream(stream)?;
        crate::sync::event::record(&self.primary, stream, event)
    }

    fn stream_wait_event(&self, stream: &CudaStream, event: &CudaEvent) -> Result<()> {
        self.primary.check_origin()?;
        self.check_stream(stream)?;
        let _ctx = self.primary.enter()?;
        stream::wait_event(self.driver(), stream.raw, event.inner.raw)
    }

    fn export_event(&self, event: &CudaEvent, opts: &ExportOptions) -> Result<Exported> {
        self.primary.check_origin()?;
        self.require(Capabilities::IPC_EVENT, "export_event")?;
        if !Arc::ptr_eq(&event.inner.primary, &self.primary) {
            return Err(Error::invalid(
                "the event belongs to another CUDA device: export it through that device",
            ));
        }
        crate::sync::event::export(&self.info, event, opts)
    }

    fn import_event(&self, shared: SharedHandle, _opts: &ImportOptions) -> Result<CudaEvent> {
        self.primary.check_origin()?;
        self.require(Capabilities::IPC_EVENT, "import_event")?;
        crate::sync::event::import(&self.primary, &self.info, shared)
    }

    type Notify = CudaNotify;
    fn create_notify_with(&self, flags: NotifyFlags) -> Result<CudaNotify> {
        self.primary.check_origin()?;
        if flags.device_only {
            self.require(Capabilities::STREAM_ORDERED_NOTIFY, "a device-only notify")?;
        }
        CudaNotify::create(flags)
    }

    fn record_notify(&self, stream: &CudaStream, notify: &CudaNotify) -> Result<()> {
        self.primary.check_origin()?;
        self.require(Capabilities::STREAM_ORDERED_NOTIFY, "record_notify")?;
        self.check_stream(stream)?;
        let mut held = stream.holding();
        self.queue_notify_record(stream, notify)?;
        // The stream writes the notify's page: it holds the page until then.
        held.hold(notify.clone());
        Ok(())
    }

    /// The stream waits until the notify is signalled, with no bound: a
    /// device cannot give up a wait (`cuStreamWaitValue32`), so `timeout`
    /// is not enforced here; bound the wait with
    /// [`Device::synchronize`]'s timeout instead.
    fn stream_wait_notify(
        &self,
        stream: &CudaStream,
        notify: &CudaNotify,
        _timeout: Option<Duration>,
    ) -> Result<()> {
        self.primary.check_origin()?;
        self.require(Capabilities::STREAM_ORDERED_NOTIFY, "stream_wait_notify")?;
        self.check_stream(stream)?;
        let mut held = stream.holding();
        let queued = self.queue_notify_wait(stream, notify);
        // Held even when only the wait was queued: the stream reads the
        // notify's page until it passed.
        held.hold(notify.clone());
        queued
    }

    fn export_notify(&self, notify: &CudaNotify, opts: &ExportOptions) -> Result<Exported> {
        self.primary.check_origin()?;
        notify.export(&self.info, opts)
    }

    fn import_notify(&self, shared: SharedHandle, _opts: &ImportOptions) -> Result<CudaNotify> {
        self.primary.check_origin()?;
        CudaNotify::import(shared)
    }
}

impl VmmByCalls for CudaDevice {
    type Physical = CudaPhysical;
    type Reservation = CudaReservation;
    type Calls<'a> = Vmm<'a>;

    /// The VMM calls, once the device has [`Capabilities::VMM`].
    fn vmm(&self, operation: &str) -> Result<Vmm<'_>> {
        self.primary.check_origin()?;
        self.require(Capabilities::VMM, operation)?;
        Ok(Vmm {
            primary: &self.primary,
            info: &self.info,
            fabric: self.fabric,
            device_count: self.device_count,
        })
    }
}

impl hal_core::testing::ContextProbe for CudaDevice {
    fn current_context(&self) -> Result<Option<u64>> {
        self.primary.check_origin()?;
        ctx::current(self.driver())
    }
}
