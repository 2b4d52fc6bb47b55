//! [`UvmDevice`]: a GPU of the inner backend whose host and managed
//! allocations are shared managed buffers, and whose streams, events,
//! notifies and VMM are the GPU's own.

use hal_core::DeviceExt;
use std::sync::Arc;
use std::time::Duration;

use hal_core::{
    Access, AccessGrant, AccessTarget, Advice, AllocDesc, BackendId, Capabilities, Device,
    DeviceInfo, Error, EventFlags, ExportOptions, Exported, Granularity, ImportOptions, Location,
    MemRef, Memory, PhysicalDesc, Result, SharedHandle, Vmm,
};
use hal_cpu_shm::CpuDevice;

use crate::brand;
use crate::gpu::GpuDevice;
use crate::home;
use crate::memory::{HomePages, SharedManaged, SharedView, UvmAllocation, UvmMapping};
use crate::registration;
use crate::route::Side;
use crate::step;
use crate::step_errors::StepErrors;
use crate::stream::UvmStream;

/// How the GPU reaches the home pages of shared managed buffers.
///
/// # Strategies, and when each is used
///
/// The figures of the table were measured on an H200 (driver 580, CUDA 13.0)
/// with two real processes making plain driver calls, before this crate existed
/// (`shared/vendor/cuda.md` in the project's notes). Through this crate, one
/// run of `cargo xtask gpu-smoke`'s `run.sh` on an H200 (driver 580.159.04,
/// code of commit 7ce4317) measured the
/// registered home: `uvm_bench` over 256 MiB registered in 131 ms (a raw
/// `register_host` of the same pages 154 ms), opened a region already
/// registered in 0.64 µs, and read home pages from the GPU at 53.6 GB/s (pinned
/// `cuMemAllocHost` memory 52.5 GB/s). Nothing of
/// `Residency` or [`NumaHome`](crate::NumaHome) has been
/// measured through this crate.
///
/// | strategy | when | what it costs | bounded by |
/// |---|---|---|---|
/// | registered home pages ([`Strategy::Registered`](crate::Strategy::Registered)) | always, by default: every process that uses the GPU registers the memfd pages (`cuMemHostRegister(PORTABLE \| DEVICEMAP)`) once, and its GPU reads and writes them in place at the host address | registration 256 MiB: 40–102 ms, 1 GiB: 446 ms (another sitting on the same machine: 145 ms in one process, 355 ms each in 8 at once, 1.15 s each in 32), once per process and region (a second open is a cache lookup); unregistration 1 GiB: 16 ms | the host link: 55 GB/s GPU reads and writes, equal to pinned `cuMemAllocHost` memory (pageable `cuMemcpyHtoD`: 8 GB/s) |
/// | device-resident chunks (`Residency`, experimental: feature `experimental-residency`) | after `Residency::prefetch`, where the GPU has VMM: a chunk's current copy is a device VMM allocation that every process maps | a copy of the chunk each way (prefetch, writeback); creating a 64 MiB chunk 47 µs, exporting it 762 µs, mapping it in another process 60–205 µs | device memory (fast: device bandwidth) |
/// | direct pageable access ([`Strategy::Pageable`](crate::Strategy::Pageable)) | where the GPU reports `PAGEABLE_MEMORY_ACCESS` (HMM or ATS machines): nothing is registered, the GPU reaches the pages at their host address | nothing at open | the host link; not available on the H200 measured (the attribute is 0 there: unregistered pages fault in kernels and answer `CUDA_ERROR_INVALID_VALUE` to copies), so this strategy is tested on the stand-in driver only |
/// | host-NUMA home ([`NumaHome`](crate::NumaHome)) | picked explicitly, where the GPU has VMM with host-NUMA pages | creating 1 GiB 233 ms; attaching it in another process about 23 ms (import + reserve + map + access) | the host link: GPU reads 55.3 GB/s; CPU memmove 10.7 GB/s (malloc 9.9) |
/// | CPU-only processes ([`open_on_cpu`](crate::open_on_cpu)) | processes that never initialise CUDA | a memfd import (tens of µs) | host memory bandwidth |
///
/// **Homes.** A buffer's home is a sealed memfd (`hal-cpu-shm`) by default,
/// because CPU-only processes can map it without CUDA and it works on every GPU
/// that registers host memory. The second home, picked explicitly with
/// [`NumaHome`](crate::NumaHome), is a host-NUMA VMM allocation shared by
/// descriptor: a second process attaches 1 GiB in about 23 ms instead of 145–446 ms
/// of registration, the GPU reads it at 55 GB/s and the CPU as fast as `malloc`
/// memory (the table's plain driver calls), but every process that maps it initialises CUDA, and it
/// needs the GPU's VMM with host-NUMA pages (`Unsupported` where the GPU
/// backend lacks `HOST_NUMA_VMM`). It is plain memory of the contract
/// ([`Memory`](hal_core::Memory)), not an allocation of
/// [`UvmDevice`](crate::UvmDevice): stream operations reach it through the
/// GPU's own copies or kernels at
/// [`NumaHome::device_addr`](crate::NumaHome::device_addr).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Registered with the GPU in every process that maps them
    /// (`cuMemHostRegister(PORTABLE | DEVICEMAP)`), once per process and
    /// region: every GPU, the H200 measured among them.
    Registered,
    /// Reached directly, unregistered: GPUs with
    /// [`Capabilities::PAGEABLE_MEMORY_ACCESS`] (HMM or ATS machines).
    Pageable,
}

