//! The object-safe mirror of the traits, for choosing a backend at run time.
//!
//! The traits of [`crate::device`] use associated types, so a program that
//! knows its backend at compile time pays no dynamic dispatch. A program that
//! picks a backend at run time (from a configuration file, a command-line
//! flag, or by probing the machine) speaks this module instead:
//!
//! - [`DynBackend`] and [`DynDevice`] have the same operations as
//!   [`Backend`] and [`Device`], with every resource boxed as a trait object;
//! - blanket implementations make every `B: Backend` a [`DynBackend`] and
//!   every `D: Device` a [`DynDevice`], so a backend crate writes nothing for
//!   this layer;
//! - every boxed resource has `as_any()`, to get the backend's own type back
//!   with `Any::downcast_ref`.
//!
//! A resource passed to a device must come from that device's backend: one
//! from another backend is refused with [`Error::InvalidArgument`], never a
//! panic. Resources are told apart by their concrete type; backends whose
//! instances share resource types (the simulator's CUDA and Ascend profiles)
//! check the owner of a resource themselves.
//!
//! ```
//! use hal_core::dynamic::{DynBackend, DynDevice};
//! use hal_core::{AllocDesc, Capabilities, Result};
//!
//! /// Fill a buffer on whatever backend the caller chose.
//! fn fill(backend: &dyn DynBackend, byte: u8) -> Result<()> {
//!     let device = backend.open(0)?;
//!     let desc = if device.info().capabilities.contains(Capabilities::HOST_VISIBLE) {
//!         AllocDesc::host(4096)
//!     } else {
//!         AllocDesc::device(device.info().ordinal, 4096)
//!     };
//!     let buffer = device.allocate(&desc)?;
//!     buffer.write(0, &[byte; 4096])?;
//!     Ok(())
//! }
//! ```

use std::any::Any;
use std::time::Duration;

use crate::device::{
    Allocation, Backend, Device, Event, FreeError, Mapping, Memory, Notify, Physical, Reservation,
};
use crate::error::{Error, Result};
use crate::handle::{Handle, SharedHandle};
use crate::types::{
    Access, Advice, AllocDesc, Availability, BackendId, Capabilities, DeviceInfo, EventFlags,
    ExportOptions, Granularity, ImportOptions, Location,
};
use crate::vmm::{AccessGrant, AccessTarget, PhysicalDesc};
use crate::Exported;

/// A backend chosen at run time: the object-safe mirror of [`Backend`].
///
/// Every `B: Backend` is a `DynBackend` through a blanket implementation.
pub trait DynBackend: Send + Sync {
    /// Which backend this is.
    fn id(&self) -> BackendId;

    /// The registry name (`cpu-shm`, `mock-cuda`, ...).
    fn name(&self) -> String;

    /// Whether it can be used on this machine, and why not.
    fn availability(&self) -> Availability;

    /// Information about every device, in ordinal order.
    fn devices(&self) -> Result<Vec<DeviceInfo>>;

    /// Open device `ordinal`.
    fn open(&self, ordinal: u32) -> Result<Box<dyn DynDevice>>;
}

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

/// Memory this process allocated: the object-safe mirror of [`Allocation`].
pub trait DynAllocation: Memory {
    /// The backend's own allocation type, for `Any::downcast_ref`.
    fn as_any(&self) -> &dyn Any;

    /// How many importers hold mappings of this allocation now.
    fn importers(&self) -> Result<usize>;

    /// Block until no importer holds this allocation, or `timeout` passes
    /// ([`Error::Timeout`]).
    fn wait_unleased(&self, timeout: Option<Duration>) -> Result<()>;

    /// Free the allocation now; see [`Allocation::free`]. On refusal (usually
    /// [`Error::Busy`]) the allocation comes back in the error.
    fn free(self: Box<Self>) -> std::result::Result<(), FreeError<Box<dyn DynAllocation>>>;
}

impl<T: Allocation + 'static> DynAllocation for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn importers(&self) -> Result<usize> {
        Allocation::importers(self)
    }

    fn wait_unleased(&self, timeout: Option<Duration>) -> Result<()> {
        Allocation::wait_unleased(self, timeout)
    }

    fn free(self: Box<Self>) -> std::result::Result<(), FreeError<Box<dyn DynAllocation>>> {
        Allocation::free(*self).map_err(|e| FreeError {
            resource: Box::new(e.resource) as Box<dyn DynAllocation>,
            error: e.error,
        })
    }
}

/// Memory imported from another process: the object-safe mirror of [`Mapping`].
pub trait DynMapping: Memory {
    /// The backend's own mapping type, for `Any::downcast_ref`.
    fn as_any(&self) -> &dyn Any;

    /// The handle this mapping was imported from.
    fn handle(&self) -> &Handle;
}

impl<T: Mapping + 'static> DynMapping for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn handle(&self) -> &Handle {
        Mapping::handle(self)
    }
}

/// An event of a run-time chosen backend; it keeps every [`Event`] method.
pub trait DynEvent: Event {
    /// The backend's own event type, for `Any::downcast_ref`.
    fn as_any(&self) -> &dyn Any;
}

