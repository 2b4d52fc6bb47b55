//! # hal-mock-libcuda: a stand-in `libcuda.so.1` built on the simulator
//!
//! This crate builds `libhal_mock_libcuda.so`, a shared library that
//! exports the CUDA driver entry points listed in [`EXPORTED`] with the C
//! ABI, under the names a loader resolves (`cuMemAlloc_v2`,
//! `cuCtxPushCurrent_v2`, ...; see `hal_core::kit::vendor::cuda::entry`). A
//! program that loads the driver with `dlopen` / `libloading` loads this
//! file instead (hal-cuda: `HAL_CUDA_LIBRARY=/path/to/libhal_mock_libcuda.so`)
//! and runs without a GPU, against one process-wide
//! [`hal_mock::MockBackend`] with the CUDA-like profile.
//! The library is linked `-z nodelete` (`build.rs`): like a real vendor
//! runtime it is never unloaded, since threads the simulator starts inside
//! it may still run after a program's last handle to it is closed.
//!
//! ## What it answers
//!
//! As driver 580 does (`shared/vendor/cuda.md`, "Measured on an H200")
//! for what this first slice covers:
//!
//! - Before a successful `cuInit(0)`, every call answers
//!   `CUDA_ERROR_NOT_INITIALIZED` (3), except `cuGetErrorName`,
//!   `cuGetErrorString` and `cuDriverGetVersion` (12080). `cuInit` with
//!   flags other than 0 is `CUDA_ERROR_INVALID_VALUE` (1); with no visible
//!   device it is `CUDA_ERROR_NO_DEVICE` (100), and so are later `cuInit`s.
//! - Devices are the simulator's (4 × 16 GiB by default): `HAL_MOCK_DEVICES`
//!   and `HAL_MOCK_VISIBLE_DEVICES` apply
//!   ([`hal_mock::Profile::with_env_overrides`]), then `CUDA_VISIBLE_DEVICES`
//!   (indices or `GPU-` UUID prefixes, the list ending at the first entry
//!   that names no device, as the driver reads it). An ordinal past the
//!   count is `CUDA_ERROR_INVALID_DEVICE` (101).
//! - Attributes are an H200's; `HAL_MOCK_LIBCUDA_PAGEABLE_MEMORY_ACCESS=1` answers
//!   1 for `CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS` (an HMM or ATS
//!   machine; 0 otherwise, as measured).
//! - Contexts: one primary context per device, reference counted by
//!   `cuDevicePrimaryCtxRetain` / `cuDevicePrimaryCtxRelease_v2`; releasing
//!   the last reference destroys what it owns (allocations, streams,
//!   events). Each thread has its own context stack. Memory, stream and
//!   event calls with no current context, or with a current primary
//!   context that is not retained, answer `CUDA_ERROR_INVALID_CONTEXT` (201).
//! - Memory: a device pointer (of `cuMemAlloc_v2`, or of an IPC open) is
//!   the address of a range reserved with no access, as long as the
//!   memory: a host access through it faults, as on a GPU (`view.rs`).
//!   Pinned and managed memory are host memory. A pointer may point inside an allocation, and a range
//!   that leaves its allocation is `CUDA_ERROR_INVALID_VALUE`, as is freeing
//!   anything but the base of a live allocation of the matching kind.
//!   Synchronous copies first wait for the context's default stream and its
//!   blocking streams (the legacy default stream's ordering).
//! - Streams and events run on the simulator's streams: `cuStreamQuery` and
//!   `cuEventQuery` answer `CUDA_ERROR_NOT_READY` (600) while work is
//!   pending. The null stream, `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`
//!   are the current context's default stream. An unknown stream or event
//!   handle is `CUDA_ERROR_INVALID_HANDLE` (400).
//! - Legacy IPC of device memory (`cuIpcGetMemHandle`,
//!   `cuIpcOpenMemHandle_v2`, `cuIpcCloseMemHandle`) as measured: the handle
//!   of a pointer inside an allocation is the base's; opening in the
//!   exporting process is `CUDA_ERROR_INVALID_CONTEXT`; opens in one process
//!   are reference counted; managed and pinned host memory, and closing a
//!   pointer not opened, are `CUDA_ERROR_INVALID_VALUE`. The 64 bytes work
//!   across processes running this build (see `ipc.rs` for their layout).
//!   `cuPointerGetAttribute` answers `CU_POINTER_ATTRIBUTE_BUFFER_ID`,
//!   `_DEVICE_ORDINAL`, `_MEMORY_TYPE` and `_IS_MANAGED`, and
//!   `CUDA_ERROR_NOT_SUPPORTED` for other attributes.
//! - IPC events (`cuIpcGetEventHandle`, `cuIpcOpenEventHandle`) as
//!   measured: only `CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING`
//!   events have a handle; an opened event answers `cuEventQuery` and
//!   `cuStreamWaitEvent`, and `cuEventElapsedTime` with
//!   `CUDA_ERROR_INVALID_HANDLE`; the exporter's destroy takes effect at
//!   once, so an opener's later record, query or wait answers
//!   `CUDA_ERROR_UNKNOWN` (a backend must keep the exporter's event alive
//!   while openers use it). The 64 bytes work across processes (see
//!   `ipc_event.rs`).
//! - VMM (`cuMemCreate`, `cuMemAddressReserve`, `cuMemMap`,
//!   `cuMemSetAccess`, POSIX shareable handles, ...) on the simulator's
//!   VMM, as measured: a fabric handle type is `CUDA_ERROR_NOT_PERMITTED`
//!   without an IMEX daemon, an export of an allocation made for no handle
//!   type `CUDA_ERROR_INVALID_VALUE`; host NUMA memory is made
//!   host-accessible by `cuMemSetAccess`; a copy through a mapping without
//!   access is refused. The descriptor is the memfd of the bytes, so
//!   another process imports it alone (see `vmm.rs`). Copies on streams do
//!   not reach reservations (the synchronous ones do).
//! - Switches from the environment (`switches.rs`): [`IMEX_VAR`] says an
//!   IMEX daemon is present, [`FAIL_VAR`] makes named entry points answer
//!   a given code, [`ATTRIBUTES_VAR`] answers device attributes otherwise,
//!   [`GRANULARITY_VAR`] answers VMM granularities otherwise.
//! - A null output pointer is `CUDA_ERROR_INVALID_VALUE`, except for
//!   `cuCtxPopCurrent_v2`, whose output the driver makes optional.
//! - A panic inside an entry point never crosses the C boundary: the call
//!   answers `CUDA_ERROR_UNKNOWN` (999).
//!
//! Parameters that are C enums (the `CUresult` of `cuGetErrorName` and
//! `cuGetErrorString`, the `CUdevice_attribute` of `cuDeviceGetAttribute`)
//! are taken as their integer, the same ABI, so that a number outside
//! cudarc's enum is answered rather than being undefined behaviour.
//!
//! ## Safety
//!
//! Every entry point is an `unsafe extern "C" fn` with the CUDA driver
//! API's contract: pointers are null or valid for what the driver documents
//! (an output pointer for one write of its type, a host buffer for `n`
//! bytes). Device pointers and handles are never dereferenced: any value is
//! answered.
//!
//! ## How the shared library gets built
//!
//! The package's library target has `crate-type = ["cdylib", "rlib"]`, and
//! cargo compiles every crate type of a library in one `rustc` call, also
//! when the library is built as a dependency: the build `cargo test
//! --workspace` makes to link this package's integration tests (they use
//! [`EXPORTED`]) writes `target/<profile>/deps/libhal_mock_libcuda.so`
//! (a cdylib's name has no hash) before any test runs. Checked from an
//! empty target folder: after `cargo test --workspace` the library is in
//! `deps/` only; the copy in `target/<profile>/libhal_mock_libcuda.so`
//! appears when the package is built on its own (`cargo build`,
//! `cargo build -p hal-mock-libcuda`), and may then be older than the one in
//! `deps/`. The tests load the one beside their executable (in `deps/`),
//! falling back to the other; another crate's tests do the same after a
//! dev-dependency on this package, which makes cargo build it.
#![deny(missing_docs)]
// `unsafe` only in the modules that say so (`#[allow(unsafe_code)]`).
#![deny(unsafe_code)]
#![cfg(target_os = "linux")]
// The entry points' safety contract is the driver API's, stated once above.
#![allow(clippy::missing_safety_doc)]
// The exported names are the driver's.
#![allow(non_snake_case)]

