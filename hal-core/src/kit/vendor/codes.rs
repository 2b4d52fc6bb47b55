//! The vendors' error codes and entry-point names, as plain data.
//!
//! What the real backends (`hal-cuda`, `hal-ascend`) and the simulator
//! (`hal-mock`) alike need to speak a vendor's language: the numbers and
//! symbolic names of `CUresult` and `aclError` ([`Code`]), a lookup from
//! number to name ([`cuda::name`], [`acl::name`]), and the names of the
//! entry points a loader resolves ([`cuda::entry`], [`acl::entry`]). No FFI
//! lives here: these are constants.
//!
//! Every refusal that a real runtime reports with an error code reaches the
//! caller as [`Error::Vendor`] carrying the code and name below, unchanged,
//! so that code written against the simulator matches on the same values it
//! will see on hardware. The numbers and names are the vendors' own
//! (`cuda.h`, `acl_base.h`).
//!
//! ```
//! use hal_core::kit::vendor::{acl, cuda};
//!
//! assert_eq!(cuda::INVALID_VALUE.code, 1);
//! assert_eq!(cuda::name(705), Some("CUDA_ERROR_PEER_ACCESS_NOT_ENABLED"));
//! assert_eq!(acl::name(207_006), Some("ACL_ERROR_RT_NO_PERMISSION"));
//! assert_eq!(acl::entry::RT_IPC_MEM_GET_EXPORT_KEY, "aclrtIpcMemGetExportKey");
//! ```

use crate::{BackendId, Error, VendorError};

/// A vendor error code and its symbolic name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Code {
    /// The vendor's number (`CUresult` or `aclError`).
    pub code: i64,
    /// The vendor's symbolic name, e.g. `CUDA_ERROR_INVALID_VALUE`.
    pub name: &'static str,
}

impl Code {
    /// A code with its name.
    pub const fn new(code: i64, name: &'static str) -> Self {
        Code { code, name }
    }

    /// The [`Error::Vendor`] a backend reports for this code.
    pub fn error(self, backend: BackendId, message: impl Into<String>) -> Error {
        Error::Vendor(VendorError {
            backend: backend.name(),
            code: self.code,
            name: self.name.to_string(),
            message: message.into(),
        })
    }

    /// True when `err` is a vendor error with this code.
    pub fn matches(self, err: &Error) -> bool {
        matches!(err, Error::Vendor(v) if v.code == self.code && v.name == self.name)
    }
}

/// The code of `table` numbered `number`.
fn find(table: &[Code], number: i64) -> Option<Code> {
    table.iter().copied().find(|c| c.code == number)
}

/// The CUDA driver API: `CUresult` values (`cuda.h`) and entry points.
pub mod cuda {
    use super::Code;

