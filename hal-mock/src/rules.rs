//! The vendors' rules, in one place: every behaviour in which the CUDA-like
//! and the Ascend-like simulator differ is a function here (or a method of
//! [`Vendor`] or [`Api`] defined here), named for the rule and citing the
//! section of the vendor notes (`vendor/cuda.md`, `vendor/ascend.md` beside
//! the architecture page) it encodes. Callers ask these functions; no other
//! file of the crate matches on the vendor.

use hal_core::{BackendId, EventFlags};

use crate::codes::{acl, cuda, Code};
use crate::vendor::{Api, Vendor};

impl Vendor {
    /// The backend id of the simulator's profile for this vendor.
    pub const fn backend(self) -> BackendId {
        match self {
            Vendor::Cuda => BackendId::MockCuda,
            Vendor::Ascend => BackendId::MockAscend,
        }
    }

    /// The code for an out-of-range parameter: `CUDA_ERROR_INVALID_VALUE`
    /// (`vendor/cuda.md`, "IPC events", "VMM (cuMem*) sharing", "Measured")
    /// or `ACL_ERROR_RT_PARAM_INVALID` (`vendor/ascend.md`, "Types and
    /// status").
    pub const fn invalid_value(self) -> Code {
        match self {
            Vendor::Cuda => cuda::INVALID_VALUE,
            Vendor::Ascend => acl::RT_PARAM_INVALID,
        }
    }

    /// The code for a device ordinal that does not exist:
    /// `CUDA_ERROR_INVALID_DEVICE` or `ACL_ERROR_RT_INVALID_DEVICEID`
    /// (`vendor/ascend.md`, "Types and status").
    pub const fn invalid_device(self) -> Code {
        match self {
            Vendor::Cuda => cuda::INVALID_DEVICE,
            Vendor::Ascend => acl::RT_INVALID_DEVICEID,
        }
    }

    /// The code for a handle naming a resource that is gone:
    /// `CUDA_ERROR_INVALID_HANDLE` (`vendor/cuda.md`, "Measured") or
    /// `ACL_ERROR_RT_INVALID_HANDLE` (`vendor/ascend.md`, "Types and status").
    pub const fn invalid_handle(self) -> Code {
        match self {
            Vendor::Cuda => cuda::INVALID_HANDLE,
            Vendor::Ascend => acl::RT_INVALID_HANDLE,
        }
    }

    /// The code for using another device's memory without peer access:
    /// `CUDA_ERROR_PEER_ACCESS_NOT_ENABLED`, or `ACL_ERROR_RT_NO_PERMISSION`
    /// (`vendor/ascend.md`, "Semantics": importing on another device needs
    /// ENABLE_PEER_ACCESS).
    pub const fn peer_not_enabled(self) -> Code {
        match self {
            Vendor::Cuda => cuda::PEER_ACCESS_NOT_ENABLED,
            Vendor::Ascend => acl::RT_NO_PERMISSION,
        }
    }

    /// The code for a device pair that cannot access each other at all:
    /// `CUDA_ERROR_PEER_ACCESS_UNSUPPORTED` or
    /// `ACL_ERROR_RT_FEATURE_NOT_SUPPORT`.
    pub const fn peer_unsupported(self) -> Code {
        match self {
            Vendor::Cuda => cuda::PEER_ACCESS_UNSUPPORTED,
            Vendor::Ascend => acl::RT_FEATURE_NOT_SUPPORT,
        }
    }

    /// The code every call of a lost device answers:
    /// `CUDA_ERROR_DEVICE_UNAVAILABLE` or `ACL_ERROR_RT_LOST_HEARTBEAT`.
    pub const fn device_lost(self) -> Code {
        match self {
            Vendor::Cuda => cuda::DEVICE_UNAVAILABLE,
            Vendor::Ascend => acl::RT_LOST_HEARTBEAT,
        }
    }

    /// The code for device memory that ran out: `CUDA_ERROR_OUT_OF_MEMORY`
    /// or `ACL_ERROR_RT_MEMORY_ALLOCATION`.
    pub const fn out_of_memory(self) -> Code {
        match self {
            Vendor::Cuda => cuda::OUT_OF_MEMORY,
            Vendor::Ascend => acl::RT_MEMORY_ALLOCATION,
        }
    }