impl<T: Event + 'static> DynEvent for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A notify of a run-time chosen backend; it keeps every [`Notify`] method.
pub trait DynNotify: Notify {
    /// The backend's own notify type, for `Any::downcast_ref`.
    fn as_any(&self) -> &dyn Any;
}

impl<T: Notify + 'static> DynNotify for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A stream of a run-time chosen backend.
///
/// Streams have no methods of their own (work is queued through the device),
/// so there is no blanket implementation over every type: [`DynDevice`]
/// boxes a backend's stream in a private wrapper whose `as_any()` gives the
/// backend's stream type. A backend that implements [`DynDevice`] by hand
/// implements this trait for its stream type.
pub trait DynStream: Send + Sync {
    /// The backend's own stream type, for `Any::downcast_ref`.
    fn as_any(&self) -> &dyn Any;
}

/// The box a backend's stream travels in through [`DynDevice::create_stream`].
struct StreamOf<S>(S);

impl<S: Send + Sync + 'static> DynStream for StreamOf<S> {
    fn as_any(&self) -> &dyn Any {
        &self.0
    }
}

// A boxed stream is a stream too, so `&stream` passes where `&dyn DynStream`
// is asked for; `as_any` looks through the box.
impl DynStream for Box<dyn DynStream> {
    fn as_any(&self) -> &dyn Any {
        (**self).as_any()
    }
}

/// A VMM physical allocation of a run-time chosen backend.
pub trait DynPhysical: Physical {
    /// The backend's own type, for `Any::downcast_ref`.
    fn as_any(&self) -> &dyn Any;
}

impl<T: Physical + 'static> DynPhysical for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A VMM address reservation of a run-time chosen backend.
pub trait DynReservation: Reservation {
    /// The backend's own type, for `Any::downcast_ref`.
    fn as_any(&self) -> &dyn Any;
}

impl<T: Reservation + 'static> DynReservation for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

macro_rules! forward_memory {
    ($ty:ty) => {
        impl Memory for $ty {
            fn addr(&self) -> u64 {
                (**self).addr()
            }
            fn len(&self) -> u64 {
                (**self).len()
            }
            fn is_empty(&self) -> bool {
                (**self).is_empty()
            }
            fn location(&self) -> Location {
                (**self).location()
            }
            fn host_ptr(&self) -> Option<*mut u8> {
                (**self).host_ptr()
            }
            fn is_read_only(&self) -> bool {
                (**self).is_read_only()
            }
            fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
                (**self).read(offset, dst)
            }
            fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
                (**self).write(offset, src)
            }
        }
    };
}

// A boxed allocation or mapping is memory too, so code generic over
// `M: Memory` (DLPack export, copies) takes it as it is.
forward_memory!(Box<dyn DynAllocation>);
forward_memory!(Box<dyn DynMapping>);

/// A device of a run-time chosen backend: the object-safe mirror of
/// [`Device`], with the same operations and resources as trait objects.
///
/// Every `D: Device` is a `DynDevice` through a blanket implementation. A
/// resource passed in that another backend made is refused with
/// [`Error::InvalidArgument`].
pub trait DynDevice: Send + Sync {
    /// What the device is and can do.
    fn info(&self) -> &DeviceInfo;

    /// Shorthand for `info().capabilities`.
    fn capabilities(&self) -> Capabilities {
        self.info().capabilities
    }

    /// The id the exporter must put on its allow-list for this process to
    /// import from this backend; see [`Device::process_id`].
    fn process_id(&self) -> Result<u32>;

    /// The vendor context current on the calling thread; see [`Device::current_context`].
    fn current_context(&self) -> Result<Option<u64>>;

    /// Allocate memory; see [`Device::allocate`].
    fn allocate(&self, desc: &AllocDesc) -> Result<Box<dyn DynAllocation>>;

    /// Adopt memory this library did not allocate; see [`Device::adopt_memory`].
    ///
    /// # Safety
    ///
    /// As for [`Device::adopt_memory`].
    unsafe fn adopt_memory(&self, addr: u64, len: u64) -> Result<Box<dyn DynAllocation>>;

    /// Register existing host memory; see [`Device::register_host`].
    ///
    /// # Safety
    ///
    /// As for [`Device::register_host`].
    unsafe fn register_host(&self, ptr: *mut u8, len: u64) -> Result<Box<dyn Memory>>;

    /// Export a page-aligned range of an allocation; see [`Device::export_memory`].
    fn export_memory(&self, alloc: &dyn DynAllocation, opts: &ExportOptions) -> Result<Exported>;

    /// Add importer pids to an export; see [`Device::allow_importers`].
    fn allow_importers(&self, exported: &mut Exported, pids: &[u32]) -> Result<()>;

    /// Import memory; see [`Device::import_memory`].
    fn import_memory(
        &self,
        shared: SharedHandle,
        opts: &ImportOptions,
    ) -> Result<Box<dyn DynMapping>>;

    /// Create a stream.
    fn create_stream(&self) -> Result<Box<dyn DynStream>>;

    /// Block until everything queued on `stream` has run.
    fn synchronize(&self, stream: &dyn DynStream, timeout: Option<Duration>) -> Result<()>;