    /// No error.
    pub const SUCCESS: Code = Code::new(0, "CUDA_SUCCESS");
    /// A parameter is out of range. The simulator's answer to
    /// `cuIpcGetEventHandle` on an event without `CU_EVENT_INTERPROCESS`, to
    /// `CU_EVENT_INTERPROCESS` without `CU_EVENT_DISABLE_TIMING`, to VMM sizes
    /// and offsets that are not multiples of the granularity, and to copies
    /// from unmapped or inaccessible parts of a reservation; the driver's answer
    /// to `cuIpcGetMemHandle` on managed memory (measured, `vendor/cuda.md`).
    pub const INVALID_VALUE: Code = Code::new(1, "CUDA_ERROR_INVALID_VALUE");
    /// The device could not provide the memory.
    pub const OUT_OF_MEMORY: Code = Code::new(2, "CUDA_ERROR_OUT_OF_MEMORY");
    /// A call before `cuInit`.
    pub const NOT_INITIALIZED: Code = Code::new(3, "CUDA_ERROR_NOT_INITIALIZED");
    /// The device is unavailable; the simulator's lost device.
    pub const DEVICE_UNAVAILABLE: Code = Code::new(46, "CUDA_ERROR_DEVICE_UNAVAILABLE");
    /// No device is visible: `cuInit`'s answer when `CUDA_VISIBLE_DEVICES`
    /// hides every device.
    pub const NO_DEVICE: Code = Code::new(100, "CUDA_ERROR_NO_DEVICE");
    /// No such device ordinal.
    pub const INVALID_DEVICE: Code = Code::new(101, "CUDA_ERROR_INVALID_DEVICE");
    /// No valid current context; the driver's answer to
    /// `cuIpcOpenMemHandle_v2` in the exporting process (measured,
    /// `vendor/cuda.md`).
    pub const INVALID_CONTEXT: Code = Code::new(201, "CUDA_ERROR_INVALID_CONTEXT");
    /// A resource is already mapped (older drivers' answer to a second
    /// open of one IPC handle in a process).
    pub const ALREADY_MAPPED: Code = Code::new(208, "CUDA_ERROR_ALREADY_MAPPED");
    /// A resource is not mapped.
    pub const NOT_MAPPED: Code = Code::new(211, "CUDA_ERROR_NOT_MAPPED");
    /// The devices cannot access each other at all.
    pub const PEER_ACCESS_UNSUPPORTED: Code = Code::new(217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED");
    /// A handle that does not name a live resource (an IPC event opened after
    /// its exporter destroyed it); the driver's answer to `cuEventElapsedTime`
    /// on an opened IPC event (measured, `vendor/cuda.md`).
    pub const INVALID_HANDLE: Code = Code::new(400, "CUDA_ERROR_INVALID_HANDLE");
    /// The device accessed an illegal address.
    pub const ILLEGAL_ADDRESS: Code = Code::new(700, "CUDA_ERROR_ILLEGAL_ADDRESS");
    /// A named thing does not exist: `cuMemGetAddressRange` of a pointer
    /// that no allocation holds.
    pub const NOT_FOUND: Code = Code::new(500, "CUDA_ERROR_NOT_FOUND");
    /// Work an event stands for has not completed (`cuEventElapsedTime`,
    /// `cuEventQuery`).
    pub const NOT_READY: Code = Code::new(600, "CUDA_ERROR_NOT_READY");
    /// `cuCtxEnablePeerAccess` for a peer that is already enabled.
    pub const PEER_ACCESS_ALREADY_ENABLED: Code =
        Code::new(704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED");
    /// Memory of another device used without peer access.
    pub const PEER_ACCESS_NOT_ENABLED: Code = Code::new(705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED");
    /// `cuMemHostRegister` of a range that is already registered.
    pub const HOST_MEMORY_ALREADY_REGISTERED: Code =
        Code::new(712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED");
    /// `cuMemHostUnregister` of a range that is not registered.
    pub const HOST_MEMORY_NOT_REGISTERED: Code =
        Code::new(713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED");
    /// The operation is not permitted (a VMM allocation with the FABRIC
    /// handle type and no IMEX daemon, measured in `vendor/cuda.md`).
    pub const NOT_PERMITTED: Code = Code::new(800, "CUDA_ERROR_NOT_PERMITTED");
    /// The operation is not supported.
    pub const NOT_SUPPORTED: Code = Code::new(801, "CUDA_ERROR_NOT_SUPPORTED");
    /// An unknown internal error.
    pub const UNKNOWN: Code = Code::new(999, "CUDA_ERROR_UNKNOWN");
    /// Every code above, in the order of their numbers.
    pub const CODES: &[Code] = &[
        SUCCESS,
        INVALID_VALUE,
        OUT_OF_MEMORY,
        NOT_INITIALIZED,
        DEVICE_UNAVAILABLE,
        NO_DEVICE,
        INVALID_DEVICE,
        INVALID_CONTEXT,
        ALREADY_MAPPED,
        NOT_MAPPED,
        PEER_ACCESS_UNSUPPORTED,
        INVALID_HANDLE,
        NOT_FOUND,
        NOT_READY,
        ILLEGAL_ADDRESS,
        PEER_ACCESS_ALREADY_ENABLED,
        PEER_ACCESS_NOT_ENABLED,
        HOST_MEMORY_ALREADY_REGISTERED,
        HOST_MEMORY_NOT_REGISTERED,
        NOT_PERMITTED,
        NOT_SUPPORTED,
        UNKNOWN,
    ];

    /// The code numbered `number`, if it is one of [`CODES`].
    pub fn code(number: i64) -> Option<Code> {
        super::find(CODES, number)
    }

    /// The symbolic name of the code numbered `number`, if it is one of
    /// [`CODES`].
    pub fn name(number: i64) -> Option<&'static str> {
        code(number).map(|c| c.name)
    }

    /// `CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`:
    /// a CUDA 13.0 attribute number the 12.8 headers have no name for
    /// (1 on an H200 with driver 580, measured).
    pub const ATTRIBUTE_HOST_NUMA_VMM_SUPPORTED: i32 = 141;

    /// Names of the driver's entry points, as `dlsym` resolves them
    /// (`vendor/cuda.md`, "Exported symbol names"): several exist only
    /// under a versioned `_v2` name.
    pub mod entry {
        /// The `cuCtxEnablePeerAccess` entry point.
        pub const CTX_ENABLE_PEER_ACCESS: &str = "cuCtxEnablePeerAccess";
        /// The `cuCtxGetCurrent` entry point.
        pub const CTX_GET_CURRENT: &str = "cuCtxGetCurrent";
        /// The `cuCtxPopCurrent_v2` entry point.
        pub const CTX_POP_CURRENT_V2: &str = "cuCtxPopCurrent_v2";
        /// The `cuCtxPushCurrent_v2` entry point.
        pub const CTX_PUSH_CURRENT_V2: &str = "cuCtxPushCurrent_v2";
        /// The `cuCtxSetCurrent` entry point.
        pub const CTX_SET_CURRENT: &str = "cuCtxSetCurrent";
        /// The `cuCtxSynchronize` entry point.
        pub const CTX_SYNCHRONIZE: &str = "cuCtxSynchronize";
        /// The `cuCtxSynchronize_v2` entry point.
        pub const CTX_SYNCHRONIZE_V2: &str = "cuCtxSynchronize_v2";
        /// The `cuDeviceCanAccessPeer` entry point.
        pub const DEVICE_CAN_ACCESS_PEER: &str = "cuDeviceCanAccessPeer";
        /// The `cuDeviceGet` entry point.
        pub const DEVICE_GET: &str = "cuDeviceGet";
        /// The `cuDeviceGetAttribute` entry point.
        pub const DEVICE_GET_ATTRIBUTE: &str = "cuDeviceGetAttribute";
        /// The `cuDeviceGetCount` entry point.
        pub const DEVICE_GET_COUNT: &str = "cuDeviceGetCount";
        /// The `cuDeviceGetName` entry point.
        pub const DEVICE_GET_NAME: &str = "cuDeviceGetName";
        /// The `cuDeviceGetUuid` entry point.
        pub const DEVICE_GET_UUID: &str = "cuDeviceGetUuid";
        /// The `cuDeviceGetUuid_v2` entry point.
        pub const DEVICE_GET_UUID_V2: &str = "cuDeviceGetUuid_v2";
        /// The `cuDevicePrimaryCtxRelease_v2` entry point.
        pub const DEVICE_PRIMARY_CTX_RELEASE_V2: &str = "cuDevicePrimaryCtxRelease_v2";
        /// The `cuDevicePrimaryCtxRetain` entry point.
        pub const DEVICE_PRIMARY_CTX_RETAIN: &str = "cuDevicePrimaryCtxRetain";
        /// The `cuDeviceTotalMem_v2` entry point.
        pub const DEVICE_TOTAL_MEM_V2: &str = "cuDeviceTotalMem_v2";
        /// The `cuDriverGetVersion` entry point.
        pub const DRIVER_GET_VERSION: &str = "cuDriverGetVersion";
        /// The `cuEventCreate` entry point.
        pub const EVENT_CREATE: &str = "cuEventCreate";
        /// The `cuEventDestroy_v2` entry point.
        pub const EVENT_DESTROY_V2: &str = "cuEventDestroy_v2";
        /// The `cuEventElapsedTime` entry point.
        pub const EVENT_ELAPSED_TIME: &str = "cuEventElapsedTime";
        /// The `cuEventQuery` entry point.
        pub const EVENT_QUERY: &str = "cuEventQuery";
        /// The `cuEventRecord` entry point.
        pub const EVENT_RECORD: &str = "cuEventRecord";
        /// The `cuEventSynchronize` entry point.
        pub const EVENT_SYNCHRONIZE: &str = "cuEventSynchronize";
        /// The `cuGetErrorName` entry point.
        pub const GET_ERROR_NAME: &str = "cuGetErrorName";
        /// The `cuGetErrorString` entry point.
        pub const GET_ERROR_STRING: &str = "cuGetErrorString";
        /// The `cuGetProcAddress` entry point.
        pub const GET_PROC_ADDRESS: &str = "cuGetProcAddress";
        /// The `cuGetProcAddress_v2` entry point.
        pub const GET_PROC_ADDRESS_V2: &str = "cuGetProcAddress_v2";
        /// The `cuInit` entry point.
        pub const INIT: &str = "cuInit";
        /// The `cuIpcCloseMemHandle` entry point.
        pub const IPC_CLOSE_MEM_HANDLE: &str = "cuIpcCloseMemHandle";
        /// The `cuIpcGetEventHandle` entry point.
        pub const IPC_GET_EVENT_HANDLE: &str = "cuIpcGetEventHandle";
        /// The `cuIpcGetMemHandle` entry point.
        pub const IPC_GET_MEM_HANDLE: &str = "cuIpcGetMemHandle";
        /// The `cuIpcOpenEventHandle` entry point.
        pub const IPC_OPEN_EVENT_HANDLE: &str = "cuIpcOpenEventHandle";
        /// The `cuIpcOpenMemHandle_v2` entry point.
        pub const IPC_OPEN_MEM_HANDLE_V2: &str = "cuIpcOpenMemHandle_v2";
        /// The `cuLaunchHostFunc` entry point.
        pub const LAUNCH_HOST_FUNC: &str = "cuLaunchHostFunc";
        /// The `cuMemAddressFree` entry point.
        pub const MEM_ADDRESS_FREE: &str = "cuMemAddressFree";
        /// The `cuMemAddressReserve` entry point.
        pub const MEM_ADDRESS_RESERVE: &str = "cuMemAddressReserve";
        /// The `cuMemAdvise` entry point.
        pub const MEM_ADVISE: &str = "cuMemAdvise";
        /// The `cuMemAdvise_v2` entry point.
        pub const MEM_ADVISE_V2: &str = "cuMemAdvise_v2";
        /// The `cuMemAlloc_v2` entry point.
        pub const MEM_ALLOC_V2: &str = "cuMemAlloc_v2";
        /// The `cuMemAllocHost_v2` entry point.
        pub const MEM_ALLOC_HOST_V2: &str = "cuMemAllocHost_v2";
        /// The `cuMemAllocManaged` entry point.
        pub const MEM_ALLOC_MANAGED: &str = "cuMemAllocManaged";
        /// The `cuMemcpyAsync` entry point.
        pub const MEMCPY_ASYNC: &str = "cuMemcpyAsync";
        /// The `cuMemcpyDtoD_v2` entry point.
        pub const MEMCPY_DTOD_V2: &str = "cuMemcpyDtoD_v2";
        /// The `cuMemcpyDtoH_v2` entry point.
        pub const MEMCPY_DTOH_V2: &str = "cuMemcpyDtoH_v2";
        /// The `cuMemcpyDtoHAsync_v2` entry point.
        pub const MEMCPY_DTOH_ASYNC_V2: &str = "cuMemcpyDtoHAsync_v2";
        /// The `cuMemcpyHtoD_v2` entry point.
        pub const MEMCPY_HTOD_V2: &str = "cuMemcpyHtoD_v2";
        /// The `cuMemcpyHtoDAsync_v2` entry point.
        pub const MEMCPY_HTOD_ASYNC_V2: &str = "cuMemcpyHtoDAsync_v2";
        /// The `cuMemCreate` entry point.
        pub const MEM_CREATE: &str = "cuMemCreate";
        /// The `cuMemExportToShareableHandle` entry point.
        pub const MEM_EXPORT_TO_SHAREABLE_HANDLE: &str = "cuMemExportToShareableHandle";
        /// The `cuMemFree_v2` entry point.
        pub const MEM_FREE_V2: &str = "cuMemFree_v2";
        /// The `cuMemFreeHost` entry point.
        pub const MEM_FREE_HOST: &str = "cuMemFreeHost";
        /// The `cuMemGetAddressRange_v2` entry point.
        pub const MEM_GET_ADDRESS_RANGE_V2: &str = "cuMemGetAddressRange_v2";
        /// The `cuMemGetAllocationGranularity` entry point.
        pub const MEM_GET_ALLOCATION_GRANULARITY: &str = "cuMemGetAllocationGranularity";
        /// The `cuMemHostAlloc` entry point.
        pub const MEM_HOST_ALLOC: &str = "cuMemHostAlloc";
        /// The `cuMemHostGetDevicePointer_v2` entry point.
        pub const MEM_HOST_GET_DEVICE_POINTER_V2: &str = "cuMemHostGetDevicePointer_v2";
        /// The `cuMemHostRegister_v2` entry point.
        pub const MEM_HOST_REGISTER_V2: &str = "cuMemHostRegister_v2";
        /// The `cuMemHostUnregister` entry point.
        pub const MEM_HOST_UNREGISTER: &str = "cuMemHostUnregister";
        /// The `cuMemImportFromShareableHandle` entry point.
        pub const MEM_IMPORT_FROM_SHAREABLE_HANDLE: &str = "cuMemImportFromShareableHandle";
        /// The `cuMemMap` entry point.
        pub const MEM_MAP: &str = "cuMemMap";
        /// The `cuMemPrefetchAsync` entry point.
        pub const MEM_PREFETCH_ASYNC: &str = "cuMemPrefetchAsync";
        /// The `cuMemPrefetchAsync_v2` entry point.
        pub const MEM_PREFETCH_ASYNC_V2: &str = "cuMemPrefetchAsync_v2";
        /// The `cuMemRelease` entry point.
        pub const MEM_RELEASE: &str = "cuMemRelease";
        /// The `cuMemRetainAllocationHandle` entry point.
        pub const MEM_RETAIN_ALLOCATION_HANDLE: &str = "cuMemRetainAllocationHandle";
        /// The `cuMemSetAccess` entry point.
        pub const MEM_SET_ACCESS: &str = "cuMemSetAccess";
        /// The `cuMemsetD8_v2` entry point.
        pub const MEMSET_D8_V2: &str = "cuMemsetD8_v2";
        /// The `cuMemsetD8Async` entry point.
        pub const MEMSET_D8_ASYNC: &str = "cuMemsetD8Async";
        /// The `cuStreamQuery` entry point.
        pub const STREAM_QUERY: &str = "cuStreamQuery";
        /// The `cuMemUnmap` entry point.
        pub const MEM_UNMAP: &str = "cuMemUnmap";
        /// The `cuPointerGetAttribute` entry point.
        pub const POINTER_GET_ATTRIBUTE: &str = "cuPointerGetAttribute";
        /// The `cuStreamCreate` entry point.
        pub const STREAM_CREATE: &str = "cuStreamCreate";
        /// The `cuStreamDestroy_v2` entry point.
        pub const STREAM_DESTROY_V2: &str = "cuStreamDestroy_v2";
        /// The `cuStreamSynchronize` entry point.
        pub const STREAM_SYNCHRONIZE: &str = "cuStreamSynchronize";
        /// The `cuStreamWaitEvent` entry point.
        pub const STREAM_WAIT_EVENT: &str = "cuStreamWaitEvent";
        /// The `cuStreamWaitValue32_v2` entry point.
        pub const STREAM_WAIT_VALUE32_V2: &str = "cuStreamWaitValue32_v2";
        /// The `cuStreamWriteValue32_v2` entry point.
        pub const STREAM_WRITE_VALUE32_V2: &str = "cuStreamWriteValue32_v2";
        /// Every entry point above, sorted by name (case-insensitive).
        pub const ALL: &[&str] = &[
            CTX_ENABLE_PEER_ACCESS,
            CTX_GET_CURRENT,
            CTX_POP_CURRENT_V2,
            CTX_PUSH_CURRENT_V2,
            CTX_SET_CURRENT,
            CTX_SYNCHRONIZE,
            CTX_SYNCHRONIZE_V2,
            DEVICE_CAN_ACCESS_PEER,
            DEVICE_GET,
            DEVICE_GET_ATTRIBUTE,
            DEVICE_GET_COUNT,
            DEVICE_GET_NAME,
            DEVICE_GET_UUID,
            DEVICE_GET_UUID_V2,
            DEVICE_PRIMARY_CTX_RELEASE_V2,
            DEVICE_PRIMARY_CTX_RETAIN,
            DEVICE_TOTAL_MEM_V2,
            DRIVER_GET_VERSION,
            EVENT_CREATE,
            EVENT_DESTROY_V2,
            EVENT_ELAPSED_TIME,
            EVENT_QUERY,
            EVENT_RECORD,
            EVENT_SYNCHRONIZE,
            GET_ERROR_NAME,
            GET_ERROR_STRING,
            GET_PROC_ADDRESS,
            GET_PROC_ADDRESS_V2,
            INIT,
            IPC_CLOSE_MEM_HANDLE,
            IPC_GET_EVENT_HANDLE,
            IPC_GET_MEM_HANDLE,
            IPC_OPEN_EVENT_HANDLE,
            IPC_OPEN_MEM_HANDLE_V2,
            LAUNCH_HOST_FUNC,
            MEM_ADDRESS_FREE,
            MEM_ADDRESS_RESERVE,
            MEM_ADVISE,
            MEM_ADVISE_V2,
            MEM_ALLOC_V2,
            MEM_ALLOC_HOST_V2,
            MEM_ALLOC_MANAGED,
            MEMCPY_ASYNC,
            MEMCPY_DTOD_V2,
            MEMCPY_DTOH_V2,
            MEMCPY_DTOH_ASYNC_V2,
            MEMCPY_HTOD_V2,
            MEMCPY_HTOD_ASYNC_V2,
            MEM_CREATE,
            MEM_EXPORT_TO_SHAREABLE_HANDLE,
            MEM_FREE_V2,
            MEM_FREE_HOST,
            MEM_GET_ADDRESS_RANGE_V2,
            MEM_GET_ALLOCATION_GRANULARITY,
            MEM_HOST_ALLOC,
            MEM_HOST_GET_DEVICE_POINTER_V2,
            MEM_HOST_REGISTER_V2,
            MEM_HOST_UNREGISTER,
            MEM_IMPORT_FROM_SHAREABLE_HANDLE,
            MEM_MAP,
            MEM_PREFETCH_ASYNC,
            MEM_PREFETCH_ASYNC_V2,
            MEM_RELEASE,
            MEM_RETAIN_ALLOCATION_HANDLE,
            MEM_SET_ACCESS,
            MEMSET_D8_V2,
            MEMSET_D8_ASYNC,
            STREAM_QUERY,
            MEM_UNMAP,
            POINTER_GET_ATTRIBUTE,
            STREAM_CREATE,
            STREAM_DESTROY_V2,
            STREAM_SYNCHRONIZE,
            STREAM_WAIT_EVENT,
            STREAM_WAIT_VALUE32_V2,
            STREAM_WRITE_VALUE32_V2,
        ];
    }
}

/// The Ascend runtime: `aclError` values (`acl_base.h`) and entry points.
pub mod acl {
    use super::Code;

    /// No error.
    pub const SUCCESS: Code = Code::new(0, "ACL_SUCCESS");
    /// A parameter is invalid (ACL level).
    pub const INVALID_PARAM: Code = Code::new(100_000, "ACL_ERROR_INVALID_PARAM");
    /// A call before `aclInit`.
    pub const UNINITIALIZE: Code = Code::new(100_001, "ACL_ERROR_UNINITIALIZE");
    /// A second `aclInit`.
    pub const REPEAT_INITIALIZE: Code = Code::new(100_002, "ACL_ERROR_REPEAT_INITIALIZE");
    /// Allocation failed (ACL level).
    pub const BAD_ALLOC: Code = Code::new(200_000, "ACL_ERROR_BAD_ALLOC");
    /// The API is not supported.
    pub const API_NOT_SUPPORT: Code = Code::new(200_001, "ACL_ERROR_API_NOT_SUPPORT");
    /// The device is invalid (ACL level).
    pub const INVALID_DEVICE: Code = Code::new(200_002, "ACL_ERROR_INVALID_DEVICE");
    /// The feature is not supported (ACL level).
    pub const FEATURE_UNSUPPORTED: Code = Code::new(200_006, "ACL_ERROR_FEATURE_UNSUPPORTED");
    /// A parameter is invalid (runtime level). The simulator's answer to flags
    /// OR-ed with `ACL_EVENT_IPC`, to exporting an event created without it,
    /// to VMM sizes and offsets that are not multiples of the granularity, and
    /// to copies from unmapped or inaccessible parts of a reservation.
    pub const RT_PARAM_INVALID: Code = Code::new(107_000, "ACL_ERROR_RT_PARAM_INVALID");
    /// No such device id.
    pub const RT_INVALID_DEVICEID: Code = Code::new(107_001, "ACL_ERROR_RT_INVALID_DEVICEID");
    /// No current context.
    pub const RT_CONTEXT_NULL: Code = Code::new(107_002, "ACL_ERROR_RT_CONTEXT_NULL");
    /// A handle that does not name a live resource.
    pub const RT_INVALID_HANDLE: Code = Code::new(107_017, "ACL_ERROR_RT_INVALID_HANDLE");
    /// A wait timed out.
    pub const RT_WAIT_TIMEOUT: Code = Code::new(107_019, "ACL_ERROR_RT_WAIT_TIMEOUT");
    /// The feature is not supported.
    pub const RT_FEATURE_NOT_SUPPORT: Code = Code::new(207_000, "ACL_ERROR_RT_FEATURE_NOT_SUPPORT");
    /// Device memory could not be allocated.
    pub const RT_MEMORY_ALLOCATION: Code = Code::new(207_001, "ACL_ERROR_RT_MEMORY_ALLOCATION");
    /// No device.
    pub const RT_NO_DEVICE: Code = Code::new(207_004, "ACL_ERROR_RT_NO_DEVICE");
    /// The caller lacks the permission (importing onto another device without
    /// peer access).
    pub const RT_NO_PERMISSION: Code = Code::new(207_006, "ACL_ERROR_RT_NO_PERMISSION");
    /// An internal runtime error.
    pub const RT_INTERNAL_ERROR: Code = Code::new(507_000, "ACL_ERROR_RT_INTERNAL_ERROR");
    /// The task scheduler lost its heartbeat: the simulator's lost device.
    pub const RT_LOST_HEARTBEAT: Code = Code::new(507_010, "ACL_ERROR_RT_LOST_HEARTBEAT");
    /// A stream synchronize timed out.
    pub const RT_STREAM_SYNC_TIMEOUT: Code = Code::new(507_046, "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT");
    /// An event synchronize timed out.
    pub const RT_EVENT_SYNC_TIMEOUT: Code = Code::new(507_047, "ACL_ERROR_RT_EVENT_SYNC_TIMEOUT");
    /// An internal driver error.
    pub const RT_DRV_INTERNAL_ERROR: Code = Code::new(507_899, "ACL_ERROR_RT_DRV_INTERNAL_ERROR");
    /// Every code above, in the order of their numbers.
    pub const CODES: &[Code] = &[
        SUCCESS,
        INVALID_PARAM,
        UNINITIALIZE,
        REPEAT_INITIALIZE,
        RT_PARAM_INVALID,
        RT_INVALID_DEVICEID,
        RT_CONTEXT_NULL,
        RT_INVALID_HANDLE,
        RT_WAIT_TIMEOUT,
        BAD_ALLOC,
        API_NOT_SUPPORT,
        INVALID_DEVICE,
        FEATURE_UNSUPPORTED,
        RT_FEATURE_NOT_SUPPORT,
        RT_MEMORY_ALLOCATION,
        RT_NO_DEVICE,
        RT_NO_PERMISSION,
        RT_INTERNAL_ERROR,
        RT_LOST_HEARTBEAT,
        RT_STREAM_SYNC_TIMEOUT,
        RT_EVENT_SYNC_TIMEOUT,
        RT_DRV_INTERNAL_ERROR,
    ];

    /// The code numbered `number`, if it is one of [`CODES`].
    pub fn code(number: i64) -> Option<Code> {
        super::find(CODES, number)
    }

    /// The symbolic name of the code numbered `number`, if it is one of
    /// [`CODES`].
    pub fn name(number: i64) -> Option<&'static str> {
        code(number).map(|c| c.name)
    }

    /// Names of the runtime's entry points, as `dlsym` resolves them, each
    /// declared by the public CANN runtime headers
    /// (`include/external/acl/*.h`; hal-ascend's `include/acl_names.txt`
    /// lists them, and a test there holds every name here to that list).
    pub mod entry {
        /// The `aclFinalize` entry point.
        pub const FINALIZE: &str = "aclFinalize";
        /// The `aclGetRecentErrMsg` entry point.
        pub const GET_RECENT_ERR_MSG: &str = "aclGetRecentErrMsg";
        /// The `aclInit` entry point.
        pub const INIT: &str = "aclInit";
        /// The `aclrtCreateEventExWithFlag` entry point.
        pub const RT_CREATE_EVENT_EX_WITH_FLAG: &str = "aclrtCreateEventExWithFlag";
        /// The `aclrtCreateNotify` entry point.
        pub const RT_CREATE_NOTIFY: &str = "aclrtCreateNotify";
        /// The `aclrtCreateStream` entry point.
        pub const RT_CREATE_STREAM: &str = "aclrtCreateStream";
        /// The `aclrtDestroyNotify` entry point.
        pub const RT_DESTROY_NOTIFY: &str = "aclrtDestroyNotify";
        /// The `aclrtDeviceEnablePeerAccess` entry point.
        pub const RT_DEVICE_ENABLE_PEER_ACCESS: &str = "aclrtDeviceEnablePeerAccess";
        /// The `aclrtDeviceGetBareTgid` entry point.
        pub const RT_DEVICE_GET_BARE_TGID: &str = "aclrtDeviceGetBareTgid";
        /// The `aclrtEventElapsedTime` entry point.
        pub const RT_EVENT_ELAPSED_TIME: &str = "aclrtEventElapsedTime";
        /// The `aclrtFree` entry point.
        pub const RT_FREE: &str = "aclrtFree";
        /// The `aclrtFreePhysical` entry point.
        pub const RT_FREE_PHYSICAL: &str = "aclrtFreePhysical";
        /// The `aclrtGetDeviceCount` entry point.
        pub const RT_GET_DEVICE_COUNT: &str = "aclrtGetDeviceCount";
        /// The `aclrtIpcGetEventHandle` entry point.
        pub const RT_IPC_GET_EVENT_HANDLE: &str = "aclrtIpcGetEventHandle";
        /// The `aclrtIpcMemClose` entry point.
        pub const RT_IPC_MEM_CLOSE: &str = "aclrtIpcMemClose";
        /// The `aclrtIpcMemGetExportKey` entry point.
        pub const RT_IPC_MEM_GET_EXPORT_KEY: &str = "aclrtIpcMemGetExportKey";
        /// The `aclrtIpcMemImportByKey` entry point.
        pub const RT_IPC_MEM_IMPORT_BY_KEY: &str = "aclrtIpcMemImportByKey";
        /// The `aclrtIpcMemSetImportPid` entry point.
        pub const RT_IPC_MEM_SET_IMPORT_PID: &str = "aclrtIpcMemSetImportPid";
        /// The `aclrtIpcOpenEventHandle` entry point.
        pub const RT_IPC_OPEN_EVENT_HANDLE: &str = "aclrtIpcOpenEventHandle";
        /// The `aclrtMalloc` entry point.
        pub const RT_MALLOC: &str = "aclrtMalloc";
        /// The `aclrtMallocHost` entry point.
        pub const RT_MALLOC_HOST: &str = "aclrtMallocHost";
        /// The `aclrtMemAllocManaged` entry point.
        pub const RT_MEM_ALLOC_MANAGED: &str = "aclrtMemAllocManaged";
        /// The `aclrtMallocPhysical` entry point.
        pub const RT_MALLOC_PHYSICAL: &str = "aclrtMallocPhysical";
        /// The `aclrtMapMem` entry point.
        pub const RT_MAP_MEM: &str = "aclrtMapMem";
        /// The `aclrtMemcpy` entry point.
        pub const RT_MEMCPY: &str = "aclrtMemcpy";
        /// The `aclrtMemcpyAsync` entry point.
        pub const RT_MEMCPY_ASYNC: &str = "aclrtMemcpyAsync";
        /// The `aclrtMemsetAsync` entry point.
        pub const RT_MEMSET_ASYNC: &str = "aclrtMemsetAsync";
        /// The `aclrtStreamQuery` entry point.
        pub const RT_STREAM_QUERY: &str = "aclrtStreamQuery";
        /// The `aclrtSynchronizeDevice` entry point.
        pub const RT_SYNCHRONIZE_DEVICE: &str = "aclrtSynchronizeDevice";
        /// The `aclrtMemExportToShareableHandle` entry point.
        pub const RT_MEM_EXPORT_TO_SHAREABLE_HANDLE: &str = "aclrtMemExportToShareableHandle";
        /// The `aclrtMemGetAllocationGranularity` entry point.
        pub const RT_MEM_GET_ALLOCATION_GRANULARITY: &str = "aclrtMemGetAllocationGranularity";
        /// The `aclrtMemImportFromShareableHandle` entry point.
        pub const RT_MEM_IMPORT_FROM_SHAREABLE_HANDLE: &str = "aclrtMemImportFromShareableHandle";
        /// The `aclrtMemSetAccess` entry point.
        pub const RT_MEM_SET_ACCESS: &str = "aclrtMemSetAccess";
        /// The `aclrtMemSetPidToShareableHandle` entry point.
        pub const RT_MEM_SET_PID_TO_SHAREABLE_HANDLE: &str = "aclrtMemSetPidToShareableHandle";
        /// The `aclrtNotifyGetExportKey` entry point.
        pub const RT_NOTIFY_GET_EXPORT_KEY: &str = "aclrtNotifyGetExportKey";
        /// The `aclrtNotifyImportByKey` entry point.
        pub const RT_NOTIFY_IMPORT_BY_KEY: &str = "aclrtNotifyImportByKey";
        /// The `aclrtNotifySetImportPid` entry point.
        pub const RT_NOTIFY_SET_IMPORT_PID: &str = "aclrtNotifySetImportPid";
        /// The `aclrtQueryEventStatus` entry point.
        pub const RT_QUERY_EVENT_STATUS: &str = "aclrtQueryEventStatus";
        /// The `aclrtRecordEvent` entry point.
        pub const RT_RECORD_EVENT: &str = "aclrtRecordEvent";
        /// The `aclrtRecordNotify` entry point.
        pub const RT_RECORD_NOTIFY: &str = "aclrtRecordNotify";
        /// The `aclrtReleaseMemAddress` entry point.
        pub const RT_RELEASE_MEM_ADDRESS: &str = "aclrtReleaseMemAddress";
        /// The `aclrtReserveMemAddress` entry point.
        pub const RT_RESERVE_MEM_ADDRESS: &str = "aclrtReserveMemAddress";
        /// The `aclrtSetDevice` entry point.
        pub const RT_SET_DEVICE: &str = "aclrtSetDevice";
        /// The `aclrtStreamWaitEvent` entry point.
        pub const RT_STREAM_WAIT_EVENT: &str = "aclrtStreamWaitEvent";
        /// The `aclrtSynchronizeEvent` entry point.
        pub const RT_SYNCHRONIZE_EVENT: &str = "aclrtSynchronizeEvent";
        /// The `aclrtSynchronizeStreamWithTimeout` entry point.
        pub const RT_SYNCHRONIZE_STREAM_WITH_TIMEOUT: &str = "aclrtSynchronizeStreamWithTimeout";
        /// The `aclrtUnmapMem` entry point.
        pub const RT_UNMAP_MEM: &str = "aclrtUnmapMem";
        /// The `aclrtWaitAndResetNotify` entry point.
        pub const RT_WAIT_AND_RESET_NOTIFY: &str = "aclrtWaitAndResetNotify";
        /// The `aclrtDestroyEvent` entry point.
        pub const RT_DESTROY_EVENT: &str = "aclrtDestroyEvent";
        /// The `aclrtDestroyStream` entry point.
        pub const RT_DESTROY_STREAM: &str = "aclrtDestroyStream";
        /// The `aclrtGetDevice` entry point.
        pub const RT_GET_DEVICE: &str = "aclrtGetDevice";
        /// The `aclrtDeviceGetUuid` entry point (`aclrtUuid`, 16 bytes).
        pub const RT_DEVICE_GET_UUID: &str = "aclrtDeviceGetUuid";
        /// The `aclrtDeviceCanAccessPeer` entry point.
        pub const RT_DEVICE_CAN_ACCESS_PEER: &str = "aclrtDeviceCanAccessPeer";
        /// The `aclrtGetMemInfo` entry point.
        pub const RT_GET_MEM_INFO: &str = "aclrtGetMemInfo";
        /// The `aclrtGetSocName` entry point.
        pub const RT_GET_SOC_NAME: &str = "aclrtGetSocName";
        /// The `aclrtSynchronizeEventWithTimeout` entry point.
        pub const RT_SYNCHRONIZE_EVENT_WITH_TIMEOUT: &str = "aclrtSynchronizeEventWithTimeout";
        /// Every entry point above, sorted by name (case-insensitive).
        pub const ALL: &[&str] = &[
            FINALIZE,
            GET_RECENT_ERR_MSG,
            INIT,
            RT_CREATE_EVENT_EX_WITH_FLAG,
            RT_CREATE_NOTIFY,
            RT_CREATE_STREAM,
            RT_DESTROY_NOTIFY,
            RT_DEVICE_ENABLE_PEER_ACCESS,
            RT_DEVICE_GET_BARE_TGID,
            RT_EVENT_ELAPSED_TIME,
            RT_FREE,
            RT_FREE_PHYSICAL,
            RT_GET_DEVICE_COUNT,
            RT_IPC_GET_EVENT_HANDLE,
            RT_IPC_MEM_CLOSE,
            RT_IPC_MEM_GET_EXPORT_KEY,
            RT_IPC_MEM_IMPORT_BY_KEY,
            RT_IPC_MEM_SET_IMPORT_PID,
            RT_IPC_OPEN_EVENT_HANDLE,
            RT_MALLOC,
            RT_MALLOC_HOST,
            RT_MEM_ALLOC_MANAGED,
            RT_MALLOC_PHYSICAL,
            RT_MAP_MEM,
            RT_MEMCPY,
            RT_MEMCPY_ASYNC,
            RT_MEMSET_ASYNC,
            RT_STREAM_QUERY,
            RT_SYNCHRONIZE_DEVICE,
            RT_MEM_EXPORT_TO_SHAREABLE_HANDLE,
            RT_MEM_GET_ALLOCATION_GRANULARITY,
            RT_MEM_IMPORT_FROM_SHAREABLE_HANDLE,
            RT_MEM_SET_ACCESS,
            RT_MEM_SET_PID_TO_SHAREABLE_HANDLE,
            RT_NOTIFY_GET_EXPORT_KEY,
            RT_NOTIFY_IMPORT_BY_KEY,
            RT_NOTIFY_SET_IMPORT_PID,
            RT_QUERY_EVENT_STATUS,
            RT_RECORD_EVENT,
            RT_RECORD_NOTIFY,
            RT_RELEASE_MEM_ADDRESS,
            RT_RESERVE_MEM_ADDRESS,
            RT_SET_DEVICE,
            RT_STREAM_WAIT_EVENT,
            RT_SYNCHRONIZE_EVENT,
            RT_SYNCHRONIZE_STREAM_WITH_TIMEOUT,
            RT_UNMAP_MEM,
            RT_WAIT_AND_RESET_NOTIFY,
            RT_DESTROY_EVENT,
            RT_DESTROY_STREAM,
            RT_GET_DEVICE,
            RT_DEVICE_GET_UUID,
            RT_DEVICE_CAN_ACCESS_PEER,
            RT_GET_MEM_INFO,
            RT_GET_SOC_NAME,
            RT_SYNCHRONIZE_EVENT_WITH_TIMEOUT,
        ];
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn check_table(codes: &[Code], lookup: fn(i64) -> Option<&'static str>, prefix: &str) {
        let names: HashSet<_> = codes.iter().map(|c| c.name).collect();
        assert_eq!(names.len(), codes.len(), "a {prefix} name is used twice");
        let numbers: HashSet<_> = codes.iter().map(|c| c.code).collect();
        assert_eq!(
            numbers.len(),
            codes.len(),
            "a {prefix} number is used twice"
        );
        for c in codes {
            assert!(c.name.starts_with(prefix), "{}", c.name);
            assert_eq!(lookup(c.code), Some(c.name), "{}", c.code);
        }
        assert!(codes.windows(2).all(|w| w[0].code < w[1].code));
    }

    #[test]
    fn names_are_unique_and_looked_up_by_number() {
        check_table(cuda::CODES, cuda::name, "CUDA_");
        check_table(acl::CODES, acl::name, "ACL_");
        assert_eq!(cuda::name(12_345), None);
        assert_eq!(acl::name(-1), None);
        assert_eq!(cuda::code(801), Some(cuda::NOT_SUPPORTED));
        assert_eq!(acl::code(507_010), Some(acl::RT_LOST_HEARTBEAT));
    }

    #[test]
    fn entry_points_are_unique_and_named_by_vendor() {
        for (all, prefix) in [(cuda::entry::ALL, "cu"), (acl::entry::ALL, "acl")] {
            let set: HashSet<_> = all.iter().collect();
            assert_eq!(set.len(), all.len());
            assert!(all.iter().all(|s| s.starts_with(prefix)), "{all:?}");
        }
    }

    #[test]
    fn errors_keep_code_and_name() {
        let e = acl::RT_NO_PERMISSION.error(BackendId::MockAscend, "pid not allowed");
        assert!(acl::RT_NO_PERMISSION.matches(&e));
        assert!(!cuda::PEER_ACCESS_NOT_ENABLED.matches(&e));
        let s = e.to_string();
        assert!(
            s.contains("207006") && s.contains("ACL_ERROR_RT_NO_PERMISSION"),
            "{s}"
        );
    }
}