    /// The vendor's flag for an IPC event, for messages:
    /// `CU_EVENT_INTERPROCESS` (`vendor/cuda.md`, "IPC events") or
    /// `ACL_EVENT_IPC` (`vendor/ascend.md`, "Constants").
    pub(crate) const fn ipc_event_flag(self) -> &'static str {
        match self {
            Vendor::Cuda => "CU_EVENT_INTERPROCESS",
            Vendor::Ascend => "ACL_EVENT_IPC",
        }
    }
}

impl Api {
    /// The symbol name for `vendor`: the entry-point tables of
    /// [`hal_core::kit::vendor`] (`vendor/cuda.md`, "Exported symbol names";
    /// `vendor/ascend.md`, "Declarations").
    pub(crate) const fn symbol(self, vendor: Vendor) -> &'static str {
        use Api::*;
        match vendor {
            Vendor::Cuda => match self {
                MemAlloc => cuda::entry::MEM_ALLOC_V2,
                MemAllocManaged => cuda::entry::MEM_ALLOC_MANAGED,
                MemAllocHost => cuda::entry::MEM_HOST_ALLOC,
                MemFree => cuda::entry::MEM_FREE_V2,
                MemGetAddressRange => cuda::entry::MEM_GET_ADDRESS_RANGE_V2,
                MemHostRegister => cuda::entry::MEM_HOST_REGISTER_V2,
                MemcpyHtoD => cuda::entry::MEMCPY_HTOD_V2,
                MemcpyDtoH => cuda::entry::MEMCPY_DTOH_V2,
                MemcpyAsync => cuda::entry::MEMCPY_ASYNC,
                MemsetAsync => cuda::entry::MEMSET_D8_ASYNC,
                IpcGetMem => cuda::entry::IPC_GET_MEM_HANDLE,
                // CUDA has no pid allow-lists: these are refused as
                // unsupported before any entry point is reached.
                IpcSetImportPid | NotifySetImportPid => cuda::entry::IPC_GET_MEM_HANDLE,
                IpcOpenMem => cuda::entry::IPC_OPEN_MEM_HANDLE_V2,
                IpcCloseMem => cuda::entry::IPC_CLOSE_MEM_HANDLE,
                StreamCreate => cuda::entry::STREAM_CREATE,
                StreamSynchronize => cuda::entry::STREAM_SYNCHRONIZE,
                StreamQuery => cuda::entry::STREAM_QUERY,
                DeviceSynchronize => cuda::entry::CTX_SYNCHRONIZE,
                EventCreate => cuda::entry::EVENT_CREATE,
                EventRecord => cuda::entry::EVENT_RECORD,
                EventQuery => cuda::entry::EVENT_QUERY,
                EventSynchronize => cuda::entry::EVENT_SYNCHRONIZE,
                EventElapsedTime => cuda::entry::EVENT_ELAPSED_TIME,
                StreamWaitEvent => cuda::entry::STREAM_WAIT_EVENT,
                IpcGetEvent => cuda::entry::IPC_GET_EVENT_HANDLE,
                IpcOpenEvent => cuda::entry::IPC_OPEN_EVENT_HANDLE,
                NotifyCreate => cuda::entry::MEM_HOST_REGISTER_V2,
                NotifyRecord => cuda::entry::STREAM_WRITE_VALUE32_V2,
                NotifyWait => cuda::entry::STREAM_WAIT_VALUE32_V2,
                NotifyExport => cuda::entry::MEM_HOST_REGISTER_V2,
                NotifyImport => cuda::entry::MEM_HOST_REGISTER_V2,
                Granularity => cuda::entry::MEM_GET_ALLOCATION_GRANULARITY,
                MemCreate => cuda::entry::MEM_CREATE,
                AddressReserve => cuda::entry::MEM_ADDRESS_RESERVE,
                MemMap => cuda::entry::MEM_MAP,
                MemUnmap => cuda::entry::MEM_UNMAP,
                MemSetAccess => cuda::entry::MEM_SET_ACCESS,
                MemExportShareable => cuda::entry::MEM_EXPORT_TO_SHAREABLE_HANDLE,
                MemImportShareable => cuda::entry::MEM_IMPORT_FROM_SHAREABLE_HANDLE,
                MemSetPidShareable => cuda::entry::MEM_EXPORT_TO_SHAREABLE_HANDLE,
                EnablePeerAccess => cuda::entry::CTX_ENABLE_PEER_ACCESS,
            },
            Vendor::Ascend => match self {
                MemAlloc => acl::entry::RT_MALLOC,
                MemAllocManaged => acl::entry::RT_MEM_ALLOC_MANAGED,
                MemAllocHost => acl::entry::RT_MALLOC_HOST,
                MemFree => acl::entry::RT_FREE,
                // The key export finds the allocation of the range itself.
                MemGetAddressRange => acl::entry::RT_IPC_MEM_GET_EXPORT_KEY,
                // The Ascend notes have no host registration: the profile
                // lacks HOST_REGISTRATION and refuses before any entry point.
                MemHostRegister => acl::entry::RT_MALLOC_HOST,
                MemcpyHtoD | MemcpyDtoH => acl::entry::RT_MEMCPY,
                MemcpyAsync => acl::entry::RT_MEMCPY_ASYNC,
                MemsetAsync => acl::entry::RT_MEMSET_ASYNC,
                IpcGetMem => acl::entry::RT_IPC_MEM_GET_EXPORT_KEY,
                IpcSetImportPid => acl::entry::RT_IPC_MEM_SET_IMPORT_PID,
                IpcOpenMem => acl::entry::RT_IPC_MEM_IMPORT_BY_KEY,
                IpcCloseMem => acl::entry::RT_IPC_MEM_CLOSE,
                StreamCreate => acl::entry::RT_CREATE_STREAM,
                StreamSynchronize => acl::entry::RT_SYNCHRONIZE_STREAM_WITH_TIMEOUT,
                StreamQuery => acl::entry::RT_STREAM_QUERY,
                DeviceSynchronize => acl::entry::RT_SYNCHRONIZE_DEVICE,
                EventCreate => acl::entry::RT_CREATE_EVENT_EX_WITH_FLAG,
                EventRecord => acl::entry::RT_RECORD_EVENT,
                EventQuery => acl::entry::RT_QUERY_EVENT_STATUS,
                EventSynchronize => acl::entry::RT_SYNCHRONIZE_EVENT,
                EventElapsedTime => acl::entry::RT_EVENT_ELAPSED_TIME,
                StreamWaitEvent => acl::entry::RT_STREAM_WAIT_EVENT,
                IpcGetEvent => acl::entry::RT_IPC_GET_EVENT_HANDLE,
                IpcOpenEvent => acl::entry::RT_IPC_OPEN_EVENT_HANDLE,
                NotifyCreate => acl::entry::RT_CREATE_NOTIFY,
                NotifyRecord => acl::entry::RT_RECORD_NOTIFY,
                NotifyWait => acl::entry::RT_WAIT_AND_RESET_NOTIFY,
                NotifyExport => acl::entry::RT_NOTIFY_GET_EXPORT_KEY,
                NotifySetImportPid => acl::entry::RT_NOTIFY_SET_IMPORT_PID,
                NotifyImport => acl::entry::RT_NOTIFY_IMPORT_BY_KEY,
                Granularity => acl::entry::RT_MEM_GET_ALLOCATION_GRANULARITY,
                MemCreate => acl::entry::RT_MALLOC_PHYSICAL,
                AddressReserve => acl::entry::RT_RESERVE_MEM_ADDRESS,
                MemMap => acl::entry::RT_MAP_MEM,
                MemUnmap => acl::entry::RT_UNMAP_MEM,
                MemSetAccess => acl::entry::RT_MEM_SET_ACCESS,
                MemExportShareable => acl::entry::RT_MEM_EXPORT_TO_SHAREABLE_HANDLE,
                MemImportShareable => acl::entry::RT_MEM_IMPORT_FROM_SHAREABLE_HANDLE,
                MemSetPidShareable => acl::entry::RT_MEM_SET_PID_TO_SHAREABLE_HANDLE,
                EnablePeerAccess => acl::entry::RT_DEVICE_ENABLE_PEER_ACCESS,
            },
        }
    }
}

