//! `halctl` on the CUDA backend without a GPU: the stand-in driver
//! (`hal-mock-libcuda`) named by `HAL_CUDA_LIBRARY`.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_halctl");

/// The stand-in driver cargo built for this test.
fn standin() -> std::path::PathBuf {
    hal_mock_libcuda::built_library()
}

#[test]
fn the_demo_runs_on_the_cuda_backend_over_the_standin_driver() {
    let out = Command::new(BIN)
        .args(["demo", "--backend", "cuda", "--json"])
        .env("HAL_CUDA_LIBRARY", standin())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["backend"], "cuda", "{v}");
    assert_eq!(v["verified"]["ok"], true, "{v}");
}

#[test]
fn devices_lists_the_standin_devices_as_cuda() {
    let out = Command::new(BIN)
        .args(["devices", "--backend", "cuda", "--json"])
        .env("HAL_CUDA_LIBRARY", standin())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cuda = &v["backends"][0];
    assert_eq!(cuda["name"], "cuda");
    assert_eq!(cuda["available"], true, "{cuda}");
    let caps: Vec<&str> = cuda["devices"][0]["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.as_str())
        .collect();
    assert!(
        caps.contains(&"ipc-memory") && caps.contains(&"leases"),
        "{caps:?}"
    );
}
