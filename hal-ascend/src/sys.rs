//! The thin table of runtime entry points: each resolved from the loaded
//! library on first use, by its name in `hal_core::vendor::acl::entry`,
//! and kept; a missing one is [`Error::Unsupported`] naming the symbol
//! and the library, never a panic. The IPC calls exist only in newer CANN
//! (memory and notify keys from 8.3, IPC events from 8.5), so every
//! capability that needs them is claimed only where they resolve.
//!
//! Results are declared as `c_int` (`aclError`). Types and constants come
//! from the generated [`bindings`](crate::bindings).

use std::ffi::{c_char, c_int, c_void};
use std::path::PathBuf;
use std::sync::OnceLock;

use hal_core::vendor::acl::entry;
use hal_core::{Error, Result};

pub(crate) use crate::bindings::aclrtIpcEventHandle;
pub(crate) use crate::bindings::{aclrtMemAccessDesc, aclrtPhysicalMemProp};
use crate::loader::Loaded;

/// An `aclError` as the runtime returns it.
pub(crate) type Status = c_int;
/// `aclrtStream`, `aclrtEvent`, `aclrtNotify`: opaque pointers.
pub(crate) type Raw = *mut c_void;

macro_rules! entries {
    ($( $(#[$doc:meta])* $field:ident = $sym:expr => fn($($arg:ty),* $(,)?) -> $ret:ty; )*) => {
        /// The resolved entry points, each on first use.
        #[derive(Default)]
        struct Table {
            $( $field: OnceLock<Option<unsafe extern "C" fn($($arg),*) -> $ret>>, )*
        }

        impl Runtime {
            $(
                $(#[$doc])*
                pub(crate) fn $field(&self) -> Result<unsafe extern "C" fn($($arg),*) -> $ret> {
                    let f = self.table.$field.get_or_init(|| {
                        // SAFETY: the symbol is the runtime's entry point of
                        // this name, whose C signature is the one declared
                        // here (`acl_rt.h`, `vendor/ascend.md`).
                        unsafe { self.resolve::<unsafe extern "C" fn($($arg),*) -> $ret>($sym) }
                    });
                    f.ok_or_else(|| self.missing($sym))
                }
            )*

            /// True when the library has the entry point `symbol` (one of
            /// [`RESOLVED`]).
            pub(crate) fn present(&self, symbol: &str) -> bool {
                $(
                    if symbol == $sym {
                        return self.$field().is_ok();
                    }
                )*
                false
            }
        }

        /// Every entry point this crate resolves, by name. `aclFinalize` is
        /// not among them: the runtime may be shared with a framework in
        /// the same process, so this crate never finalises it.
        pub const RESOLVED: &[&str] = &[$($sym),*];
    };
}

/// The loaded runtime library and its entry points.
pub(crate) struct Runtime {
    loaded: Loaded,
    table: Table,
    /// The process that loaded and initialised the runtime: a child forked
    /// from it cannot use the runtime's devices (its contexts do not
    /// survive `fork`), and is refused before any call.
    pub(crate) origin: hal_core::os::Origin,
}

impl Runtime {
    pub(crate) fn new(loaded: Loaded) -> Runtime {
        Runtime {
            loaded,
            table: Table::default(),
            origin: hal_core::os::Origin::here(),
        }
    }

    /// Where the library was loaded from.
    pub(crate) fn path(&self) -> &PathBuf {
        &self.loaded.path
    }

    /// # Safety
    ///
    /// `F` must be the C signature of the symbol `name`.
    unsafe fn resolve<F: Copy>(&self, name: &str) -> Option<F> {
        // SAFETY: `F` is the symbol's signature (the caller's promise); the
        // copy stays valid while `self.loaded` is loaded, which it is for as
        // long as `self` lives, and every copy is used only through `&self`.
        unsafe { self.loaded.symbol::<F>(name) }
    }

    fn missing(&self, symbol: &str) -> Error {
        Error::unsupported(
            "ascend",
            symbol,
            format!(
                "{} has no entry point {symbol}; the CANN runtime is older than this call needs \
                 (IPC keys need CANN 8.3, IPC events 8.5): update CANN",
                self.loaded.path.display()
            ),
        )
    }
}

entries! {
    /// `aclInit`.
    init = entry::INIT => fn(*const c_char) -> Status;
    /// `aclGetRecentErrMsg`.
    get_recent_err_msg = entry::GET_RECENT_ERR_MSG => fn() -> *const c_char;
    /// `aclrtSetDevice`.
    set_device = entry::RT_SET_DEVICE => fn(i32) -> Status;
    /// `aclrtGetDevice`.
    get_device = entry::RT_GET_DEVICE => fn(*mut i32) -> Status;
    /// `aclrtGetDeviceCount`.
    get_device_count = entry::RT_GET_DEVICE_COUNT => fn(*mut u32) -> Status;
    /// `aclrtGetSocName`.
    get_soc_name = entry::RT_GET_SOC_NAME => fn() -> *const c_char;
    /// `aclrtGetDeviceUuid`.
    get_device_uuid = entry::RT_GET_DEVICE_UUID => fn(i32, *mut [u8; 16]) -> Status;
    /// `aclrtGetMemInfo`.
    get_mem_info = entry::RT_GET_MEM_INFO => fn(c_int, *mut usize, *mut usize) -> Status;
    /// `aclrtDeviceGetBareTgid`.
    device_get_bare_tgid = entry::RT_DEVICE_GET_BARE_TGID => fn(*mut i32) -> Status;
    /// `aclrtSynchronizeDevice`.
    synchronize_device = entry::RT_SYNCHRONIZE_DEVICE => fn() -> Status;
    /// `aclrtMalloc`.
    malloc = entry::RT_MALLOC => fn(*mut Raw, usize, c_int) -> Status;
    /// `aclrtFree`.
    free = entry::RT_FREE => fn(Raw) -> Status;
    /// `aclrtMemcpy`.
    memcpy = entry::RT_MEMCPY => fn(Raw, usize, *const c_void, usize, c_int) -> Status;
    /// `aclrtMemcpyAsync`.
    memcpy_async = entry::RT_MEMCPY_ASYNC => fn(Raw, usize, *const c_void, usize, c_int, Raw) -> Status;
    /// `aclrtMemsetAsync`.
    memset_async = entry::RT_MEMSET_ASYNC => fn(Raw, usize, i32, usize, Raw) -> Status;
    /// `aclrtCreateStream`.
    create_stream = entry::RT_CREATE_STREAM => fn(*mut Raw) -> Status;
    /// `aclrtDestroyStream`.
    destroy_stream = entry::RT_DESTROY_STREAM => fn(Raw) -> Status;
    /// `aclrtSynchronizeStreamWithTimeout`.
    synchronize_stream_with_timeout = entry::RT_SYNCHRONIZE_STREAM_WITH_TIMEOUT => fn(Raw, i32) -> Status;
    /// `aclrtStreamQuery`.
    stream_query = entry::RT_STREAM_QUERY => fn(Raw, *mut c_int) -> Status;
    /// `aclrtCreateEventExWithFlag`.
    create_event_ex_with_flag = entry::RT_CREATE_EVENT_EX_WITH_FLAG => fn(*mut Raw, u32) -> Status;
    /// `aclrtDestroyEvent`.
    destroy_event = entry::RT_DESTROY_EVENT => fn(Raw) -> Status;
    /// `aclrtRecordEvent`.
    record_event = entry::RT_RECORD_EVENT => fn(Raw, Raw) -> Status;
    /// `aclrtStreamWaitEvent`.
    stream_wait_event = entry::RT_STREAM_WAIT_EVENT => fn(Raw, Raw) -> Status;
    /// `aclrtQueryEventStatus`.
    query_event_status = entry::RT_QUERY_EVENT_STATUS => fn(Raw, *mut c_int) -> Status;
    /// `aclrtSynchronizeEventWithTimeout`.
    synchronize_event_with_timeout = entry::RT_SYNCHRONIZE_EVENT_WITH_TIMEOUT => fn(Raw, i32) -> Status;
    /// `aclrtIpcMemGetExportKey`.
    ipc_mem_get_export_key = entry::RT_IPC_MEM_GET_EXPORT_KEY => fn(Raw, usize, *mut c_char, usize, u64) -> Status;
    /// `aclrtIpcMemSetImportPid`.
    ipc_mem_set_import_pid = entry::RT_IPC_MEM_SET_IMPORT_PID => fn(*const c_char, *mut i32, usize) -> Status;
    /// `aclrtIpcMemImportByKey`.
    ipc_mem_import_by_key = entry::RT_IPC_MEM_IMPORT_BY_KEY => fn(*mut Raw, *const c_char, u64) -> Status;
    /// `aclrtIpcMemClose`.
    ipc_mem_close = entry::RT_IPC_MEM_CLOSE => fn(*const c_char) -> Status;
    /// `aclrtIpcGetEventHandle`.
    ipc_get_event_handle = entry::RT_IPC_GET_EVENT_HANDLE => fn(Raw, *mut aclrtIpcEventHandle) -> Status;
    /// `aclrtIpcOpenEventHandle` (the handle by value).
    ipc_open_event_handle = entry::RT_IPC_OPEN_EVENT_HANDLE => fn(aclrtIpcEventHandle, *mut Raw) -> Status;
    /// `aclrtCreateNotify`.
    create_notify = entry::RT_CREATE_NOTIFY => fn(*mut Raw, u64) -> Status;
    /// `aclrtDestroyNotify`.
    destroy_notify = entry::RT_DESTROY_NOTIFY => fn(Raw) -> Status;
    /// `aclrtRecordNotify`.
    record_notify = entry::RT_RECORD_NOTIFY => fn(Raw, Raw) -> Status;
    /// `aclrtWaitAndResetNotify`.
    wait_and_reset_notify = entry::RT_WAIT_AND_RESET_NOTIFY => fn(Raw, Raw, u32) -> Status;
    /// `aclrtNotifyGetExportKey`.
    notify_get_export_key = entry::RT_NOTIFY_GET_EXPORT_KEY => fn(Raw, *mut c_char, usize, u64) -> Status;
    /// `aclrtNotifySetImportPid`.
    notify_set_import_pid = entry::RT_NOTIFY_SET_IMPORT_PID => fn(Raw, *mut i32, usize) -> Status;
    /// `aclrtNotifyImportByKey`.
    notify_import_by_key = entry::RT_NOTIFY_IMPORT_BY_KEY => fn(*mut Raw, *const c_char, u64) -> Status;
    /// `aclrtMemGetAllocationGranularity`.
    mem_get_allocation_granularity = entry::RT_MEM_GET_ALLOCATION_GRANULARITY => fn(*mut aclrtPhysicalMemProp, u32, *mut usize) -> Status;
    /// `aclrtMallocPhysical`.
    malloc_physical = entry::RT_MALLOC_PHYSICAL => fn(*mut Raw, usize, *const aclrtPhysicalMemProp, u64) -> Status;
    /// `aclrtFreePhysical`.
    free_physical = entry::RT_FREE_PHYSICAL => fn(Raw) -> Status;
    /// `aclrtReserveMemAddress`.
    reserve_mem_address = entry::RT_RESERVE_MEM_ADDRESS => fn(*mut Raw, usize, usize, Raw, u64) -> Status;
    /// `aclrtReleaseMemAddress`.
    release_mem_address = entry::RT_RELEASE_MEM_ADDRESS => fn(Raw) -> Status;
    /// `aclrtMapMem`.
    map_mem = entry::RT_MAP_MEM => fn(Raw, usize, usize, Raw, u64) -> Status;
    /// `aclrtUnmapMem`.
    unmap_mem = entry::RT_UNMAP_MEM => fn(Raw) -> Status;
    /// `aclrtMemSetAccess`.
    mem_set_access = entry::RT_MEM_SET_ACCESS => fn(Raw, usize, *mut aclrtMemAccessDesc, usize) -> Status;
    /// `aclrtMemExportToShareableHandle`.
    mem_export_to_shareable_handle = entry::RT_MEM_EXPORT_TO_SHAREABLE_HANDLE => fn(Raw, u32, u64, *mut u64) -> Status;
    /// `aclrtMemSetPidToShareableHandle`.
    mem_set_pid_to_shareable_handle = entry::RT_MEM_SET_PID_TO_SHAREABLE_HANDLE => fn(u64, *mut i32, usize) -> Status;
    /// `aclrtMemImportFromShareableHandle`.
    mem_import_from_shareable_handle = entry::RT_MEM_IMPORT_FROM_SHAREABLE_HANDLE => fn(u64, i32, *mut Raw) -> Status;
}

// SAFETY: the ACL runtime API is thread-safe (every entry point may be
// called from any thread); the table's cells are `OnceLock`s and the
// library handle is only read.
unsafe impl Send for Runtime {}
// SAFETY: see `Send`.
unsafe impl Sync for Runtime {}
