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
    // The allow-list holds the consumer's bare tgid, which is not its pid,
    // and says so: labelled as the runtime's id, beside the pid.
    let consumer = v["consumer_pid"].as_u64().unwrap();
    let importers = v["importers"].as_str().unwrap();
    let id: u64 = importers
        .strip_prefix("runtime process id ")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unlabelled: {importers}"));
    assert_ne!(id, consumer, "{importers}");
    assert!(
        importers.ends_with(&format!("(the consumer, pid {consumer})")),
        "{importers}"
    );
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

/// `halctl export --backend ascend` in the background (standard input
/// /dev/null: it holds until a signal) with `extra` arguments; its handle
/// file, in `dir`. Killed when dropped.
struct AscendExport(std::process::Child);

impl AscendExport {
    fn start(dir: &std::path::Path, extra: &[&str]) -> (AscendExport, std::path::PathBuf) {
        use std::io::BufRead;
        let file = dir.join("handle");
        let mut child = Command::new(BIN)
            .args([
                "export",
                "--backend",
                "ascend",
                "--size",
                "64K",
                "--fill",
                "9",
            ])
            .args(extra)
            .arg("--handle-file")
            .arg(&file)
            .env("HAL_ASCEND_LIBRARY", standin())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("hal1."), "{line:?}");
        (AscendExport(child), file)
    }
}

impl Drop for AscendExport {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn import(file: &std::path::Path) -> std::process::Output {
    Command::new(BIN)
        .args(["import", "--expect", "9", "--handle-file"])
        .arg(file)
        .env("HAL_ASCEND_LIBRARY", standin())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn an_ascend_export_is_importable_with_importers_anyone() {
    let dir = tempfile::tempdir().unwrap();
    // The backend's default allows nobody: the refusal says, in one line,
    // what an operator can do (no library calls), and keeps the vendor's
    // code and name.
    let (exporter, file) = AscendExport::start(dir.path(), &[]);
    let out = import(&file);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("halctl: error: "), "{err}");
    assert!(err.contains("--importers anyone"), "{err}");
    assert!(err.contains("ACL_ERROR_RT_NO_PERMISSION"), "{err}");
    assert!(err.contains("runtime process id"), "{err}");
    for rust in ["allow_importers", "add_importers", "process_id", "Device::"] {
        assert!(!err.contains(rust), "{rust}: {err}");
    }
    drop(exporter);

    let dir = tempfile::tempdir().unwrap();
    let (_exporter, file) = AscendExport::start(dir.path(), &["--importers", "anyone"]);
    let out = import(&file);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("verified: every byte is 0x09"), "{text}");
}
