//! # hal-cuda: the CUDA driver behind the hal contract
//!
//! `libcuda.so.1` is loaded at run time with `libloading`, never linked: a
//! program built with this backend starts on a machine without the NVIDIA
//! driver, and [`CudaBackend::availability`](hal_core::Backend::availability)
//! says why the backend is unavailable, naming every path it searched. Set
//! [`LIBRARY_VAR`] (`HAL_CUDA_LIBRARY=/path/to/libcuda.so.1`) to load a
//! given library instead of searching.
//!
//! Layers, as in `cudarc`: a thin table of entry points ([`RESOLVED`]),
//! each resolved on first use by the versioned name of
//! [`hal_core::vendor::cuda::entry`] (a missing one is
//! [`Error::Unsupported`](hal_core::Error::Unsupported) naming it); a result
//! layer turning a `CUresult` into a [`VendorError`](hal_core::VendorError)
//! with the driver's number and name (`cuGetErrorName`); and the backend
//! on top. Handle types come from `cudarc::driver::sys` (CUDA 12.8
//! headers); cudarc's own loader is never used.
//!
//! ## What this backend offers, and the vendor rules it keeps
//!
//! | rule | where |
//! |---|---|
//! | every call pushes the device's primary context and pops it, so the caller's current context is unchanged, on any thread | `context.rs` (`Primary::enter`) |
//! | the primary context is retained once per opened device and released when it drops | `context.rs` |
//! | device memory is reached with `cuMemcpyHtoD` / `DtoH`, never dereferenced | `memory.rs` |
//! | `cuMemcpyHtoD_v2` from pageable memory returns before the bytes are in device memory, so a synchronous write synchronizes the legacy stream after the copy before it returns: another process that is told afterwards (a notify, a pipe) reads the new bytes (seen on an H200: without it the peer read the old ones) | `memory.rs` (`copy_in`) |
//! | pinned host memory (`cuMemAllocHost`) is host-visible | `memory.rs` |
//! | host waits poll `cuStreamQuery` / `cuEventQuery`, so timeouts and dropped `wait_async` futures hold | `stream.rs` |
//! | `cuCtxSynchronize` cannot time out: it runs on a thread of its own | `device.rs` |
//! | managed memory is allocated, advised and prefetched, never exported (INVALID_VALUE, measured) | `managed.rs`, `device.rs` |
//! | host memory is registered `PORTABLE \| DEVICEMAP` and reached at `cuMemHostGetDevicePointer` | `hostreg.rs` |
//! | a stream keeps the host bytes of its queued copies until it ran them | `device.rs`, `stream.rs` |
//! | a dropped stream whose work has not run (it may wait for a notify nobody signals yet) is destroyed only once `cuStreamQuery` says the work ran, by hal-core's reaper thread; the drop returns at once | `stream.rs` (`hal_core::reaper`) |
//! | device memory is shared with legacy IPC: the handle of the allocation's base, the range as an offset; one `cuIpcOpenMemHandle_v2` per process for every import of an allocation, closed at the last drop; the exporter's own imports reach the original memory (the driver answers INVALID_CONTEXT, measured) | `ipc.rs`, `mapping.rs` |
//! | importers of exported memory are counted with leases from the exporter's descriptor broker | `ipc.rs`, `memory.rs` |
//! | IPC events: `CU_EVENT_INTERPROCESS \| CU_EVENT_DISABLE_TIMING` (with timing: INVALID_VALUE, measured); the handle's 64 bytes in the payload; importers counted with leases, and the exporter's drop destroys the event only after them; the exporting process's own imports reach the original event; an opened event answers queries and stream waits (measured) | `ipc_event.rs`, `stream.rs` |
//! | a handle names its device by UUID (`cuDeviceGetUuid_v2`): an importer that numbers the devices otherwise (`CUDA_VISIBLE_DEVICES`) finds it with `Backend::device_for`; an import through another device without peer access is refused naming the UUID | `peer.rs`, `ipc.rs` |
//! | an import onto another device needs `ImportOptions::peer_access` and `cuDeviceCanAccessPeer`; another process's memory is opened with `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS` in the importing device's context, this process's own after `cuCtxEnablePeerAccess` (ALREADY_ENABLED is success); `PEER_ACCESS` is claimed where a device reaches another | `peer.rs`, `ipc.rs`, `backend.rs` |
//! | memory of another library (a framework's caching allocator) is adopted by address: `cuMemGetAddressRange_v2` finds the allocation holding the range (a range that leaves it is refused), `cuPointerGetAttribute` its device (another device's memory is refused) and kind (managed, pinned host or device, each keeping its rules); the adopted allocation exports as the backend's own and never frees the memory | `adopt.rs` |
//! | raw legacy handles of other libraries (64 bytes, offset, size) open through the same per-process cache, keyed by their bytes; the range is checked against `cuMemGetAddressRange_v2` of the opened base; raw exports carry no lease | `raw.rs` |
//! | at most 1000 live IPC events per process (as PyTorch); past the cap an interprocess event has no driver handle and recording it synchronizes the stream (a warning is logged once) | `event_cap.rs`, `ipc_event.rs` |
//! | VMM is claimed only when the driver has the `cuMem*` entry points and the device says VMM and POSIX descriptors are supported; host NUMA memory only with `CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`; the granularity is the driver's | `backend.rs`, `needs.rs` |
//! | VMM, legacy IPC and IPC events each need a group of entry points, and managed memory, host registration (with stream-ordered notifies), IPC events, pageable access and VMM each need device attributes answered non-zero; where one is missing the capability is not claimed and a refused call names the entry point the driver lacks and its path, or else the attribute the device answers 0 | `needs.rs` |
//! | sizes, offsets and alignments are whole granules; physical memory is made on the device it is asked of, or in host NUMA memory | `vmm.rs` |
//! | fabric is asked for (with a POSIX descriptor beside it) only where the device supports fabric handles; a refusal (NOT_PERMITTED without IMEX, measured) falls back to a POSIX descriptor with one warning per process | `vmm.rs` (`hal_core::vmm::fabric_or_posix`) |
//! | physical memory is exported as a POSIX descriptor, made once per allocation and served by the descriptor broker over SCM_RIGHTS; importers are counted with leases; an import closes the descriptor after `cuMemImportFromShareableHandle` | `vmm.rs`, `physical.rs` |
//! | a mapping has no access until `cuMemSetAccess`; one call gives every device (and the host, for host NUMA pages only) its access; reads and writes through a reservation check this device's access first and copy with `cuMemcpyHtoD` / `DtoH`, never through the address | `vmm.rs`, `reservation.rs` |
//! | unmaps cover whole mappings and run after the context's queued work (`cuCtxSynchronize`, then `cuMemUnmap`); a reservation's drop unmaps what is left the same way, then frees the range, on a teardown worker that it waits for at most `hal_core::teardown::GRACE`; physical memory is released when its last mapping and owner are gone | `reservation.rs`, `physical.rs` |
//! | a driver call that waits for the device's queued work (`cuMemFree_v2`, `cuMemFreeHost`, `cuMemHostUnregister`, `cuCtxSynchronize`) starts only once no stream wait for a notify this crate queued in the context is pending, and keeps new ones out while it runs (a reservation's teardown until its range is freed): on driver 580 the first three waited for a stream that waited for an unwritten word and held every other call tried meanwhile (registration, event creation, destruction and record, allocation, stream creation, stream writes) but `cuStreamQuery`; `cuCtxSynchronize` waited and held none (measured, `tests/driver_waits.rs`); a wait for a notify has no bound; each wait is followed on its stream by a write to a registered word, so the host sees it pass without a driver call | `quiet.rs` |
//! | a registration ends after that quiet: a notify's page on a teardown worker (its drop never waits), a caller's registration where it drops | `managed.rs` |
//! | a copy whose two sides are host memory (registered or pinned) is a host function (`cuLaunchHostFunc`) that copies with the CPU, never a `cuMemcpyAsync`, which is fully synchronous between host memories and waited in the driver for a gated stream on driver 580 (measured) | `hostcopy.rs` |
//! | `cuMemMap` maps a physical allocation from its start only (offset 0; driver 580 answered NOT_SUPPORTED to a granule's offset, measured): any other offset is `Unsupported` before the driver is asked | `vmm.rs` |
//! | `cuMemFree_v2` and `cuMemFreeHost` may synchronize the context (the driver API says "may perform implicit synchronization"): a dropped allocation is freed on a teardown worker that it waits for at most `hal_core::teardown::GRACE`, so work that waits for a crashed peer's notify cannot hang the drop; an allocation (`cuMemAlloc_v2`, `cuMemAllocHost_v2`, `cuMemAllocManaged`, `cuMemCreate`) refused with OUT_OF_MEMORY while such frees and teardowns are pending is tried again as each finishes, for at most `hal_core::teardown::PATIENCE` (`hal_core::teardown::when_freed`) | `memory.rs`, `device.rs`, `vmm.rs` |
//!
//! Notifies are words of a shared page signalled and waited on by the host
//! and shared across processes by descriptor (`notify.rs`).
#![deny(missing_docs)]

mod adopt;
mod backend;
mod baseline;
mod context;
mod device;
mod event_cap;
mod exports;

mod hostcopy;
mod hostreg;
mod ipc;
mod ipc_event;
mod loader;
mod managed;
mod mapping;
mod memory;
mod needs;
mod notify;
mod opened;
mod peer;
mod physical;
mod query;
mod quiet;
mod raw;
mod reservation;
mod result;
mod stream;
mod sys;
mod vmm;

pub use backend::CudaBackend;
pub use baseline::{BareAlloc, BareOpen, BareVmm};
pub use device::CudaDevice;
pub use event_cap::DEFAULT_IPC_EVENT_CAP;
#[doc(hidden)]
pub use event_cap::{live_ipc_events, set_ipc_event_cap};
#[doc(hidden)]
pub use ipc_event::own_exported_events;
pub use loader::{LIBRARY_NAME, LIBRARY_VAR};
pub use mapping::CudaMapping;
pub use memory::CudaAllocation;
pub use notify::CudaNotify;
pub use physical::CudaPhysical;
pub use raw::{RawIpcHandle, RAW_HANDLE_LEN};
pub use reservation::CudaReservation;
pub use stream::{CudaEvent, CudaStream};
pub use sys::RESOLVED;
