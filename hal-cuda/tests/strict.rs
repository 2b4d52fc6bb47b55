//! With `HAL_TESTS_STRICT=1` (what CI sets) the suite instantiated for a
//! CUDA backend whose library is missing fails every case, naming the
//! backend and the missing library, outside driver mode too: a run without
//! the driver or the stand-in it was meant for cannot pass.

use hal_core::Backend;

/// A library that does not exist.
const MISSING: &str = "/nonexistent/hal-cuda-strict/libcuda.so.1";

fn missing() -> hal_cuda::CudaBackend {
    hal_cuda::CudaBackend::with_library(MISSING)
}

hal_tests::conformance_suite!(@on_demand cuda_missing_library, crate::missing());

#[test]
fn a_missing_library_fails_every_case_in_strict_mode() {
    let reason = match missing().availability() {
        hal_core::Availability::Unavailable { reason, .. } => reason,
        hal_core::Availability::Available => panic!("{MISSING} is available"),
    };
    assert!(reason.contains(MISSING), "{reason}");
    hal_tests::driver::assert_suite_fails_in_strict_mode(
        "cuda_missing_library",
        cuda_missing_library::CASES,
        hal_core::BackendId::Cuda,
        &reason,
    );
}
