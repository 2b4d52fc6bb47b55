//! The blanket implementations that make every `B: Backend` a
//! [`DynBackend`] and every `D: Device` a [`DynDevice`].

use std::any::Any;
use std::time::Duration;

use crate::backend::Backend;
use crate::device::{Device, Memory};
use crate::dynamic::own::own;
use crate::dynamic::traits::{
    DynAllocation, DynBackend, DynDevice, DynEvent, DynMapping, DynMemRef, DynNotify, DynStream,
};
use crate::dynamic::vmm::DynVmm;
use crate::error::Result;
use crate::handle::SharedHandle;
use crate::types::{
    Advice, AllocDesc, Availability, BackendId, DeviceInfo, EventFlags, ExportOptions,
    ImportOptions, Location,
};
use crate::vmm::Vmm;
use crate::Exported;

impl<B> DynBackend for B
where
    B: Backend,
    B::Device: DynDevice,
{
    fn id(&self) -> BackendId {
        Backend::id(self)
    }

    fn name(&self) -> String {
        Backend::id(self).name()
    }

    fn availability(&self) -> Availability {
        Backend::availability(self)
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        Backend::devices(self)
    }

    fn open(&self, ordinal: u32) -> Result<Box<dyn DynDevice>> {
        Ok(Box::new(Backend::open(self, ordinal)?))
    }
}

/// The box a backend's stream travels in through [`DynDevice::create_stream`].
struct StreamOf<S>(S);

impl<S: Send + Sync + 'static> DynStream for StreamOf<S> {
    fn as_any(&self) -> &dyn Any {
        &self.0
    }
}

