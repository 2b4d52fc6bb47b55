//! The object-safe traits: every operation of [`Backend`] and [`Device`]
//! with resources boxed as trait objects.

use std::any::Any;
use std::time::Duration;

use super::own::own;
use super::vmm::DynVmm;
use crate::device::{Allocation, Device, Event, FreeError, Mapping, Memory, Notify};
use crate::error::Result;
// Named by the documentation's links only.
use crate::handle::{Handle, SharedHandle};
use crate::types::{
    Advice, AllocDesc, Availability, BackendId, Capabilities, DeviceInfo, EventFlags,
    ExportOptions, ImportOptions, Location,
};
use crate::Exported;
#[cfg(doc)]
use crate::{Backend, Error};

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

    /// The ordinal, in this process, of the device to import `handle`
    /// through: see [`Backend::device_for`].
    fn device_for(&self, handle: &Handle) -> Result<u32> {
        let devices = self.devices()?;
        handle.device_in(&devices).ok_or_else(|| {
            crate::error::no_device_for(&handle.device_uuid, handle.device, devices.len())
        })
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

// A boxed stream is a stream too, so `&stream` passes where `&dyn DynStream`
// is asked for; `as_any` looks through the box.
impl DynStream for Box<dyn DynStream> {
    fn as_any(&self) -> &dyn Any {
        (**self).as_any()
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
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
pub trait DynDevice: Send + Sync {
    /// What the device is and can do.
    fn info(&self) -> &DeviceInfo;

    /// The id the exporter must put on its allow-list for this process to
    /// import from this backend; see [`Device::process_id`].
    fn process_id(&self) -> Result<u32>;

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

    /// Import many memory handles at once; see [`Device::import_memory_batch`].
    fn import_memory_batch(
        &self,
        shared: Vec<SharedHandle>,
        opts: &ImportOptions,
    ) -> Vec<Result<Box<dyn DynMapping>>>;

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

    /// The VMM operations of this device ([`crate::Vmm`]'s mirror).
    fn vmm(&self) -> &dyn DynVmm;
}

/// The conveniences of every [`DynDevice`], as [`DeviceExt`](crate::DeviceExt)
/// has them for every [`Device`]: methods of the trait object itself, so
/// that a program reaches them without an import.
impl dyn DynDevice + '_ {
    /// Shorthand for `info().capabilities`.
    pub fn capabilities(&self) -> Capabilities {
        self.info().capabilities
    }

    /// Create a notify with the default flags; see
    /// [`DeviceExt::create_notify`](crate::DeviceExt::create_notify).
    pub fn create_notify(&self) -> Result<Box<dyn DynNotify>> {
        self.create_notify_with(crate::NotifyFlags::default())
    }
}

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
    /// The backend's own reference, or
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for memory
    /// of another backend.
    pub(crate) fn own<D>(self, info: &DeviceInfo) -> Result<crate::MemRef<'a, D>>
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
