//! The traits every backend implements.
//!
//! One trait per role with associated types, in the style of wgpu-hal: a
//! program that knows its backend at compile time calls these directly and
//! pays no dynamic dispatch. The object-safe mirror in [`crate::dynamic`]
//! serves programs that choose a backend at run time.
//!
//! Operations live on [`Device`]; resources ([`Allocation`], [`Mapping`],
//! events, notifies, physical allocations, reservations) are RAII values that
//! release themselves on drop. A backend that cannot do an operation answers
//! [`Error::Unsupported`], never a panic.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::handle::SharedHandle;
use crate::types::{
    Advice, AllocDesc, Capabilities, DeviceInfo, EventFlags, ExportOptions, ImportOptions,
    Location, NotifyFlags, WaitOptions,
};
use crate::Exported;

/// A future returned by the awaitable waits. It does not block the executor
/// thread that polls it, and it works under any async runtime.
pub type WaitFuture<'a> = Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>>;

/// A byte range of memory with a location: what allocations and mappings share.
///
/// Host-visible memory also gives its address; device memory is reached with
/// [`Memory::read`] and [`Memory::write`], which every backend implements.
pub trait Memory: Send + Sync {
    /// The address of the first byte in this process (a host pointer for host
    /// memory, a device pointer otherwise).
    fn addr(&self) -> u64;

    /// Length in bytes.
    fn len(&self) -> u64;

    /// True when the length is zero.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where the bytes live.
    fn location(&self) -> Location;

    /// The host pointer, when the memory is host-visible.
    fn host_ptr(&self) -> Option<*mut u8>;

    /// True when the host can address this memory ([`Memory::host_ptr`]):
    /// a property of each allocation and mapping (pinned host and managed
    /// memory of a GPU are, its device memory is not), never of the
    /// device. Memory that is not host-visible is still read and written
    /// with [`Memory::read`] / [`Memory::write`] and exported to DLPack
    /// with its device address.
    fn host_visible(&self) -> bool {
        self.host_ptr().is_some()
    }

    /// True when writes are refused (a read-only import).
    fn is_read_only(&self) -> bool {
        false
    }

    /// Copy `dst.len()` bytes starting at `offset` into `dst`.
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()>;

    /// Copy `src` into the memory starting at `offset`.
    fn write(&self, offset: u64, src: &[u8]) -> Result<()>;
}

pub use crate::bounds::check_bounds;

/// The default answer of the managed-memory operations.
fn no_managed_memory(info: &DeviceInfo, operation: &str) -> Error {
    Error::unsupported(
        info.backend.name(),
        operation,
        "this device has no managed memory (Capabilities::MANAGED_MEMORY)",
    )
}

