//! The numbers of `CUresult`: conversion from the vendor table of
//! `hal_core` and from the simulator's errors.

use cudarc::driver::sys::CUresult;
use hal_core::kit::vendor::{cuda, Code};
use hal_core::Error;

/// Every variant of cudarc's `CUresult` (CUDA 12.8 headers), named one by
/// one so that the compiler checks each: the safe way from a number to the
/// enum, since cudarc offers no conversion.
pub(crate) const VARIANTS: &[CUresult] = {
    use CUresult::*;
    &[
        CUDA_SUCCESS,
        CUDA_ERROR_INVALID_VALUE,
        CUDA_ERROR_OUT_OF_MEMORY,
        CUDA_ERROR_NOT_INITIALIZED,
        CUDA_ERROR_DEINITIALIZED,
        CUDA_ERROR_PROFILER_DISABLED,
        CUDA_ERROR_PROFILER_NOT_INITIALIZED,
        CUDA_ERROR_PROFILER_ALREADY_STARTED,
        CUDA_ERROR_PROFILER_ALREADY_STOPPED,
        CUDA_ERROR_STUB_LIBRARY,
        CUDA_ERROR_DEVICE_UNAVAILABLE,
        CUDA_ERROR_NO_DEVICE,
        CUDA_ERROR_INVALID_DEVICE,
        CUDA_ERROR_DEVICE_NOT_LICENSED,
        CUDA_ERROR_INVALID_IMAGE,
        CUDA_ERROR_INVALID_CONTEXT,
        CUDA_ERROR_CONTEXT_ALREADY_CURRENT,
        CUDA_ERROR_MAP_FAILED,
        CUDA_ERROR_UNMAP_FAILED,
        CUDA_ERROR_ARRAY_IS_MAPPED,
        CUDA_ERROR_ALREADY_MAPPED,
        CUDA_ERROR_NO_BINARY_FOR_GPU,
        CUDA_ERROR_ALREADY_ACQUIRED,
        CUDA_ERROR_NOT_MAPPED,
        CUDA_ERROR_NOT_MAPPED_AS_ARRAY,
        CUDA_ERROR_NOT_MAPPED_AS_POINTER,
        CUDA_ERROR_ECC_UNCORRECTABLE,
        CUDA_ERROR_UNSUPPORTED_LIMIT,
        CUDA_ERROR_CONTEXT_ALREADY_IN_USE,
        CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
        CUDA_ERROR_INVALID_PTX,
        CUDA_ERROR_INVALID_GRAPHICS_CONTEXT,
        CUDA_ERROR_NVLINK_UNCORRECTABLE,
        CUDA_ERROR_JIT_COMPILER_NOT_FOUND,
        CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
        CUDA_ERROR_JIT_COMPILATION_DISABLED,
        CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY,
        CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC,
        CUDA_ERROR_CONTAINED,
        CUDA_ERROR_INVALID_SOURCE,
        CUDA_ERROR_FILE_NOT_FOUND,
        CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND,
        CUDA_ERROR_SHARED_OBJECT_INIT_FAILED,
        CUDA_ERROR_OPERATING_SYSTEM,
        CUDA_ERROR_INVALID_HANDLE,
        CUDA_ERROR_ILLEGAL_STATE,
        CUDA_ERROR_LOSSY_QUERY,
        CUDA_ERROR_NOT_FOUND,
        CUDA_ERROR_NOT_READY,
        CUDA_ERROR_ILLEGAL_ADDRESS,
        CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
        CUDA_ERROR_LAUNCH_TIMEOUT,
        CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING,
        CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
        CUDA_ERROR_PEER_ACCESS_NOT_ENABLED,
        CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,
        CUDA_ERROR_CONTEXT_IS_DESTROYED,
        CUDA_ERROR_ASSERT,
        CUDA_ERROR_TOO_MANY_PEERS,
        CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
        CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
        CUDA_ERROR_HARDWARE_STACK_ERROR,
        CUDA_ERROR_ILLEGAL_INSTRUCTION,
        CUDA_ERROR_MISALIGNED_ADDRESS,
        CUDA_ERROR_INVALID_ADDRESS_SPACE,
        CUDA_ERROR_INVALID_PC,
        CUDA_ERROR_LAUNCH_FAILED,
        CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
        CUDA_ERROR_TENSOR_MEMORY_LEAK,
        CUDA_ERROR_NOT_PERMITTED,
        CUDA_ERROR_NOT_SUPPORTED,
        CUDA_ERROR_SYSTEM_NOT_READY,
        CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
        CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
        CUDA_ERROR_MPS_CONNECTION_FAILED,
        CUDA_ERROR_MPS_RPC_FAILURE,
        CUDA_ERROR_MPS_SERVER_NOT_READY,
        CUDA_ERROR_MPS_MAX_CLIENTS_REACHED,
        CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED,
        CUDA_ERROR_MPS_CLIENT_TERMINATED,
        CUDA_ERROR_CDP_NOT_SUPPORTED,
        CUDA_ERROR_CDP_VERSION_MISMATCH,
        CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
        CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
        CUDA_ERROR_STREAM_CAPTURE_MERGE,
        CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,
        CUDA_ERROR_STREAM_CAPTURE_UNJOINED,
        CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
        CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
        CUDA_ERROR_CAPTURED_EVENT,
        CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
        CUDA_ERROR_TIMEOUT,
        CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
        CUDA_ERROR_EXTERNAL_DEVICE,
        CUDA_ERROR_INVALID_CLUSTER_SIZE,
        CUDA_ERROR_FUNCTION_NOT_LOADED,
        CUDA_ERROR_INVALID_RESOURCE_TYPE,
        CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION,
        CUDA_ERROR_KEY_ROTATION,
        CUDA_ERROR_UNKNOWN,
    ]
};

