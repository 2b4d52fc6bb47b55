//! The thin table of runtime entry points: each resolved from the loaded
//! library on first use, by its name and with its signature as the public
//! headers declare them (`bindings::fns`, generated from
//! `include/acl_subset.h`), and kept; a missing one is [`Error::Unsupported`] naming the symbol
//! and the library, never a panic. The IPC calls exist only in newer CANN
//! (memory and notify keys from 8.3, IPC events from 8.5), so every
//! capability that needs them is claimed only where they resolve.
//!
//! Types and constants come from the generated [`bindings`](crate::bindings).

use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::OnceLock;

use hal_core::{Error, Result};

use crate::bindings::fns;
use crate::loader::Loaded;

/// An `aclError` as the runtime returns it.
pub(crate) type Status = c_int;
/// `aclrtStream`, `aclrtEvent`, `aclrtNotify`: opaque pointers.
pub(crate) type Raw = *mut c_void;

macro_rules! entries {
    ($( $(#[$doc:meta])* $field:ident = $sym:ident; )*) => {
        /// The resolved entry points, each on first use.
        #[derive(Default)]
        struct Table {
            $( $field: OnceLock<Option<fns::$sym>>, )*
        }

        impl Runtime {
            $(
                $(#[$doc])*
                pub(crate) fn $field(&self) -> Result<fns::$sym> {
                    let f = self.table.$field.get_or_init(|| {
                        // SAFETY: the symbol is the runtime's entry point of
                        // this name, and `fns::$sym` is its C signature as the
                        // public headers declare it (`include/acl_subset.h`).
                        unsafe { self.resolve::<fns::$sym>(stringify!($sym)) }
                    });
                    f.ok_or_else(|| self.missing(stringify!($sym)))
                }
            )*

            /// True when the library has the entry point `symbol` (one of
            /// [`RESOLVED`]).
            pub(crate) fn present(&self, symbol: &str) -> bool {
                $(
                    if symbol == stringify!($sym) {
                        return self.$field().is_ok();
                    }
                )*
                false
            }
        }

        /// Every entry point this crate resolves, by name: each one the
        /// public CANN runtime headers declare (`include/acl_names.txt`),
        /// resolved with the signature they give it. `aclFinalize` is not
        /// among them: the runtime may be shared with a framework in the
        /// same process, so this crate never finalises it.
        pub const RESOLVED: &[&str] = &[$(stringify!($sym)),*];
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
    init = aclInit;
    /// `aclGetRecentErrMsg`.
    get_recent_err_msg = aclGetRecentErrMsg;
    /// `aclrtSetDevice`.
    set_device = aclrtSetDevice;
    /// `aclrtGetDevice`.
    get_device = aclrtGetDevice;
    /// `aclrtGetDeviceCount`.
    get_device_count = aclrtGetDeviceCount;
    /// `aclrtGetSocName`.
    get_soc_name = aclrtGetSocName;
    /// `aclrtDeviceGetUuid`.
    device_get_uuid = aclrtDeviceGetUuid;
    /// `aclrtDeviceCanAccessPeer`.
    device_can_access_peer = aclrtDeviceCanAccessPeer;
    /// `aclrtDeviceEnablePeerAccess`.
    device_enable_peer_access = aclrtDeviceEnablePeerAccess;
    /// `aclrtGetMemInfo`.
    get_mem_info = aclrtGetMemInfo;
    /// `aclrtDeviceGetBareTgid`.
    device_get_bare_tgid = aclrtDeviceGetBareTgid;
    /// `aclrtSynchronizeDevice`.
    synchronize_device = aclrtSynchronizeDevice;
    /// `aclrtMalloc`.
    malloc = aclrtMalloc;
    /// `aclrtFree`.
    free = aclrtFree;
    /// `aclrtMemcpy`.
    memcpy = aclrtMemcpy;
    /// `aclrtMemcpyAsync`.
    memcpy_async = aclrtMemcpyAsync;
    /// `aclrtMemsetAsync`.
    memset_async = aclrtMemsetAsync;
    /// `aclrtCreateStream`.
    create_stream = aclrtCreateStream;
    /// `aclrtDestroyStream`.
    destroy_stream = aclrtDestroyStream;
    /// `aclrtSynchronizeStreamWithTimeout`.
    synchronize_stream_with_timeout = aclrtSynchronizeStreamWithTimeout;
    /// `aclrtStreamQuery`.
    stream_query = aclrtStreamQuery;
    /// `aclrtCreateEventExWithFlag`.
    create_event_ex_with_flag = aclrtCreateEventExWithFlag;
    /// `aclrtDestroyEvent`.
    destroy_event = aclrtDestroyEvent;
    /// `aclrtRecordEvent`.
    record_event = aclrtRecordEvent;
    /// `aclrtStreamWaitEvent`.
    stream_wait_event = aclrtStreamWaitEvent;
    /// `aclrtQueryEventStatus`.
    query_event_status = aclrtQueryEventStatus;
    /// `aclrtSynchronizeEventWithTimeout`.
    synchronize_event_with_timeout = aclrtSynchronizeEventWithTimeout;
    /// `aclrtIpcMemGetExportKey`.
    ipc_mem_get_export_key = aclrtIpcMemGetExportKey;
    /// `aclrtIpcMemSetImportPid`.
    ipc_mem_set_import_pid = aclrtIpcMemSetImportPid;
    /// `aclrtIpcMemImportByKey`.
    ipc_mem_import_by_key = aclrtIpcMemImportByKey;
    /// `aclrtIpcMemClose`.
    ipc_mem_close = aclrtIpcMemClose;
    /// `aclrtIpcGetEventHandle`.
    ipc_get_event_handle = aclrtIpcGetEventHandle;
    /// `aclrtIpcOpenEventHandle` (the handle by value).
    ipc_open_event_handle = aclrtIpcOpenEventHandle;
    /// `aclrtCreateNotify`.
    create_notify = aclrtCreateNotify;
    /// `aclrtDestroyNotify`.
    destroy_notify = aclrtDestroyNotify;
    /// `aclrtRecordNotify`.
    record_notify = aclrtRecordNotify;
    /// `aclrtWaitAndResetNotify`.
    wait_and_reset_notify = aclrtWaitAndResetNotify;
    /// `aclrtNotifyGetExportKey`.
    notify_get_export_key = aclrtNotifyGetExportKey;
    /// `aclrtNotifySetImportPid`.
    notify_set_import_pid = aclrtNotifySetImportPid;
    /// `aclrtNotifyImportByKey`.
    notify_import_by_key = aclrtNotifyImportByKey;
    /// `aclrtMemGetAllocationGranularity`.
    mem_get_allocation_granularity = aclrtMemGetAllocationGranularity;
    /// `aclrtMallocPhysical`.
    malloc_physical = aclrtMallocPhysical;
    /// `aclrtFreePhysical`.
    free_physical = aclrtFreePhysical;
    /// `aclrtReserveMemAddress`.
    reserve_mem_address = aclrtReserveMemAddress;
    /// `aclrtReleaseMemAddress`.
    release_mem_address = aclrtReleaseMemAddress;
    /// `aclrtMapMem`.
    map_mem = aclrtMapMem;
    /// `aclrtUnmapMem`.
    unmap_mem = aclrtUnmapMem;
    /// `aclrtMemGetAddressRange`.
    mem_get_address_range = aclrtMemGetAddressRange;
    /// `aclrtMemSetAccess`.
    mem_set_access = aclrtMemSetAccess;
    /// `aclrtMemExportToShareableHandle`.
    mem_export_to_shareable_handle = aclrtMemExportToShareableHandle;
    /// `aclrtMemSetPidToShareableHandle`.
    mem_set_pid_to_shareable_handle = aclrtMemSetPidToShareableHandle;
    /// `aclrtMemImportFromShareableHandle`.
    mem_import_from_shareable_handle = aclrtMemImportFromShareableHandle;
}

// SAFETY: the ACL runtime API is thread-safe (every entry point may be
// called from any thread); the table's cells are `OnceLock`s and the
// library handle is only read.
unsafe impl Send for Runtime {}
// SAFETY: see `Send`.
unsafe impl Sync for Runtime {}
