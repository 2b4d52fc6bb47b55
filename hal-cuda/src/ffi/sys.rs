//! The thin table of driver entry points: each resolved from the loaded
//! library on first use, by the versioned name of `hal_core::kit::vendor::cuda`,
//! and kept; a missing one is [`Error::Unsupported`] naming the symbol and
//! the library, never a panic. The library itself is loaded here too
//! ([`load`]; where it is searched for is `loader.rs`).
//!
//! Results are declared as `c_uint`, not as an enum: the driver may answer
//! a code newer than any table, and an unknown value in a Rust enum would
//! be undefined behaviour. Handle types come from `cudarc::driver::sys`;
//! the driver's pointer handles travel in the newtypes [`Context`],
//! [`Stream`] and [`Event`], which may cross threads.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

pub(crate) use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUipcEventHandle, CUipcMemHandle, CUmemAccessDesc,
    CUmemAllocationProp, CUmemGenericAllocationHandle, CUmemLocation, CUstream, CUuuid,
};
use hal_core::kit::vendor::cuda::entry;
use hal_core::kit::vendor::library::VendorLibrary;
use hal_core::{Error, Result};

use super::loader::{self, Loaded, NotLoaded};

/// A host function of `cuLaunchHostFunc` (`CUhostFn`).
pub(crate) type HostFn = Option<unsafe extern "C" fn(*mut c_void)>;

/// A `CUresult` as the driver returns it.
pub(crate) type Status = c_uint;

/// Load the library the program names (`program`), else the one
/// [`LIBRARY_VAR`](crate::LIBRARY_VAR) names, else the first candidate of
/// the search that loads and is a CUDA driver.
pub(crate) fn load(program: Option<PathBuf>) -> std::result::Result<Loaded, NotLoaded> {
    let (over, named) = loader::LIBRARY.named(program);
    // SAFETY: loading runs the library's initialisers. The candidates are
    // the NVIDIA driver library (by its name, its install directories, or
    // the path the user named in HAL_CUDA_LIBRARY), whose initialisers have
    // no preconditions on this process.
    unsafe { loader::LIBRARY.load(named, loader::candidates(over)) }
}

/// A resolved entry point and its versioned name, which the errors of its
/// calls give.
#[derive(Clone, Copy)]
pub(crate) struct Entry<F> {
    /// The function.
    pub(crate) f: F,
    /// Its symbol (`hal_core::kit::vendor::cuda::entry`).
    pub(crate) name: &'static str,
}

