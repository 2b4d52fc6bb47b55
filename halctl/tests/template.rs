//! The template backend, registered at run time under its own name, reached
//! by name from halctl: listed by `halctl devices`, exported from by
//! `halctl export --backend template`, imported by another halctl process
//! from the handle text alone, and named `template` in `halctl inspect`.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_halctl");
/// Generous: a stuck command fails its test instead of hanging the suite.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Wait for `child` at most [`TIMEOUT`]; kill it and fail past that.
fn finish(mut child: Child) -> (i32, String, String) {
    let mut out = child.stdout.take().map(|o| read_all(Box::new(o)));
    let mut err = child.stderr.take().map(|e| read_all(Box::new(e)));
    let deadline = Instant::now() + TIMEOUT;
    let code = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status.code().unwrap_or(-1);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("halctl did not finish within {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let joined = |h: Option<std::thread::JoinHandle<String>>| {
        h.map(|h| h.join().expect("reader")).unwrap_or_default()
    };
    (code, joined(out.take()), joined(err.take()))
}

fn read_all(mut r: Box<dyn Read + Send>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

fn halctl(args: &[&str]) -> (i32, String, String) {
    let child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn halctl");
    finish(child)
}

#[test]
fn devices_lists_the_template_by_name() {
    let (code, out, err) = halctl(&["devices", "--backend", "template", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let json: Value = serde_json::from_str(out.trim()).expect("one JSON object");
    let backends = json["backends"].as_array().expect("backends");
    assert_eq!(backends.len(), 1, "{json}");
    let template = &backends[0];
    assert_eq!(template["name"], "template", "{json}");
    assert_eq!(template["available"], true, "{json}");
    let devices = template["devices"].as_array().expect("devices");
    assert_eq!(devices.len(), 1, "{json}");
    let caps = devices[0]["capabilities"].as_array().expect("capabilities");
    assert!(caps.iter().any(|c| c == "ipc-memory"), "{json}");
    assert!(!caps.iter().any(|c| c == "vmm"), "{json}");
}

#[test]
fn a_template_export_imports_in_another_halctl_by_its_text() {
    let mut exporter = Command::new(BIN)
        .args([
            "export",
            "--backend",
            "template",
            "--size",
            "64K",
            "--fill",
            "5",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn halctl export");
    let mut handle = String::new();
    BufReader::new(exporter.stdout.as_mut().expect("stdout"))
        .read_line(&mut handle)
        .expect("read the handle line");
    let handle = handle.trim().to_string();
    assert!(handle.starts_with("hal1"), "export printed {handle:?}");

    let (code, out, err) = halctl(&["import", "--expect", "5", &handle]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("verified: every byte is 0x05"), "{out}");

    let (code, out, err) = halctl(&["inspect", &handle]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("template"),
        "the handle names its backend: {out}"
    );
    assert!(!out.contains("external-8000"), "{out}");

    drop(exporter.stdin.take());
    let (code, _, err) = finish(exporter);
    assert_eq!(code, 0, "the export ends when its stdin closes: {err}");
}

#[test]
fn an_unknown_backend_lists_the_template() {
    let (code, out, err) = halctl(&["devices", "--backend", "no-such-backend"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("template"), "{err}");
}