/// A device of [`UvmBackend`](crate::UvmBackend): the GPU `D` and the
/// host's shared memory.
///
/// - [`Location::Host`] and [`Location::Managed`] allocate a shared managed
///   buffer ([`SharedManaged`]): memfd pages, registered with the GPU;
///   [`Location::Device`] allocates the GPU's own memory.
/// - Exports of shared managed buffers are `hal-cpu-shm` exports named
///   for this backend and GPU; an import maps the pages and registers them
///   once per process ([`registration`](crate::registration)).
/// - Events, notifies and VMM are the GPU's; a stream is the GPU's stream
///   ([`UvmStream::inner`]). Stream work between the GPU's own memory and
///   registered home pages runs on it as the GPU's own; work on home pages
///   the GPU does not reach is a host step in stream order (see
///   [`UvmStream`], *Stream order*).
pub struct UvmDevice<D: Device> {
    gpu: D,
    host: CpuDevice,
    info: DeviceInfo,
    devices: u32,
    steps: Arc<StepErrors>,
    /// The process that opened it: a child forked from it is refused (see
    /// [`Error::Forked`](hal_core::Error::Forked)).
    origin: hal_core::kit::os::Origin,
}

impl<D: Device> std::fmt::Debug for UvmDevice<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.info.fmt_device("UvmDevice", f)
    }
}

