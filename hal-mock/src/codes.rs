//! The vendor error codes the simulator reports, with their vendors' numbers
//! and symbolic names.
//!
//! Every refusal that a real runtime reports with an error code reaches the
//! caller as [`Error::Vendor`] carrying the code and name below, unchanged,
//! so that code written against the simulator matches on the same values it
//! will see on hardware. Tests pass these constants to
//! [`Faults::fail_next`](crate::fault::Faults::fail_next) to inject a fault.

use hal_core::{BackendId, Error, VendorError};

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

/// `CUresult` values of the CUDA driver API (`cuda.h`).
pub mod cuda {
    use super::Code;

    /// A parameter is out of range. The simulator's answer to
    /// `cuIpcGetEventHandle` on an event without `CU_EVENT_INTERPROCESS`, to
    /// `CU_EVENT_INTERPROCESS` without `CU_EVENT_DISABLE_TIMING`, to VMM sizes
    /// and offsets that are not multiples of the granularity, and to copies
    /// from unmapped or inaccessible parts of a reservation.
    pub const INVALID_VALUE: Code = Code::new(1, "CUDA_ERROR_INVALID_VALUE");
    /// The device could not provide the memory.
    pub const OUT_OF_MEMORY: Code = Code::new(2, "CUDA_ERROR_OUT_OF_MEMORY");
    /// The device is unavailable; the simulator's lost device.
    pub const DEVICE_UNAVAILABLE: Code = Code::new(46, "CUDA_ERROR_DEVICE_UNAVAILABLE");
    /// No such device ordinal.
    pub const INVALID_DEVICE: Code = Code::new(101, "CUDA_ERROR_INVALID_DEVICE");
    /// A resource is already mapped.
    pub const ALREADY_MAPPED: Code = Code::new(208, "CUDA_ERROR_ALREADY_MAPPED");
    /// A resource is not mapped.
    pub const NOT_MAPPED: Code = Code::new(211, "CUDA_ERROR_NOT_MAPPED");
    /// The devices cannot access each other at all.
    pub const PEER_ACCESS_UNSUPPORTED: Code = Code::new(217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED");
    /// A handle that does not name a live resource (an IPC event opened after
    /// its exporter destroyed it).
    pub const INVALID_HANDLE: Code = Code::new(400, "CUDA_ERROR_INVALID_HANDLE");
    /// The device accessed an illegal address.
    pub const ILLEGAL_ADDRESS: Code = Code::new(700, "CUDA_ERROR_ILLEGAL_ADDRESS");
    /// `cuCtxEnablePeerAccess` for a peer that is already enabled.
    pub const PEER_ACCESS_ALREADY_ENABLED: Code =
        Code::new(704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED");
    /// Memory of another device used without peer access.
    pub const PEER_ACCESS_NOT_ENABLED: Code = Code::new(705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED");
    /// The operation is not permitted.
    pub const NOT_PERMITTED: Code = Code::new(800, "CUDA_ERROR_NOT_PERMITTED");
    /// The operation is not supported.
    pub const NOT_SUPPORTED: Code = Code::new(801, "CUDA_ERROR_NOT_SUPPORTED");
    /// An unknown internal error.
    pub const UNKNOWN: Code = Code::new(999, "CUDA_ERROR_UNKNOWN");
}

/// `aclError` values of the Ascend runtime (`acl_base.h`).
pub mod acl {
    use super::Code;

    /// A parameter is invalid (ACL level).
    pub const INVALID_PARAM: Code = Code::new(100_000, "ACL_ERROR_INVALID_PARAM");
    /// Allocation failed (ACL level).
    pub const BAD_ALLOC: Code = Code::new(200_000, "ACL_ERROR_BAD_ALLOC");
    /// The API is not supported.
    pub const API_NOT_SUPPORT: Code = Code::new(200_001, "ACL_ERROR_API_NOT_SUPPORT");
    /// A parameter is invalid (runtime level). The simulator's answer to flags
    /// OR-ed with `ACL_EVENT_IPC`, to exporting an event created without it,
    /// to VMM sizes and offsets that are not multiples of the granularity, and
    /// to copies from unmapped or inaccessible parts of a reservation.
    pub const RT_PARAM_INVALID: Code = Code::new(107_000, "ACL_ERROR_RT_PARAM_INVALID");
    /// No such device id.
    pub const RT_INVALID_DEVICEID: Code = Code::new(107_001, "ACL_ERROR_RT_INVALID_DEVICEID");
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
}
