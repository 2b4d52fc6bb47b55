//! # hal-cpu-shm: the default backend, on POSIX shared memory
//!
//! The backend every Linux machine can run: [`CpuShm`] has one device,
//! ordinal 0, the host ([`CpuDevice`]), whose memory is shared between
//! processes through memfds, named POSIX shared memory objects and files,
//! with events and notifies on futexes in shared memory and a VMM made of
//! memfd chunks mapped into reserved address space. It implements the whole
//! `hal_core` contract; its capabilities are [`CAPABILITIES`].
//!
//! ```
//! use hal_core::{AllocDesc, Backend, Device, ExportOptions, ImportOptions, Memory};
//!
//! let device = hal_cpu_shm::CpuShm::new().open(0)?;
//! let region = device.allocate(&AllocDesc::host(1 << 20))?;
//! region.write(0, b"hello")?;
//! let exported = device.export_memory(&region, &ExportOptions::default())?;
//! // Another process imports from `exported.to_text()` alone; here, in-process:
//! let mapping = device.import_memory(exported.share()?, &ImportOptions::default())?;
//! let mut buf = [0u8; 5];
//! mapping.read(0, &mut buf)?;
//! assert_eq!(&buf, b"hello");
//! # Ok::<(), hal_core::Error>(())
//! ```
//!
//! ## Anonymous regions: memfd and seals
//!
//! [`Device::allocate`](hal_core::Device::allocate) creates a memfd
//! (`MFD_CLOEXEC | MFD_ALLOW_SEALING`) of the size rounded up to whole pages
//! and maps it shared. Only [`Location::Host`](hal_core::Location::Host)
//! exists here; device and managed locations are
//! [`Error::Unsupported`](hal_core::Error::Unsupported). Nothing is allocated
//! until touched: a 64 GiB region of which 1 MiB is touched costs about 1 MiB.
//!
//! The first export seals the memfd against shrinking and growing
//! (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`); from then on nobody, the
//! exporter included, can change its size. An export covers whole pages (a
//! misaligned range is [`Error::Misaligned`](hal_core::Error::Misaligned),
//! never widened) and carries one descriptor, the data memfd, which the
//! exporter's descriptor broker serves, so the handle text alone is enough
//! to import from another process (`hal_core::exchange`). The
//! handle holds the exporter's address for fixed-address imports, the
//! creator's pid and start time, and a random object id.
//! `Importers::BackendDefault` means anyone; a pid allow-list is enforced by
//! the broker (pids of the exporter's pid namespace). A read-only export
//! sends a descriptor reopened `O_RDONLY`, and its first export seals the memfd
//! against writes (`F_SEAL_FUTURE_WRITE`): the exporter's own mapping keeps
//! writing, and no other mapping or descriptor, in any process, can ever
//! write it (not one reopened read-write through `/proc/PID/fd`, not
//! `mprotect`). An allocation is therefore exported either writable or
//! read-only, as its first export decides; the other kind is refused with
//! [`Error::PermissionDenied`](hal_core::Error::PermissionDenied). An importer
//! refuses a read-only handle whose memfd lacks that seal.
//!
//! An import verifies the descriptor **before** mapping it: a memfd, sealed
//! against shrinking and growing, at least as large as the handle's range.
//! An unsealed or short descriptor is refused
//! ([`HandleError::Descriptors`](hal_core::HandleError::Descriptors)), so no
//! peer can make the importer die of `SIGBUS` by truncating. With
//! [`ImportPlacement::ExporterAddress`](hal_core::ImportPlacement) the mapping
//! goes at the exporter's address (`MAP_FIXED_NOREPLACE`) so pointer-rich
//! structures work unchanged, or fails with
//! [`Error::AlreadyExists`](hal_core::Error::AlreadyExists) when that range is
//! taken. Each importing mapping holds a lease that the exporter's broker
//! registered in the allocation's [`LeaseTable`](hal_core::lease::LeaseTable)
//! (kept by the exporter, never sent):
//! [`Allocation::importers`](hal_core::Allocation::importers) counts them (dead
//! importers excluded) and
//! [`Allocation::wait_unleased`](hal_core::Allocation::wait_unleased) waits
//! for none. Importing the same handle again in one process returns the
//! existing mapping ([`CpuMapping`] is a cheap reference-counted clone) with
//! no system call beyond closing the descriptors that came with the handle.
//! Only imports whose descriptors came from a checked source (the creator's
//! own broker, or this process's own registration) are kept for reuse, and
//! a reuse must match the whole handle: a handle that names a genuine
//! object but carries a peer's descriptors never answers a later import.
//! Anonymous regions leave nothing behind: the memory goes with the last
//! descriptor and mapping, whatever way the processes end.
//!
//! ## Named regions
//!
//! [`named`](mod@named): a region named `X` is the POSIX object `/X`, reachable from C's
//! `shm_open` and Python's `multiprocessing.shared_memory`. Create is
//! exclusive with mode 0600; open refuses other users' regions and
//! unexpected sizes. The ownership metadata lives outside the region's bytes
//! in `/dev/shm/.hal-meta.X`, which [`list_regions`] and [`collect_garbage`]
//! use to find and remove the regions of crashed creators, and only those.
//! Named regions export as handles that carry the name (no descriptors).
//!
//! ## File-backed regions
//!
//! [`file`](mod@file): a regular file mapped shared, for data that should persist.
//!
//! ## Events, notifies, streams
//!
//! Streams are host-synchronous: operations run at once, in order. Events
//! and notifies live in a sealed one-page memfd that exports with the handle;
//! waits spin briefly ([`WaitOptions::spin`](hal_core::WaitOptions), zero
//! sleeps at once), then sleep on a futex with the timeout; an uncontended
//! signal makes no system call. Awaitable waits run on a waiter thread and
//! never block the executor. Notifies are not creator-only: both sides may
//! signal and wait.
//!
//! ## VMM
//!
//! Granularity is the page (minimum) and 2 MiB (recommended). A physical
//! allocation is a sealed memfd chunk; a reservation is `PROT_NONE` address
//! space; map places a chunk over part of it (`MAP_FIXED`), set_access is
//! `mprotect`. Chunks export with their descriptor (verified on import like
//! memory), which is how a buffer grows after it was shared
//! (`hal_core::growable`).
//!
//! ## Placement
//!
//! [`Placement`](hal_core::Placement) hints are honoured: NUMA bind,
//! interleave or preferred (`mbind`; an unknown node is an
//! [`Error::InvalidArgument`](hal_core::Error::InvalidArgument) naming the
//! nodes there are), transparent huge pages (`madvise(MADV_HUGEPAGE)`, advice
//! the kernel may ignore), explicit huge pages (`MFD_HUGETLB`, with an
//! [`Error::OutOfMemory`](hal_core::Error::OutOfMemory) that says how to
//! reserve some when none are free) and prefaulting (`MADV_POPULATE_WRITE`,
//! else a touch of every page).
//!
//! ## What is protected, and what is not
//!
//! | threat | anonymous region | named / file-backed region |
//! |---|---|---|
//! | a peer truncates or grows it | refused by the seals | possible: the library's own `read`/`write` return [`Error::Closed`](hal_core::Error::Closed), direct accesses through `host_ptr` fault |
//! | a forged descriptor (unsealed, short, not memory) | refused before mapping | n/a (opened by name: the size is checked before mapping) |
//! | another user's object | n/a (descriptors are capabilities) | refused on open (owner uid) |
//! | writes through a read-only import | impossible: `O_RDONLY` descriptor and `F_SEAL_FUTURE_WRITE` (a read-write reopen through `/proc` cannot write either) | refused by the library; a same-user process may open the name read-write |
//! | an importer not on the allow-list | refused by the exporter's broker | allow-lists cannot be enforced on a name: such exports are refused |
//! | a crashed creator | nothing is left | [`collect_garbage`] removes its regions |
//! | an importer maps past the exported range | possible: a sub-range export sends the whole allocation's memfd (it cannot be narrowed); the library maps only the range — export a separate allocation to hide neighbours | n/a (the whole region is shared by name) |
//!
//! Shared bytes are shared: a peer with write access can change them at any
//! time, and users of [`Memory::host_ptr`](hal_core::Memory::host_ptr) must
//! treat them as such (atomics or copies, never Rust references held across
//! a peer's writes).
#![deny(missing_docs)]
#![cfg(target_os = "linux")]

mod device;
pub mod file;
mod hostreg;
mod id;
mod info;
mod io;
mod mapping;
mod memory;
pub mod named;
mod placement;
mod sync;
mod view;
mod vmm;

pub use device::{CpuDevice, CpuShm};
pub use file::{create_file_backed, open_file_backed, open_file_backed_read_only};
pub use hal_core::kit::os::numa_nodes;
pub use info::{CAPABILITIES, HUGE_1G, HUGE_2M};
pub use mapping::CpuMapping;
pub use memory::{CpuAllocation, RegionKind};
pub use named::{
    collect_garbage, collect_garbage_named, collect_garbage_prefix, create_named, list_regions,
    open_named, open_named_read_only, region_id, unlink_named, Collected, NamedOptions, RegionInfo,
};
pub use sync::{CpuEvent, CpuNotify, CpuStream};
pub use vmm::{CpuPhysical, CpuReservation};
