//! What every entry point shares: the panic guard and the output pointers.

use std::panic::{catch_unwind, AssertUnwindSafe};

use cudarc::driver::sys::CUresult;
use hal_core::kit::vendor::{cuda, Code};

use crate::error::result_of;

/// Run the body of entry point `entry`: its answer as a `CUresult`,
/// `CUDA_ERROR_UNKNOWN` if it panicked (a panic never unwinds into C), or
/// the failure [`FAIL_VAR`](crate::FAIL_VAR) injects into `entry` instead
/// of running it.
pub(crate) fn guard(entry: &str, f: impl FnOnce() -> Result<(), Code>) -> CUresult {
    let run = || {
        // A call that waits for the device may hold the registrations.
        if crate::held::takes(entry) {
            crate::held::pass();
        }
        // Later driver work of this process is ordered after its staged
        // host-to-device copies; the context stack, the error strings and
        // the device queries are no work.
        if crate::staged::lands(entry) {
            crate::staged::land_all();
        }
        crate::switches::injected(entry)?;
        f()
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => CUresult::CUDA_SUCCESS,
        Ok(Err(code)) => result_of(code),
        Err(_) => result_of(cuda::UNKNOWN),
    }
}

/// Write `value` through the output pointer `out`;
/// `CUDA_ERROR_INVALID_VALUE` when it is null.
///
/// # Safety
///
/// `out` is null or valid for one write of a `T`.
pub(crate) unsafe fn put<T>(out: *mut T, value: T) -> Result<(), Code> {
    // SAFETY: `out` is null or valid for one write (this fn's contract).
    unsafe { hal_mock::standin::put(out, value, || cuda::INVALID_VALUE) }
}

/// Refuse a null output pointer before doing anything.
pub(crate) fn non_null<T>(out: *mut T) -> Result<(), Code> {
    if out.is_null() {
        Err(cuda::INVALID_VALUE)
    } else {
        Ok(())
    }
}