/// The vendor's name, for messages.
pub(crate) const fn vendor_name(vendor: Vendor) -> &'static str {
    match vendor {
        Vendor::Cuda => "CUDA",
        Vendor::Ascend => "Ascend",
    }
}

/// Enabling peer access to a peer that is already enabled: CUDA refuses it
/// with `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED` (`cuCtxEnablePeerAccess`,
/// `vendor/cuda.md`, "Exported symbol names"); Ascend's
/// `aclrtDeviceEnablePeerAccess` accepts it again (`vendor/ascend.md`,
/// "Semantics").
pub(crate) const fn peer_enable_again(vendor: Vendor) -> Option<Code> {
    match vendor {
        Vendor::Cuda => Some(cuda::PEER_ACCESS_ALREADY_ENABLED),
        Vendor::Ascend => None,
    }
}

/// The import flag and the call that give an import onto another device
/// peer access, for messages: `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS` /
/// `cuCtxEnablePeerAccess` (`vendor/cuda.md`, "Legacy IPC"), or
/// `ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS` /
/// `aclrtDeviceEnablePeerAccess` (`vendor/ascend.md`, "Semantics": importing
/// on another device needs ENABLE_PEER_ACCESS or
/// `aclrtDeviceEnablePeerAccess` first).
pub(crate) const fn peer_access_flag(vendor: Vendor) -> (&'static str, &'static str) {
    match vendor {
        Vendor::Cuda => (
            "CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS",
            "cuCtxEnablePeerAccess",
        ),
        Vendor::Ascend => (
            "ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS",
            "aclrtDeviceEnablePeerAccess",
        ),
    }
}

