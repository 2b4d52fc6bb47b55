//! # hal-mock-libascendcl: a stand-in `libascendcl.so` built on the simulator
//!
//! This crate builds `libhal_mock_libascendcl.so`, a shared library that
//! exports the Ascend ACL runtime entry points listed in [`EXPORTED`] with
//! the C ABI, under the names `dlsym` resolves (`aclInit`,
//! `aclrtIpcMemGetExportKey`, ...; see `hal_core::kit::vendor::acl::entry`). A
//! program that loads the runtime with `dlopen` / `libloading` loads this
//! file instead (hal-ascend: `HAL_ASCEND_LIBRARY=/path/to/libhal_mock_libascendcl.so`)
//! and runs without an NPU, against one process-wide
//! [`hal_mock::MockBackend`] with the Ascend-like profile, whose rules
//! follow `vendor/ascend.md`.
//! The library is linked `-z nodelete` (`build.rs`): like a real vendor
//! runtime it is never unloaded, since threads the simulator starts inside
//! it may still run after a program's last handle to it is closed.
//!
//! ## What it answers
//!
//! - Before `aclInit` (and after `aclFinalize`) every call answers
//!   `ACL_ERROR_UNINITIALIZE` (100001); a second `aclInit` answers
//!   `ACL_ERROR_REPEAT_INITIALIZE` (100002), as the runtime does when a
//!   framework in the process initialised it first.
//! - Devices are the simulator's (2 × 32 GiB): `HAL_MOCK_DEVICES` and
//!   `HAL_MOCK_VISIBLE_DEVICES` apply, then `ASCEND_RT_VISIBLE_DEVICES`
//!   (physical indices). Each thread has its own current device
//!   (`aclrtSetDevice`); calls that need one answer
//!   `ACL_ERROR_RT_CONTEXT_NULL` (107002) before it is set. A device id
//!   past the count is `ACL_ERROR_RT_INVALID_DEVICEID` (107001).
//! - Memory: device addresses are the simulator's, never dereferenced.
//!   `aclrtMalloc` honours the allocation policy: huge pages (2 MiB, or
//!   1 GiB for `HUGE1G_ONLY`) for the huge policies (`HUGE_FIRST` from
//!   2 MiB up, its fallback to normal pages below), and an export of such
//!   memory must be whole pages of that size; on normal pages small
//!   allocations are sub-allocated from 2 MiB chunks, so they may not
//!   start on a page, as `aclrtMalloc` documents.
//!   `aclrtMemGetAddressRange` gives the block holding a pointer.
//! - Peer access: `aclrtDeviceCanAccessPeer` answers 1 for two devices;
//!   physical memory of another device is imported only after
//!   `aclrtDeviceEnablePeerAccess` (else `ACL_ERROR_RT_NO_PERMISSION`).
//! - Memory keys and notify keys are 64 printable characters and a NUL
//!   that work on their own across processes running this build (`key.rs`);
//!   the rules of `ipc_mem.rs` (pages, pid allow-lists of bare tgids, peer
//!   access, close order) and `notify.rs` (creator-only wait, the notify's
//!   own flag values) are enforced.
//! - VMM (`vmm.rs`): granularity, physical allocations, reservations,
//!   mappings, access, and the 64-bit shareable handle
//!   (`aclrtMemExportToShareableHandle` with `ACL_MEM_HANDLE_TYPE_NONE`),
//!   which works on its own across processes running this build
//!   (`hal_core::exchange::envelope::numbered`); its pid allow-list
//!   (`aclrtMemSetPidToShareableHandle`, bare tgids) or
//!   `ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION` is enforced.
//!   `aclrtFreePhysical`, `aclrtReleaseMemAddress` and `aclrtUnmapMem` are
//!   the runtime's names for the releases, to be checked against the CANN
//!   version in use.
//! - Bare tgids (`aclrtDeviceGetBareTgid`) differ from OS pids
//!   ([`tgid::TGID_OFFSET`]), as inside a container: passing an OS pid to
//!   `aclrtIpcMemSetImportPid` admits nobody.
//! - IPC events: `ACL_EVENT_IPC` alone; no query (`ACL_ERROR_RT_FEATURE_NOT_SUPPORT`),
//!   no timing; the handle's 64 bytes work across processes.
//! - `aclGetRecentErrMsg` gives the text of the calling thread's last
//!   error, naming the entry point and the code.
//! - Faults: [`visible::FAIL_VAR`] (`HAL_ASCEND_STANDIN_FAIL=allocate=207001`)
//!   makes the next operation of a kind fail with a code, or the next call
//!   of a named entry point (`aclInit=507000`, `aclrtGetDevice=507899`).
//! - A panic inside an entry point never crosses the C boundary: the call
//!   answers `ACL_ERROR_RT_INTERNAL_ERROR` (507000).
//!
//! - Switches ([`switches`]): the SoC name `aclrtGetSocName` gives, and
//!   devices that deny peer access or IPC events.
//!
//! Every exported name but `halStandinCalls` (this library's own counter)
//! is one the public CANN runtime headers declare (hal-ascend's
//! `include/acl_names.txt`; hal-ascend's `tests/headers.rs` checks
//! [`EXPORTED`] against it, and this library's dynamic symbols against
//! [`EXPORTED`]).
//!
//! ## Safety
//!
//! Every entry point is an `unsafe extern "C" fn` with the runtime's
//! contract: pointers are null or valid for what the runtime documents.
//! Device pointers and handles are never dereferenced.
//!
//! ## Where the built library lies
//!
//! As for `hal-mock-libcuda`: the package's library target is
//! `["cdylib", "rlib"]`, so any build of it (also as another package's
//! dev-dependency) writes `target/<profile>/deps/libhal_mock_libascendcl.so`;
//! [`built_library`] finds it for a test executable.
//!
//! ## Sharing the process with hal
//!
//! The library holds its own copy of `hal-core` and the simulator: its
//! descriptor broker and lease tables are separate from the loading
//! program's, under broker names of their own (`hal-<pid>-<random>`), so
//! the two never collide.
#![deny(missing_docs)]
// `unsafe` only in the modules that say so (`#[allow(unsafe_code)]`).
#![deny(unsafe_code)]
#![cfg(target_os = "linux")]
// The entry points' safety contract is the runtime's, stated once above.
#![allow(clippy::missing_safety_doc)]
// The exported names are the runtime's.
#![allow(non_snake_case)]

