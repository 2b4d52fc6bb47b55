//! The thin table of runtime entry points, and the library they come
//! from: each entry point is resolved from the loaded library on first
//! use, by its name and with its signature as the public headers declare
//! them (`bindings::fns`, generated from `include/acl_subset.h`), and kept;
//! a missing one is [`Error::Unsupported`] naming the symbol and the
//! library, never a panic. The IPC calls exist only in newer CANN (memory
//! and notify keys from 8.3, IPC events from 8.5), so every capability
//! that needs them is claimed only where they resolve.
//!
//! Also here: the runtime's handles (`aclrtStream`, `aclrtEvent`,
//! `aclrtNotify`, `aclrtDrvMemHandle`) as owned values that may cross
//! threads. Types and constants come from the generated
//! [`bindings`](super::bindings).

use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::OnceLock;

use hal_core::kit::vendor::library::VendorLibrary;
use hal_core::{Error, Result};

use super::bindings::fns;
use super::loader::{self, NotLoaded};

/// An `aclError` as the runtime returns it.
pub(crate) type Status = c_int;

/// A resolved entry point and the name of its symbol, which the result
/// layer names in the errors of its calls.
#[derive(Clone, Copy)]
pub(crate) struct Entry<F> {
    /// The function.
    pub(crate) f: F,
    /// The symbol it was resolved by.
    pub(crate) name: &'static str,
}

