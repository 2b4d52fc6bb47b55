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

/// The driver this binary runs on, named on a line of its own
/// (`driver-loaded: PATH version N`, with `--nocapture`): what the GPU
/// smoke run's summary states, and what it fails without. The stand-in
/// outside driver mode.
#[test]
fn the_driver_in_use_is_named() {
    use std::ffi::c_int;
    let b = backend();
    let availability = hal_core::Backend::availability(&b);
    assert!(availability.is_available(), "{availability:?}");
    // SAFETY: the library the backend loaded already; loading it again
    // runs no initialiser. It is never unloaded (forgotten below), as a
    // driver never is.
    let lib = unsafe { libloading::Library::new(common::library_path()) }.unwrap();
    // SAFETY: cuDriverGetVersion is `CUresult (int *)`.
    let get =
        unsafe { lib.get::<unsafe extern "C" fn(*mut c_int) -> c_int>(b"cuDriverGetVersion") }
            .unwrap();
    let mut version: c_int = 0;
    // SAFETY: `version` is a valid place for the answer.
    assert_eq!(unsafe { get(&mut version) }, 0, "cuDriverGetVersion");
    assert!(version > 0, "a driver version, got {version}");
    let file = hal_tests::driver::mapped_file(*get as usize).expect("the driver's file is mapped");
    println!(
        "{}{} version {}.{} ({version})",
        hal_tests::driver::LOADED_LINE,
        file.display(),
        version / 1000,
        version % 1000 / 10
    );
    std::mem::forget(lib);
}

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
