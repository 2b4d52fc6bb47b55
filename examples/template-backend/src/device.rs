//! The device: `impl Device` over the memory and sync types, its stream
//! methods forwarded to the kit's host-synchronous ones
//! (`kit::stream::host`), and its `Vmm` from `kit::vmm::none` (every VMM
//! call answers `Unsupported`).

use std::time::Duration;

use hal_core::kit::os::Origin;
use hal_core::kit::stream::host::{self, HostStream};
use hal_core::kit::vmm::forward::VmmByCalls;
use hal_core::kit::vmm::none::{self, NoPhysical, NoReservation, NoVmm};
use hal_core::{
    AllocDesc, Device, DeviceInfo, Error, EventFlags, ExportOptions, Exported, ImportOptions,
    MemRef, NotifyFlags, Result, SharedHandle, WaitOptions,
};

use crate::id::BACKEND_ID;
use crate::memory::{TemplateAllocation, TemplateMapping};
use crate::sync::{TemplateEvent, TemplateNotify};

/// The template's one device: host memory, events and notifies shared
/// across processes.
#[derive(Debug, Clone)]
pub struct TemplateDevice {
    info: &'static DeviceInfo,
    /// The process that opened it: a child forked from it is refused.
    origin: Origin,
}

impl TemplateDevice {
    pub(crate) fn new(info: &'static DeviceInfo) -> TemplateDevice {
        TemplateDevice {
            info,
            origin: Origin::here(),
        }
    }

    /// Refuse to be used in a child forked after the device was opened
    /// ([`Error::Forked`]).
    fn check(&self) -> Result<()> {
        self.origin.check("the template device")
    }
}

/// What a host registration is on the template: nothing, it has none.
#[derive(Debug)]
pub enum NoRegistration {}

impl hal_core::Memory for NoRegistration {
    fn addr(&self) -> u64 {
        match *self {}
    }
    fn len(&self) -> u64 {
        match *self {}
    }
    fn location(&self) -> hal_core::Location {
        match *self {}
    }
    fn host_ptr(&self) -> Option<*mut u8> {
        match *self {}
    }
    fn read(&self, _offset: u64, _dst: &mut [u8]) -> Result<()> {
        match *self {}
    }
    fn write(&self, _offset: u64, _src: &[u8]) -> Result<()> {
        match *self {}
    }
}

impl Device for TemplateDevice {
    type Allocation = TemplateAllocation;
    type Mapping = TemplateMapping;
    type Stream = HostStream;
    type Event = TemplateEvent;
    type Notify = TemplateNotify;
    type HostRegistration = NoRegistration;

    fn info(&self) -> &DeviceInfo {
        self.info
    }

    fn allocate(&self, desc: &AllocDesc) -> Result<TemplateAllocation> {
        self.check()?;
        TemplateAllocation::allocate(desc)
    }

    fn export_memory(&self, alloc: &TemplateAllocation, opts: &ExportOptions) -> Result<Exported> {
        self.check()?;
        alloc.export(opts)
    }

    fn allow_importers(&self, exported: &mut Exported, pids: &[u32]) -> Result<()> {
        self.check()?;
        exported.add_importers(pids)
    }

    /// The template registers no host memory
    /// (`Capabilities::HOST_REGISTRATION` is absent). The method is unsafe
    /// by the trait's declaration; this one touches nothing.
    #[allow(unsafe_code)]
    unsafe fn register_host(&self, _ptr: *mut u8, _len: u64) -> Result<NoRegistration> {
        Err(Error::unsupported(
            BACKEND_ID,
            "register_host",
            "the template's memory is its own memfds (Capabilities::HOST_REGISTRATION is \
             absent); allocate with Device::allocate and copy in",
        ))
    }

