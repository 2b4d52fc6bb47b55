//! The fork rule on hal-cuda-uvm, over hal-cuda and the stand-in
//! `libcuda.so.1` (the NVIDIA driver in the GPU smoke run) and over the
//! simulator: a child is refused its parent's backend, device, managed
//! memory, streams, events and notifies with `Error::Forked`; a backend
//! never opened before the fork works in the child; over the simulator,
//! whose runtime survives a fork, a backend the child makes works too.
//! The tests fork one at a time, with no hal work of another running.

use std::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn over_cuda() -> hal_cuda_uvm::UvmBackend {
    if std::env::var_os("HAL_CUDA_CONFORMANCE_DRIVER").is_some_and(|v| v == "1") {
        hal_cuda_uvm::UvmBackend::new()
    } else {
        hal_cuda_uvm::UvmBackend::with_library(hal_mock_libcuda::built_library())
    }
}

#[test]
fn parents_objects_are_refused_in_a_child() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    hal_tests::fork::parents_objects_are_refused_in_a_child(over_cuda, true, false);
}

/// In a process of its own: this binary's other tests load the driver,
/// and a process that loaded it before forking is not the case checked.
#[test]
fn a_backend_never_opened_before_the_fork_works_in_the_child() {
    hal_tests::process::child_passes(
        "child_forks_before_opening",
        "the child that forks before opening its backend",
        &[],
    );
}

#[test]
#[ignore = "child entry point: run by its parent"]
fn child_forks_before_opening() {
    hal_tests::fork::unopened_backend_works_in_a_child(over_cuda);
    println!("child done");
}

#[test]
fn over_the_simulator_parents_objects_are_refused_in_a_child() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    hal_tests::fork::parents_objects_are_refused_in_a_child(
        || hal_cuda_uvm::UvmBackend::over(hal_mock::MockBackend::cuda()),
        true,
        true,
    );
}
