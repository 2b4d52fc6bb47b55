//! # hal-mock: a strict simulator of CUDA-like and Ascend-like devices
//!
//! `hal-mock` implements the [`hal_core`] contract without a GPU or an NPU,
//! and refuses what the real runtimes refuse: a simulator that accepts what
//! the hardware rejects teaches its users bugs. It is what the conformance
//! suite proves the contract against, and what programs test their sharing
//! code with in CI.
//!
//! ```
//! use hal_core::{AllocDesc, Backend, Device, ExportOptions, ImportOptions, Memory};
//! use hal_mock::MockBackend;
//!
//! let backend = MockBackend::cuda(); // or MockBackend::ascend()
//! let gpu = backend.open(0)?;
//! let buf = gpu.allocate(&AllocDesc::device(0, 8192))?;
//! assert_eq!(buf.host_ptr(), None); // device memory is not host-visible
//! buf.write(4096, b"hello")?;
//! let exported = gpu.export_memory(&buf, &ExportOptions::default())?;
//! // In another process: `Handle::from_text(&exported.to_text())` and import;
//! // the exporter's descriptor broker serves the memory's descriptors.
//! let mapping = gpu.import_memory(exported.share()?, &ImportOptions::default())?;
//! let mut out = [0u8; 5];
//! mapping.read(4096, &mut out)?;
//! assert_eq!(&out, b"hello");
//! # Ok::<(), hal_core::Error>(())
//! ```
//!
//! ## Profiles
//!
//! A [`Profile`] describes the devices: their number, memory, page sizes,
//! allocation granularity, capabilities, and whose rules they follow
//! ([`Vendor`]). Two are built in:
//!
//! | | [`Profile::cuda()`] | [`Profile::ascend()`] |
//! |---|---|---|
//! | backend id | [`BackendId::MockCuda`](hal_core::BackendId::MockCuda) | [`BackendId::MockAscend`](hal_core::BackendId::MockAscend) |
//! | devices | 4 × 16 GiB | 2 × 32 GiB |
//! | page sizes | 4 KiB, 2 MiB, 1 GiB | 4 KiB, 2 MiB, 1 GiB |
//! | VMM granularity (min / recommended) | 2 MiB / 2 MiB | 2 MiB / 2 MiB |
//! | plain allocations | own memory, rounded to 4 KiB | under 1 MiB: sub-allocated from 2 MiB pool chunks in 512-byte steps; larger: own memory, rounded to 512 bytes |
//! | capabilities | IPC memory, events, notifies; VMM; managed memory; peer access; IPC event query; leases; growable buffers | IPC memory, events, notifies; creator-only notify wait; VMM; peer access; pid allow-lists, on by default; leases; growable buffers |
//!
//! Change the number of devices with [`Profile::with_devices`] or the
//! `HAL_MOCK_DEVICES` variable ([`Profile::with_env_overrides`]). Device UUIDs
//! derive from the profile name and the physical device index
//! ([`Profile::device_uuid`]), so a child process that builds the same
//! profile (`MockBackend::cuda()`) imports onto the same
//! devices.
//!
//! Removing a capability from a profile makes the operations that
//! need it answer [`Error::Unsupported`](hal_core::Error::Unsupported).
//! Growable buffers ([`hal_core::growable`]) are built on VMM and IPC memory:
//! without either, the devices do not report
//! [`Capabilities::GROWABLE`](hal_core::Capabilities::GROWABLE).
//!
//! ### Visible devices
//!
//! On real machines processes often number the same devices differently:
//! `CUDA_VISIBLE_DEVICES=2,0` (or `ASCEND_RT_VISIBLE_DEVICES`, or a
//! container's device list) makes physical device 2 that process's device
//! 0. [`Profile::with_visible_devices`] (`&[2, 0]`) or the
//! `HAL_MOCK_VISIBLE_DEVICES` variable (`2,0`, or per profile
//! `mock-cuda=2,0;mock-ascend=1`; read by [`Profile::with_env_overrides`])
//! simulate it. Ordinals ([`DeviceInfo::ordinal`](hal_core::DeviceInfo::ordinal),
//! [`Backend::open`](hal_core::Backend::open), allocations, peer access,
//! memory accounting, faults) are this process's; the UUID, name and memory
//! of a device are its physical device's ([`MockDevice::physical_device`]).
//!
//! This is why a handle names its device by UUID as well as by ordinal: the
//! exporter's ordinal 2 may be the importer's ordinal 0, or another device
//! altogether. Imports find the device by UUID, so memory lands on the
//! device the exporter allocated it on, whatever the two processes' lists;
//! a handle whose device the importer does not see is refused with the
//! vendor's invalid-device code (`CUDA_ERROR_INVALID_DEVICE` (101),
//! `ACL_ERROR_RT_INVALID_DEVICEID` (107001)) naming the UUID, rather than
//! landing on whichever device has the handle's ordinal here.
//!
//! ```
//! use hal_core::{AllocDesc, Backend, Device, ExportOptions, ImportOptions, Location, Memory};
//! use hal_mock::{MockBackend, Profile};
//!
//! let exporter = MockBackend::new(Profile::cuda()); // sees devices 0..4
//! let importer = MockBackend::new(Profile::cuda().with_visible_devices(&[2, 0])?);
//! let gpu2 = exporter.open(2)?;
//! let buf = gpu2.allocate(&AllocDesc::device(2, 4096))?;
//! let exported = gpu2.export_memory(&buf, &ExportOptions::default())?;
//! let here = importer.open(0)?;
//! let mapping = here.import_memory(exported.share()?, &ImportOptions::default())?;
//! assert_eq!(mapping.location(), Location::Device(0)); // physical device 2
//! # Ok::<(), hal_core::Error>(())
//! ```
//!
//! ## How it is built
//!
//! - **Memory** lives in sealed memfds mapped into the process, so handles
//!   exported by one process are imported by another real process, which
//!   maps the same pages. Nothing is created in `/dev/shm`. Device memory is
//!   not host-visible: [`Memory::host_ptr`](hal_core::Memory::host_ptr) is
//!   `None`, and bytes move with `Memory::read` / `Memory::write` (a
//!   simulated `cuMemcpyDtoH` / `aclrtMemcpy`) or the stream copies
//!   [`MockDevice::write_async`] and [`MockDevice::copy_async`]. A device
//!   address ([`Memory::addr`](hal_core::Memory::addr)) is the address of
//!   the simulator's private mapping of the memory: unique and stable, like
//!   a unified virtual address, but not to be dereferenced.
//! - **Streams** are ordered queues, each run by a worker thread: a stream
//!   waiting on an event or a notify runs no later work until the wait is
//!   satisfied, and `synchronize` waits for the queue to drain.
//! - **Events and notifies** keep their state in futex words in a shared
//!   memfd, so records, signals and waits work across processes; host waits
//!   take timeouts, and `wait_async` runs on a waiter thread
//!   ([`hal_core::wait::blocking_future`]).
//! - **Leases**: each exported allocation keeps a
//!   [`LeaseTable`](hal_core::lease::LeaseTable) in the exporter; the
//!   exporter's broker registers a lease for each importing process, which
//!   holds it until it closes (or dies).
//! - **Descriptors** travel through the exporter's broker
//!   ([`hal_core::Exported`]), which enforces pid allow-lists across
//!   processes; descriptors that arrive attached are checked against the
//!   handle's allow-list by the import itself. Allow-lists govern the
//!   processes other than the exporter's: the exporting process imports its
//!   own exports from the handle text (its broker serves it) and with the
//!   descriptors attached ([`Exported::share`](hal_core::Exported::share))
//!   alike.
//!
//! ## The rules enforced, and where they come from
//!
//! Every refusal that the vendor reports with an error code is an
//! [`Error::Vendor`](hal_core::Error::Vendor) with the vendor's number and
//! name ([`codes`]).
//!
//! **Both profiles**
//!
//! - *Exports are whole pages.* An exported range must start and end on a
//!   page boundary of the allocation's page size (4 KiB, or 2 MiB / 1 GiB
//!   with [`HugePages::Explicit`](hal_core::HugePages::Explicit)), in the
//!   device's address space: otherwise [`Error::Misaligned`](hal_core::Error::Misaligned),
//!   never a widened range (Ascend's `aclrtIpcMemGetExportKey` checks that
//!   the range is page-table aligned so that no neighbouring data leaks).
//! - *Import onto another device needs peer access*:
//!   [`ImportOptions::peer_access`](hal_core::ImportOptions::peer_access)
//!   (`CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`,
//!   `ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS`) or a prior
//!   [`MockDevice::enable_peer_access`] (`cuCtxEnablePeerAccess`,
//!   `aclrtDeviceEnablePeerAccess`); otherwise
//!   `CUDA_ERROR_PEER_ACCESS_NOT_ENABLED` (705) or
//!   `ACL_ERROR_RT_NO_PERMISSION` (207006).
//! - *IPC events need the IPC flag at creation*: exporting an event created
//!   without [`EventFlags::interprocess`](hal_core::EventFlags) fails with
//!   `CUDA_ERROR_INVALID_VALUE` (1) from `cuIpcGetEventHandle`, or
//!   `ACL_ERROR_RT_PARAM_INVALID` (107000); and an IPC event cannot time:
//!   `interprocess` with `timing` is refused at creation
//!   (`CU_EVENT_INTERPROCESS` requires `CU_EVENT_DISABLE_TIMING`;
//!   `ACL_EVENT_IPC` is not OR-ed with other flags).
//! - *Close order*: [`Allocation::free`](hal_core::Allocation::free) while
//!   importers hold the memory is refused with
//!   [`Error::Busy`](hal_core::Error::Busy) (Ascend documents that importers
//!   `aclrtIpcMemClose` before the exporter frees; on CUDA freeing under an
//!   importer is undefined). Dropping instead keeps the memory, with a
//!   warning in the log, until the last importer closes
//!   ([`MockDevice::deferred_frees`]); a pool range is not reused meanwhile.
//! - *VMM*: physical sizes, reservation sizes and alignments, mapping
//!   offsets, unmap and access ranges must be multiples of the minimum
//!   granularity (`cuMemGetAllocationGranularity`,
//!   `aclrtMemGetAllocationGranularity`), else the vendor's invalid-value
//!   code. A new mapping has no access until `set_access`
//!   (`cuMemSetAccess`, `aclrtMemSetAccess`); reads and writes of unmapped
//!   or inaccessible parts of a reservation are refused; unmap takes whole
//!   mappings only (`cuMemUnmap`).
//! - *Imports check the handle before mapping.* A memory handle whose
//!   [`offset`](hal_core::Handle::offset) or [`size`](hal_core::Handle::size)
//!   is not the window its vendor payload names (an edited handle text) is
//!   refused with [`HandleError::Malformed`](hal_core::HandleError::Malformed)
//!   for the field `payload`, so that a mapping's
//!   [`handle()`](hal_core::Mapping::handle) always describes what it maps.
//!   A data descriptor opened read-only (or write-only) for a writable
//!   handle is refused with
//!   [`Error::PermissionDenied`](hal_core::Error::PermissionDenied) before
//!   anything is mapped, as `hal-cpu-shm` refuses it.
//! - *Managed and host memory cannot be exported through IPC*
//!   (`cuMemAllocManaged` memory is refused by `cuIpcGetMemHandle`):
//!   [`Error::Unsupported`](hal_core::Error::Unsupported). Read-only
//!   exports are unsupported too: neither vendor's IPC maps read-only.
//!   A profile that adds
//!   [`Capabilities::READ_ONLY_EXPORT`](hal_core::Capabilities::READ_ONLY_EXPORT)
//!   gets them with the guarantee of `hal-cpu-shm`: the first export of an
//!   allocation decides, for all of its exports, whether its memory object
//!   is sealed against writes (`F_SEAL_FUTURE_WRITE`; the exporter's own
//!   mapping keeps writing, nothing else ever can, not even a descriptor
//!   reopened read-write through `/proc`); the other kind of export is then
//!   refused with [`Error::PermissionDenied`](hal_core::Error::PermissionDenied).
//!   A read-only export sends an `O_RDONLY` descriptor, and an importer
//!   refuses a read-only handle whose memory object lacks the seal. A
//!   sub-allocation of a pool chunk is not exported read-only
//!   ([`Error::Unsupported`](hal_core::Error::Unsupported)): the seal would
//!   cover every allocation of its chunk.
//!
//! **CUDA-like** ([`Vendor::Cuda`])
//!
//! - `cuIpcGetMemHandle` works on the base allocation: the handle names the
//!   base plus [`Handle::offset`](hal_core::Handle::offset), and the importer
//!   maps the base.
//! - Opening the same allocation twice in one process
//!   (`cuIpcOpenMemHandle_v2`) returns the same mapping, reference counted:
//!   the same base address, and closing one does not unmap the other.
//! - Notifies are built from stream memory operations on shared host memory
//!   (`cuStreamWriteValue32_v2` / `cuStreamWaitValue32_v2`): any process may
//!   wait, and there is no pid allow-list (`Importers::Pids` is unsupported).
//!
//! **Ascend-like** ([`Vendor::Ascend`])
//!
//! - `aclrtMalloc` may hand out sub-allocations that are not page-aligned:
//!   allocations under 1 MiB are carved from shared 2 MiB chunks in 512-byte
//!   steps, so exporting one fails with `Misaligned` unless it was allocated
//!   with [`AllocDesc::align`](hal_core::AllocDesc::align) of a page.
//! - The pid allow-list is on by default: with
//!   [`Importers::BackendDefault`](hal_core::Importers) no other process may
//!   import until pids are added, after the export too
//!   ([`Device::allow_importers`](hal_core::Device::allow_importers):
//!   `aclrtIpcMemSetImportPid`, `aclrtNotifySetImportPid`,
//!   `aclrtMemSetPidToShareableHandle`); `Importers::Anyone` is
//!   `DISABLE_PID_VALIDATION`. A refused importer gets
//!   [`Error::PermissionDenied`](hal_core::Error::PermissionDenied), whether
//!   it imports from the handle text or with the descriptors attached; the
//!   exporting process itself is never refused.
//! - Only the creator of a notify waits on it (`aclrtWaitAndResetNotify`);
//!   importers record. An importer's wait is `PermissionDenied`.
//! - IPC events cannot be queried or timed: `query` is `Unsupported`, and
//!   handles carry [`HandleFlags::NO_QUERY`](hal_core::HandleFlags::NO_QUERY).
//! - Memory imported onto another device is usable only for asynchronous
//!   device-to-device copies ([`MockDevice::copy_async`]); `read` / `write`
//!   on it are `Unsupported`.
//! - Importing a notify onto another device needs peer access too
//!   (`ACL_RT_NOTIFY_IMPORT_FLAG_ENABLE_PEER_ACCESS`).
//!
//! ## Fault injection
//!
//! [`fault`] makes the next allocation, export, import or wait fail with a
//! chosen vendor error, loses a device (every later call answers the
//! vendor's device-lost code: `CUDA_ERROR_DEVICE_UNAVAILABLE` (46),
//! `ACL_ERROR_RT_LOST_HEARTBEAT` (507010)), or removes a vendor entry point
//! so that the operations calling it answer `Unsupported` naming the symbol.
//! Faults belong to one backend instance: parallel tests do not see each
//! other's.
//!
//! For the stand-in libraries, [`older::LibraryCopy`] makes a copy of a
//! built stand-in whose dynamic symbol table lacks chosen entry points:
//! loaded in place of the stand-in, it is a driver or runtime older than
//! those calls (`dlsym` finds nothing for them).
#![deny(missing_docs)]
#![cfg(target_os = "linux")]

mod backend;
mod backing;
pub mod bad_library;
pub mod codes;
pub mod context;
mod device;
pub mod fault;
mod memory;
pub mod older;
mod profile;
mod rules;
pub mod standin;
mod state;
mod stream;
mod sync;
mod vendor;
mod vmm;

pub use backend::MockBackend;
pub use device::MockDevice;
pub use memory::{DeviceMemory, MockAllocation, MockMapping};
pub use profile::{Profile, SubAllocation, DLPACK};
pub use stream::MockStream;
pub use sync::{MockEvent, MockNotify};
pub use vendor::Vendor;
pub use vmm::{MockPhysical, MockReservation};
