//! The conformance suite on hal-cuda-uvm over hal-cuda and the stand-in
//! `libcuda.so.1` (`hal-mock-libcuda`), and over the simulator's CUDA-like
//! profile (which has VMM, so the VMM and growable cases run through this
//! backend too). Cases whose capability is absent require `Unsupported`.
//!
//! With `HAL_CUDA_CONFORMANCE_DRIVER=1` the stand-in cases run on the
//! NVIDIA driver hal-cuda finds (the GPU smoke run).

/// The backend of the suite over hal-cuda: the stand-in, or the real
/// driver when `HAL_CUDA_CONFORMANCE_DRIVER=1`.
fn over_cuda() -> hal_cuda_uvm::UvmBackend {
    if std::env::var_os("HAL_CUDA_CONFORMANCE_DRIVER").is_some_and(|v| v == "1") {
        hal_cuda_uvm::UvmBackend::new()
    } else {
        hal_cuda_uvm::UvmBackend::with_library(hal_mock_libcuda::built_library())
    }
}

hal_tests::conformance_suite!(cuda_uvm_standin, crate::over_cuda());
hal_tests::conformance_suite!(
    cuda_uvm_mock,
    hal_cuda_uvm::UvmBackend::over(hal_mock::MockBackend::cuda())
);

#[test]
fn zz_after_suite_no_shm_entries_left() {
    hal_tests::assert_no_shm_left(cuda_uvm_standin::CASES + cuda_uvm_mock::CASES);
}
