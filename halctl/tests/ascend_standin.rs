//! `halctl` on the Ascend backend without an NPU: the stand-in runtime
//! (`hal-mock-libascendcl`) named by `HAL_ASCEND_LIBRARY`, and without any
//! runtime at all.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_halctl");

/// The stand-in runtime cargo built for this test.
fn standin() -> std::path::PathBuf {
    hal_mock_libascendcl::built_library()
}

#[test]
fn the_demo_runs_on_the_ascend_backend_over_the_standin_runtime() {
    let out = Command::new(BIN)
        .args([
            "demo",
            "--backend",
            "ascend",
            "--json",
            "--round-trips",
            "50",
        ])
        .env("HAL_ASCEND_LIBRARY", standin())
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
    assert_eq!(v["backend"], "ascend", "{v}");
    assert_eq!(v["verified"]["ok"], true, "{v}");
    // The allow-list holds the consumer's bare tgid, which is not its pid.
    let consumer = v["consumer_pid"].as_u64().unwrap();
    let importers = v["importers"].as_str().unwrap();
    assert!(!importers.contains(&consumer.to_string()), "{importers}");
}

#[test]
fn devices_says_why_ascend_is_unavailable_naming_the_paths_searched() {
    let out = Command::new(BIN)
        .args(["devices", "--json"])
        .env_remove("HAL_ASCEND_LIBRARY")
        .env_remove("ASCEND_HOME_PATH")
        .env_remove("ASCEND_TOOLKIT_HOME")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ascend = v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "ascend")
        .expect("the ascend backend is listed");
    if ascend["available"] == true {
        // A machine with CANN installed: nothing to check here.
        return;
    }
    let searched: Vec<&str> = ascend["searched"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s.as_str())
        .collect();
    assert_eq!(searched.first(), Some(&"libascendcl.so"), "{ascend}");
    assert!(
        searched.contains(&"/usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so"),
        "{ascend}"
    );
    let reason = ascend["reason"].as_str().unwrap();
    assert!(reason.contains("HAL_ASCEND_LIBRARY"), "{reason}");
}

#[test]
fn devices_lists_the_standin_devices_as_ascend() {
    let out = Command::new(BIN)
        .args(["devices", "--backend", "ascend", "--json"])
        .env("HAL_ASCEND_LIBRARY", standin())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ascend = &v["backends"][0];
    assert_eq!(ascend["name"], "ascend");
    assert_eq!(ascend["available"], true, "{ascend}");
    let caps: Vec<&str> = ascend["devices"][0]["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.as_str())
        .collect();
    for c in [
        "ipc-memory",
        "pid-allow-list-default-on",
        "creator-only-notify-wait",
    ] {
        assert!(caps.contains(&c), "{c}: {caps:?}");
    }
    assert!(!caps.contains(&"ipc-event-query"), "{caps:?}");
}
