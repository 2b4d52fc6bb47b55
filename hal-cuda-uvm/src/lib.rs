//! # hal-cuda-uvm: managed memory shared across processes
//!
//! CUDA refuses to share managed memory between processes
//! (`cuIpcGetMemHandle` on `cuMemAllocManaged` memory answers
//! `CUDA_ERROR_INVALID_VALUE`, measured). This backend gives every process
//! of a group (PostgreSQL's backends and background workers, a pool of
//! data loaders) one buffer that its CPU and its GPU both reach at one
//! address, without a service process that owns all GPU work.
//!
//! ```
//! use hal_core::{AllocDesc, Backend, Device, ExportOptions, ImportOptions, MemRef, Memory};
//! use hal_cuda_uvm::UvmBackend;
//!
//! // UvmBackend::new() runs on the NVIDIA driver; here, the simulator.
//! let dev = UvmBackend::over(hal_mock::MockBackend::cuda()).open(0)?;
//! let buffer = dev.allocate(&AllocDesc::managed(1 << 20))?; // memfd pages, registered
//! let gpu_addr = buffer.shared().and_then(|s| s.device_addr()); // for your kernels
//! assert!(gpu_addr.is_some());
//! let exported = dev.export_memory(&buffer, &ExportOptions::default())?;
//! let text = exported.to_text(); // ~190 characters: argv, a file, a shared-memory slot
//!
//! // In a worker process (here the same one): map, register once, use.
//! let handle = hal_core::Handle::from_text(&text)?;
//! let view = dev.import_memory(handle.into(), &ImportOptions::default())?;
//! let stream = dev.create_stream()?;
//! dev.memset_async(&stream, MemRef::Mapping(&view), 0, 4096, 7)?;
//! dev.synchronize(&stream, None)?;
//! let mut first = [0u8; 1];
//! buffer.read(0, &mut first)?;
//! assert_eq!(first, [7]);
//! # Ok::<(), hal_core::Error>(())
//! ```
//!
//! ## Strategies, and when each is used
//!
//! The figures of the table were measured on an H200 (driver 580, CUDA
//! 13.0) with two real processes making plain driver calls, before this
//! crate existed (`shared/vendor/cuda.md` in the project's notes). Through
//! this crate, one run on an H200 (driver 580.159.04, code of commit
//! 7ce4317) measured the registered home: `uvm_bench` over 256 MiB
//! registered in 131 ms (a raw `register_host` of the same pages 154 ms),
//! opened a region already registered in 0.64 µs, and read home pages from
//! the GPU at 53.6 GB/s (pinned `cuMemAllocHost` memory 52.5 GB/s). Nothing
//! of [`Residency`] or [`NumaHome`] has been measured through this crate.
//!
//! | strategy | when | what it costs | bounded by |
//! |---|---|---|---|
//! | registered home pages ([`Strategy::Registered`]) | always, by default: every process that uses the GPU registers the memfd pages (`cuMemHostRegister(PORTABLE \| DEVICEMAP)`) once, and its GPU reads and writes them in place at the host address | registration 256 MiB: 40–102 ms, 1 GiB: 446 ms, once per process and region (a second open is a cache lookup); unregistration 1 GiB: 16 ms | the host link: 55 GB/s GPU reads and writes, equal to pinned `cuMemAllocHost` memory (pageable `cuMemcpyHtoD`: 8 GB/s) |
//! | device-resident chunks ([`Residency`]) | after [`Residency::prefetch`], where the GPU has VMM: a chunk's current copy is a device VMM allocation that every process maps | a copy of the chunk each way (prefetch, writeback); creating a 64 MiB chunk 47 µs, exporting it 762 µs, mapping it in another process 60–205 µs | device memory (fast: device bandwidth) |
//! | direct pageable access ([`Strategy::Pageable`]) | where the GPU reports `PAGEABLE_MEMORY_ACCESS` (HMM or ATS machines): nothing is registered, the GPU reaches the pages at their host address | nothing at open | the host link; not available on the H200 measured (the attribute is 0 there: unregistered pages fault in kernels and answer `CUDA_ERROR_INVALID_VALUE` to copies), so this strategy is tested on the stand-in driver only |
//! | host-NUMA home ([`NumaHome`]) | picked explicitly, where the GPU has VMM with host-NUMA pages | creating 1 GiB 233 ms; attaching it in another process about 23 ms (import + reserve + map + access) | the host link: GPU reads 55.3 GB/s; CPU memmove 10.7 GB/s (malloc 9.9) |
//! | CPU-only processes ([`open_on_cpu`]) | processes that never initialise CUDA | a memfd import (tens of µs) | host memory bandwidth |
//!
//! **Homes.** A buffer's home is a sealed memfd (`hal-cpu-shm`) by default,
//! because CPU-only processes can map it without CUDA and it works on every
//! GPU that registers host memory. The second home, picked explicitly with
//! [`NumaHome`], is a host-NUMA VMM allocation shared by descriptor: a
//! second process attaches 1 GiB in about 23 ms instead of 446 ms of
//! registration, the GPU reads it at 55 GB/s and the CPU as fast as
//! `malloc` memory (measured), but every process that maps it initialises
//! CUDA, and it needs the GPU's VMM with host-NUMA pages (`Unsupported`
//! where the GPU backend lacks `HOST_NUMA_VMM`). It
//! is plain memory of the contract ([`Memory`](hal_core::Memory)), not an
//! allocation of [`UvmDevice`]: stream operations reach it through the
//! GPU's own copies or kernels at [`NumaHome::device_addr`].
//!
//! ## Stream order
//!
//! Streams, events and notifies are the GPU's. A copy, write or memset
//! between memory the GPU reaches runs on its stream as the GPU's own
//! work: its own memory, and home pages through their registration
//! (`MemRef::Registered` of the inner backend), at pinned-memory speed and
//! with no thread; the stream holds the home pages until it ran the work
//! (`Device::hold_until_done`), so dropping the buffer right after the
//! call is safe. Home pages that the GPU does not reach here (a read-only
//! view, which is never registered, and every home under
//! [`Strategy::Pageable`]) are worked on by a host step: the stream records
//! an event and waits on a notify; a thread waits for the event, copies
//! between the home pages and a staging buffer of the GPU's pinned host
//! memory (or between home pages, or fills them), and signals the notify,
//! so later work on the stream runs after it. The GPU's side of such a
//! copy is a GPU copy to or from the staging buffer, queued in stream
//! order at the call, so the step never reaches memory the caller may
//! free: what it works on, it holds. The call returns at once; an error of
//! the queued work comes back from the next `synchronize`. A host step
//! costs an event, a notify, a thread and, for a copy with the GPU's
//! memory, a staging buffer.
//!
//! A stream of this backend ([`UvmStream`]) is the GPU's stream
//! ([`UvmStream::inner`], for the GPU backend's own calls such as a kernel
//! launch) with an id of its own: a host step's error is kept under it, so
//! it reaches that stream's next `synchronize` or `query_stream` however
//! the stream was moved in between, and never another stream's; a stream
//! dropped with an error unreported logs it.
//!
//! ## Residency, and the consistency rule
//!
//! [`Residency`] keeps a table in a shared header: for every chunk, where
//! its current copy lives, its generation and the process that serves the
//! device copy. **Between a prefetch and its writeback a chunk is written
//! only on the device.** Host writes through [`Residency::write`] to a
//! device-resident chunk are refused; home-page writes made behind the
//! table's back are detected at the writeback, which reports the chunk and
//! keeps the device copy. The header is shared with every attached
//! process, and each reads it as untrusted bytes: no writer of it can make
//! another process wait for ever (its lock has a deadline, set with
//! [`Residency::set_lock_patience`], past which a call answers
//! [`Error::Timeout`](hal_core::Error::Timeout) naming the holder), lose
//! the device writes of a chunk it serves (the server writes them home
//! whatever its slot says, or reports them lost), or disable a chunk for
//! good (an unreadable slot is a dead server's, which
//! [`Residency::reclaim`] recovers). Residency needs the GPU's VMM
//! ([`Capabilities::VMM`](hal_core::Capabilities::VMM), which [`hal_cuda`]
//! offers where the driver reports it): without it, it answers
//! `Unsupported`.
//!
//! ## Growth
//!
//! A device-resident buffer that grows after export is
//! [`hal_core::growable`] over this backend's device (capability
//! `GROWABLE`, where the GPU has VMM): the exporter reserves the capacity
//! it names (not the whole GPU), commits chunks as data arrives, and
//! importers follow the count in its header. Example 06 appends results of
//! unknown size this way, and with shared segments where there is no VMM.
//!
//! ## From PostgreSQL worker processes
//!
//! - **Create** the buffer in one long-lived process (a background worker,
//!   never the postmaster: CUDA does not survive `fork`), and put the
//!   handle text in a slot of the extension's shared memory. The handle
//!   names the creator's descriptor broker: the creator must live while
//!   others import; what is imported stays valid after it exits, because
//!   each importer holds the memfd and a lease.
//! - **Import** in each backend on first use, by text: a backend that uses
//!   the GPU gets a [`UvmMapping`] from [`UvmDevice`]'s `import_memory`
//!   (the pages registered once per backend process; later imports of the
//!   same buffer cost a lookup); a backend that only reads results uses
//!   [`open_on_cpu`] and never loads CUDA.
//! - **Work** with your own kernels at [`SharedView::device_addr`], or with
//!   the contract's stream operations; order work between processes with
//!   exported events or notifies (`export_event`, `import_event`).
//! - **Costs** to plan for: registration is paid per backend process and
//!   buffer (hundreds of milliseconds per GiB), so keep buffers alive in
//!   long-lived processes and prefer fewer, larger buffers; registered
//!   pages are pinned host memory and count against the machine's RAM, not
//!   the GPU's; each imported buffer holds a descriptor.
//! - **Exit**: a backend that exits or is killed releases its registration
//!   (the driver's process state goes with it) and its lease (dead
//!   importers are not counted), so the creator's
//!   [`Allocation::importers`](hal_core::Allocation::importers) drops and it
//!   may free.
//!
//! ## What it cannot do
//!
//! - Home pages never migrate: they are pinned by registration. Advice and
//!   `prefetch_async` on them are checked and change nothing; device
//!   copies are made by [`Residency`] and need VMM.
//! - A read-only import is not registered (the driver registers writable
//!   pages); its bytes reach the GPU through copies only.
//! - Device copies are served by the process that made them: it should
//!   keep its [`Residency`] until the chunk is written back (dropping it
//!   writes back the chunks it serves). If it is killed first, a process
//!   that maps the chunk writes it home at its next call on it (or when it
//!   lets go of its `Residency`); a device
//!   copy no other process maps is lost with its server, and calls on the
//!   chunk answer [`Error::Closed`](hal_core::Error::Closed) until
//!   [`Residency::reclaim`] makes the home pages (the bytes from before the
//!   prefetch) current again.
//! - Pid allow-lists are offered only where the GPU backend keeps them for
//!   events and notifies too (not on CUDA).
//! - No peer access: shared managed buffers are host pages that every GPU
//!   reaches once registered; import device memory onto its own GPU.
//!
//! ## Where each rule lives
//!
//! | rule | where |
//! |---|---|
//! | home pages are `hal-cpu-shm` sealed memfds; handles are renamed for `cuda-uvm` and back | `memory.rs`, `brand.rs` |
//! | registration once per process, GPU and region; unregistered at the last drop, before the pages are unmapped | `registration.rs`, `memory.rs` |
//! | pageable access skips registration | `device.rs` (`Strategy`) |
//! | stream work on home pages is a host step in stream order; its error reported by its own stream's next synchronization | `step.rs`, `home.rs`, `stream.rs`, `step_errors.rs` |
//! | the residency table, its lock (a dead holder is replaced, also when its pid was reused: the lock carries the holder's start time; a word in this process's name that it never took, or never stamped past a grace, is taken over; a live holder is waited for up to a deadline), a dead server's chunks (told the same way), slots read as untrusted bytes, a server's own device writes kept, and the consistency rule | `header.rs`, `residency.rs` |
//! | the host-NUMA home: host-NUMA physical pages, host and device access granted together | `numa.rs` |
#![deny(missing_docs)]

mod backend;
mod brand;
mod cpu;
mod device;
mod gpu;
mod header;
mod home;
mod info;
mod memory;
mod numa;
pub mod registration;
mod residency;
mod route;
mod step;
mod step_errors;
mod stream;

pub use backend::UvmBackend;
pub use cpu::open_on_cpu;
pub use device::{Strategy, UvmDevice};
pub use gpu::GpuDevice;
pub use header::Slot;
pub use info::{GPU_CAPABILITIES, MEMORY_CAPABILITIES};
pub use memory::{SharedManaged, SharedView, UvmAllocation, UvmMapping};
pub use numa::NumaHome;
pub use residency::Residency;
pub use stream::UvmStream;