#[allow(unsafe_code)]
mod abi;
#[allow(unsafe_code)]
mod device;
mod error;
#[allow(unsafe_code)]
mod event;
#[allow(unsafe_code)]
mod ipc_event;
#[allow(unsafe_code)]
mod ipc_mem;
#[allow(unsafe_code)]
mod key;
#[allow(unsafe_code)]
mod memory;
#[allow(unsafe_code)]
mod notify;
mod refusal;
mod state;
#[allow(unsafe_code)]
mod stream;
pub mod switches;
pub mod tgid;
pub mod visible;
#[allow(unsafe_code)]
mod vmm;
mod vmm_table;

pub use device::*;
pub use event::*;
pub use ipc_event::*;
pub use ipc_mem::*;
pub use key::KEY_LEN;
pub use memory::*;
pub use notify::*;
pub use stream::*;
pub use vmm::*;

/// The file name cargo gives the built library.
pub const LIBRARY_FILE: &str = "libhal_mock_libascendcl.so";

/// The built library for a test executable of this workspace: beside it in
/// `target/<profile>/deps/`, else in `target/<profile>/`. A test that loads
/// it depends on this package, so that cargo builds it first.
///
/// # Panics
///
/// When neither exists, with the places looked at: a test helper, never
/// called by the library's entry points.
pub fn built_library() -> std::path::PathBuf {
    hal_mock::standin::built_library(LIBRARY_FILE, "hal-mock-libascendcl")
}

/// Every symbol this library exports, as `dlsym` resolves them.
pub const EXPORTED: &[&str] = &[
    "aclInit",
    "aclFinalize",
    "aclGetRecentErrMsg",
    "aclrtSetDevice",
    "aclrtGetDevice",
    "aclrtGetDeviceCount",
    "aclrtGetSocName",
    "aclrtDeviceGetUuid",
    "aclrtDeviceCanAccessPeer",
    "aclrtGetMemInfo",
    "aclrtDeviceGetBareTgid",
    "aclrtDeviceEnablePeerAccess",
    "aclrtSynchronizeDevice",
    "aclrtMalloc",
    "aclrtFree",
    "aclrtMemGetAddressRange",
    "aclrtMemcpy",
    "aclrtMemcpyAsync",
    "aclrtMemsetAsync",
    "aclrtCreateStream",
    "aclrtDestroyStream",
    "aclrtSynchronizeStreamWithTimeout",
    "aclrtStreamQuery",
    "aclrtCreateEventExWithFlag",
    "aclrtDestroyEvent",
    "aclrtRecordEvent",
    "aclrtStreamWaitEvent",
    "aclrtQueryEventStatus",
    "aclrtSynchronizeEventWithTimeout",
    "aclrtIpcMemGetExportKey",
    "aclrtIpcMemSetImportPid",
    "aclrtIpcMemImportByKey",
    "aclrtIpcMemClose",
    "aclrtIpcGetEventHandle",
    "aclrtIpcOpenEventHandle",
    "aclrtCreateNotify",
    "aclrtDestroyNotify",
    "aclrtRecordNotify",
    "aclrtWaitAndResetNotify",
    "aclrtNotifyGetExportKey",
    "aclrtNotifySetImportPid",
    "aclrtNotifyImportByKey",
    "aclrtMemGetAllocationGranularity",
    "aclrtMallocPhysical",
    "aclrtFreePhysical",
    "aclrtReserveMemAddress",
    "aclrtReleaseMemAddress",
    "aclrtMapMem",
    "aclrtUnmapMem",
    "aclrtMemSetAccess",
    "aclrtMemExportToShareableHandle",
    "aclrtMemSetPidToShareableHandle",
    "aclrtMemImportFromShareableHandle",
    "halStandinCalls",
];
