//! The example `06_shared_managed_workers` run as a user runs it: on the
//! stand-in driver (hal-cuda underneath) and on the simulator; each picks a
//! growable result buffer where the GPU backend offers VMM and shared
//! segments otherwise. Cargo
//! builds the example beside this test when the features are on.
#![cfg(all(feature = "cuda-uvm", feature = "mock"))]

use std::process::Command;

fn example() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let path = profile.join("examples").join("06_shared_managed_workers");
    assert!(
        path.is_file(),
        "{} is missing: run `cargo test -p hal-ipc --features cuda-uvm`, which builds it",
        path.display()
    );
    path
}

fn run(args: &[&str], env: &[(&str, std::path::PathBuf)]) {
    let mut cmd = Command::new(example());
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("verified"),
        "the example failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn on_the_standin_driver() {
    run(
        &["cuda-uvm", "4"],
        &[("HAL_CUDA_LIBRARY", hal_mock_libcuda::built_library())],
    );
}

#[test]
fn on_the_simulator() {
    run(&["mock", "4"], &[]);
}
