//! The driver the tests of this crate run on: the stand-in cargo built,
//! or the NVIDIA driver with `HAL_CUDA_CONFORMANCE_DRIVER=1` (the GPU
//! smoke run of `cargo xtask gpu-smoke`).
#![allow(dead_code)]

use std::path::PathBuf;

/// True when the tests run on the real driver.
pub fn on_driver() -> bool {
    std::env::var_os("HAL_CUDA_CONFORMANCE_DRIVER").is_some_and(|v| v == "1")
}

/// The library that plain driver calls of a test load: the stand-in, or
/// on the real driver what `HAL_CUDA_LIBRARY` names, else `libcuda.so.1`.
pub fn library_path() -> PathBuf {
    if on_driver() {
        std::env::var_os(hal_cuda::LIBRARY_VAR)
            .map_or_else(|| PathBuf::from(hal_cuda::LIBRARY_NAME), PathBuf::from)
    } else {
        hal_mock_libcuda::built_library()
    }
}

/// The backend on that driver.
pub fn backend() -> hal_cuda::CudaBackend {
    if on_driver() {
        hal_cuda::CudaBackend::new()
    } else {
        hal_cuda::CudaBackend::with_library(hal_mock_libcuda::built_library())
    }
}

/// Run this executable's test `name` alone in a child with `env`, and
/// require that it printed "child done" and exited 0; its output.
pub fn child_passes(name: &str, what: &str, env: &[(&str, &str)]) -> String {
    hal_tests::process::child_passes(name, what, env)
}