impl<D> UvmDevice<D>
where
    D: GpuDevice,
{
    /// The device over `gpu`, one of `devices` GPUs of its backend. `gpu`
    /// must register host memory
    /// ([`Capabilities::HOST_REGISTRATION`](hal_core::Capabilities::HOST_REGISTRATION)):
    /// without, [`Error::Unsupported`].
    pub fn new(gpu: D, devices: u32) -> Result<Self> {
        if !gpu.capabilities().contains(crate::info::REQUIRED) {
            return Err(Error::unsupported(
                "cuda-uvm",
                "open",
                format!(
                    "{} cannot register host memory (Capabilities::HOST_REGISTRATION), which \
                     shared managed buffers need; use a GPU backend that has it",
                    gpu.info().name
                ),
            ));
        }
        let info = crate::info::device_info(gpu.info());
        Ok(UvmDevice {
            gpu,
            host: hal_cpu_shm::CpuShm::new().host(),
            info,
            devices,
            steps: Arc::default(),
            origin: hal_core::kit::os::Origin::here(),
        })
    }

    /// The GPU underneath.
    pub fn gpu(&self) -> &D {
        &self.gpu
    }

    /// How the GPU reaches home pages here: registered in every process,
    /// or directly where the GPU reads pageable memory (see the crate
    /// documentation, *Strategies*).
    pub fn strategy(&self) -> Strategy {
        if self
            .gpu
            .capabilities()
            .contains(Capabilities::PAGEABLE_MEMORY_ACCESS)
        {
            Strategy::Pageable
        } else {
            Strategy::Registered
        }
    }

    fn shared(&self, desc: &AllocDesc) -> Result<SharedManaged<D>> {
        let home_desc = AllocDesc {
            location: Location::Host,
            ..desc.clone()
        };
        let home = Arc::new(self.host.allocate(&home_desc)?);
        let ptr = home
            .host_ptr()
            .ok_or_else(|| Error::invalid("host shared memory without a host address"))?;
        if self.strategy() == Strategy::Pageable {
            return Ok(SharedManaged::new(None, true, home, desc.location));
        }
        let keep: Box<dyn std::any::Any + Send + Sync> = Box::new(Arc::clone(&home));
        // SAFETY: `keep`, a share of the allocation, keeps the pages mapped
        // as long as the registration lives.
        let reg = unsafe { registration::register(&self.gpu, ptr, home.len(), Some(keep)) }?;
        Ok(SharedManaged::new(Some(reg), false, home, desc.location))
    }

    fn import_shared(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<SharedView<D>> {
        let original = shared.handle.clone();
        let shared = brand::host(shared, self.host.info())?;
        let host_opts = ImportOptions {
            device: None,
            ..opts.clone()
        };
        let home = self.host.import_memory(shared, &host_opts)?;
        let direct = self.strategy() == Strategy::Pageable;
        let registration = match home.host_ptr() {
            Some(ptr) if !home.is_read_only() && !direct => {
                let keep: Box<dyn std::any::Any + Send + Sync> = Box::new(home.clone());
                // SAFETY: `keep`, a clone of the mapping, keeps the pages
                // mapped as long as the registration lives.
                Some(unsafe { registration::register(&self.gpu, ptr, home.len(), Some(keep)) }?)
            }
            _ => None,
        };
        Ok(SharedView::new(registration, direct, home, original))
    }

    /// Hold the home pages GPU work just queued on `stream` reaches, until
    /// the stream ran it. Called after the inner GPU queued the work: what
    /// the GPU holds for it (a clone of the pages' registration) is let go
    /// first (`hal_core::kit::stream::queued::Holding::release` keeps the order), so the
    /// home's own drop unregisters the pages while they are still mapped.
    fn hold_homes<const N: usize>(
        &self,
        stream: &UvmStream<D::Stream>,
        homes: [Option<Arc<dyn HomePages>>; N],
    ) -> Result<()> {
        for home in homes.into_iter().flatten() {
            self.gpu.hold_until_done(stream.inner(), Box::new(home))?;
        }
        Ok(())
    }

    fn check_device(&self, ordinal: u32) -> Result<()> {
        if ordinal >= self.devices {
            return Err(Error::invalid(format!(
                "device {ordinal} does not exist: the GPU backend has {} device(s)",
                self.devices
            )));
        }
        Ok(())
    }

    /// The checks of advice and prefetch on a shared managed buffer: managed
    /// memory (other memory is refused, as the driver does), the range, the
    /// device named.
    fn managed_hint(&self, mem: &dyn Memory, offset: u64, len: u64, at: Location) -> Result<()> {
        if mem.location() != Location::Managed {
            return Err(Error::invalid(format!(
                "the memory is {}, not managed memory: advice and prefetch apply to \
                 allocations of {}",
                mem.location(),
                Location::Managed
            )));
        }
        hal_core::device::check_bounds(offset, len, mem.len())?;
        match at {
            Location::Device(d) => self.check_device(d),
            Location::Host => Ok(()),
            Location::Managed => Err(Error::invalid(
                "managed memory is not a place pages move to: name a device or the host",
            )),
        }
    }
}

/// The side `m` names: memory the GPU reaches (home pages through their
/// registration, held for the queued work), or home pages only the host
/// reaches.
fn side<D>(m: MemRef<'_, UvmDevice<D>>) -> Side<'_, D>
where
    D: GpuDevice,
{
    match m {
        MemRef::Allocation(UvmAllocation::Shared(s)) => match s.registration() {
            Some(r) => Side::Gpu(MemRef::Registered(r), Some(s.pages())),
            None => Side::Host(s.pages()),
        },
        MemRef::Allocation(UvmAllocation::Inner(a)) => Side::Gpu(MemRef::Allocation(a), None),
        MemRef::Mapping(UvmMapping::Shared(s)) => match s.registration() {
            Some(r) => Side::Gpu(MemRef::Registered(r), Some(s.pages())),
            None => Side::Host(s.pages()),
        },
        MemRef::Mapping(UvmMapping::Inner(m)) => Side::Gpu(MemRef::Mapping(m), None),
        MemRef::Registered(r) => Side::Gpu(MemRef::Registered(r), None),
    }
}

/// Refuse a read-only destination.
fn writable(mem: &dyn Memory) -> Result<()> {
    if mem.is_read_only() {
        return Err(Error::PermissionDenied {
            pid: None,
            reason: "the destination is mapped read-only here; writes are refused".into(),
        });
    }
    Ok(())
}

impl<D> Device for UvmDevice<D>
where
    D: GpuDevice,
{
    type Allocation = UvmAllocation<D>;
    type Mapping = UvmMapping<D>;
    type Stream = UvmStream<D::Stream>;
    type Event = D::Event;
    type Notify = D::Notify;
    type HostRegistration = D::HostRegistration;

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn process_id(&self) -> Result<u32> {
        self.origin.check("the cuda-uvm device")?;
        self.host.process_id()
    }

    fn allocate(&self, desc: &AllocDesc) -> Result<UvmAllocation<D>> {
        self.origin.check("the cuda-uvm device")?;
        match desc.location {
            Location::Host | Location::Managed => Ok(UvmAllocation::Shared(self.shared(desc)?)),
            Location::Device(_) => Ok(UvmAllocation::Inner(self.gpu.allocate(desc)?)),
        }
    }

    fn export_memory(&self, alloc: &UvmAllocation<D>, opts: &ExportOptions) -> Result<Exported> {
        self.origin.check("the cuda-uvm device")?;
        match alloc {
            UvmAllocation::Shared(s) => {
                if matches!(opts.importers, hal_core::Importers::Pids(_))
                    && !self
                        .info
                        .capabilities
                        .contains(Capabilities::PID_ALLOW_LIST)
                {
                    return Err(Error::unsupported(
                        "cuda-uvm",
                        "export to a pid allow-list",
                        "the GPU's events and notifies keep no pid allow-list, so this backend \
                         claims none; export with Importers::Anyone or BackendDefault and \
                         control who receives the handle",
                    ));
                }
                let exported = self.host.export_memory(s.home(), opts)?;
                Ok(brand::ours(exported, &self.info))
            }
            UvmAllocation::Inner(a) => {
                Ok(brand::ours(self.gpu.export_memory(a, opts)?, &self.info))
            }
        }
    }

    fn allow_importers(&self, exported: &mut Exported, pids: &[u32]) -> Result<()> {
        self.origin.check("the cuda-uvm device")?;
        let h = exported.handle();
        let home =
            h.kind == hal_core::HandleKind::Memory && !matches!(h.location, Location::Device(_));
        if !self
            .info
            .capabilities
            .contains(Capabilities::PID_ALLOW_LIST)
        {
            return Err(Error::unsupported(
                "cuda-uvm",
                "allow_importers",
                "the GPU keeps no pid allow-list (Capabilities::PID_ALLOW_LIST is absent); \
                 control who receives the handle",
            ));
        }
        if home {
            return self.host.allow_importers(exported, pids);
        }
        // The GPU's export, under its own name for the call.
        let gpu = self.gpu.info();
        exported.set_device(gpu.backend, gpu.ordinal, gpu.uuid);
        let done = self.gpu.allow_importers(exported, pids);
        exported.set_device(BackendId::CudaUvm, self.info.ordinal, self.info.uuid);
        done
    }

    unsafe fn register_host(&self, ptr: *mut u8, len: u64) -> Result<D::HostRegistration> {
        self.origin.check("the cuda-uvm device")?;
        // SAFETY: the caller gives register_host's promise.
        unsafe { self.gpu.register_host(ptr, len) }
    }

    fn import_memory(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<UvmMapping<D>> {
        self.origin.check("the cuda-uvm device")?;
        brand::check(&shared)?;
        if let Some(d) = opts.device {
            self.check_device(d)?;
        }
        if opts.peer_access {
            return Err(Error::unsupported(
                "cuda-uvm",
                "an import with peer access",
                "this backend does not enable peer access (Capabilities::PEER_ACCESS is absent): \
                 shared managed buffers are host pages every GPU reaches once registered",
            ));
        }
        if let Location::Device(_) = shared.handle.location {
            let shared = brand::theirs(shared, self.gpu.info().backend)?;
            return Ok(UvmMapping::Inner(self.gpu.import_memory(shared, opts)?));
        }
        Ok(UvmMapping::Shared(self.import_shared(shared, opts)?))
    }

    fn create_stream(&self) -> Result<UvmStream<D::Stream>> {
        self.origin.check("the cuda-uvm device")?;
        let inner = self.gpu.create_stream()?;
        Ok(UvmStream::new(inner, Arc::clone(&self.steps)))
    }

    unsafe fn wrap_stream(&self, raw: *mut std::ffi::c_void) -> Result<UvmStream<D::Stream>> {
        self.origin.check("the cuda-uvm device")?;
        // SAFETY: the caller gives wrap_stream's promise.
        let inner = unsafe { self.gpu.wrap_stream(raw) }?;
        Ok(UvmStream::new(inner, Arc::clone(&self.steps)))
    }

    fn synchronize(&self, stream: &UvmStream<D::Stream>, timeout: Option<Duration>) -> Result<()> {
        self.origin.check("the cuda-uvm device")?;
        self.gpu.synchronize(stream.inner(), timeout)?;
        self.steps.take(stream.id())
    }

    /// Between memory the GPU reaches (its own, and home pages through
    /// their registration), the GPU's copy in stream order; with home pages
    /// only the host reaches, a host step (see [`UvmStream`], *Stream
    /// order*).
    fn copy_async(
        &self,
        stream: &UvmStream<D::Stream>,
        dst: MemRef<'_, Self>,
        dst_offset: u64,
        src: MemRef<'_, Self>,
        src_offset: u64,
        len: u64,
    ) -> Result<()> {
        self.origin.check("the cuda-uvm device")?;
        // Checks of a copy a host step takes part in; false when it is empty.
        let checked = |to: &dyn Memory, from: &dyn Memory| -> Result<bool> {
            hal_core::device::check_bounds(src_offset, len, from.len())?;
            hal_core::device::check_bounds(dst_offset, len, to.len())?;
            writable(to)?;
            Ok(len > 0)
        };
        match (side(dst), side(src)) {
            (Side::Gpu(d, held_d), Side::Gpu(s, held_s)) => {
                self.gpu
                    .copy_async(stream.inner(), d, dst_offset, s, src_offset, len)?;
                self.hold_homes(stream, [held_d, held_s])
            }
            (Side::Host(to), Side::Host(from)) => {
                if !checked(to.memory(), from.memory())? {
                    return Ok(());
                }
                step::queue(&self.gpu, stream, move || {
                    home::copy(
                        to.memory(),
                        dst_offset,
                        true,
                        from.memory(),
                        src_offset,
                        true,
                        len,
                    )
                })
            }
            // Host-only pages to memory the GPU reaches: the step copies
            // them into a staging buffer of the GPU's host memory, which the
            // GPU then copies in stream order; the step reaches only what
            // it holds.
            (Side::Gpu(d, held_d), Side::Host(from)) => {
                if !checked(d.memory(), from.memory())? {
                    return Ok(());
                }
                let staging = Arc::new(self.gpu.allocate(&AllocDesc::host(len))?);
                let filled = Arc::clone(&staging);
                step::queue_around(
                    &self.gpu,
                    stream,
                    || Ok(()),
                    move || home::copy(&*filled, 0, false, from.memory(), src_offset, true, len),
                    || {
                        self.gpu.copy_async(
                            stream.inner(),
                            d,
                            dst_offset,
                            MemRef::Allocation(&*staging),
                            0,
                            len,
                        )
                    },
                    (Arc::clone(&staging), held_d),
                )
            }
            // Memory the GPU reaches to host-only pages: the GPU copies
            // into a staging buffer first, and the step copies that home.
            (Side::Host(to), Side::Gpu(s, held_s)) => {
                if !checked(to.memory(), s.memory())? {
                    return Ok(());
                }
                let staging = Arc::new(self.gpu.allocate(&AllocDesc::host(len))?);
                let filled = Arc::clone(&staging);
                step::queue_around(
                    &self.gpu,
                    stream,
                    || {
                        self.gpu.copy_async(
                            stream.inner(),
                            MemRef::Allocation(&*staging),
                            0,
                            s,
                            src_offset,
                            len,
                        )
                    },
                    move || home::copy(to.memory(), dst_offset, true, &*filled, 0, false, len),
                    || Ok(()),
                    (Arc::clone(&staging), held_s),
                )
            }
        }
    }

    fn write_async(
        &self,
        stream: &UvmStream<D::Stream>,
        dst: MemRef<'_, Self>,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<()> {
        self.origin.check("the cuda-uvm device")?;
        match side(dst) {
            Side::Gpu(d, held) => {
                self.gpu.write_async(stream.inner(), d, offset, data)?;
                self.hold_homes(stream, [held])
            }
            Side::Host(h) => {
                hal_core::device::check_bounds(offset, data.len() as u64, h.memory().len())?;
                writable(h.memory())?;
                step::queue(&self.gpu, stream, move || h.memory().write(offset, &data))
            }
        }
    }

    fn memset_async(
        &self,
        stream: &UvmStream<D::Stream>,
        dst: MemRef<'_, Self>,
        offset: u64,
        len: u64,
        value: u8,
    ) -> Result<()> {
        self.origin.check("the cuda-uvm device")?;
        match side(dst) {
            Side::Gpu(d, held) => {
                self.gpu
                    .memset_async(stream.inner(), d, offset, len, value)?;
                self.hold_homes(stream, [held])
            }
            Side::Host(h) => {
                hal_core::device::check_bounds(offset, len, h.memory().len())?;
                writable(h.memory())?;
                step::queue(&self.gpu, stream, move || {
                    home::fill(h.memory(), offset, len, value)
                })
            }
        }
    }

    fn hold_until_done(
        &self,
        stream: &UvmStream<D::Stream>,
        value: Box<dyn std::any::Any + Send>,
    ) -> Result<()> {
        self.origin.check("the cuda-uvm device")?;
        self.gpu.hold_until_done(stream.inner(), value)
    }

    /// On a shared managed buffer, advice is checked and kept by nobody:
    /// the home pages are registered (pinned) and never migrate, so every
    /// device reaches them in place whatever the advice. Device copies are
    /// made explicitly (see [`Strategy`]).
    fn advise(&self, mem: MemRef<'_, Self>, offset: u64, len: u64, advice: Advice) -> Result<()> {
        self.origin.check("the cuda-uvm device")?;
        match side(mem) {
            Side::Gpu(m, None) => self.gpu.advise(m, offset, len, advice),
            Side::Gpu(_, Some(_)) | Side::Host(_) => {
                let at = match advice {
                    Advice::ReadMostly => Location::Host,
                    Advice::PreferredLocation(l) => l,
                    Advice::AccessedBy(d) => Location::Device(d),
                };
                self.managed_hint(mem.memory(), offset, len, at)
            }
        }
    }

    /// On a shared managed buffer, the pages stay home (registered pages
    /// do not migrate) and the bytes are unchanged, which is what a
    /// prefetch promises; the call is ordered after the stream's work.
    fn prefetch_async(
        &self,
        stream: &UvmStream<D::Stream>,
        mem: MemRef<'_, Self>,
        offset: u64,
        len: u64,
        to: Location,
    ) -> Result<()> {
        self.origin.check("the cuda-uvm device")?;
        match side(mem) {
            Side::Gpu(m, None) => self.gpu.prefetch_async(stream.inner(), m, offset, len, to),
            Side::Gpu(_, Some(_)) | Side::Host(_) => {
                // A hint on the home pages queues nothing; the stream is
                // still this device's to name (the GPU's query checks it,
                // and answers without waiting).
                self.gpu.query_stream(stream.inner())?;
                self.managed_hint(mem.memory(), offset, len, to)
            }
        }
    }

    fn query_stream(&self, stream: &UvmStream<D::Stream>) -> Result<bool> {
        self.origin.check("the cuda-uvm device")?;
        let done = self.gpu.query_stream(stream.inner())?;
        if done {
            self.steps.take(stream.id())?;
        }
        Ok(done)
    }

    fn synchronize_device(&self, timeout: Option<Duration>) -> Result<()> {
        self.origin.check("the cuda-uvm device")?;
        self.gpu.synchronize_device(timeout)?;
        self.steps.take_any()
    }

    fn create_event(&self, flags: EventFlags) -> Result<D::Event> {
        self.origin.check("the cuda-uvm device")?;
        self.gpu.create_event(flags)
    }

    fn record_event(&self, stream: &UvmStream<D::Stream>, event: &D::Event) -> Result<()> {
        self.origin.check("the cuda-uvm device")?;
        self.gpu.record_event(stream.inner(), event)
    }

    fn stream_wait_event(&self, stream: &UvmStream<D::Stream>, event: &D::Event) -> Result<()> {
        self.origin.check("the cuda-uvm device")?;
        self.gpu.stream_wait_event(stream.inner(), event)
    }

    fn export_event(&self, event: &D::Event, opts: &ExportOptions) -> Result<Exported> {
        self.origin.check("the cuda-uvm device")?;
        Ok(brand::ours(self.gpu.export_event(event, opts)?, &self.info))
    }

    fn import_event(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<D::Event> {
        self.origin.check("the cuda-uvm device")?;
        let shared = brand::theirs(shared, self.gpu.info().backend)?;
        self.gpu.import_event(shared, opts)
    }

    fn create_notify_with(&self, flags: hal_core::NotifyFlags) -> Result<D::Notify> {
        self.origin.check("the cuda-uvm device")?;
        self.gpu.create_notify_with(flags)
    }

    fn record_notify(&self, stream: &UvmStream<D::Stream>, notify: &D::Notify) -> Result<()> {
        self.origin.check("the cuda-uvm device")?;
        self.gpu.record_notify(stream.inner(), notify)
    }

    fn stream_wait_notify(
        &self,
        stream: &UvmStream<D::Stream>,
        notify: &D::Notify,
        timeout: Option<Duration>,
    ) -> Result<()> {
        self.origin.check("the cuda-uvm device")?;
        self.gpu.stream_wait_notify(stream.inner(), notify, timeout)
    }

    fn export_notify(&self, notify: &D::Notify, opts: &ExportOptions) -> Result<Exported> {
        self.origin.check("the cuda-uvm device")?;
        Ok(brand::ours(
            self.gpu.export_notify(notify, opts)?,
            &self.info,
        ))
    }

    fn import_notify(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<D::Notify> {
        self.origin.check("the cuda-uvm device")?;
        let shared = brand::theirs(shared, self.gpu.info().backend)?;
        self.gpu.import_notify(shared, opts)
    }
}

impl<D> Vmm for UvmDevice<D>
where
    D: GpuDevice,
{
    type Physical = D::Physical;
    type Reservation = D::Reservation;

    fn granularity(&self, which: Granularity) -> Result<u64> {
        self.origin.check("the cuda-uvm device")?;
        self.gpu.granularity(which)
    }

    fn allocate_physical_with(&self, desc: &PhysicalDesc) -> Result<D::Physical> {
        self.origin.check("the cuda-uvm device")?;
        self.gpu.allocate_physical_with(desc)
    }

    fn reserve(&self, size: u64, align: u64) -> Result<D::Reservation> {
        self.origin.check("the cuda-uvm device")?;
        self.gpu.reserve(size, align)
    }

    fn map_range(
        &self,
        reservation: &D::Reservation,
        offset: u64,
        physical: &D::Physical,
        physical_offset: u64,
        len: u64,
    ) -> Result<()> {
        self.origin.check("the cuda-uvm device")?;
        self.gpu
            .map_range(reservation, offset, physical, physical_offset, len)
    }

    fn unmap(&self, reservation: &D::Reservation, offset: u64, len: u64) -> Result<()> {
        self.origin.check("the cuda-uvm device")?;
        self.gpu.unmap(reservation, offset, len)
    }

    fn set_access_for(
        &self,
        reservation: &D::Reservation,
        offset: u64,
        len: u64,
        grants: &[AccessGrant],
    ) -> Result<()> {
        self.origin.check("the cuda-uvm device")?;
        self.gpu.set_access_for(reservation, offset, len, grants)
    }

    fn access(
        &self,
        reservation: &D::Reservation,
        offset: u64,
        target: AccessTarget,
    ) -> Result<Access> {
        self.origin.check("the cuda-uvm device")?;
        self.gpu.access(reservation, offset, target)
    }

    fn export_physical(&self, physical: &D::Physical, opts: &ExportOptions) -> Result<Exported> {
        self.origin.check("the cuda-uvm device")?;
        Ok(brand::ours(
            self.gpu.export_physical(physical, opts)?,
            &self.info,
        ))
    }

    fn import_physical(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<D::Physical> {
        self.origin.check("the cuda-uvm device")?;
        let shared = brand::theirs(shared, self.gpu.info().backend)?;
        self.gpu.import_physical(shared, opts)
    }
}

impl<D> hal_core::testing::ContextProbe for UvmDevice<D>
where
    D: GpuDevice,
{
    fn current_context(&self) -> Result<Option<u64>> {
        self.origin.check("the cuda-uvm device")?;
        self.gpu.current_context()
    }
}