#[allow(unsafe_code)]
mod abi;
#[allow(unsafe_code)]
mod context;
#[allow(unsafe_code)]
mod device;
mod envelope;
mod error;
#[allow(unsafe_code)]
mod event;
mod held;
#[allow(unsafe_code)]
mod hostreg;
#[allow(unsafe_code)]
mod ipc;
#[allow(unsafe_code)]
mod ipc_event;
mod ipc_table;
#[allow(unsafe_code)]
mod managed;
#[allow(unsafe_code)]
mod memops;
#[allow(unsafe_code)]
mod memory;
#[allow(unsafe_code)]
mod peer;
mod staged;
#[allow(unsafe_code)]
mod state;
#[allow(unsafe_code)]
mod stream;
#[allow(unsafe_code)]
mod strings;
mod switches;
mod view;
mod visible;
#[allow(unsafe_code)]
mod vmm;
mod vmm_table;

pub use context::*;
pub use device::*;
pub use event::*;
pub use hostreg::*;
pub use ipc::*;
pub use ipc_event::*;
pub use managed::*;
pub use memops::*;
pub use memory::*;
pub use peer::*;
pub use stream::*;
pub use strings::*;
pub use switches::{
    ATTRIBUTES_VAR, FAIL_VAR, FREE_SYNCS_VAR, GRANULARITY_VAR, IMEX_VAR, NO_PEER_VAR, PAGEABLE_VAR,
};
pub use vmm::*;