    fn import_memory(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<TemplateMapping> {
        self.check()?;
        TemplateMapping::import(shared, opts)
    }

    fn create_stream(&self) -> Result<HostStream> {
        self.check()?;
        host::create_stream(self)
    }

    /// Host-synchronous: everything queued has already run.
    fn synchronize(&self, stream: &HostStream, _timeout: Option<Duration>) -> Result<()> {
        self.check()?;
        host::synchronize(self, stream)
    }

    fn query_stream(&self, stream: &HostStream) -> Result<bool> {
        self.check()?;
        host::query_stream(self, stream)
    }

    /// Host-synchronous: nothing is ever left to run.
    fn synchronize_device(&self, _timeout: Option<Duration>) -> Result<()> {
        self.check()
    }

    fn copy_async(
        &self,
        stream: &HostStream,
        dst: MemRef<'_, Self>,
        dst_offset: u64,
        src: MemRef<'_, Self>,
        src_offset: u64,
        len: u64,
    ) -> Result<()> {
        self.check()?;
        host::copy_async(self, stream, dst, dst_offset, src, src_offset, len)
    }

    fn write_async(
        &self,
        stream: &HostStream,
        dst: MemRef<'_, Self>,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<()> {
        self.check()?;
        host::write_async(self, stream, dst, offset, &data)
    }

    fn memset_async(
        &self,
        stream: &HostStream,
        dst: MemRef<'_, Self>,
        offset: u64,
        len: u64,
        value: u8,
    ) -> Result<()> {
        self.check()?;
        host::memset_async(self, stream, dst, offset, len, value)
    }

    fn create_event(&self, flags: EventFlags) -> Result<TemplateEvent> {
        self.check()?;
        TemplateEvent::create(flags)
    }

    fn record_event(&self, stream: &HostStream, event: &TemplateEvent) -> Result<()> {
        self.check()?;
        stream.check(self.info)?;
        event.record()
    }

    fn stream_wait_event(&self, stream: &HostStream, event: &TemplateEvent) -> Result<()> {
        self.check()?;
        stream.check(self.info)?;
        hal_core::Event::wait(event, WaitOptions::default())
    }

    fn export_event(&self, event: &TemplateEvent, opts: &ExportOptions) -> Result<Exported> {
        self.check()?;
        event.export(opts)
    }

    fn import_event(&self, shared: SharedHandle, _opts: &ImportOptions) -> Result<TemplateEvent> {
        self.check()?;
        TemplateEvent::import(shared)
    }

    fn create_notify_with(&self, flags: NotifyFlags) -> Result<TemplateNotify> {
        self.check()?;
        TemplateNotify::create(flags)
    }

    fn record_notify(&self, stream: &HostStream, notify: &TemplateNotify) -> Result<()> {
        self.check()?;
        stream.check(self.info)?;
        notify.record()
    }

    fn stream_wait_notify(
        &self,
        stream: &HostStream,
        notify: &TemplateNotify,
        timeout: Option<Duration>,
    ) -> Result<()> {
        self.check()?;
        stream.check(self.info)?;
        notify.stream_wait(WaitOptions {
            timeout,
            ..WaitOptions::default()
        })
    }

    fn export_notify(&self, notify: &TemplateNotify, opts: &ExportOptions) -> Result<Exported> {
        self.check()?;
        notify.export(opts)
    }

    fn import_notify(&self, shared: SharedHandle, _opts: &ImportOptions) -> Result<TemplateNotify> {
        self.check()?;
        TemplateNotify::import(shared)
    }
}

/// No VMM: every VMM operation answers `Unsupported` naming itself.
impl VmmByCalls for TemplateDevice {
    type Physical = NoPhysical;
    type Reservation = NoReservation;
    type Calls<'a> = NoVmm;

    fn vmm(&self, operation: &str) -> Result<NoVmm> {
        self.check()?;
        Err(none::unsupported(self.info, operation))
    }
}

impl hal_core::testing::ContextProbe for TemplateDevice {
    /// The template has no vendor contexts.
    fn current_context(&self) -> Result<Option<u64>> {
        Ok(None)
    }
}
