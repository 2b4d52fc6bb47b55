//! Stream memory operations on registered host memory
//! (`cuStreamWriteValue32_v2`, `cuStreamWaitValue32_v2`): what a notify
//! shared by pages between processes records and waits with, measured as
//! a 3.6 µs cross-process round trip on an H200 with plain driver calls
//! (`shared/vendor/cuda.md`, "Measured on an H200").

use std::ffi::c_uint;

use cudarc::driver::sys::{CUdeviceptr, CUresult, CUstream};
use hal_core::kit::vendor::cuda;

use crate::abi::guard;
use crate::error::sim;
use crate::state::driver;
use crate::stream::stream_of;

/// `CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER`.
const NO_MEMORY_BARRIER: c_uint = 1;
/// `CU_STREAM_WAIT_VALUE_EQ`.
const WAIT_EQ: c_uint = 1;
/// `CU_STREAM_WAIT_VALUE_FLUSH`.
const WAIT_FLUSH: c_uint = 1 << 30;

/// Queues storing `value` into the word at `addr` (registered host memory).
#[no_mangle]
pub unsafe extern "C" fn cuStreamWriteValue32_v2(
    h_stream: CUstream,
    addr: CUdeviceptr,
    value: c_uint,
    flags: c_uint,
) -> CUresult {
    guard("cuStreamWriteValue32_v2", || {
        if flags & !NO_MEMORY_BARRIER != 0 {
            return Err(cuda::INVALID_VALUE);
        }
        let d = driver()?;
        let (stream, ordinal) = stream_of(d, h_stream)?;
        // SAFETY: the caller keeps the registration until the stream ran
        // the write (the driver API's contract); the simulator checks that
        // the word is registered.
        sim(unsafe {
            d.devices[ordinal as usize]
                .device
                .write_value32(&stream, addr, value)
        })
    })
}

/// Queues holding the stream until the word at `addr` equals `value`
/// (`CU_STREAM_WAIT_VALUE_EQ`, with or without `FLUSH`; the other
/// comparisons answer `CUDA_ERROR_NOT_SUPPORTED` in this stand-in).
#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitValue32_v2(
    h_stream: CUstream,
    addr: CUdeviceptr,
    value: c_uint,
    flags: c_uint,
) -> CUresult {
    guard("cuStreamWaitValue32_v2", || {
        let d = driver()?;
        let (stream, ordinal) = stream_of(d, h_stream)?;
        match flags & !WAIT_FLUSH {
            WAIT_EQ => {}
            0 | 2 | 3 => return Err(cuda::NOT_SUPPORTED),
            _ => return Err(cuda::INVALID_VALUE),
        }
        // SAFETY: as for `cuStreamWriteValue32_v2`.
        sim(unsafe {
            d.devices[ordinal as usize]
                .device
                .wait_value32(&stream, addr, value)
        })
    })
}
