//! The conformance suite on hal-cuda over the stand-in `libcuda.so.1`
//! (`hal-mock-libcuda`): every case runs against the backend's real code
//! paths, answering `Unsupported` where a capability is not claimed.
//!
//! With `HAL_CUDA_CONFORMANCE_DRIVER=1` the same cases run on the NVIDIA
//! driver the backend finds (`HAL_CUDA_LIBRARY`, then the search): what
//! `cargo xtask gpu-smoke`'s run script does on a machine with a GPU.

mod common;

use common::backend;

hal_tests::conformance_suite!(cuda_standin, crate::backend());

/// Pointed at a driver that does not exist, the suite in driver mode fails
/// every case: a GPU run whose driver did not load cannot pass.
#[test]
fn driver_mode_without_a_driver_fails_every_case() {
    hal_tests::driver::assert_suite_fails_without_driver(
        "cuda_standin",
        cuda_standin::CASES,
        &[
            (hal_tests::driver::CUDA_DRIVER_VAR, "1"),
            (hal_cuda::LIBRARY_VAR, "/nonexistent/libcuda.so.1"),
        ],
    );
}

#[test]
fn zz_after_suite_no_shm_entries_left() {
    hal_tests::assert_no_shm_left(cuda_standin::CASES);
}
