//! Without a usable driver the backend is unavailable and says why, naming
//! what it searched; it never panics. Each case runs in a child process
//! with its own `HAL_CUDA_LIBRARY`.

use std::process::Command;

use hal_core::{Availability, Backend, Error};
use hal_cuda::CudaBackend;

const CHILD: &str = "HAL_CUDA_TEST_CASE";

/// Run test `name` again in a child with `HAL_CUDA_LIBRARY=library`.
fn in_child(name: &str, library: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, name)
        .env(hal_cuda::LIBRARY_VAR, library)
        .output()
        .unwrap();
    // Its one test ran: a name that matched nothing would run none, and pass.
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains(" 1 passed;"),
        "child {name} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn is_child(name: &str) -> bool {
    std::env::var(CHILD).is_ok_and(|v| v == name)
}

#[test]
fn a_missing_library_is_unavailable_with_the_path_searched() {
    const ME: &str = "a_missing_library_is_unavailable_with_the_path_searched";
    let path = "/nonexistent/hal-cuda-test/libcuda.so.1";
    if !is_child(ME) {
        return in_child(ME, path);
    }
    let cuda = CudaBackend::new();
    match cuda.availability() {
        Availability::Unavailable { reason, searched } => {
            assert_eq!(searched, vec![std::path::PathBuf::from(path)]);
            assert!(reason.contains(path), "{reason}");
            assert!(reason.contains(hal_cuda::LIBRARY_VAR), "{reason}");
        }
        Availability::Available => panic!("a missing library is available"),
    }
    for e in [cuda.devices().unwrap_err(), cuda.open(0).unwrap_err()] {
        match e {
            Error::Unavailable { searched, .. } => {
                assert_eq!(searched, vec![std::path::PathBuf::from(path)])
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
}

#[test]
fn a_library_without_the_entry_points_names_the_missing_symbol() {
    const ME: &str = "a_library_without_the_entry_points_names_the_missing_symbol";
    // A library that loads and is not the driver.
    let libc = "libc.so.6";
    if !is_child(ME) {
        return in_child(ME, libc);
    }
    let cuda = CudaBackend::new();
    match cuda.availability() {
        Availability::Unavailable { reason, searched } => {
            assert_eq!(searched, vec![std::path::PathBuf::from(libc)]);
            assert!(reason.contains("cuInit"), "names the symbol: {reason}");
            assert!(reason.contains(libc), "names the library: {reason}");
            assert!(
                reason.contains("it is not a CUDA driver") && !reason.contains("older"),
                "not a CUDA driver, not an older one: {reason}"
            );
            assert!(
                reason.contains(hal_cuda::LIBRARY_VAR) && !reason.contains("install the NVIDIA"),
                "the variable named it: {reason}"
            );
        }
        Availability::Available => panic!("libc is not a CUDA driver"),
    }
}

#[test]
fn the_search_without_an_override_lists_every_place() {
    const ME: &str = "the_search_without_an_override_lists_every_place";
    if !is_child(ME) {
        // An empty override means no override.
        return in_child(ME, "");
    }
    let cuda = CudaBackend::new();
    if let Availability::Unavailable { searched, .. } = cuda.availability() {
        // On a machine without the driver: the loader's own search by name,
        // then the install directories.
        assert_eq!(
            searched[0],
            std::path::PathBuf::from(hal_cuda::LIBRARY_NAME)
        );
        assert!(searched.len() > 2, "{searched:?}");
    }
}

#[test]
fn a_library_named_by_the_program_wins_over_the_variable() {
    let path = "/nonexistent/hal-cuda-test/named/libcuda.so.1";
    let cuda = CudaBackend::with_library(path);
    match cuda.availability() {
        Availability::Unavailable { searched, reason } => {
            assert_eq!(searched, vec![std::path::PathBuf::from(path)]);
            assert!(reason.contains(path), "{reason}");
        }
        Availability::Available => panic!("a missing library is available"),
    }
}
