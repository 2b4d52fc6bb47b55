//! The conformance suite on hal-cuda over the stand-in `libcuda.so.1`
//! (`hal-mock-libcuda`): every case runs against the backend's real code
//! paths, answering `Unsupported` where a capability is not claimed.
//!
//! With `HAL_CUDA_CONFORMANCE_DRIVER=1` the same cases run on the NVIDIA
//! driver the backend finds (`HAL_CUDA_LIBRARY`, then the search): what
//! `cargo xtask gpu-smoke`'s run script does on a machine with a GPU.

/// The stand-in beside this test's executable (cargo builds it in `deps/`).
fn standin() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test executable");
    let deps = exe.parent().expect("deps");
    let name = "libhal_mock_libcuda.so";
    [deps.join(name), deps.parent().expect("profile").join(name)]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{name} is not built beside {}", exe.display()))
}

hal_tests::conformance_suite!(
    cuda_standin,
    hal_cuda::CudaBackend::with_library(crate::standin())
);

#[test]
fn zz_after_suite_no_shm_entries_left() {
    hal_tests::assert_no_shm_left(cuda_standin::CASES);
}