macro_rules! entries {
    ($( $field:ident = $sym:ident; )*) => {
        /// The resolved entry points, each on first use.
        #[derive(Default)]
        pub(crate) struct Table {
            $( $field: OnceLock<Option<fns::$sym>>, )*
        }

        impl Runtime {
            $(
                #[doc = concat!("`", stringify!($sym), "`, resolved on first use.")]
                pub(crate) fn $field(&self) -> Result<Entry<fns::$sym>> {
                    let f = self.table.$field.get_or_init(|| {
                        // SAFETY: the symbol is the runtime's entry point of
                        // this name, and `fns::$sym` is its C signature as the
                        // public headers declare it (`include/acl_subset.h`).
                        // The library is never unloaded, so the copy stays
                        // valid while `self` lives.
                        unsafe { self.loaded.symbol::<fns::$sym>(stringify!($sym)) }
                    });
                    match *f {
                        Some(f) => Ok(Entry { f, name: stringify!($sym) }),
                        None => Err(self.missing(stringify!($sym))),
                    }
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

/// The loaded runtime library and its entry points; a child forked from
/// the process that loaded it cannot use the runtime's devices (its
/// contexts do not survive `fork`), and is refused before any call
/// ([`VendorLibrary::origin`]).
pub(crate) struct Runtime(VendorLibrary<Table>);

impl std::ops::Deref for Runtime {
    type Target = VendorLibrary<Table>;

    fn deref(&self) -> &VendorLibrary<Table> {
        &self.0
    }
}

impl Runtime {
    /// Load the library the program names (`program`), else the one
    /// [`LIBRARY_VAR`](crate::LIBRARY_VAR) names, else the first candidate
    /// of the search that loads and is an ACL runtime (`loader.rs`).
    pub(crate) fn load(program: Option<PathBuf>) -> std::result::Result<Runtime, NotLoaded> {
        let (named, search) = loader::search(program);
        // SAFETY: loading runs the library's initialisers. The candidates are
        // the Ascend runtime library (by its name, its install directories, or
        // the path the user named in HAL_ASCEND_LIBRARY), whose initialisers
        // have no preconditions on this process.
        let loaded = unsafe { loader::LIBRARY.load(named, search) }?;
        Ok(Runtime(VendorLibrary::new(loaded)))
    }

    fn missing(&self, symbol: &str) -> Error {
        let older = "the CANN runtime is older than this call needs (IPC keys need CANN 8.3, \
                     IPC events 8.5): update CANN";
        self.0.missing("ascend", symbol, older)
    }
}

entries! {
    init = aclInit;
    get_recent_err_msg = aclGetRecentErrMsg;
    set_device = aclrtSetDevice;
    get_device = aclrtGetDevice;
    get_device_count = aclrtGetDeviceCount;
    get_soc_name = aclrtGetSocName;
    device_get_uuid = aclrtDeviceGetUuid;
    device_can_access_peer = aclrtDeviceCanAccessPeer;
    device_enable_peer_access = aclrtDeviceEnablePeerAccess;
    get_mem_info = aclrtGetMemInfo;
    device_get_bare_tgid = aclrtDeviceGetBareTgid;
    synchronize_device = aclrtSynchronizeDevice;
    malloc = aclrtMalloc;
    free = aclrtFree;
    memcpy = aclrtMemcpy;
    memcpy_async = aclrtMemcpyAsync;
    memset_async = aclrtMemsetAsync;
    create_stream = aclrtCreateStream;
    destroy_stream = aclrtDestroyStream;
    synchronize_stream_with_timeout = aclrtSynchronizeStreamWithTimeout;
    stream_query = aclrtStreamQuery;
    create_event_ex_with_flag = aclrtCreateEventExWithFlag;
    destroy_event = aclrtDestroyEvent;
    record_event = aclrtRecordEvent;
    stream_wait_event = aclrtStreamWaitEvent;
    query_event_status = aclrtQueryEventStatus;
    synchronize_event_with_timeout = aclrtSynchronizeEventWithTimeout;
    ipc_mem_get_export_key = aclrtIpcMemGetExportKey;
    ipc_mem_set_import_pid = aclrtIpcMemSetImportPid;
    ipc_mem_import_by_key = aclrtIpcMemImportByKey;
    ipc_mem_close = aclrtIpcMemClose;
    ipc_get_event_handle = aclrtIpcGetEventHandle;
    ipc_open_event_handle = aclrtIpcOpenEventHandle;
    create_notify = aclrtCreateNotify;
    destroy_notify = aclrtDestroyNotify;
    record_notify = aclrtRecordNotify;
    wait_and_reset_notify = aclrtWaitAndResetNotify;
    notify_get_export_key = aclrtNotifyGetExportKey;
    notify_set_import_pid = aclrtNotifySetImportPid;
    notify_import_by_key = aclrtNotifyImportByKey;
    mem_get_allocation_granularity = aclrtMemGetAllocationGranularity;
    malloc_physical = aclrtMallocPhysical;
    free_physical = aclrtFreePhysical;
    reserve_mem_address = aclrtReserveMemAddress;
    release_mem_address = aclrtReleaseMemAddress;
    map_mem = aclrtMapMem;
    unmap_mem = aclrtUnmapMem;
    mem_get_address_range = aclrtMemGetAddressRange;
    mem_set_access = aclrtMemSetAccess;
    mem_export_to_shareable_handle = aclrtMemExportToShareableHandle;
    mem_set_pid_to_shareable_handle = aclrtMemSetPidToShareableHandle;
    mem_import_from_shareable_handle = aclrtMemImportFromShareableHandle;
}

// SAFETY: the ACL runtime API is thread-safe (every entry point may be
// called from any thread); the table's cells are `OnceLock`s and the
// library handle is only read.
unsafe impl Send for Runtime {}
// SAFETY: see `Send`.
unsafe impl Sync for Runtime {}

/// An `aclrtStream`: one the runtime created for this crate (and only
/// [`result::stream::destroy`](super::result::stream::destroy) destroys,
/// taking it by value), or a caller's stream this crate uses and never
/// destroys, or the default stream (null).
pub(crate) struct StreamHandle {
    pub(super) raw: *mut c_void,
    owned: bool,
}

impl StreamHandle {
    /// A stream this crate created and owns.
    pub(super) fn created(raw: *mut c_void) -> StreamHandle {
        StreamHandle { raw, owned: true }
    }

    /// A caller's stream, used and never destroyed here.
    ///
    /// # Safety
    ///
    /// `raw` is null (the default stream) or a stream of this process's
    /// runtime that stays live for as long as the value is used.
    pub(crate) unsafe fn borrowed(raw: *mut c_void) -> StreamHandle {
        StreamHandle { raw, owned: false }
    }

    /// True for a stream this crate created (and destroys).
    pub(crate) fn owned(&self) -> bool {
        self.owned
    }

    /// The handle, taken out for a destroy by value; the default stream,
    /// not owned, is left in its place.
    pub(crate) fn take(&mut self) -> StreamHandle {
        std::mem::replace(
            self,
            StreamHandle {
                raw: std::ptr::null_mut(),
                owned: false,
            },
        )
    }
}

impl std::fmt::Debug for StreamHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.raw, f)
    }
}

// SAFETY: an aclrtStream is an opaque handle the runtime lets any thread
// use; this value only passes it to the runtime.
unsafe impl Send for StreamHandle {}
// SAFETY: see `Send`.
unsafe impl Sync for StreamHandle {}

macro_rules! handles {
    ($( $(#[$doc:meta])* $name:ident = $c:literal; )*) => {$(
        $(#[$doc])*
        ///
        /// Made only by the result layer from the runtime's answer, neither
        /// `Copy` nor `Clone`, and given back to the runtime by value: a
        /// value that is not null is live. [`take`](Self::take) leaves null
        /// behind, which the result layer refuses.
        pub(crate) struct $name(*mut c_void);

        impl $name {
            /// The runtime's answer as a handle.
            pub(super) fn made(raw: *mut c_void) -> $name {
                $name(raw)
            }

            /// The handle as the runtime takes it; an error once taken.
            pub(super) fn live(&self) -> Result<*mut c_void> {
                if self.0.is_null() {
                    return Err(Error::invalid(concat!("the ", $c, " was destroyed already")));
                }
                Ok(self.0)
            }

            /// The handle, taken out for a destroy by value; null is left
            /// in its place.
            pub(crate) fn take(&mut self) -> $name {
                $name(std::mem::replace(&mut self.0, std::ptr::null_mut()))
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(&self.0, f)
            }
        }

        // SAFETY: the handle is opaque and the runtime lets any thread use
        // it; this value only passes it to the runtime.
        unsafe impl Send for $name {}
        // SAFETY: see `Send`.
        unsafe impl Sync for $name {}
    )*};
}

handles! {
    /// An `aclrtEvent`, created or opened from an IPC handle.
    EventHandle = "aclrtEvent";
    /// An `aclrtNotify`, created or imported by key.
    NotifyHandle = "aclrtNotify";
    /// An `aclrtDrvMemHandle`: VMM physical memory, allocated or imported.
    MemHandle = "aclrtDrvMemHandle";
}

impl MemHandle {
    /// The handle's address, for messages.
    pub(crate) fn addr(&self) -> usize {
        self.0.addr()
    }
}