/// The file name cargo gives the built library.
pub const LIBRARY_FILE: &str = "libhal_mock_libcuda.so";

/// The built library for a test executable of this workspace: beside it in
/// `target/<profile>/deps/` (where every build of this package writes it,
/// the one `cargo test --workspace` makes included), else in
/// `target/<profile>/` (written by `cargo build` of the package, possibly
/// older). A test that loads it depends on this package, so that cargo
/// builds it first.
///
/// # Panics
///
/// When neither exists, with the places looked at: a test helper, never
/// called by the library's entry points.
pub fn built_library() -> std::path::PathBuf {
    hal_mock::standin::built_library(LIBRARY_FILE, "hal-mock-libcuda")
}

/// Every symbol this library exports, as `dlsym` resolves them.
pub const EXPORTED: &[&str] = &[
    "cuGetErrorName",
    "cuGetErrorString",
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetUuid",
    "cuDeviceGetUuid_v2",
    "cuDeviceTotalMem_v2",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuCtxEnablePeerAccess",
    "cuDeviceCanAccessPeer",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemAllocHost_v2",
    "cuMemFreeHost",
    "cuMemAllocManaged",
    "cuMemGetAddressRange_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyDtoD_v2",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamQuery",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemsetD8Async",
    "cuStreamWaitEvent",
    "cuMemcpyAsync",
    "cuLaunchHostFunc",
    "cuMemAdvise_v2",
    "cuMemPrefetchAsync_v2",
    "cuMemHostRegister_v2",
    "cuMemHostGetDevicePointer_v2",
    "cuMemHostUnregister",
    "cuStreamWriteValue32_v2",
    "cuStreamWaitValue32_v2",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventElapsedTime",
    "cuIpcGetMemHandle",
    "cuIpcOpenMemHandle_v2",
    "cuIpcCloseMemHandle",
    "cuIpcGetEventHandle",
    "cuIpcOpenEventHandle",
    "cuPointerGetAttribute",
    "cuMemGetAllocationGranularity",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemSetAccess",
    "cuMemExportToShareableHandle",
    "cuMemImportFromShareableHandle",
];