/// The window of a memory object that an export of `range_len` bytes at
/// `range_offset` of an allocation (at `alloc_offset` in its memory object,
/// `alloc_len` bytes long) names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    /// Where the importer's mapping starts in the memory object.
    pub(crate) fd_offset: u64,
    /// How many bytes the importer maps.
    pub(crate) map_len: u64,
    /// Where the exported range starts in the importer's mapping.
    pub(crate) view: u64,
}

/// What an export of memory names. CUDA: `cuIpcGetMemHandle` works on the
/// base of an allocation, so the handle names the base and the importer maps
/// it whole, the range sitting at its offset (`vendor/cuda.md`, "Legacy
/// IPC", and "Measured": the 64 bytes of `base + 16 MiB` equal the base's).
/// Ascend: the key names exactly the range (`aclrtIpcMemGetExportKey(devPtr,
/// size, ...)`, `vendor/ascend.md`, "Declarations" and "Semantics").
pub(crate) fn export_window(
    vendor: Vendor,
    alloc_offset: u64,
    alloc_len: u64,
    range_offset: u64,
    range_len: u64,
    page: u64,
) -> Window {
    match vendor {
        // The base allocation is opened whole; the handle names the range in it.
        Vendor::Cuda => Window {
            fd_offset: alloc_offset,
            map_len: alloc_len.next_multiple_of(page),
            view: range_offset,
        },
        // The key names exactly the range.
        Vendor::Ascend => Window {
            fd_offset: alloc_offset + range_offset,
            map_len: range_len,
            view: 0,
        },
    }
}

/// True when a memory handle's window has the shape [`export_window`] gives
/// for `vendor`: CUDA-like payloads map the base allocation
/// (`fd_offset == alloc_offset`); Ascend-like ones map exactly the range
/// (`view == 0`, `map_len == size`).
pub(crate) fn window_has_vendor_shape(
    vendor: Vendor,
    window: Window,
    alloc_offset: u64,
    size: u64,
) -> bool {
    match vendor {
        Vendor::Cuda => window.fd_offset == alloc_offset,
        Vendor::Ascend => window.view == 0 && window.map_len == size,
    }
}

/// The length of the vendor's handle payload: a `CUipcMemHandle` is 64
/// opaque bytes (`vendor/cuda.md`, "Exported symbol names"); an Ascend key
/// buffer is 65 bytes (`vendor/ascend.md`, "Semantics").
pub(crate) const fn payload_len(vendor: Vendor) -> usize {
    match vendor {
        Vendor::Cuda => 64,
        Vendor::Ascend => 65,
    }
}

/// The simulator's tag for the vendor inside its payloads, so that a CUDA
/// handle is never read as an Ascend key.
pub(crate) const fn payload_tag(vendor: Vendor) -> u8 {
    match vendor {
        Vendor::Cuda => 1,
        Vendor::Ascend => 2,
    }
}

/// Memory imported onto another device than its own is usable only by
/// asynchronous device-to-device copies on Ascend (`vendor/ascend.md`,
/// "Semantics"); CUDA maps it for every use once peer access is on.
pub(crate) const fn peer_import_copy_only(vendor: Vendor) -> bool {
    matches!(vendor, Vendor::Ascend)
}

/// A second open of the same allocation in one process returns the same
/// mapping, reference counted, on CUDA (`vendor/cuda.md`, "Legacy IPC" and
/// "Measured": same pointer, two closes needed); Ascend maps each import.
pub(crate) const fn shares_repeated_imports(vendor: Vendor) -> bool {
    matches!(vendor, Vendor::Cuda)
}