macro_rules! entries {
    ($( $(#[$doc:meta])* $field:ident = $sym:expr => fn($($arg:ty),* $(,)?); )*) => {
        /// The resolved entry points, each on first use, and whether a
        /// call of it was made (asked for by a code path).
        #[derive(Default)]
        pub(crate) struct Table {
            $( $field: (OnceLock<Option<unsafe extern "C" fn($($arg),*) -> Status>>, AtomicBool), )*
        }

        impl Driver {
            $(
                $(#[$doc])*
                pub(crate) fn $field(&self) -> Result<Entry<unsafe extern "C" fn($($arg),*) -> Status>> {
                    let (cell, called) = &self.table.$field;
                    let f = cell.get_or_init(|| {
                        // SAFETY: the symbol is the driver's entry point of
                        // this name, whose C signature is the one declared
                        // here (CUDA driver API, `cuda.h`).
                        // The library is never unloaded, so the copy stays
                        // valid while `self` lives.
                        unsafe { self.loaded.symbol::<unsafe extern "C" fn($($arg),*) -> Status>($sym) }
                    });
                    if !called.load(Ordering::Relaxed) {
                        called.store(true, Ordering::Relaxed);
                    }
                    f.map(|f| Entry { f, name: $sym }).ok_or_else(|| self.missing($sym))
                }
            )*

            /// True when the library has the entry point `symbol` (one of
            /// [`RESOLVED`]); a probe, not counted as a call.
            pub(crate) fn present(&self, symbol: &str) -> bool {
                $(
                    if symbol == $sym {
                        let (cell, _) = &self.table.$field;
                        return cell
                            .get_or_init(|| {
                                // SAFETY: as in the entry point's accessor.
                                // The library is never unloaded, so the copy stays
                        // valid while `self` lives.
                        unsafe { self.loaded.symbol::<unsafe extern "C" fn($($arg),*) -> Status>($sym) }
                            })
                            .is_some();
                    }
                )*
                false
            }

            /// The entry points a code path has asked for so far.
            #[cfg(feature = "testing")]
            pub(crate) fn called(&self) -> Vec<&'static str> {
                let mut out = Vec::new();
                $(
                    if self.table.$field.1.load(Ordering::Relaxed) {
                        out.push($sym);
                    }
                )*
                out
            }
        }

        /// Every entry point this crate resolves, by its versioned name.
        pub const RESOLVED: &[&str] = &[$($sym),*];
    };
}

/// The loaded driver library and its entry points. A child forked from
/// the process that loaded and initialised the driver cannot use the
/// driver's contexts (CUDA does not survive `fork`), and is refused before
/// any call ([`VendorLibrary::origin`]).
pub(crate) struct Driver {
    library: VendorLibrary<Table>,
}

impl Driver {
    pub(crate) fn new(loaded: Loaded) -> Driver {
        let library = VendorLibrary::new(loaded);
        Driver { library }
    }

    fn missing(&self, symbol: &str) -> Error {
        let older = "the driver is older than this call needs (update the NVIDIA driver)";
        self.library.missing("cuda", symbol, older)
    }
}

impl std::ops::Deref for Driver {
    type Target = VendorLibrary<Table>;

    fn deref(&self) -> &Self::Target {
        &self.library
    }
}

/// A pointer handle of the driver, carried between threads.
macro_rules! handle {
    ($(#[$doc:meta])* $name:ident($raw:ty)) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq)]
        pub(crate) struct $name(pub(crate) $raw);

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(&self.0, f)
            }
        }

        // SAFETY: the handle is opaque: this value never dereferences it,
        // only passes it to the driver, whose API may be called with it
        // from any thread.
        unsafe impl Send for $name {}
        // SAFETY: see `Send`; the value is a copyable pointer, never
        // written through.
        unsafe impl Sync for $name {}
    };
}

handle! {
    /// A context (`CUcontext`).
    Context(CUcontext)
}

handle! {
    /// A stream (`CUstream`); null is the context's legacy stream.
    Stream(CUstream)
}

handle! {
    /// An event (`CUevent`).
    Event(CUevent)
}

impl Stream {
    /// The legacy default stream of the current context.
    pub(crate) const LEGACY: Stream = Stream(std::ptr::null_mut());
}

entries! {
    /// `cuGetErrorName`.
    get_error_name = entry::GET_ERROR_NAME => fn(Status, *mut *const c_char);
    /// `cuGetErrorString`.
    get_error_string = entry::GET_ERROR_STRING => fn(Status, *mut *const c_char);
    /// `cuInit`.
    init = entry::INIT => fn(c_uint);
    /// `cuDeviceGetCount`.
    device_get_count = entry::DEVICE_GET_COUNT => fn(*mut c_int);
    /// `cuDeviceGet`.
    device_get = entry::DEVICE_GET => fn(*mut CUdevice, c_int);
    /// `cuDeviceGetName`.
    device_get_name = entry::DEVICE_GET_NAME => fn(*mut c_char, c_int, CUdevice);
    /// `cuDeviceGetUuid_v2`.
    device_get_uuid = entry::DEVICE_GET_UUID_V2 => fn(*mut CUuuid, CUdevice);
    /// `cuDeviceTotalMem_v2`.
    device_total_mem = entry::DEVICE_TOTAL_MEM_V2 => fn(*mut usize, CUdevice);
    /// `cuDeviceGetAttribute`.
    device_get_attribute = entry::DEVICE_GET_ATTRIBUTE => fn(*mut c_int, c_int, CUdevice);
    /// `cuDevicePrimaryCtxRetain`.
    primary_ctx_retain = entry::DEVICE_PRIMARY_CTX_RETAIN => fn(*mut CUcontext, CUdevice);
    /// `cuDevicePrimaryCtxRelease_v2`.
    primary_ctx_release = entry::DEVICE_PRIMARY_CTX_RELEASE_V2 => fn(CUdevice);
    /// `cuCtxPushCurrent_v2`.
    ctx_push_current = entry::CTX_PUSH_CURRENT_V2 => fn(CUcontext);
    /// `cuCtxPopCurrent_v2`.
    ctx_pop_current = entry::CTX_POP_CURRENT_V2 => fn(*mut CUcontext);
    /// `cuCtxGetCurrent`.
    ctx_get_current = entry::CTX_GET_CURRENT => fn(*mut CUcontext);
    /// `cuCtxSynchronize`.
    ctx_synchronize = entry::CTX_SYNCHRONIZE => fn();
    /// `cuCtxEnablePeerAccess`.
    ctx_enable_peer_access = entry::CTX_ENABLE_PEER_ACCESS => fn(CUcontext, c_uint);
    /// `cuDeviceCanAccessPeer`.
    device_can_access_peer = entry::DEVICE_CAN_ACCESS_PEER => fn(*mut c_int, CUdevice, CUdevice);
    /// `cuMemAlloc_v2`.
    mem_alloc = entry::MEM_ALLOC_V2 => fn(*mut CUdeviceptr, usize);
    /// `cuMemAllocHost_v2`.
    mem_alloc_host = entry::MEM_ALLOC_HOST_V2 => fn(*mut *mut c_void, usize);
    /// `cuMemAllocManaged`.
    mem_alloc_managed = entry::MEM_ALLOC_MANAGED => fn(*mut CUdeviceptr, usize, c_uint);
    /// `cuMemAdvise_v2`.
    mem_advise = entry::MEM_ADVISE_V2 => fn(CUdeviceptr, usize, c_uint, CUmemLocation);
    /// `cuMemPrefetchAsync_v2`.
    mem_prefetch_async = entry::MEM_PREFETCH_ASYNC_V2 => fn(CUdeviceptr, usize, CUmemLocation, c_uint, CUstream);
    /// `cuMemHostRegister_v2`.
    mem_host_register = entry::MEM_HOST_REGISTER_V2 => fn(*mut c_void, usize, c_uint);
    /// `cuMemHostGetDevicePointer_v2`.
    mem_host_get_device_pointer = entry::MEM_HOST_GET_DEVICE_POINTER_V2 => fn(*mut CUdeviceptr, *mut c_void, c_uint);
    /// `cuMemHostUnregister`.
    mem_host_unregister = entry::MEM_HOST_UNREGISTER => fn(*mut c_void);
    /// `cuMemFree_v2`.
    mem_free = entry::MEM_FREE_V2 => fn(CUdeviceptr);
    /// `cuMemFreeHost`.
    mem_free_host = entry::MEM_FREE_HOST => fn(*mut c_void);
    /// `cuMemcpyHtoD_v2`.
    memcpy_htod = entry::MEMCPY_HTOD_V2 => fn(CUdeviceptr, *const c_void, usize);
    /// `cuMemcpyDtoH_v2`.
    memcpy_dtoh = entry::MEMCPY_DTOH_V2 => fn(*mut c_void, CUdeviceptr, usize);
    /// `cuMemcpyHtoDAsync_v2`.
    memcpy_htod_async = entry::MEMCPY_HTOD_ASYNC_V2 => fn(CUdeviceptr, *const c_void, usize, CUstream);
    /// `cuMemcpyAsync` (unified addressing: either side host or device).
    memcpy_async = entry::MEMCPY_ASYNC => fn(CUdeviceptr, CUdeviceptr, usize, CUstream);
    /// `cuLaunchHostFunc`: `f(data)` on a driver thread, in stream order.
    launch_host_func = entry::LAUNCH_HOST_FUNC => fn(CUstream, HostFn, *mut c_void);
    /// `cuMemsetD8Async`.
    memset_d8_async = entry::MEMSET_D8_ASYNC => fn(CUdeviceptr, u8, usize, CUstream);
    /// `cuStreamCreate`.
    stream_create = entry::STREAM_CREATE => fn(*mut CUstream, c_uint);
    /// `cuStreamDestroy_v2`.
    stream_destroy = entry::STREAM_DESTROY_V2 => fn(CUstream);
    /// `cuStreamQuery`.
    stream_query = entry::STREAM_QUERY => fn(CUstream);
    /// `cuStreamSynchronize`.
    stream_synchronize = entry::STREAM_SYNCHRONIZE => fn(CUstream);
    /// `cuStreamWriteValue32_v2`.
    stream_write_value32 = entry::STREAM_WRITE_VALUE32_V2 => fn(CUstream, CUdeviceptr, c_uint, c_uint);
    /// `cuStreamWaitValue32_v2`.
    stream_wait_value32 = entry::STREAM_WAIT_VALUE32_V2 => fn(CUstream, CUdeviceptr, c_uint, c_uint);
    /// `cuStreamWaitEvent`.
    stream_wait_event = entry::STREAM_WAIT_EVENT => fn(CUstream, CUevent, c_uint);
    /// `cuEventCreate`.
    event_create = entry::EVENT_CREATE => fn(*mut CUevent, c_uint);
    /// `cuEventDestroy_v2`.
    event_destroy = entry::EVENT_DESTROY_V2 => fn(CUevent);
    /// `cuEventRecord`.
    event_record = entry::EVENT_RECORD => fn(CUevent, CUstream);
    /// `cuEventQuery`.
    event_query = entry::EVENT_QUERY => fn(CUevent);
    /// `cuMemGetAddressRange_v2`.
    mem_get_address_range = entry::MEM_GET_ADDRESS_RANGE_V2 => fn(*mut CUdeviceptr, *mut usize, CUdeviceptr);
    /// `cuPointerGetAttribute`.
    pointer_get_attribute = entry::POINTER_GET_ATTRIBUTE => fn(*mut c_void, c_int, CUdeviceptr);
    /// `cuIpcGetMemHandle`.
    ipc_get_mem_handle = entry::IPC_GET_MEM_HANDLE => fn(*mut CUipcMemHandle, CUdeviceptr);
    /// `cuIpcOpenMemHandle_v2`.
    ipc_open_mem_handle = entry::IPC_OPEN_MEM_HANDLE_V2 => fn(*mut CUdeviceptr, CUipcMemHandle, c_uint);
    /// `cuIpcCloseMemHandle`.
    ipc_close_mem_handle = entry::IPC_CLOSE_MEM_HANDLE => fn(CUdeviceptr);
    /// `cuIpcGetEventHandle`.
    ipc_get_event_handle = entry::IPC_GET_EVENT_HANDLE => fn(*mut CUipcEventHandle, CUevent);
    /// `cuIpcOpenEventHandle`.
    ipc_open_event_handle = entry::IPC_OPEN_EVENT_HANDLE => fn(*mut CUevent, CUipcEventHandle);
    /// `cuMemGetAllocationGranularity`.
    mem_get_allocation_granularity = entry::MEM_GET_ALLOCATION_GRANULARITY => fn(*mut usize, *const CUmemAllocationProp, c_uint);
    /// `cuMemCreate`.
    mem_create = entry::MEM_CREATE => fn(*mut CUmemGenericAllocationHandle, usize, *const CUmemAllocationProp, u64);
    /// `cuMemRelease`.
    mem_release = entry::MEM_RELEASE => fn(CUmemGenericAllocationHandle);
    /// `cuMemAddressReserve`.
    mem_address_reserve = entry::MEM_ADDRESS_RESERVE => fn(*mut CUdeviceptr, usize, usize, CUdeviceptr, u64);
    /// `cuMemAddressFree`.
    mem_address_free = entry::MEM_ADDRESS_FREE => fn(CUdeviceptr, usize);
    /// `cuMemMap`.
    mem_map = entry::MEM_MAP => fn(CUdeviceptr, usize, usize, CUmemGenericAllocationHandle, u64);
    /// `cuMemUnmap`.
    mem_unmap = entry::MEM_UNMAP => fn(CUdeviceptr, usize);
    /// `cuMemSetAccess`.
    mem_set_access = entry::MEM_SET_ACCESS => fn(CUdeviceptr, usize, *const CUmemAccessDesc, usize);
    /// `cuMemExportToShareableHandle`.
    mem_export_to_shareable_handle = entry::MEM_EXPORT_TO_SHAREABLE_HANDLE => fn(*mut c_void, CUmemGenericAllocationHandle, c_uint, u64);
    /// `cuMemImportFromShareableHandle`.
    mem_import_from_shareable_handle = entry::MEM_IMPORT_FROM_SHAREABLE_HANDLE => fn(*mut CUmemGenericAllocationHandle, *mut c_void, c_uint);
}

// SAFETY: the driver API is thread-safe (every entry point may be called
// from any thread); the table's cells are `OnceLock`s and the library
// handle is only read.
unsafe impl Send for Driver {}
// SAFETY: see `Send`.
unsafe impl Sync for Driver {}