/// The `CUresult` numbered `number`, if cudarc has that variant.
pub(crate) fn curesult(number: i64) -> Option<CUresult> {
    VARIANTS
        .iter()
        .copied()
        .find(|r| i64::from(*r as u32) == number)
}

/// The `CUresult` of a vendor code; `CUDA_ERROR_UNKNOWN` for a number
/// cudarc does not know (none of `hal_core`'s table, as a test checks).
pub(crate) fn result_of(code: Code) -> CUresult {
    curesult(code.code).unwrap_or(CUresult::CUDA_ERROR_UNKNOWN)
}

/// The vendor code a simulator error stands for: its own code when it is a
/// vendor error, else the driver's nearest answer.
pub(crate) fn code_of(err: &Error) -> Code {
    match err {
        Error::Vendor(v) => cuda::code(v.code).unwrap_or(cuda::UNKNOWN),
        Error::InvalidArgument { .. } | Error::Misaligned { .. } | Error::NotFound { .. } => {
            cuda::INVALID_VALUE
        }
        Error::OutOfMemory { .. } => cuda::OUT_OF_MEMORY,
        Error::Unsupported { .. } => cuda::NOT_SUPPORTED,
        Error::PermissionDenied { .. } => cuda::NOT_PERMITTED,
        Error::Timeout { .. } => cuda::NOT_READY,
        _ => cuda::UNKNOWN,
    }
}

/// Convert a simulator result into a driver answer.
pub(crate) fn sim<T>(r: hal_core::Result<T>) -> Result<T, Code> {
    r.map_err(|e| code_of(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_vendor_code_is_a_variant() {
        for c in cuda::CODES {
            let r = curesult(c.code).unwrap_or_else(|| panic!("{}", c.name));
            assert_eq!(format!("{r:?}"), c.name);
        }
        assert_eq!(curesult(12345), None);
    }

    #[test]
    fn variants_are_distinct() {
        let mut n: Vec<u32> = VARIANTS.iter().map(|r| *r as u32).collect();
        n.sort_unstable();
        n.dedup();
        assert_eq!(n.len(), VARIANTS.len());
    }
}