/// Memory of one device that a stream operation reads or writes: an
/// allocation of this process, a mapping it imported, or host memory it
/// registered with the device.
pub enum MemRef<'a, D: Device + ?Sized> {
    /// An allocation.
    Allocation(&'a D::Allocation),
    /// An imported mapping.
    Mapping(&'a D::Mapping),
    /// Host memory registered with the device ([`Device::register_host`]):
    /// the host side of a copy, reached by the device in stream order (on
    /// CUDA at pinned-memory speed).
    Registered(&'a D::HostRegistration),
}

impl<D: Device + ?Sized> Clone for MemRef<'_, D> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<D: Device + ?Sized> Copy for MemRef<'_, D> {}

impl<'a, D: Device + ?Sized> MemRef<'a, D> {
    /// The memory, whichever kind it is.
    pub fn memory(self) -> &'a dyn Memory {
        match self {
            MemRef::Allocation(a) => a,
            MemRef::Mapping(m) => m,
            MemRef::Registered(r) => r,
        }
    }

    /// The address of byte `offset` of the memory, once
    /// `offset..offset + len` is checked to lie inside it
    /// ([`Error::InvalidArgument`] otherwise).
    pub fn address(self, offset: u64, len: u64) -> Result<u64> {
        let m = self.memory();
        crate::bounds::check_bounds(offset, len, m.len())?;
        Ok(m.addr() + offset)
    }
}

/// A resource returned by [`Allocation::free`] when it could not be freed.
#[derive(Debug)]
pub struct FreeError<T> {
    /// The resource, still alive.
    pub resource: T,
    /// Why it was not freed (usually [`Error::Busy`]).
    pub error: Error,
}

/// Memory this process allocated and may export.
pub trait Allocation: Memory + Sized {
    /// How many importers hold mappings of this allocation now. Importers
    /// whose process died are not counted.
    fn importers(&self) -> Result<usize>;

    /// Block until no importer holds this allocation, or `timeout` passes
    /// ([`Error::Timeout`]).
    fn wait_unleased(&self, timeout: Option<Duration>) -> Result<()>;

    /// Free the allocation now. Refused with [`Error::Busy`] while importers
    /// hold it, on backends whose vendor requires importers to close first;
    /// the allocation comes back in the error. Dropping instead defers the
    /// release until the importers are gone.
    fn free(self) -> std::result::Result<(), FreeError<Self>> {
        drop(self);
        Ok(())
    }
}

/// Memory imported from another process.
pub trait Mapping: Memory {
    /// The handle this mapping was imported from.
    fn handle(&self) -> &crate::Handle;
}

/// An event: stream-ordered completion, waited on from the host.
pub trait Event: Send + Sync {
    /// True when every operation recorded before it has completed.
    /// Unsupported on IPC events of backends without [`Capabilities::IPC_EVENT_QUERY`].
    fn query(&self) -> Result<bool>;

    /// Block the calling thread until the event completes.
    fn wait(&self, opts: WaitOptions) -> Result<()>;

    /// Await completion without blocking the executor thread.
    fn wait_async(&self, opts: WaitOptions) -> WaitFuture<'_>;
}

/// A notify: a wake-up signal, recorded by one side and waited-and-reset by
/// the other.
pub trait Notify: Send + Sync {
    /// Signal from the host.
    fn signal(&self) -> Result<()>;

    /// Wait until signalled, then reset. Refused with
    /// [`Error::PermissionDenied`] on an importer where the backend has
    /// [`Capabilities::CREATOR_ONLY_NOTIFY_WAIT`].
    fn wait(&self, opts: WaitOptions) -> Result<()>;

    /// Await the signal (and reset it) without blocking the executor thread.
    fn wait_async(&self, opts: WaitOptions) -> WaitFuture<'_>;
}

/// A device: allocates, exports and imports memory, events and notifies,
/// and runs streams.
///
/// Code written against `Device` runs on every backend. A program gets a
/// device from its backend ([`Backend::open`](crate::Backend::open)), or from the `hal` facade's
/// registry when it chooses the backend at run time (then through the
/// object-safe mirror, [`crate::dynamic`]).
///
/// **The thread rule:** every call and every drop may happen on any
/// thread, and leaves the calling thread's current context (CUDA) or
/// current device and context (Ascend) as it found it. A backend pushes its
/// device's context for each vendor call and pops it after, so a framework
/// sharing the process (PyTorch, a runtime's own CUDA code) never finds its
/// context changed; resources may be created on one thread and used and
/// dropped on others. No backend finalizes the vendor runtime
/// (`aclFinalize`) or resets a device that a framework in the same process
/// may be using. The conformance suite checks it through
/// [`ContextProbe`](crate::testing::ContextProbe).
///
/// Here, on CPU shared memory:
///
/// ```
/// use hal_core::{AllocDesc, Backend, Capabilities, Device, Exported, ExportOptions, Handle};
/// use hal_core::{DeviceExt, ImportOptions, Importers, Memory, Result};
///
/// /// Put `bytes` in a fresh page of `device` and export it to anyone.
/// /// The caller keeps both: dropping the export ends it.
/// fn publish<D: Device>(device: &D, bytes: &[u8]) -> Result<(D::Allocation, Exported)> {
///     let desc = if device.capabilities().contains(Capabilities::MEMORY_IS_HOST) {
///         AllocDesc::host(4096)
///     } else {
///         AllocDesc::device(device.info().ordinal, 4096)
///     };
///     let buffer = device.allocate(&desc)?;
///     buffer.write(0, bytes)?;
///     let opts = ExportOptions { importers: Importers::Anyone, ..Default::default() };
///     let exported = device.export_memory(&buffer, &opts)?;
///     Ok((buffer, exported))
/// }
///
/// let device = hal_cpu_shm::CpuShm::new().open(0)?;
/// let (_buffer, exported) = publish(&device, b"shared bytes")?;
///
/// // What another process does with the text (here the same process).
/// let handle = Handle::from_text(&exported.to_text())?;
/// let mapping = device.import_memory(handle.into(), &ImportOptions::default())?;
/// let mut back = [0u8; 12];
/// mapping.read(0, &mut back)?;
/// assert_eq!(&back, b"shared bytes");
/// # Ok::<(), hal_core::Error>(())
/// ```
pub trait Device: Send + Sync + 'static {
    /// Memory this process allocated.
    ///
    /// Dropping it never waits long for the device's queued work: where
    /// the vendor's free may synchronize the device (CUDA's), the backend
    /// frees on a worker thread ([`crate::kit::stream::teardown`]) once that work has
    /// run, and an allocation that finds the device full meanwhile waits
    /// for such frees ([`crate::kit::stream::teardown::when_freed`]).
    type Allocation: Allocation;
    /// Memory imported from another process.
    type Mapping: Mapping;
    /// An ordered queue of work.
    ///
    /// Dropping a stream never waits for work that waits for a notify or
    /// an event: the vendor backends let such work run on when it can and
    /// destroy the vendor's stream afterwards ([`crate::kit::stream::reaper`]), keeping
    /// what the work uses alive until then; the simulator abandons it.
    type Stream: Send + Sync + 'static;
    /// An event.
    type Event: Event;
    /// A notify.
    type Notify: Notify;
    /// Host memory registered with the device ([`Device::register_host`]).
    type HostRegistration: Memory;

    /// What the device is and can do.
    fn info(&self) -> &DeviceInfo;

    /// The id the exporter must put on its allow-list for this process to
    /// import from this backend: what an importer sends its exporter to pass
    /// to [`Device::allow_importers`] or [`Importers::Pids`].
    ///
    /// The default is this process's OS pid ([`os::pid`](crate::kit::os::pid)),
    /// right for backends whose allow-list the exporter's descriptor broker
    /// checks against `SO_PEERCRED` (CPU shared memory, the CUDA-like
    /// simulator). A backend whose vendor keeps its own allow-list of its
    /// own process ids answers with that id instead: Ascend's bare tgid
    /// (`aclrtDeviceGetBareTgid`), which is the host pid even inside a
    /// container, where the OS pid is not. A handle says which of the two
    /// its allow-list holds ([`Handle::pid_kind`](crate::Handle::pid_kind)).
    ///
    /// An OS pid is the importer's pid as the *exporter's* pid namespace
    /// numbers it: an importer in another pid namespace sees itself under
    /// another pid (see [`exchange`](crate::exchange), *Pid namespaces*).
    ///
    /// [`Importers::Pids`]: crate::Importers::Pids
    fn process_id(&self) -> Result<u32> {
        Ok(crate::process::pid())
    }

    // --- memory ---------------------------------------------------------

    /// Allocate memory.
    fn allocate(&self, desc: &AllocDesc) -> Result<Self::Allocation>;

    /// Export a page-aligned range of an allocation. A range that is not
    /// whole pages is refused with [`Error::Misaligned`].
    fn export_memory(&self, alloc: &Self::Allocation, opts: &ExportOptions) -> Result<Exported>;

    /// Add importers to an export after the fact (Ascend's
    /// `aclrtIpcMemSetImportPid`): `pids` are the ids the importers'
    /// [`Device::process_id`] gave them.
    fn allow_importers(&self, exported: &mut Exported, pids: &[u32]) -> Result<()>;

    /// Adopt memory this library did not allocate (a range of a framework's
    /// caching allocator, a raw `cuMemAlloc` pointer) as an allocation that
    /// can be exported: the backend finds the vendor allocation that holds
    /// `addr..addr + len` (`cuMemGetAddressRange`), and exports of the
    /// adopted allocation name that allocation's base plus the offset, as
    /// the vendor's handles do. A range that is not inside one allocation
    /// is refused; exports keep the whole-page rule
    /// ([`Error::Misaligned`]), never widening the range.
    ///
    /// Dropping the adopted allocation never frees the memory; it counts
    /// its own importers ([`Allocation::importers`],
    /// [`Allocation::wait_unleased`]), which the owner waits for before it
    /// frees. Backends without [`Capabilities::FOREIGN_MEMORY`] answer
    /// [`Error::Unsupported`] (the default).
    ///
    /// # Safety
    ///
    /// `addr..addr + len` must be memory of this device's vendor runtime,
    /// and it must stay allocated as long as the returned allocation, its
    /// exports and every importer's mapping of them live (wait for
    /// [`Allocation::wait_unleased`] before the owner frees it).
    unsafe fn adopt_memory(&self, addr: u64, len: u64) -> Result<Self::Allocation> {
        let _ = (addr, len);
        Err(Error::unsupported(
            self.info().backend.name(),
            "adopt_memory",
            "this backend exports only memory it allocated \
             (Capabilities::FOREIGN_MEMORY); allocate the buffer with Device::allocate",
        ))
    }

    /// Register existing host memory, any page-aligned mapping of this
    /// process (a PostgreSQL dynamic shared memory segment, a memfd
    /// region), so that the device reaches it (`cuMemHostRegister` with
    /// `PORTABLE | DEVICEMAP`); the returned memory's [`Memory::addr`] is the
    /// address the device uses (on the H200 measured, the host address
    /// itself). Dropping it unregisters the range. A range that is not whole
    /// pages is [`Error::Misaligned`]; one that overlaps a registration is
    /// refused (CUDA: `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`). Backends
    /// without [`Capabilities::HOST_REGISTRATION`] answer
    /// [`Error::Unsupported`].
    ///
    /// # Safety
    ///
    /// `ptr..ptr + len` must be mapped in this process, readable and
    /// writable, and stay mapped as long as the registration lives and
    /// until the stream work queued on it ([`MemRef::Registered`]) has run;
    /// the caller is responsible for what else reads and writes those
    /// bytes.
    unsafe fn register_host(&self, ptr: *mut u8, len: u64) -> Result<Self::HostRegistration>;

    /// Import memory exported by another (or this) process.
    ///
    /// A process may import its own export, on every backend. Where the
    /// vendor refuses to open a process's own handle (CUDA answers
    /// `CUDA_ERROR_INVALID_CONTEXT`), the backend short-circuits the import
    /// to the original memory: a device mapping then has the exporter's
    /// address for the range. Either way the import takes a lease, so
    /// [`Allocation::importers`] counts it and
    /// [`Allocation::wait_unleased`] waits for it, as for any importer.
    fn import_memory(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<Self::Mapping>;

    /// Import many memory handles at once, with the same options: what a
    /// process that maps hundreds of blocks at start-up calls. One result
    /// per handle, in order, each as [`Device::import_memory`] would give
    /// it: a handle this process may not import is refused with its own
    /// error ([`Error::PermissionDenied`]) and the others are imported
    /// all the same (the batch is not all-or-nothing).
    ///
    /// The default imports one handle after another. Backends whose
    /// descriptors come from the exporter's broker override it to fetch
    /// the descriptors of the handles of one exporter in one round trip.
    fn import_memory_batch(
        &self,
        shared: Vec<SharedHandle>,
        opts: &ImportOptions,
    ) -> Vec<Result<Self::Mapping>> {
        shared
            .into_iter()
            .map(|s| self.import_memory(s, opts))
            .collect()
    }

    // --- streams, events, notifies ---------------------------------------

    /// Create a stream.
    fn create_stream(&self) -> Result<Self::Stream>;

    /// Use a stream the caller already owns (a framework's `CUstream` or
    /// `aclrtStream`) as this device's stream, without taking ownership:
    /// dropping the returned value never destroys `raw`.
    ///
    /// The default answers [`Error::Unsupported`]: backends without vendor
    /// streams (CPU shared memory, the simulator) have nothing to wrap.
    ///
    /// # Safety
    ///
    /// `raw` must be a live stream of this device's vendor runtime, created
    /// in the context (CUDA) or on the device (Ascend) this device stands
    /// for, and it must outlive the returned value and every operation
    /// queued through it; the caller must not destroy it while work queued
    /// here may still run.
    unsafe fn wrap_stream(&self, raw: *mut std::ffi::c_void) -> Result<Self::Stream> {
        let _ = raw;
        Err(Error::unsupported(
            self.info().backend.name(),
            "wrap_stream",
            "this backend has no vendor streams to wrap; create one with create_stream",
        ))
    }

    /// Block until everything queued on `stream` has run.
    fn synchronize(&self, stream: &Self::Stream, timeout: Option<Duration>) -> Result<()>;

    /// Keep `value` alive until `stream` has run the work queued on it so
    /// far, then drop it: what that work reaches through an address (pages
    /// a kernel reads, a buffer of another library) can be handed to the
    /// stream instead of kept by the caller. Backends with device streams
    /// hold it with the stream and let go once the stream is idle (queuing
    /// never waits); the default waits for the stream, then drops it. A
    /// failed wait keeps the value (leaked, never freed under queued work)
    /// and returns the error.
    fn hold_until_done(
        &self,
        stream: &Self::Stream,
        value: Box<dyn std::any::Any + Send>,
    ) -> Result<()> {
        match self.synchronize(stream, None) {
            Ok(()) => {
                drop(value);
                Ok(())
            }
            Err(e) => {
                std::mem::forget(value);
                Err(e)
            }
        }
    }

    /// Queue a copy of `len` bytes from `src` at `src_offset` to `dst` at
    /// `dst_offset` on `stream`: host to device, device to host or device to
    /// device, by where each side lives (a host allocation of the device, or
    /// a host registration, is the host side). The stream keeps both sides
    /// alive until the copy ran;
    /// its errors surface at the next [`Device::synchronize`]. Out-of-range
    /// offsets are [`Error::InvalidArgument`], a read-only destination
    /// [`Error::PermissionDenied`]. On a host-synchronous stream the copy runs
    /// before the call returns.
    fn copy_async(
        &self,
        stream: &Self::Stream,
        dst: MemRef<'_, Self>,
        dst_offset: u64,
        src: MemRef<'_, Self>,
        src_offset: u64,
        len: u64,
    ) -> Result<()>;

    /// Queue a copy of the host bytes `data` into `dst` at `offset` on
    /// `stream` (the stream owns the bytes until the copy ran).
    fn write_async(
        &self,
        stream: &Self::Stream,
        dst: MemRef<'_, Self>,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<()>;

    /// Queue setting `len` bytes of `dst` at `offset` to `value` on `stream`
    /// (`cuMemsetD8Async`, `aclrtMemsetAsync`).
    fn memset_async(
        &self,
        stream: &Self::Stream,
        dst: MemRef<'_, Self>,
        offset: u64,
        len: u64,
        value: u8,
    ) -> Result<()>;

    /// Advise how a range of managed memory will be used. Backends with
    /// [`Capabilities::MANAGED_MEMORY`] apply it to managed memory and refuse
    /// other memory with the vendor's error (CUDA: `CUDA_ERROR_INVALID_VALUE`,
    /// measured); the others answer [`Error::Unsupported`] (the default).
    fn advise(&self, mem: MemRef<'_, Self>, offset: u64, len: u64, advice: Advice) -> Result<()> {
        let _ = (mem, offset, len, advice);
        Err(no_managed_memory(self.info(), "advise"))
    }

    /// Queue moving a range of managed memory to `to` (a device or the host)
    /// on `stream` (`cuMemPrefetchAsync`): the bytes stay the same, only
    /// where the pages live changes. As [`Device::advise`] for backends
    /// without managed memory.
    fn prefetch_async(
        &self,
        stream: &Self::Stream,
        mem: MemRef<'_, Self>,
        offset: u64,
        len: u64,
        to: Location,
    ) -> Result<()> {
        let _ = (stream, mem, offset, len, to);
        Err(no_managed_memory(self.info(), "prefetch_async"))
    }

    /// True when everything queued on `stream` so far has run (it never
    /// waits; `cuStreamQuery`, `aclrtStreamQuery`). An error of queued work
    /// is returned here as it would be by [`Device::synchronize`].
    fn query_stream(&self, stream: &Self::Stream) -> Result<bool>;

    /// Block until everything queued on every stream of this device has run
    /// (`cuCtxSynchronize`, `aclrtSynchronizeDevice`). An error of work
    /// queued on a stream is that stream's, answered by its own
    /// [`Device::synchronize`] or [`Device::query_stream`]: a device-wide
    /// synchronize in one thread does not take it from the thread that owns
    /// the stream. What this answers is a failure of the device itself (a
    /// device lost, a driver error that stays with the whole context).
    fn synchronize_device(&self, timeout: Option<Duration>) -> Result<()>;

    /// Create an event.
    fn create_event(&self, flags: EventFlags) -> Result<Self::Event>;

    /// Record `event` on `stream`: it completes when the work queued before it has.
    fn record_event(&self, stream: &Self::Stream, event: &Self::Event) -> Result<()>;

    /// Make `stream` wait for `event` before running later work.
    fn stream_wait_event(&self, stream: &Self::Stream, event: &Self::Event) -> Result<()>;

    /// Export an event created with [`EventFlags::interprocess`].
    fn export_event(&self, event: &Self::Event, opts: &ExportOptions) -> Result<Exported>;

    /// Import an event.
    fn import_event(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<Self::Event>;

    /// Create a notify with `flags`. A device-only notify
    /// ([`NotifyFlags::device_only`]) needs
    /// [`Capabilities::STREAM_ORDERED_NOTIFY`] ([`Error::Unsupported`]
    /// otherwise).
    ///
    /// A notify is signalled from the host ([`Notify::signal`]) or on a
    /// stream ([`Device::record_notify`]); a backend whose vendor records
    /// only on streams (Ascend's `aclrtRecordNotify`) signals from the host
    /// through an internal stream of its own, so `signal` returns once the
    /// signal is recorded.
    fn create_notify_with(&self, flags: NotifyFlags) -> Result<Self::Notify>;

    /// Record (signal) `notify` on `stream`, after the work queued before it.
    /// Backends without [`Capabilities::STREAM_ORDERED_NOTIFY`] answer
    /// [`Error::Unsupported`] here and in [`Device::stream_wait_notify`];
    /// CUDA does it with `cuStreamWriteValue32` / `cuStreamWaitValue32` on
    /// a word of registered shared pages (a 3.6 µs cross-process round trip
    /// on an H200 with plain driver calls, as the project's vendor notes
    /// record, `shared/vendor/cuda.md`).
    ///
    /// The stream holds the notify until it ran the operation: dropping
    /// `notify` before then is allowed, and the stream still signals it
    /// (another handle of it, an importer's, sees the signal). The same
    /// holds for [`Device::stream_wait_notify`].
    fn record_notify(&self, stream: &Self::Stream, notify: &Self::Notify) -> Result<()>;

    /// Make `stream` wait for `notify` and reset it, giving up after `timeout`.
    fn stream_wait_notify(
        &self,
        stream: &Self::Stream,
        notify: &Self::Notify,
        timeout: Option<Duration>,
    ) -> Result<()>;

    /// Export a notify.
    fn export_notify(&self, notify: &Self::Notify, opts: &ExportOptions) -> Result<Exported>;

    /// Import a notify.
    fn import_notify(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<Self::Notify>;
}

/// The conveniences of every [`Device`], implemented for all of them: what
/// a program calls often and a backend never writes.
pub trait DeviceExt: Device {
    /// Shorthand for `info().capabilities`.
    fn capabilities(&self) -> Capabilities {
        self.info().capabilities
    }

    /// Create a notify with the default flags: [`Device::create_notify_with`]
    /// with [`NotifyFlags::default`].
    fn create_notify(&self) -> Result<Self::Notify> {
        self.create_notify_with(NotifyFlags::default())
    }
}

impl<D: Device + ?Sized> DeviceExt for D {}
