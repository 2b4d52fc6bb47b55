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

/// Plain driver calls, as another library makes them, with device 0's
/// primary context pushed around `f`.
pub fn with_driver<R>(f: impl FnOnce(&libloading::Library) -> R) -> R {
    with_driver_on(0, f)
}

/// [`with_driver`] with device `ordinal`'s primary context.
pub fn with_driver_on<R>(ordinal: i32, f: impl FnOnce(&libloading::Library) -> R) -> R {
    type Retain = unsafe extern "C" fn(*mut *mut std::ffi::c_void, i32) -> u32;
    type Push = unsafe extern "C" fn(*mut std::ffi::c_void) -> u32;
    type Pop = unsafe extern "C" fn(*mut *mut std::ffi::c_void) -> u32;
    type Release = unsafe extern "C" fn(i32) -> u32;
    type Init = unsafe extern "C" fn(u32) -> u32;
    // SAFETY: the same file hal-cuda loaded, so the same instance; its
    // initialisers set up statics only.
    let lib = unsafe { libloading::Library::new(library_path()) }.unwrap();
    // SAFETY: the stand-in's entry points of these signatures; the context
    // is pushed and popped on this thread and the retain released.
    unsafe {
        let retain = *lib.get::<Retain>(b"cuDevicePrimaryCtxRetain").unwrap();
        let push = *lib.get::<Push>(b"cuCtxPushCurrent_v2").unwrap();
        let pop = *lib.get::<Pop>(b"cuCtxPopCurrent_v2").unwrap();
        let release = *lib.get::<Release>(b"cuDevicePrimaryCtxRelease_v2").unwrap();
        assert_eq!(lib.get::<Init>(b"cuInit").unwrap()(0), 0);
        let mut ctx = std::ptr::null_mut();
        assert_eq!(retain(&mut ctx, ordinal), 0);
        assert_eq!(push(ctx), 0);
        let r = f(&lib);
        let mut popped = std::ptr::null_mut();
        assert_eq!(pop(&mut popped), 0);
        assert_eq!(release(ordinal), 0);
        r
    }
}