    /// Queue a copy on `stream`; see [`Device::copy_async`].
    fn copy_async(
        &self,
        stream: &dyn DynStream,
        dst: DynMemRef<'_>,
        dst_offset: u64,
        src: DynMemRef<'_>,
        src_offset: u64,
        len: u64,
    ) -> Result<()>;

    /// Queue a write of host bytes on `stream`; see [`Device::write_async`].
    fn write_async(
        &self,
        stream: &dyn DynStream,
        dst: DynMemRef<'_>,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<()>;

    /// Queue a memset on `stream`; see [`Device::memset_async`].
    fn memset_async(
        &self,
        stream: &dyn DynStream,
        dst: DynMemRef<'_>,
        offset: u64,
        len: u64,
        value: u8,
    ) -> Result<()>;

    /// Advise on managed memory; see [`Device::advise`].
    fn advise(&self, mem: DynMemRef<'_>, offset: u64, len: u64, advice: Advice) -> Result<()>;

    /// Queue a prefetch of managed memory; see [`Device::prefetch_async`].
    fn prefetch_async(
        &self,
        stream: &dyn DynStream,
        mem: DynMemRef<'_>,
        offset: u64,
        len: u64,
        to: Location,
    ) -> Result<()>;

    /// Whether `stream`'s work has run; see [`Device::query_stream`].
    fn query_stream(&self, stream: &dyn DynStream) -> Result<bool>;

    /// Wait for every stream of the device; see [`Device::synchronize_device`].
    fn synchronize_device(&self, timeout: Option<Duration>) -> Result<()>;

    /// Create an event; see [`Device::create_event`].
    fn create_event(&self, flags: EventFlags) -> Result<Box<dyn DynEvent>>;

    /// Record `event` on `stream`.
    fn record_event(&self, stream: &dyn DynStream, event: &dyn DynEvent) -> Result<()>;

    /// Make `stream` wait for `event`.
    fn stream_wait_event(&self, stream: &dyn DynStream, event: &dyn DynEvent) -> Result<()>;

    /// Export an event created with [`EventFlags::interprocess`].
    fn export_event(&self, event: &dyn DynEvent, opts: &ExportOptions) -> Result<Exported>;

    /// Import an event.
    fn import_event(&self, shared: SharedHandle, opts: &ImportOptions)
        -> Result<Box<dyn DynEvent>>;

    /// Create a notify with flags; see [`Device::create_notify_with`].
    fn create_notify_with(&self, flags: crate::NotifyFlags) -> Result<Box<dyn DynNotify>>;

    /// Create a notify.
    fn create_notify(&self) -> Result<Box<dyn DynNotify>>;

    /// Record (signal) `notify` on `stream`.
    fn record_notify(&self, stream: &dyn DynStream, notify: &dyn DynNotify) -> Result<()>;

    /// Make `stream` wait for `notify` and reset it, giving up after `timeout`.
    fn stream_wait_notify(
        &self,
        stream: &dyn DynStream,
        notify: &dyn DynNotify,
        timeout: Option<Duration>,
    ) -> Result<()>;

    /// Export a notify.
    fn export_notify(&self, notify: &dyn DynNotify, opts: &ExportOptions) -> Result<Exported>;

    /// Import a notify.
    fn import_notify(
        &self,
        shared: SharedHandle,
        opts: &ImportOptions,
    ) -> Result<Box<dyn DynNotify>>;

    /// The VMM granularity.
    fn granularity(&self, which: Granularity) -> Result<u64>;

    /// Allocate physical memory; see [`Device::allocate_physical`].
    fn allocate_physical(&self, size: u64) -> Result<Box<dyn DynPhysical>>;

    /// Allocate physical memory as `desc` says; see [`Device::allocate_physical_with`].
    fn allocate_physical_with(&self, desc: &PhysicalDesc) -> Result<Box<dyn DynPhysical>>;

    /// Reserve an address range; see [`Device::reserve`].
    fn reserve(&self, size: u64, align: u64) -> Result<Box<dyn DynReservation>>;

    /// Map the whole of `physical` at `offset` in `reservation`.
    fn map(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        physical: &dyn DynPhysical,
    ) -> Result<()>;

    /// Map part of `physical`; see [`Device::map_range`].
    fn map_range(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        physical: &dyn DynPhysical,
        physical_offset: u64,
        len: u64,
    ) -> Result<()>;

    /// Unmap `len` bytes at `offset` of `reservation`.
    fn unmap(&self, reservation: &dyn DynReservation, offset: u64, len: u64) -> Result<()>;

    /// Set this device's access rights to a mapped part of `reservation`.
    fn set_access(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<()>;

    /// Set several targets' access at once; see [`Device::set_access_for`].
    fn set_access_for(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        len: u64,
        grants: &[AccessGrant],
    ) -> Result<()>;

    /// The access `target` has; see [`Device::access`].
    fn access(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        target: AccessTarget,
    ) -> Result<Access>;

    /// Export a physical allocation.
    fn export_physical(&self, physical: &dyn DynPhysical, opts: &ExportOptions)
        -> Result<Exported>;

    /// Import a physical allocation.
    fn import_physical(
        &self,
        shared: SharedHandle,
        opts: &ImportOptions,
    ) -> Result<Box<dyn DynPhysical>>;
}

/// The backend's own resource behind `any`, or [`Error::InvalidArgument`]
/// when another backend made it.
/// Memory of one device for a stream operation of the dynamic layer; see
/// [`MemRef`](crate::MemRef).
#[derive(Clone, Copy)]
pub enum DynMemRef<'a> {
    /// An allocation.
    Allocation(&'a dyn DynAllocation),
    /// An imported mapping.
    Mapping(&'a dyn DynMapping),
}

impl<'a> DynMemRef<'a> {
    /// The backend's own reference, or [`Error::InvalidArgument`] for memory
    /// of another backend.
    fn own<D>(self, info: &DeviceInfo) -> Result<crate::MemRef<'a, D>>
    where
        D: Device,
        D::Allocation: 'static,
        D::Mapping: 'static,
    {
        Ok(match self {
            DynMemRef::Allocation(a) => {
                crate::MemRef::Allocation(own::<D::Allocation>(a.as_any(), info, "allocation")?)
            }
            DynMemRef::Mapping(m) => {
                crate::MemRef::Mapping(own::<D::Mapping>(m.as_any(), info, "mapping")?)
            }
        })
    }
}

fn own<'a, T: 'static>(any: &'a dyn Any, info: &DeviceInfo, what: &str) -> Result<&'a T> {
    any.downcast_ref::<T>().ok_or_else(|| {
        Error::invalid(format!(
            "the {what} was not made by backend `{}`: pass a resource only to a device of \
             the backend that created it (device {} here)",
            info.backend, info.ordinal
        ))
    })
}

impl<D> DynDevice for D
where
    D: Device,
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

    fn capabilities(&self) -> Capabilities {
        Device::capabilities(self)
    }

    fn process_id(&self) -> Result<u32> {
        Device::process_id(self)
    }

    fn current_context(&self) -> Result<Option<u64>> {
        Device::current_context(self)
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

    fn create_notify(&self) -> Result<Box<dyn DynNotify>> {
        Ok(Box::new(Device::create_notify(self)?))
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

    fn granularity(&self, which: Granularity) -> Result<u64> {
        Device::granularity(self, which)
    }

    fn allocate_physical(&self, size: u64) -> Result<Box<dyn DynPhysical>> {
        Ok(Box::new(Device::allocate_physical(self, size)?))
    }

    fn allocate_physical_with(&self, desc: &PhysicalDesc) -> Result<Box<dyn DynPhysical>> {
        Ok(Box::new(Device::allocate_physical_with(self, desc)?))
    }

    fn reserve(&self, size: u64, align: u64) -> Result<Box<dyn DynReservation>> {
        Ok(Box::new(Device::reserve(self, size, align)?))
    }

    fn map(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        physical: &dyn DynPhysical,
    ) -> Result<()> {
        let info = Device::info(self);
        let reservation = own::<D::Reservation>(reservation.as_any(), info, "reservation")?;
        let physical = own::<D::Physical>(physical.as_any(), info, "physical allocation")?;
        Device::map(self, reservation, offset, physical)
    }

    fn map_range(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        physical: &dyn DynPhysical,
        physical_offset: u64,
        len: u64,
    ) -> Result<()> {
        let info = Device::info(self);
        let reservation = own::<D::Reservation>(reservation.as_any(), info, "reservation")?;
        let physical = own::<D::Physical>(physical.as_any(), info, "physical allocation")?;
        Device::map_range(self, reservation, offset, physical, physical_offset, len)
    }

    fn unmap(&self, reservation: &dyn DynReservation, offset: u64, len: u64) -> Result<()> {
        let reservation =
            own::<D::Reservation>(reservation.as_any(), Device::info(self), "reservation")?;
        Device::unmap(self, reservation, offset, len)
    }

    fn set_access(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<()> {
        let reservation =
            own::<D::Reservation>(reservation.as_any(), Device::info(self), "reservation")?;
        Device::set_access(self, reservation, offset, len, access)
    }

    fn set_access_for(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        len: u64,
        grants: &[AccessGrant],
    ) -> Result<()> {
        let reservation =
            own::<D::Reservation>(reservation.as_any(), Device::info(self), "reservation")?;
        Device::set_access_for(self, reservation, offset, len, grants)
    }

    fn access(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        target: AccessTarget,
    ) -> Result<Access> {
        let reservation =
            own::<D::Reservation>(reservation.as_any(), Device::info(self), "reservation")?;
        Device::access(self, reservation, offset, target)
    }

    fn export_physical(
        &self,
        physical: &dyn DynPhysical,
        opts: &ExportOptions,
    ) -> Result<Exported> {
        let physical =
            own::<D::Physical>(physical.as_any(), Device::info(self), "physical allocation")?;
        Device::export_physical(self, physical, opts)
    }

    fn import_physical(
        &self,
        shared: SharedHandle,
        opts: &ImportOptions,
    ) -> Result<Box<dyn DynPhysical>> {
        Ok(Box::new(Device::import_physical(self, shared, opts)?))
    }
}

#[cfg(test)]
mod tests {
    //! A tiny in-memory backend, instantiated twice (`Toy<1>`, `Toy<2>`) so
    //! that the two instances have distinct resource types.

    use super::*;
    use crate::device::WaitFuture;
    use crate::types::WaitOptions;
    use crate::wait;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;

    struct Toy<const N: u16>;
    struct ToyDevice<const N: u16> {
        info: DeviceInfo,
    }
    struct ToyMem<const N: u16> {
        bytes: Mutex<Vec<u8>>,
        importers: AtomicUsize,
        handle: Handle,
    }
    struct ToyStream<const N: u16>;
    struct ToyEvent<const N: u16>(AtomicBool);
    struct ToyNotify<const N: u16>(AtomicBool);
    struct ToyPhys<const N: u16>(u64);
    struct ToyRes<const N: u16>(u64);

    fn toy_handle(n: u16, kind: crate::HandleKind) -> Handle {
        Handle {
            kind,
            backend: BackendId::External(0x8000 + n),
            device: 0,
            device_uuid: [n as u8; 16],
            location: Location::Host,
            size: 0,
            offset: 0,
            address: 0,
            creator_pid: crate::os::pid(),
            creator_start: 0,
            creator_pid_ns: crate::os::pid_namespace(),
            object_id: [0; 16],
            flags: crate::HandleFlags::default(),
            pid_kind: crate::PidKind::Os,
            allowed_pids: Vec::new(),
            fds: crate::FdSource::None,
            payload: Vec::new(),
        }
    }

    fn unsupported(op: &str) -> Error {
        Error::unsupported("toy", op, "the toy backend does not share anything")
    }

    impl<const N: u16> Backend for Toy<N> {
        type Device = ToyDevice<N>;
        fn id(&self) -> BackendId {
            BackendId::External(0x8000 + N)
        }
        fn availability(&self) -> Availability {
            Availability::Available
        }
        fn devices(&self) -> Result<Vec<DeviceInfo>> {
            Ok(vec![ToyDevice::<N>::make_info()])
        }
        fn open(&self, ordinal: u32) -> Result<ToyDevice<N>> {
            if ordinal != 0 {
                return Err(Error::NotFound {
                    what: format!("toy device {ordinal}"),
                });
            }
            Ok(ToyDevice {
                info: ToyDevice::<N>::make_info(),
            })
        }
    }

    impl<const N: u16> ToyDevice<N> {
        fn make_info() -> DeviceInfo {
            DeviceInfo {
                backend: BackendId::External(0x8000 + N),
                ordinal: 0,
                uuid: [N as u8; 16],
                name: format!("toy {N}"),
                total_memory: 1 << 20,
                page_sizes: vec![4096],
                granularity_min: 4096,
                granularity_recommended: 4096,
                capabilities: Capabilities::HOST_VISIBLE | Capabilities::VMM,
            }
        }
    }

    impl<const N: u16> Memory for ToyMem<N> {
        fn addr(&self) -> u64 {
            0
        }
        fn len(&self) -> u64 {
            self.bytes.lock().map(|b| b.len() as u64).unwrap_or(0)
        }
        fn location(&self) -> Location {
            Location::Host
        }
        fn host_ptr(&self) -> Option<*mut u8> {
            None
        }
        fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
            let b = self.bytes.lock().map_err(|_| Error::invalid("poisoned"))?;
            crate::device::check_bounds(offset, dst.len() as u64, b.len() as u64)?;
            dst.copy_from_slice(&b[offset as usize..offset as usize + dst.len()]);
            Ok(())
        }
        fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
            let mut b = self.bytes.lock().map_err(|_| Error::invalid("poisoned"))?;
            crate::device::check_bounds(offset, src.len() as u64, b.len() as u64)?;
            b[offset as usize..offset as usize + src.len()].copy_from_slice(src);
            Ok(())
        }
    }

    impl<const N: u16> Allocation for ToyMem<N> {
        fn importers(&self) -> Result<usize> {
            Ok(self.importers.load(Ordering::SeqCst))
        }
        fn wait_unleased(&self, _timeout: Option<Duration>) -> Result<()> {
            Ok(())
        }
        fn free(self) -> std::result::Result<(), FreeError<Self>> {
            let holders = self.importers.load(Ordering::SeqCst);
            if holders > 0 {
                return Err(FreeError {
                    resource: self,
                    error: Error::Busy {
                        what: "toy allocation".into(),
                        holders,
                    },
                });
            }
            Ok(())
        }
    }

    impl<const N: u16> Mapping for ToyMem<N> {
        fn handle(&self) -> &Handle {
            &self.handle
        }
    }

    impl<const N: u16> Event for ToyEvent<N> {
        fn query(&self) -> Result<bool> {
            Ok(self.0.load(Ordering::SeqCst))
        }
        fn wait(&self, _opts: WaitOptions) -> Result<()> {
            Ok(())
        }
        fn wait_async(&self, _opts: WaitOptions) -> WaitFuture<'_> {
            wait::ready(Ok(()))
        }
    }

    impl<const N: u16> Notify for ToyNotify<N> {
        fn signal(&self) -> Result<()> {
            self.0.store(true, Ordering::SeqCst);
            Ok(())
        }
        fn wait(&self, _opts: WaitOptions) -> Result<()> {
            self.0.store(false, Ordering::SeqCst);
            Ok(())
        }
        fn wait_async(&self, _opts: WaitOptions) -> WaitFuture<'_> {
            wait::ready(Ok(()))
        }
    }

    impl<const N: u16> Physical for ToyPhys<N> {
        fn size(&self) -> u64 {
            self.0
        }
        fn location(&self) -> crate::PhysicalLocation {
            crate::PhysicalLocation::Device(0)
        }
        fn handle_type(&self) -> crate::ShareableHandle {
            crate::ShareableHandle::PosixFd
        }
    }

    impl<const N: u16> Reservation for ToyRes<N> {
        fn base(&self) -> u64 {
            0x1000_0000
        }
        fn len(&self) -> u64 {
            self.0
        }
        fn read(&self, _offset: u64, _dst: &mut [u8]) -> Result<()> {
            Err(unsupported("reservation read"))
        }
        fn write(&self, _offset: u64, _src: &[u8]) -> Result<()> {
            Err(unsupported("reservation write"))
        }
    }

    impl<const N: u16> Device for ToyDevice<N> {
        type Allocation = ToyMem<N>;
        type Mapping = ToyMem<N>;
        type Stream = ToyStream<N>;
        type Event = ToyEvent<N>;
        type Notify = ToyNotify<N>;
        type Physical = ToyPhys<N>;
        type Reservation = ToyRes<N>;
        type HostRegistration = ToyMem<N>;

        fn info(&self) -> &DeviceInfo {
            &self.info
        }
        unsafe fn register_host(&self, _p: *mut u8, _l: u64) -> Result<ToyMem<N>> {
            Err(unsupported("register_host"))
        }
        fn allocate(&self, desc: &AllocDesc) -> Result<ToyMem<N>> {
            Ok(ToyMem {
                bytes: Mutex::new(vec![0; desc.size as usize]),
                importers: AtomicUsize::new(0),
                handle: toy_handle(N, crate::HandleKind::Memory),
            })
        }
        fn export_memory(&self, _a: &ToyMem<N>, _o: &ExportOptions) -> Result<Exported> {
            Err(unsupported("export_memory"))
        }
        fn allow_importers(&self, _e: &mut Exported, _p: &[u32]) -> Result<()> {
            Err(unsupported("allow_importers"))
        }
        fn import_memory(&self, s: SharedHandle, _o: &ImportOptions) -> Result<ToyMem<N>> {
            Ok(ToyMem {
                bytes: Mutex::new(vec![0; s.handle.size as usize]),
                importers: AtomicUsize::new(0),
                handle: s.handle,
            })
        }
        fn create_stream(&self) -> Result<ToyStream<N>> {
            Ok(ToyStream)
        }
        fn synchronize(&self, _s: &ToyStream<N>, _t: Option<Duration>) -> Result<()> {
            Ok(())
        }
        fn copy_async(
            &self,
            _s: &ToyStream<N>,
            _d: crate::MemRef<'_, Self>,
            _do: u64,
            _src: crate::MemRef<'_, Self>,
            _so: u64,
            _l: u64,
        ) -> Result<()> {
            Err(Error::unsupported("toy", "copy_async", "no streams"))
        }
        fn write_async(
            &self,
            _s: &ToyStream<N>,
            _d: crate::MemRef<'_, Self>,
            _o: u64,
            _data: Vec<u8>,
        ) -> Result<()> {
            Err(Error::unsupported("toy", "write_async", "no streams"))
        }
        fn memset_async(
            &self,
            _s: &ToyStream<N>,
            _d: crate::MemRef<'_, Self>,
            _o: u64,
            _l: u64,
            _v: u8,
        ) -> Result<()> {
            Err(Error::unsupported("toy", "memset_async", "no streams"))
        }
        fn query_stream(&self, _s: &ToyStream<N>) -> Result<bool> {
            Ok(true)
        }
        fn synchronize_device(&self, _t: Option<Duration>) -> Result<()> {
            Ok(())
        }
        fn create_event(&self, _f: EventFlags) -> Result<ToyEvent<N>> {
            Ok(ToyEvent(AtomicBool::new(false)))
        }
        fn record_event(&self, _s: &ToyStream<N>, e: &ToyEvent<N>) -> Result<()> {
            e.0.store(true, Ordering::SeqCst);
            Ok(())
        }
        fn stream_wait_event(&self, _s: &ToyStream<N>, _e: &ToyEvent<N>) -> Result<()> {
            Ok(())
        }
        fn export_event(&self, _e: &ToyEvent<N>, _o: &ExportOptions) -> Result<Exported> {
            Err(unsupported("export_event"))
        }
        fn import_event(&self, _s: SharedHandle, _o: &ImportOptions) -> Result<ToyEvent<N>> {
            Err(unsupported("import_event"))
        }
        fn create_notify_with(&self, _f: crate::NotifyFlags) -> Result<ToyNotify<N>> {
            Ok(ToyNotify(AtomicBool::new(false)))
        }
        fn record_notify(&self, _s: &ToyStream<N>, n: &ToyNotify<N>) -> Result<()> {
            n.signal()
        }
        fn stream_wait_notify(
            &self,
            _s: &ToyStream<N>,
            n: &ToyNotify<N>,
            _t: Option<Duration>,
        ) -> Result<()> {
            Notify::wait(n, WaitOptions::default())
        }
        fn export_notify(&self, _n: &ToyNotify<N>, _o: &ExportOptions) -> Result<Exported> {
            Err(unsupported("export_notify"))
        }
        fn import_notify(&self, _s: SharedHandle, _o: &ImportOptions) -> Result<ToyNotify<N>> {
            Err(unsupported("import_notify"))
        }
        fn granularity(&self, which: Granularity) -> Result<u64> {
            Ok(self.info.granularity(which))
        }
        fn allocate_physical_with(&self, desc: &PhysicalDesc) -> Result<ToyPhys<N>> {
            Ok(ToyPhys(desc.size))
        }
        fn reserve(&self, size: u64, _align: u64) -> Result<ToyRes<N>> {
            Ok(ToyRes(size))
        }
        fn map_range(
            &self,
            _r: &ToyRes<N>,
            _o: u64,
            _p: &ToyPhys<N>,
            _po: u64,
            _l: u64,
        ) -> Result<()> {
            Ok(())
        }
        fn unmap(&self, _r: &ToyRes<N>, _o: u64, _l: u64) -> Result<()> {
            Ok(())
        }
        fn set_access_for(
            &self,
            _r: &ToyRes<N>,
            _o: u64,
            _l: u64,
            _g: &[AccessGrant],
        ) -> Result<()> {
            Ok(())
        }
        fn access(&self, _r: &ToyRes<N>, _o: u64, _t: AccessTarget) -> Result<Access> {
            Ok(Access::ReadWrite)
        }
        fn export_physical(&self, _p: &ToyPhys<N>, _o: &ExportOptions) -> Result<Exported> {
            Err(unsupported("export_physical"))
        }
        fn import_physical(&self, _s: SharedHandle, _o: &ImportOptions) -> Result<ToyPhys<N>> {
            Err(unsupported("import_physical"))
        }
    }

    fn backends() -> Vec<Box<dyn DynBackend>> {
        vec![Box::new(Toy::<1>), Box::new(Toy::<2>)]
    }

    fn is_invalid(r: Result<impl Sized>) -> bool {
        matches!(r, Err(Error::InvalidArgument { .. }))
    }

    #[test]
    fn backends_are_chosen_at_run_time() {
        let names: Vec<String> = backends().iter().map(|b| b.name()).collect();
        assert_eq!(names, ["external-8001", "external-8002"]);
        for b in backends() {
            assert!(b.availability().is_available());
            assert_eq!(b.devices().unwrap().len(), 1);
            assert_eq!(b.open(0).unwrap().info().backend, b.id());
            assert!(matches!(b.open(7), Err(Error::NotFound { .. })));
        }
    }

    #[test]
    fn process_id_defaults_to_the_os_pid_through_the_box() {
        for b in backends() {
            let dev = b.open(0).unwrap();
            assert_eq!(dev.process_id().unwrap(), crate::os::pid());
        }
        let dev = Backend::open(&Toy::<1>, 0).unwrap();
        assert_eq!(Device::process_id(&dev).unwrap(), std::process::id());
    }

    #[test]
    fn boxed_memory_reads_writes_and_downcasts() {
        let dev = DynBackend::open(&Toy::<1>, 0).unwrap();
        assert!(dev.capabilities().contains(Capabilities::VMM));
        let alloc = dev.allocate(&AllocDesc::host(64)).unwrap();
        alloc.write(8, b"hello").unwrap();
        let mut out = [0u8; 5];
        alloc.read(8, &mut out).unwrap();
        assert_eq!(&out, b"hello");
        assert!(alloc.as_any().downcast_ref::<ToyMem<1>>().is_some());
        assert!(alloc.as_any().downcast_ref::<ToyMem<2>>().is_none());
        assert!(alloc.write(60, b"too long").is_err());

        fn generic_len(m: &impl Memory) -> u64 {
            m.len()
        }
        assert_eq!(generic_len(&alloc), 64);
        let mut handle = toy_handle(1, crate::HandleKind::Memory);
        handle.size = 32;
        let mapping = dev
            .import_memory(SharedHandle::from(handle), &ImportOptions::default())
            .unwrap();
        assert_eq!(generic_len(&mapping), 32);
        assert_eq!(mapping.handle().size, 32);
    }

    #[test]
    fn free_through_the_box_gives_the_allocation_back_when_busy() {
        let dev = Backend::open(&Toy::<1>, 0).unwrap();
        let dev: &dyn DynDevice = &dev;
        let alloc = dev.allocate(&AllocDesc::host(16)).unwrap();
        let toy = alloc.as_any().downcast_ref::<ToyMem<1>>().unwrap();
        toy.importers.store(2, Ordering::SeqCst);
        let back = match alloc.free() {
            Err(e) => {
                assert!(matches!(e.error, Error::Busy { holders: 2, .. }));
                e.resource
            }
            Ok(()) => panic!("a busy allocation was freed"),
        };
        assert_eq!(back.importers().unwrap(), 2);
        let toy = back.as_any().downcast_ref::<ToyMem<1>>().unwrap();
        toy.importers.store(0, Ordering::SeqCst);
        assert!(back.free().is_ok());
    }

    #[test]
    fn own_resources_pass_through_to_the_backend() {
        let dev: Box<dyn DynDevice> = DynBackend::open(&Toy::<1>, 0).unwrap();
        let stream = dev.create_stream().unwrap();
        let event = dev.create_event(EventFlags::default()).unwrap();
        let notify = dev.create_notify().unwrap();
        let alloc = dev.allocate(&AllocDesc::host(4096)).unwrap();
        let phys = dev.allocate_physical(4096).unwrap();
        let res = dev.reserve(8192, 0).unwrap();

        // A boxed stream passes as `&stream` or `&*stream`; other resources as `&*x`.
        dev.synchronize(&stream, None).unwrap();
        dev.synchronize(&*stream, None).unwrap();
        dev.record_event(&stream, &*event).unwrap();
        assert!(event.query().unwrap());
        dev.stream_wait_event(&stream, &*event).unwrap();
        dev.record_notify(&*stream, &*notify).unwrap();
        dev.stream_wait_notify(&*stream, &*notify, None).unwrap();
        dev.map(&*res, 0, &*phys).unwrap();
        dev.set_access(&*res, 0, 4096, Access::Read).unwrap();
        dev.unmap(&*res, 0, 4096).unwrap();
        assert_eq!(dev.granularity(Granularity::Minimum).unwrap(), 4096);
        assert_eq!(phys.size(), 4096);
        assert_eq!(res.len(), 8192);

        // The backend's own answer comes through (here: unsupported).
        let opts = ExportOptions::default();
        assert!(dev
            .export_memory(&*alloc, &opts)
            .unwrap_err()
            .is_unsupported());
        assert!(dev
            .export_event(&*event, &opts)
            .unwrap_err()
            .is_unsupported());
        assert!(dev
            .export_notify(&*notify, &opts)
            .unwrap_err()
            .is_unsupported());
        assert!(dev
            .export_physical(&*phys, &opts)
            .unwrap_err()
            .is_unsupported());
        assert!(stream.as_any().downcast_ref::<ToyStream<1>>().is_some());
    }

    #[test]
    fn resources_of_another_backend_are_invalid_arguments() {
        let one: Box<dyn DynDevice> = DynBackend::open(&Toy::<1>, 0).unwrap();
        let two: Box<dyn DynDevice> = DynBackend::open(&Toy::<2>, 0).unwrap();
        let stream1 = one.create_stream().unwrap();
        let stream2 = two.create_stream().unwrap();
        let event2 = two.create_event(EventFlags::default()).unwrap();
        let notify2 = two.create_notify().unwrap();
        let alloc2 = two.allocate(&AllocDesc::host(4096)).unwrap();
        let phys1 = one.allocate_physical(4096).unwrap();
        let phys2 = two.allocate_physical(4096).unwrap();
        let res1 = one.reserve(8192, 0).unwrap();
        let res2 = two.reserve(8192, 0).unwrap();
        let event1 = one.create_event(EventFlags::default()).unwrap();
        let notify1 = one.create_notify().unwrap();
        let opts = ExportOptions::default();

        assert!(is_invalid(one.export_memory(&*alloc2, &opts)));
        assert!(is_invalid(one.synchronize(&*stream2, None)));
        assert!(is_invalid(one.record_event(&*stream2, &*event1)));
        assert!(is_invalid(one.record_event(&*stream1, &*event2)));
        assert!(is_invalid(one.stream_wait_event(&*stream2, &*event1)));
        assert!(is_invalid(one.stream_wait_event(&*stream1, &*event2)));
        assert!(is_invalid(one.export_event(&*event2, &opts)));
        assert!(is_invalid(one.record_notify(&*stream2, &*notify1)));
        assert!(is_invalid(one.record_notify(&*stream1, &*notify2)));
        assert!(is_invalid(
            one.stream_wait_notify(&*stream2, &*notify1, None)
        ));
        assert!(is_invalid(
            one.stream_wait_notify(&*stream1, &*notify2, None)
        ));
        assert!(is_invalid(one.export_notify(&*notify2, &opts)));
        assert!(is_invalid(one.map(&*res2, 0, &*phys1)));
        assert!(is_invalid(one.map(&*res1, 0, &*phys2)));
        assert!(is_invalid(one.unmap(&*res2, 0, 4096)));
        assert!(is_invalid(one.set_access(
            &*res2,
            0,
            4096,
            Access::ReadWrite
        )));
        assert!(is_invalid(one.export_physical(&*phys2, &opts)));

        let msg = one.synchronize(&*stream2, None).unwrap_err().to_string();
        assert!(
            msg.contains("stream") && msg.contains("external-8001"),
            "{msg}"
        );
    }
}