impl<D> DynDevice for D
where
    D: Vmm,
    D::Allocation: 'static,
    D::Mapping: 'static,
    D::Event: 'static,
    D::Notify: 'static,
    D::Physical: 'static,
    D::Reservation: 'static,
    D::HostRegistration: 'static,
{
    fn info(&self) -> &DeviceInfo {
        Device::info(self)
    }

    fn process_id(&self) -> Result<u32> {
        Device::process_id(self)
    }

    fn allocate(&self, desc: &AllocDesc) -> Result<Box<dyn DynAllocation>> {
        Ok(Box::new(Device::allocate(self, desc)?))
    }

    unsafe fn adopt_memory(&self, addr: u64, len: u64) -> Result<Box<dyn DynAllocation>> {
        // SAFETY: the caller gives the promise of `Device::adopt_memory`.
        Ok(Box::new(unsafe { Device::adopt_memory(self, addr, len) }?))
    }

    unsafe fn register_host(&self, ptr: *mut u8, len: u64) -> Result<Box<dyn Memory>> {
        // SAFETY: the caller gives the promise of `Device::register_host`.
        Ok(Box::new(unsafe { Device::register_host(self, ptr, len) }?))
    }

    fn export_memory(&self, alloc: &dyn DynAllocation, opts: &ExportOptions) -> Result<Exported> {
        let alloc = own::<D::Allocation>(alloc.as_any(), Device::info(self), "allocation")?;
        Device::export_memory(self, alloc, opts)
    }

    fn allow_importers(&self, exported: &mut Exported, pids: &[u32]) -> Result<()> {
        Device::allow_importers(self, exported, pids)
    }

    fn import_memory(
        &self,
        shared: SharedHandle,
        opts: &ImportOptions,
    ) -> Result<Box<dyn DynMapping>> {
        Ok(Box::new(Device::import_memory(self, shared, opts)?))
    }

    fn import_memory_batch(
        &self,
        shared: Vec<SharedHandle>,
        opts: &ImportOptions,
    ) -> Vec<Result<Box<dyn DynMapping>>> {
        Device::import_memory_batch(self, shared, opts)
            .into_iter()
            .map(|r| r.map(|m| Box::new(m) as Box<dyn DynMapping>))
            .collect()
    }

    fn create_stream(&self) -> Result<Box<dyn DynStream>> {
        Ok(Box::new(StreamOf(Device::create_stream(self)?)))
    }

    fn synchronize(&self, stream: &dyn DynStream, timeout: Option<Duration>) -> Result<()> {
        let stream = own::<D::Stream>(stream.as_any(), Device::info(self), "stream")?;
        Device::synchronize(self, stream, timeout)
    }

    fn copy_async(
        &self,
        stream: &dyn DynStream,
        dst: DynMemRef<'_>,
        dst_offset: u64,
        src: DynMemRef<'_>,
        src_offset: u64,
        len: u64,
    ) -> Result<()> {
        let info = Device::info(self);
        let stream = own::<D::Stream>(stream.as_any(), info, "stream")?;
        let dst = dst.own::<D>(info)?;
        let src = src.own::<D>(info)?;
        Device::copy_async(self, stream, dst, dst_offset, src, src_offset, len)
    }

    fn write_async(
        &self,
        stream: &dyn DynStream,
        dst: DynMemRef<'_>,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<()> {
        let info = Device::info(self);
        let stream = own::<D::Stream>(stream.as_any(), info, "stream")?;
        Device::write_async(self, stream, dst.own::<D>(info)?, offset, data)
    }

    fn memset_async(
        &self,
        stream: &dyn DynStream,
        dst: DynMemRef<'_>,
        offset: u64,
        len: u64,
        value: u8,
    ) -> Result<()> {
        let info = Device::info(self);
        let stream = own::<D::Stream>(stream.as_any(), info, "stream")?;
        Device::memset_async(self, stream, dst.own::<D>(info)?, offset, len, value)
    }

    fn advise(&self, mem: DynMemRef<'_>, offset: u64, len: u64, advice: Advice) -> Result<()> {
        let mem = mem.own::<D>(Device::info(self))?;
        Device::advise(self, mem, offset, len, advice)
    }

    fn prefetch_async(
        &self,
        stream: &dyn DynStream,
        mem: DynMemRef<'_>,
        offset: u64,
        len: u64,
        to: Location,
    ) -> Result<()> {
        let info = Device::info(self);
        let stream = own::<D::Stream>(stream.as_any(), info, "stream")?;
        Device::prefetch_async(self, stream, mem.own::<D>(info)?, offset, len, to)
    }

    fn query_stream(&self, stream: &dyn DynStream) -> Result<bool> {
        let stream = own::<D::Stream>(stream.as_any(), Device::info(self), "stream")?;
        Device::query_stream(self, stream)
    }

    fn synchronize_device(&self, timeout: Option<Duration>) -> Result<()> {
        Device::synchronize_device(self, timeout)
    }

    fn create_event(&self, flags: EventFlags) -> Result<Box<dyn DynEvent>> {
        Ok(Box::new(Device::create_event(self, flags)?))
    }

    fn record_event(&self, stream: &dyn DynStream, event: &dyn DynEvent) -> Result<()> {
        let info = Device::info(self);
        let stream = own::<D::Stream>(stream.as_any(), info, "stream")?;
        let event = own::<D::Event>(event.as_any(), info, "event")?;
        Device::record_event(self, stream, event)
    }

    fn stream_wait_event(&self, stream: &dyn DynStream, event: &dyn DynEvent) -> Result<()> {
        let info = Device::info(self);
        let stream = own::<D::Stream>(stream.as_any(), info, "stream")?;
        let event = own::<D::Event>(event.as_any(), info, "event")?;
        Device::stream_wait_event(self, stream, event)
    }

    fn export_event(&self, event: &dyn DynEvent, opts: &ExportOptions) -> Result<Exported> {
        let event = own::<D::Event>(event.as_any(), Device::info(self), "event")?;
        Device::export_event(self, event, opts)
    }

    fn import_event(
        &self,
        shared: SharedHandle,
        opts: &ImportOptions,
    ) -> Result<Box<dyn DynEvent>> {
        Ok(Box::new(Device::import_event(self, shared, opts)?))
    }

    fn create_notify_with(&self, flags: crate::NotifyFlags) -> Result<Box<dyn DynNotify>> {
        Ok(Box::new(Device::create_notify_with(self, flags)?))
    }

    fn record_notify(&self, stream: &dyn DynStream, notify: &dyn DynNotify) -> Result<()> {
        let info = Device::info(self);
        let stream = own::<D::Stream>(stream.as_any(), info, "stream")?;
        let notify = own::<D::Notify>(notify.as_any(), info, "notify")?;
        Device::record_notify(self, stream, notify)
    }

    fn stream_wait_notify(
        &self,
        stream: &dyn DynStream,
        notify: &dyn DynNotify,
        timeout: Option<Duration>,
    ) -> Result<()> {
        let info = Device::info(self);
        let stream = own::<D::Stream>(stream.as_any(), info, "stream")?;
        let notify = own::<D::Notify>(notify.as_any(), info, "notify")?;
        Device::stream_wait_notify(self, stream, notify, timeout)
    }

    fn export_notify(&self, notify: &dyn DynNotify, opts: &ExportOptions) -> Result<Exported> {
        let notify = own::<D::Notify>(notify.as_any(), Device::info(self), "notify")?;
        Device::export_notify(self, notify, opts)
    }

    fn import_notify(
        &self,
        shared: SharedHandle,
        opts: &ImportOptions,
    ) -> Result<Box<dyn DynNotify>> {
        Ok(Box::new(Device::import_notify(self, shared, opts)?))
    }

    fn vmm(&self) -> &dyn DynVmm {
        self
    }
}