/// Importing a notify onto another device needs peer access on Ascend
/// (`ACL_RT_NOTIFY_IMPORT_FLAG_ENABLE_PEER_ACCESS`, `vendor/ascend.md`,
/// "Constants"); the CUDA-like notify is host memory, reachable from every
/// device (`vendor/cuda.md`, "Measured": the cross-process doorbell).
pub(crate) const fn notify_import_needs_peer_access(vendor: Vendor) -> bool {
    matches!(vendor, Vendor::Ascend)
}

/// The event flags a vendor accepts at creation; `Err` says why not. An IPC
/// event cannot time: `CU_EVENT_INTERPROCESS` requires
/// `CU_EVENT_DISABLE_TIMING` (`vendor/cuda.md`, "IPC events" and
/// "Measured"), and `ACL_EVENT_IPC` is not OR-ed with other flags
/// (`vendor/ascend.md`, "Semantics").
pub(crate) fn event_flags_allowed(vendor: Vendor, flags: EventFlags) -> Result<(), &'static str> {
    if !(flags.interprocess && flags.timing) {
        return Ok(());
    }
    Err(match vendor {
        Vendor::Cuda => {
            "cuEventCreate: CU_EVENT_INTERPROCESS requires CU_EVENT_DISABLE_TIMING \
             (create the IPC event without timing)"
        }
        Vendor::Ascend => {
            "aclrtCreateEventExWithFlag: ACL_EVENT_IPC must be used alone, not OR-ed \
             with ACL_EVENT_TIME_LINE (create the IPC event without timing)"
        }
    })
}

/// A physical allocation made for a fabric handle: CUDA without an IMEX
/// daemon answers `CUDA_ERROR_NOT_PERMITTED` (`vendor/cuda.md`,
/// "Measured"); Ascend knows only `ACL_MEM_HANDLE_TYPE_NONE` and POSIX
/// (`vendor/ascend.md`, "Constants") and refuses the parameter.
pub(crate) const fn fabric_refusal(vendor: Vendor) -> Code {
    match vendor {
        Vendor::Cuda => cuda::NOT_PERMITTED,
        Vendor::Ascend => acl::RT_PARAM_INVALID,
    }
}

/// Export of a physical allocation made without a requested shareable
/// handle type: CUDA refuses it with `CUDA_ERROR_INVALID_VALUE`
/// (`vendor/cuda.md`, "Measured"); Ascend's `ACL_MEM_HANDLE_TYPE_NONE`
/// exports a 64-bit key (`vendor/ascend.md`, "Semantics", VMM).
pub(crate) const fn exports_unrequested_handle(vendor: Vendor) -> bool {
    matches!(vendor, Vendor::Ascend)
}

/// A call with no context current on the calling thread:
/// `CUDA_ERROR_INVALID_CONTEXT` (`vendor/cuda.md`, "Measured": the same code
/// answers an open of one's own handle) or `ACL_ERROR_RT_CONTEXT_NULL`
/// (`vendor/ascend.md`, "Types and status").
pub(crate) const fn no_context(vendor: Vendor) -> Code {
    match vendor {
        Vendor::Cuda => cuda::INVALID_CONTEXT,
        Vendor::Ascend => acl::RT_CONTEXT_NULL,
    }
}

/// Opening a handle in the process that exported it: CUDA refuses with
/// `CUDA_ERROR_INVALID_CONTEXT` (`vendor/cuda.md`, "Measured"); the Ascend
/// notes document no refusal, so the simulator opens it.
pub(crate) const fn own_handle_open(vendor: Vendor) -> Option<Code> {
    match vendor {
        Vendor::Cuda => Some(cuda::INVALID_CONTEXT),
        Vendor::Ascend => None,
    }
}

/// Registering host memory that overlaps a registration:
/// `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED` (`cuMemHostRegister`,
/// `vendor/cuda.md`, "Managed memory" and "Measured": registration of
/// shared memfd pages). The Ascend profile registers no host memory.
pub(crate) const fn host_already_registered(vendor: Vendor) -> Code {
    match vendor {
        Vendor::Cuda => cuda::HOST_MEMORY_ALREADY_REGISTERED,
        Vendor::Ascend => acl::RT_PARAM_INVALID,
    }
}

/// The elapsed time between two events whose records have not both
/// completed: `CUDA_ERROR_NOT_READY` (`cuEventElapsedTime`); the Ascend
/// notes give no code, so the simulator answers its invalid-value code.
pub(crate) const fn event_not_ready(vendor: Vendor) -> Code {
    match vendor {
        Vendor::Cuda => cuda::NOT_READY,
        Vendor::Ascend => acl::RT_PARAM_INVALID,
    }
}
