//! halctl driven as a user drives it: by spawning the binary, reading what it
//! prints (JSON parsed with serde_json) and checking its exit codes.
//!
//! Every test uses names unique to this process and test, and leaves nothing
//! in /dev/shm.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_halctl");
/// Generous: a stuck command fails its test instead of hanging the suite.
const TIMEOUT: Duration = Duration::from_secs(120);

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A region or file name unique to this process and call.
fn unique(tag: &str) -> String {
    format!(
        "halctl-test-{}-{}-{tag}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn shm_path(name: &str) -> String {
    format!("/dev/shm/{name}")
}

fn shm_exists(name: &str) -> bool {
    Path::new(&shm_path(name)).exists() || Path::new(&format!("/dev/shm/.hal-meta.{name}")).exists()
}

#[derive(Debug)]
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {self:?}"))
    }
}

/// Wait for `child` at most [`TIMEOUT`]; kill it and fail past that.
fn wait_with_timeout(child: &mut Child) -> i32 {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status.code().unwrap_or(-1);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("halctl did not finish within {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn reader<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// Run `halctl args...` to completion.
fn halctl(args: &[&str]) -> Out {
    halctl_env(args, &[])
}

/// Run `halctl args...` to completion with `env` set.
fn halctl_env(args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut child = Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn halctl");
    let out = reader(child.stdout.take().expect("stdout"));
    let err = reader(child.stderr.take().expect("stderr"));
    let code = wait_with_timeout(&mut child);
    Out {
        code,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// The error line of a failed command: exactly one line, in the house format,
/// and never a panic or a backtrace.
fn assert_short_error(out: &Out) {
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr: {out:?}");
    assert!(lines[0].starts_with("halctl: error: "), "{out:?}");
    assert!(!out.stderr.contains("panicked"), "{out:?}");
    assert!(!out.stderr.contains("backtrace"), "{out:?}");
}

/// A `halctl export` running in the background, holding its region until
/// its stdin closes.
struct Exporter {
    child: Option<Child>,
    /// The first line it printed: the handle text (or JSON with --json).
    first_line: String,
    names: Vec<String>,
}

impl Exporter {
    fn start(args: &[&str]) -> Exporter {
        let mut child = Command::new(BIN)
            .arg("export")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn halctl export");
        let mut first_line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut first_line)
            .expect("read the handle line");
        let names = args
            .windows(2)
            .filter(|w| w[0] == "--name")
            .map(|w| w[1].to_string())
            .collect();
        let mut e = Exporter {
            child: Some(child),
            first_line: first_line.trim().to_string(),
            names,
        };
        assert!(
            !e.first_line.is_empty(),
            "export printed nothing (exit {:?})",
            e.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
        );
        e
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Close its stdin (the end of the hold) and return its exit code.
    fn finish(mut self) -> i32 {
        let mut child = self.child.take().expect("running");
        drop(child.stdin.take());
        wait_with_timeout(&mut child)
    }

    /// Kill it with SIGKILL: no cleanup runs.
    fn kill(mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().expect("kill");
        child.wait().expect("wait");
        self.names.clear();
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // A failed test must not leave regions behind either.
        for n in &self.names {
            let _ = std::fs::remove_file(shm_path(n));
            let _ = std::fs::remove_file(format!("/dev/shm/.hal-meta.{n}"));
        }
    }
}

// --- help and usage --------------------------------------------------------

#[test]
fn help_documents_commands_and_exit_codes() {
    let out = halctl(&["--help"]);
    assert_eq!(out.code, 0, "{out:?}");
    for word in [
        "devices",
        "demo",
        "export",
        "import",
        "inspect",
        "shm",
        "Exit codes",
    ] {
        assert!(out.stdout.contains(word), "--help lacks {word}: {out:?}");
    }
    assert!(
        !out.stdout.contains("__demo-consumer"),
        "the consumer is hidden"
    );
    for cmd in ["demo", "export", "import", "inspect", "devices"] {
        let out = halctl(&[cmd, "--help"]);
        assert_eq!(out.code, 0, "{out:?}");
        assert!(out.stdout.contains("Exit codes"), "{cmd} --help: {out:?}");
    }
    let out = halctl(&["shm", "gc", "--help"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("--dry-run"), "{out:?}");
    let out = halctl(&["--version"]);
    assert_eq!(out.code, 0, "{out:?}");
}

#[test]
fn bad_usage_exits_2() {
    for args in [
        &["frobnicate"][..],
        &[],
        &["export", "--backend", "cpu-shm"],
        &["export", "--backend", "cpu-shm", "--size", "12Q"],
        &[
            "export",
            "--backend",
            "cpu-shm",
            "--size",
            "4K",
            "--fill",
            "0x100",
        ],
        &["import", "--expect", "300", "hal1.AAAA"],
        &["demo", "--round-trips", "0"],
        &["demo", "--size", "lots"],
        &["shm", "gc", "--now"],
        &["shm"],
        &["export", "--backend", "cpu-shm", "--sise", "4K"],
        &["import", "--handle-file", "/nonexistent/halctl-test/handle"],
        &["import", "hal1.AAAA", "--handle-file", "x"],
        &["inspect"],
    ] {
        // One line, in the house format, whatever clap had to say.
        let out = halctl(args);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert_short_error(&out);
    }
    let out = halctl(&["export", "--backend", "cpu-shm", "--sise", "4K"]);
    assert!(out.stderr.contains("--size"), "the tip survives: {out:?}");
    let out = halctl(&["export", "--size", "4K"]);
    assert!(out.stderr.contains("--backend"), "what is missing: {out:?}");
    let out = halctl(&["export", "--backend", "cpu-shm", "--size", "0"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert_short_error(&out);
}

// --- devices ---------------------------------------------------------------

#[test]
fn devices_lists_backends_devices_and_capabilities() {
    let out = halctl(&["devices", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    let backends = v["backends"].as_array().expect("backends");
    let cpu = backends
        .iter()
        .find(|b| b["name"] == "cpu-shm")
        .expect("cpu-shm listed");
    assert_eq!(cpu["available"], true);
    assert_eq!(cpu["id"], "0x0001");
    let dev = &cpu["devices"][0];
    assert_eq!(dev["ordinal"], 0);
    assert!(dev["total_memory"].as_u64().unwrap() > 0);
    assert_eq!(dev["page_sizes"][0], 4096);
    let caps: Vec<&str> = dev["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        caps.contains(&"ipc-memory") && caps.contains(&"memory-is-host"),
        "{caps:?}"
    );
    for name in ["mock-cuda", "mock-ascend"] {
        let b = backends.iter().find(|b| b["name"] == name).expect(name);
        assert_eq!(b["available"], true, "{b}");
        assert!(!b["devices"].as_array().unwrap().is_empty(), "{b}");
    }
    let not_in: Vec<&str> = v["not_compiled_in"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    // halctl is built with every backend of the project.
    assert!(not_in.is_empty(), "{not_in:?}");
    // CUDA is compiled in: without the driver it is unavailable and names
    // every path it searched.
    let cuda = backends.iter().find(|b| b["name"] == "cuda").expect("cuda");
    if cuda["available"] == false {
        let searched = cuda["searched"].as_array().unwrap();
        assert!(!searched.is_empty(), "{cuda}");
        assert!(
            cuda["reason"].as_str().unwrap().contains("libcuda"),
            "{cuda}"
        );
    }

    let out = halctl(&["devices"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains("cpu-shm (0x0001): available"),
        "{out:?}"
    );
    assert!(out.stdout.contains("capabilities"), "{out:?}");
}

#[test]
fn devices_lists_available_backends_first_and_each_path_once() {
    // CUDA made unavailable whatever the machine has; Ascend without CANN.
    let run = |json: bool| {
        let mut cmd = Command::new(BIN);
        cmd.arg("devices");
        if json {
            cmd.arg("--json");
        }
        let out = cmd
            .env("HAL_CUDA_LIBRARY", "/nonexistent/halctl-test/libcuda.so.1")
            .env_remove("HAL_ASCEND_LIBRARY")
            .env_remove("ASCEND_HOME_PATH")
            .env_remove("ASCEND_TOOLKIT_HOME")
            .stdin(Stdio::null())
            .output()
            .expect("run halctl devices");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let v: Value = serde_json::from_str(run(true).trim()).unwrap();
    let backends = v["backends"].as_array().unwrap();
    let available: Vec<bool> = backends
        .iter()
        .map(|b| b["available"].as_bool().unwrap())
        .collect();
    assert!(available.contains(&false), "cuda is unavailable: {v}");
    let first_unavailable = available.iter().position(|a| !a).unwrap();
    assert!(
        available[first_unavailable..].iter().all(|a| !a),
        "available backends come first: {available:?}"
    );
    // In the text, each searched path is printed once in its backend's part.
    let text = run(false);
    for b in backends.iter().filter(|b| b["available"] == false) {
        let name = b["name"].as_str().unwrap();
        let part: String = text
            .lines()
            .skip_while(|l| !l.starts_with(&format!("{name} (")))
            .enumerate()
            .take_while(|(i, l)| *i == 0 || l.starts_with(' '))
            .map(|(_, l)| format!("{l}\n"))
            .collect();
        assert!(!part.is_empty(), "{name} not in:\n{text}");
        let searched = b["searched"].as_array().unwrap();
        assert!(!searched.is_empty(), "{b}");
        // (A bare library name may also appear in the advice; paths may not.)
        for p in searched
            .iter()
            .filter_map(Value::as_str)
            .filter(|p| p.starts_with('/'))
        {
            let times = part
                .match_indices(p)
                .filter(|(at, _)| !part[..*at].ends_with(|c: char| c == '/' || c.is_alphanumeric()))
                .count();
            assert_eq!(times, 1, "{p} in:\n{part}");
        }
    }
}

#[test]
fn devices_filters_by_backend_and_refuses_unknown_names() {
    let out = halctl(&["devices", "--backend", "mock", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    let names: Vec<&str> = v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["name"].as_str())
        .collect();
    assert_eq!(names, ["mock-cuda"]);

    // A name hal never heard of is bad input.
    let out = halctl(&["devices", "--backend", "warp-drive"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert_short_error(&out);
    assert!(out.stderr.contains("unknown backend"), "{out:?}");
    // A real backend whose runtime this machine lacks is listed, with why.
    let out = halctl(&["devices", "--backend", "ascend", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    let ascend = &v["backends"][0];
    assert_eq!(ascend["name"], "ascend");
    if ascend["available"] == false {
        assert!(
            !ascend["searched"].as_array().unwrap().is_empty(),
            "{ascend}"
        );
    }
}

// --- demo --------------------------------------------------------------------

fn check_demo_json(v: &Value, backend: &str) {
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["backend"], backend);
    assert_eq!(v["verified"]["ok"], true, "{v}");
    assert_eq!(v["verified"]["mismatches"], 0);
    assert_eq!(v["verified"]["bytes"], v["size"]);
    assert_eq!(
        v["verified"]["crc32_exporter"],
        v["verified"]["crc32_consumer"]
    );
    assert!(v["consumer_pid"].as_u64().unwrap() > 0);
    assert_ne!(v["consumer_pid"], v["exporter_pid"]);
    for key in ["value_ns", "baseline_ns"] {
        assert!(v["import"][key].as_u64().unwrap() > 0, "{v}");
    }
    assert!(v["import"]["ratio"].as_f64().unwrap() > 0.0);
    let n = &v["notify_round_trip"];
    assert_eq!(n["ok"], true);
    for side in ["value", "baseline"] {
        assert_eq!(n[side]["n"], 64, "{v}");
        let p50 = n[side]["p50_ns"].as_u64().unwrap();
        let p99 = n[side]["p99_ns"].as_u64().unwrap();
        let max = n[side]["max_ns"].as_u64().unwrap();
        assert!(0 < p50 && p50 <= p99 && p99 <= max, "{v}");
    }
    let bw = &v["read_bandwidth"];
    assert!(bw["value_gbps"].as_f64().unwrap() > 0.0, "{v}");
    assert!(bw["baseline_gbps"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["handle"].as_str().unwrap().starts_with("hal1."));
}

#[test]
fn demo_on_cpu_shm_verifies_and_reports_baselines() {
    let out = halctl(&["demo", "--size", "1M", "--round-trips", "64", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    check_demo_json(&v, "cpu-shm");
    assert_eq!(v["size"], 1 << 20);
    // Each import path against the raw calls of that path.
    let path = v["import"]["path"].as_str().unwrap();
    let want = if v["import"]["direct"] == v["import"]["samples"] {
        "pidfd_getfd"
    } else {
        "SCM_RIGHTS"
    };
    assert!(
        v["import"]["baseline"].as_str().unwrap().contains(want),
        "{path}: {v}"
    );
    assert!(v["import_broker"]["baseline"]
        .as_str()
        .unwrap()
        .contains("SCM_RIGHTS"));
    assert!(v["import_broker"]["value_ns"].as_u64().unwrap() > 0, "{v}");
    assert!(v["notify_round_trip"].get("ratio_max").is_none(), "{v}");
    // Leases: the consumer held the buffer, then released it.
    assert_eq!(v["leases"]["while_mapped"], 1, "{v}");
    assert_eq!(v["leases"]["after_exit"], 0, "{v}");

    let out = halctl(&["demo", "--size", "100K", "--round-trips", "16"]);
    assert_eq!(out.code, 0, "{out:?}");
    for text in [
        "every byte matches",
        "import, broker path",
        "SCM_RIGHTS",
        "notify round trip",
        "read bandwidth",
        "ok:",
    ] {
        assert!(out.stdout.contains(text), "lacks {text:?}: {out:?}");
    }
    if child_may_take_parents_descriptors() {
        // The direct path, beside the raw pidfd_getfd of the same path.
        assert!(out.stdout.contains("import, direct path"), "{out:?}");
        assert!(out.stdout.contains("raw pidfd_getfd"), "{out:?}");
    }
    assert_fits_in_100_columns(&out.stdout);
    // The worst round trip has no ratio.
    let max = out
        .stdout
        .lines()
        .find(|l| l.contains("notify round trip max"))
        .unwrap_or_else(|| panic!("no max row: {out:?}"));
    assert!(max.trim_end().ends_with(" -"), "{max}");
}

fn assert_fits_in_100_columns(text: &str) {
    for l in text.lines() {
        assert!(
            l.chars().count() <= 100,
            "{} columns: {l:?}",
            l.chars().count()
        );
    }
}

#[test]
fn demo_with_the_direct_path_off_fits_in_100_columns() {
    let args = ["demo", "--size", "64K", "--round-trips", "4"];
    let out = halctl_env(&args, &[("HAL_PIDFD_GETFD", "0")]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_fits_in_100_columns(&out.stdout);
    let out = halctl(&[
        "demo",
        "--backend",
        "mock",
        "--size",
        "64K",
        "--round-trips",
        "4",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_fits_in_100_columns(&out.stdout);
}

/// Whether a process may take its parent's descriptors with `pidfd_getfd`
/// here, as the demo's consumer does from its exporter: Yama's
/// `ptrace_scope` 0 (or no Yama), or root below scope 3.
fn child_may_take_parents_descriptors() -> bool {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(0);
    let root = nix::unistd::geteuid().is_root();
    scope == 0 || (root && scope < 3)
}

#[test]
fn demo_says_which_path_its_imports_took() {
    let args = ["demo", "--size", "64K", "--round-trips", "4", "--json"];
    let out = halctl_env(&args, &[("HAL_PIDFD_GETFD", "0")]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    assert_eq!(v["import"]["direct"], 0, "the broker's path: {v}");
    let out = halctl_env(&args, &[]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    let samples = v["import"]["samples"].as_u64().unwrap();
    let want = if child_may_take_parents_descriptors() {
        samples
    } else {
        0
    };
    assert_eq!(v["import"]["direct"], want, "{v}");
    let out = halctl_env(&args[..5], &[("HAL_PIDFD_GETFD", "0")]);
    let words = out.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words
            .contains("hal's default imports took this path too: each asked the exporter's broker"),
        "{out:?}"
    );
    assert!(!out.stdout.contains("import, direct path"), "{out:?}");
}

#[test]
fn demo_on_mock_verifies_through_memory_read() {
    let out = halctl(&[
        "demo",
        "--backend",
        "mock",
        "--size",
        "1M",
        "--round-trips",
        "64",
        "--json",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    check_demo_json(&v, "mock-cuda");
}

#[test]
fn demo_on_mock_ascend_with_creator_only_notify_waits() {
    let out = halctl(&[
        "demo",
        "--backend",
        "mock-ascend",
        "--size",
        "256K",
        "--round-trips",
        "64",
        "--json",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    check_demo_json(&out.json(), "mock-ascend");
}

#[test]
fn demo_refuses_more_than_the_machine_has_with_1() {
    let out = halctl(&["demo", "--size", "256T"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_short_error(&out);
    assert!(out.stderr.contains("available"), "{out:?}");
}

#[test]
fn demo_refuses_unknown_backend_with_2() {
    let out = halctl(&["demo", "--backend", "nonesuch", "--size", "4K"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert_short_error(&out);
}

// --- export / import -----------------------------------------------------------

#[test]
fn export_in_one_process_import_in_another() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("handle");
    let file_s = file.to_str().unwrap();
    let exporter = Exporter::start(&[
        "--backend",
        "cpu-shm",
        "--size",
        "1M",
        "--fill",
        "0xab",
        "--handle-file",
        file_s,
    ]);
    let handle = exporter.first_line.clone();
    assert!(handle.starts_with("hal1."), "{handle}");
    assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), handle);

    let out = halctl(&["import", "--handle-file", file_s, "--expect", "0xab"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains("verified: every byte is 0xab"),
        "{out:?}"
    );

    let out = halctl(&["import", &handle, "--expect", "171", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    assert_eq!(v["verified"], true);
    assert_eq!(v["size"], 1 << 20);
    assert_eq!(v["mismatches"], 0);
    assert_eq!(v["source"], "handle");
    assert_eq!(v["backend"], "cpu-shm");

    // The wrong value: every byte differs, exit 1.
    let out = halctl(&["import", &handle, "--expect", "0xcd", "--json"]);
    assert_eq!(out.code, 1, "{out:?}");
    let v = out.json();
    assert_eq!(v["verified"], false);
    assert_eq!(v["mismatches"], 1 << 20);
    assert_eq!(v["first_mismatch"]["offset"], 0);
    assert_eq!(v["first_mismatch"]["found"], 0xab);
    assert!(out.stderr.starts_with("halctl: error: "), "{out:?}");

    // Without --expect: a report with the checksum.
    let out = halctl(&["import", &handle]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("crc32"), "{out:?}");

    assert_eq!(exporter.finish(), 0);
    assert!(!file.exists(), "the exporter removes its handle file");

    // The exporter is gone: importing its handle fails (exit 1).
    let out = halctl(&["import", &handle, "--expect", "0xab"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_short_error(&out);
}

#[test]
fn read_only_export_and_import() {
    let exporter = Exporter::start(&[
        "--backend",
        "cpu-shm",
        "--size",
        "64K",
        "--fill",
        "0x5a",
        "--read-only",
    ]);
    let handle = exporter.first_line.clone();
    // A read-only import works, says so, and finds every byte.
    let out = halctl(&[
        "import",
        &handle,
        "--read-only",
        "--expect",
        "0x5a",
        "--json",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    assert_eq!(v["read_only"], true);
    assert_eq!(v["verified"], true);
    let out = halctl(&["import", &handle, "--read-only"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains("read-only (a write was refused)"),
        "{out:?}"
    );
    // An import that asks for writes is refused (exit 1, one line).
    let out = halctl(&["import", &handle, "--expect", "0x5a"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_short_error(&out);
    assert!(out.stderr.contains("--read-only"), "{out:?}");
    assert_eq!(exporter.finish(), 0);

    // A writable export imported with --read-only: the mapping is writable,
    // which --read-only reports as a failure.
    let exporter = Exporter::start(&["--backend", "cpu-shm", "--size", "8K"]);
    let out = halctl(&["import", &exporter.first_line, "--read-only"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_short_error(&out);
    assert_eq!(exporter.finish(), 0);

    // The simulators have no read-only export.
    let out = halctl(&[
        "export",
        "--backend",
        "mock",
        "--size",
        "8K",
        "--read-only",
        "--hold",
        "1",
    ]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_short_error(&out);

    let out = halctl(&["export", "--help"]);
    assert!(out.stdout.contains("--read-only"), "{out:?}");
    let out = halctl(&["import", "--help"]);
    assert!(out.stdout.contains("--read-only"), "{out:?}");
}

#[test]
fn export_json_and_hold_time() {
    let out = halctl(&[
        "export",
        "--backend",
        "cpu-shm",
        "--size",
        "8K",
        "--hold",
        "1",
        "--json",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    assert!(v["handle"].as_str().unwrap().starts_with("hal1."));
    assert_eq!(v["size"], 8192);
    assert_eq!(v["kind"], "memory");
    assert_eq!(v["backend"], "cpu-shm");
    assert_eq!(v["hold_seconds"], 1);
}

#[test]
fn export_on_mock_import_in_another_process() {
    let exporter = Exporter::start(&["--backend", "mock", "--size", "64K", "--fill", "9"]);
    let handle = exporter.first_line.clone();
    let out = halctl(&["import", &handle, "--expect", "9", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    assert_eq!(v["backend"], "mock-cuda");
    assert_eq!(v["verified"], true);
    assert_eq!(exporter.finish(), 0);
}

#[test]
fn named_region_export_import_list_and_cleanup() {
    let name = unique("named");
    let exporter = Exporter::start(&[
        "--backend",
        "cpu-shm",
        "--name",
        &name,
        "--size",
        "64K",
        "--fill",
        "7",
        "--json",
    ]);
    let v: Value = serde_json::from_str(&exporter.first_line).expect("export JSON");
    assert_eq!(v["name"], name.as_str());
    let handle = v["handle"].as_str().unwrap().to_string();
    assert!(Path::new(&shm_path(&name)).exists());

    // By name, and by handle.
    let out = halctl(&[
        "import",
        "--backend",
        "cpu-shm",
        "--name",
        &name,
        "--expect",
        "7",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let out = halctl(&["import", "--name", &name, "--expect", "7", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["source"], "name");
    let out = halctl(&["import", &handle, "--expect", "7"]);
    assert_eq!(out.code, 0, "{out:?}");
    let out = halctl(&["inspect", &handle, "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    assert_eq!(v["payload"]["name"], name.as_str());
    assert!(
        v["flags"].as_array().unwrap().iter().any(|f| f == "named"),
        "{v}"
    );

    // Listed with its live owner.
    let out = halctl(&["shm", "ls", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    let r = v["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name.as_str())
        .unwrap_or_else(|| panic!("{name} not listed: {v}"));
    assert_eq!(r["owner_pid"], exporter.pid());
    assert_eq!(r["alive"], true);
    assert_eq!(r["present"], true);
    assert_eq!(r["size"], 65536);
    let out = halctl(&["shm", "ls"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains(&name), "{out:?}");

    // A live owner's region is never collected; asked for by name, that
    // is a failure that says why.
    let out = halctl(&["shm", "gc", &name, "--json"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_short_error(&out);
    assert!(out.stderr.contains("is alive"), "{out:?}");
    assert_eq!(out.json()["removed"].as_array().unwrap().len(), 0);
    assert!(Path::new(&shm_path(&name)).exists());

    assert_eq!(exporter.finish(), 0);
    assert!(!shm_exists(&name), "the exporter unlinks its named region");
    let out = halctl(&["import", "--name", &name]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_short_error(&out);
}

#[test]
fn export_importers_allows_the_pids_given_and_refuses_others() {
    // The importer's pid is known before it starts: a shell that execs
    // halctl import once it reads the handle keeps its pid.
    let mut importer = Command::new("sh")
        .args(["-c", "read h; exec \"$0\" import --expect 3 \"$h\"", BIN])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sh");
    let allowed = importer.id().to_string();
    let exporter = Exporter::start(&[
        "--backend",
        "mock-ascend",
        "--size",
        "64K",
        "--fill",
        "3",
        "--importers",
        &allowed,
    ]);
    {
        use std::io::Write;
        let mut stdin = importer.stdin.take().expect("stdin");
        writeln!(stdin, "{}", exporter.first_line).expect("send the handle");
    }
    let out = reader(importer.stdout.take().expect("stdout"));
    let err = reader(importer.stderr.take().expect("stderr"));
    let code = wait_with_timeout(&mut importer);
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("verified: every byte is 0x03"), "{out}");
    // This process is not on the list: refused, in one line naming the option.
    let refused = halctl(&["import", &exporter.first_line]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert_short_error(&refused);
    assert!(refused.stderr.contains("--importers"), "{refused:?}");
    assert!(!refused.stderr.contains("allow_importers"), "{refused:?}");
    assert_eq!(exporter.finish(), 0);
    // What each export allows, in its JSON: Ascend-like backends allow
    // nobody by default, and say so.
    for (backend, extra, want) in [
        ("mock-ascend", None, "nobody (the backend's default)"),
        ("cpu-shm", None, "anyone (the backend's default)"),
        ("mock-ascend", Some("anyone"), "anyone"),
        ("mock-ascend", Some("7,8"), "7,8"),
    ] {
        let mut args = vec!["--backend", backend, "--size", "4K", "--json"];
        if let Some(e) = extra {
            args.extend(["--importers", e]);
        }
        let exporter = Exporter::start(&args);
        let v: Value = serde_json::from_str(&exporter.first_line).unwrap();
        assert_eq!(v["importers"], want, "{backend} {extra:?}: {v}");
        assert_eq!(exporter.finish(), 0);
    }
    // A list that is not pids is bad usage.
    for bad in ["nobody", "12,x", "0", ""] {
        let out = halctl(&[
            "export",
            "--backend",
            "cpu-shm",
            "--size",
            "4K",
            "--importers",
            bad,
        ]);
        assert_eq!(out.code, 2, "{bad}: {out:?}");
        assert_short_error(&out);
    }
}

#[test]
fn import_backend_must_match_the_handle() {
    let exporter = Exporter::start(&["--backend", "cpu-shm", "--size", "4K", "--fill", "1"]);
    let handle = exporter.first_line.clone();
    let out = halctl(&["import", &handle, "--backend", "mock-cuda"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert_short_error(&out);
    assert!(out.stderr.contains("`cpu-shm`"), "{out:?}");
    let out = halctl(&["import", &handle, "--backend", "cpu-shm", "--expect", "1"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(exporter.finish(), 0);
    // inspect has no --name: its usage error does not suggest one.
    let out = halctl(&["inspect"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert_short_error(&out);
    assert!(!out.stderr.contains("--name"), "{out:?}");
}

#[test]
fn export_cleans_up_on_sigterm() {
    let name = unique("sigterm");
    let exporter = Exporter::start(&["--backend", "cpu-shm", "--name", &name, "--size", "4K"]);
    assert!(Path::new(&shm_path(&name)).exists());
    let pid = nix::unistd::Pid::from_raw(exporter.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let mut exporter = exporter;
    let mut child = exporter.child.take().expect("child");
    assert_eq!(wait_with_timeout(&mut child), 0);
    assert!(!shm_exists(&name), "SIGTERM still cleans up");
}

#[test]
fn import_opens_a_region_another_program_created() {
    // What shm_open(3) (C) or multiprocessing.shared_memory (Python) creates:
    // a plain object in /dev/shm, without hal's metadata.
    let name = unique("foreign");
    let path = shm_path(&name);
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .expect("create in /dev/shm");
        std::io::Write::write_all(&mut f, &[0x42; 12288]).expect("write");
    }
    let out = halctl(&[
        "import",
        "--backend",
        "cpu-shm",
        "--name",
        &name,
        "--expect",
        "0x42",
        "--json",
    ]);
    let bad = halctl(&["import", "--name", &name, "--expect", "0x41"]);
    // Not listed: hal did not create it.
    let ls = halctl(&["shm", "ls", "--json"]);
    std::fs::remove_file(&path).expect("remove");
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["size"], 12288);
    assert_eq!(bad.code, 1, "{bad:?}");
    assert_eq!(ls.code, 0, "{ls:?}");
    assert!(!ls.stdout.contains(&name), "{ls:?}");
}

#[test]
fn import_error_paths() {
    // Missing region: the operation failed.
    let out = halctl(&["import", "--name", &unique("missing")]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_short_error(&out);
    // An invalid name is bad input.
    let out = halctl(&["import", "--name", "a/b"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert_short_error(&out);
    // Named regions exist on cpu-shm only.
    let out = halctl(&["import", "--backend", "mock", "--name", "x"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert_short_error(&out);
    let out = halctl(&["import", "--backend", "nonesuch", "--name", "x"]);
    assert_eq!(out.code, 2, "{out:?}");
    // No source at all.
    let out = halctl(&["import"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert_short_error(&out);
    // A malformed handle, on the command line and in a file.
    let out = halctl(&["import", "hal1.not-a-handle", "--expect", "1"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert_short_error(&out);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad");
    std::fs::write(&file, "hal1.AAAAAAAA\n").unwrap();
    let out = halctl(&["import", "--handle-file", file.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{out:?}");
    assert_short_error(&out);
    // A handle file that does not exist: bad input, as the README's rule says.
    let out = halctl(&[
        "import",
        "--handle-file",
        dir.path().join("nope").to_str().unwrap(),
    ]);
    assert_eq!(out.code, 2, "{out:?}");
    assert_short_error(&out);
}

// --- inspect -------------------------------------------------------------------

#[test]
fn inspect_prints_every_field() {
    let exporter = Exporter::start(&["--backend", "cpu-shm", "--size", "16K"]);
    let handle = exporter.first_line.clone();
    let out = halctl(&["inspect", &handle, "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    assert_eq!(v["version"], 2);
    assert_eq!(v["kind"], "memory");
    assert_eq!(v["backend"], "cpu-shm");
    assert_eq!(v["backend_id"], "0x0001");
    assert_eq!(v["location"], "host");
    assert_eq!(v["size"], 16384);
    assert_eq!(v["creator_pid"], exporter.pid());
    assert_eq!(v["creator_alive"], true);
    assert_eq!(v["pid_kind"], "os");
    assert_eq!(
        v["same_pid_namespace"], true,
        "the exporter is in this pid namespace"
    );
    assert_eq!(v["fds"]["source"], "broker");
    assert_eq!(v["fds"]["count"], 1);
    assert_eq!(v["object_id"].as_str().unwrap().len(), 32);
    assert_eq!(v["text_len"], handle.len());
    for key in [
        "device",
        "device_uuid",
        "offset",
        "address",
        "creator_start",
        "creator_pid_ns",
        "pid_kind",
        "flags",
        "flags_bits",
        "allowed_pids",
        "importers",
        "payload",
        "encoded_len",
        "checksum",
    ] {
        assert!(!v[key].is_null(), "{key} missing: {v}");
    }
    let out = halctl(&["inspect", &handle]);
    assert_eq!(out.code, 0, "{out:?}");
    for label in [
        "kind",
        "backend",
        "size",
        "creator",
        "pid namespace",
        "pid kind",
        "object id",
        "flags",
        "descriptors",
        "checksum",
    ] {
        assert!(out.stdout.contains(label), "lacks {label}: {out:?}");
    }
    assert_eq!(exporter.finish(), 0);
    // A handle whose exporter is gone still decodes.
    let out = halctl(&["inspect", &handle, "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["creator_alive"], false);
}

#[test]
fn inspect_malformed_handles_exit_2_without_panic() {
    let exporter = Exporter::start(&["--backend", "cpu-shm", "--size", "4K"]);
    let good = exporter.first_line.clone();
    assert_eq!(exporter.finish(), 0);
    let mut flipped: Vec<char> = good.chars().collect();
    let mid = flipped.len() / 2;
    flipped[mid] = if flipped[mid] == 'A' { 'B' } else { 'A' };
    let flipped: String = flipped.into_iter().collect();
    let truncated = &good[..good.len() - 7];
    let long = format!("hal1.{}", "A".repeat(5000));
    let bad = [
        "",
        "hal1.",
        "hal1.AAAA",
        "hal1.!!!!",
        "garbage",
        "hal2.iUhBTAEB",
        truncated,
        flipped.as_str(),
        long.as_str(),
        "hal1.\u{00e9}\u{00e9}",
    ];
    for text in bad {
        let out = halctl(&["inspect", text]);
        assert_eq!(out.code, 2, "{text:?}: {out:?}");
        assert_short_error(&out);
        assert!(out.stderr.contains("malformed handle"), "{out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
    }
    let out = halctl(&["inspect"]);
    assert_eq!(out.code, 2, "{out:?}");
}

// --- shm gc ----------------------------------------------------------------------

#[test]
fn shm_gc_removes_only_dead_owners_regions() {
    let live = unique("gc-live");
    let dead = unique("gc-dead");
    let keeper = Exporter::start(&["--backend", "cpu-shm", "--name", &live, "--size", "4K"]);
    let victim = Exporter::start(&["--backend", "cpu-shm", "--name", &dead, "--size", "8K"]);
    let victim_pid = victim.pid();
    victim.kill();
    // SIGKILL ran no cleanup: the region is still there, its owner dead.
    assert!(Path::new(&shm_path(&dead)).exists());
    let guard = Leftover(dead.clone());

    let out = halctl(&["shm", "ls", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    let find = |n: &str| {
        v["regions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == n)
            .cloned()
    };
    let d = find(&dead).expect("dead owner's region listed");
    assert_eq!(d["alive"], false);
    assert_eq!(d["owner_pid"], victim_pid);
    assert_eq!(find(&live).expect("live region listed")["alive"], true);

    // The live one is named too: nothing can be removed for it, which is a
    // failure (exit 1) that names it, after the dead one's entry.
    let out = halctl(&["shm", "gc", "--dry-run", "--json", &dead, &live]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_short_error(&out);
    assert!(
        out.stderr.contains(&format!("{live}: its creator")),
        "{out:?}"
    );
    let v = out.json();
    assert_eq!(v["dry_run"], true);
    let names: Vec<&str> = v["removed"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, [dead.as_str()]);
    assert!(
        Path::new(&shm_path(&dead)).exists(),
        "a dry run removes nothing"
    );

    // An unfiltered dry run sees it too (and changes nothing).
    let out = halctl(&["shm", "gc", "--dry-run"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains(&dead), "{out:?}");

    let out = halctl(&["shm", "gc", &dead, &live]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stdout
            .contains(&format!("removed region /dev/shm/{dead} and its metadata")),
        "{out:?}"
    );
    assert!(!shm_exists(&dead), "the dead owner's region is gone");
    assert!(Path::new(&shm_path(&live)).exists(), "the live one stays");
    drop(guard);

    assert_eq!(keeper.finish(), 0);
    assert!(!shm_exists(&live));
    let out = halctl(&["shm", "gc", "a/b"]);
    assert_eq!(out.code, 2, "{out:?}");
}

/// Removes a region a test left behind when it fails half-way.
struct Leftover(String);

impl Drop for Leftover {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(shm_path(&self.0));
        let _ = std::fs::remove_file(format!("/dev/shm/.hal-meta.{}", self.0));
    }
}
