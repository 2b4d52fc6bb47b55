//! `halctl export` started as a script starts a background job
//! (`halctl export ... &`): its standard input is /dev/null, already at its
//! end. The export holds the region until a signal instead of releasing it
//! at once, and a signal still cleans up.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const BIN: &str = env!("CARGO_BIN_EXE_halctl");
/// Generous: a stuck command fails its test instead of hanging the suite.
const TIMEOUT: Duration = Duration::from_secs(120);

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn unique(tag: &str) -> String {
    format!(
        "halctl-hold-{}-{}-{tag}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Kills the exporter and removes what it made, should the test fail
/// half-way.
struct Guard {
    child: Option<Child>,
    name: String,
    dir: tempfile::TempDir,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(format!("/dev/shm/{}", self.name));
        let _ = std::fs::remove_file(format!("/dev/shm/.hal-meta.{}", self.name));
    }
}

fn wait(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "halctl did not finish within {TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Start `halctl export` with standard input /dev/null, as `&` does, and
/// read the handle line.
fn start_in_background(signal: Signal) {
    let name = unique(signal.as_str());
    let mut g = Guard {
        child: None,
        name: name.clone(),
        dir: tempfile::tempdir().unwrap(),
    };
    let handle_file = g.dir.path().join("handle");
    let mut child = Command::new(BIN)
        .args(["export", "--backend", "cpu-shm", "--size", "8K", "--fill"])
        .args(["0x5a", "--name", &name, "--json", "--handle-file"])
        .arg(&handle_file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn halctl export");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let pid = Pid::from_raw(child.id() as i32);
    g.child = Some(child);
    let v: serde_json::Value = serde_json::from_str(line.trim())
        .unwrap_or_else(|e| panic!("export printed no JSON ({e}): {line:?}"));
    assert_eq!(v["hold_until"], "signal", "{v}");

    // A moment later it still holds the region: importable, every byte.
    std::thread::sleep(Duration::from_millis(300));
    let child = g.child.as_mut().unwrap();
    assert!(
        child.try_wait().unwrap().is_none(),
        "the export ended although no signal came"
    );
    let out = Command::new(BIN)
        .args(["import", "--expect", "0x5a", "--handle-file"])
        .arg(&handle_file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(Path::new(&format!("/dev/shm/{name}")).exists());

    // The signal ends it cleanly: exit 0, nothing left in /dev/shm, the
    // handle file removed.
    kill(pid, signal).unwrap();
    let status = wait(child);
    assert_eq!(status.code(), Some(0), "{status:?}");
    let err = std::io::read_to_string(stderr).unwrap();
    assert!(
        err.contains(&format!("{} received", signal.as_str())),
        "{err}"
    );
    g.child = None;
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.contains(&name))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(!handle_file.exists());
}

#[test]
fn background_export_holds_until_sigterm() {
    start_in_background(Signal::SIGTERM);
}

#[test]
fn background_export_holds_until_sighup() {
    start_in_background(Signal::SIGHUP);
}
