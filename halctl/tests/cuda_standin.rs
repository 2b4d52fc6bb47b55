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

#[test]
fn the_bench_runs_the_cuda_scenarios_over_the_standin_driver() {
    let out = Command::new(BIN)
        .args(["bench", "--backend", "cuda", "--tiny", "--json", "--no-pin"])
        .env("HAL_CUDA_LIBRARY", standin())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let scenario = |name: &str| {
        lines
            .iter()
            .find(|v| v["scenario"] == name)
            .unwrap_or_else(|| panic!("no {name} line in:\n{stdout}"))
            .clone()
    };
    for name in [
        "cuda-import-first",
        "cuda-import-cached",
        "cuda-read",
        "cuda-vmm-import",
        "cuda-free",
        "cuda-notify-rtt",
        "cuda-channel-rtt",
    ] {
        let v = scenario(name);
        assert!(v["n"].as_u64().unwrap() > 0, "{v}");
        assert!(
            v["ratio_p50"].as_f64().is_some(),
            "a ratio to the baseline: {v}"
        );
        assert!(v["baseline"].as_str().is_some(), "{v}");
    }
    assert_eq!(scenario("cuda-import-cached")["cached"], true);
    // The host-memory scenarios give way to the CUDA ones.
    assert!(lines.iter().all(|v| v["scenario"] != "import-first"));
}
