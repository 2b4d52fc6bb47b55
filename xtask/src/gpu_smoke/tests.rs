//! Unit tests of the GPU smoke run: the script it writes and the reports it reads.

use super::*;

#[test]
fn the_run_script_parses() {
    let out = Command::new("bash")
        .args(["-n", "-c", RUN_SH])
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A smoke folder of fake steps, in a fresh directory removed on drop.
struct FakeFolder(PathBuf);

impl FakeFolder {
    /// `steps`: (sub-folder and name, shell body) of each executable.
    fn new(tag: &str, steps: &[(&str, &str)]) -> FakeFolder {
        let dir = std::env::temp_dir().join(format!(
            "hal-xtask-smoke-{tag}-{}-{:x}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("a clock after 1970")
                .as_nanos()
        ));
        for sub in ["bin", "tests", "examples", "python"] {
            std::fs::create_dir_all(dir.join(sub)).expect("a fresh folder");
        }
        let mut all = vec![("run.sh", RUN_SH.to_owned())];
        all.extend(
            steps
                .iter()
                .map(|(path, body)| (*path, format!("#!/usr/bin/env bash\n{body}\n"))),
        );
        for (path, body) in all {
            let file = dir.join(path);
            std::fs::write(&file, body).expect("a step written");
            Command::new("chmod")
                .arg("+x")
                .arg(&file)
                .status()
                .expect("chmod runs");
        }
        FakeFolder(dir)
    }

    fn out(&self) -> PathBuf {
        self.0.join("out")
    }

    fn report(&self) -> Vec<String> {
        std::fs::read_to_string(self.out().join("report.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The step names of the report, in order, each with its rc.
    fn steps(&self) -> Vec<(String, i64)> {
        self.report()
            .iter()
            .map(|l| {
                let name = l["{\"step\":\"".len()..].split('"').next().unwrap_or("");
                let rc = l.split("\"rc\":").nth(1).and_then(|r| r.split(',').next());
                (
                    name.to_owned(),
                    rc.and_then(|r| r.parse().ok()).unwrap_or(-1),
                )
            })
            .collect()
    }

    /// What OUT holds, sorted.
    fn out_files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.out())
            .expect("OUT exists")
            .map(|e| {
                e.expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        names
    }

    /// The names of the logs packed in OUT/logs.tar.gz.
    fn packed_logs(&self) -> Vec<String> {
        let list = Command::new("tar")
            .arg("-tzf")
            .arg(self.out().join("logs.tar.gz"))
            .output()
            .expect("tar runs");
        assert!(list.status.success(), "logs.tar.gz is a tar archive");
        String::from_utf8_lossy(&list.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix("./"))
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for FakeFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const HALCTL: (&str, &str) = (
    "bin/halctl",
    r#"case "$*" in *bench*) echo "scenario x p50 1.0 baseline 1.0 ratio 1.00";; *) echo ok;; esac"#,
);
const PASSING: &str = "echo 'test result: ok. 3 passed; 0 failed; 0 ignored'";
/// A conformance binary that names its driver when asked.
const SUITE: &str = r#"case "$*" in *the_driver_in_use_is_named*) echo "driver-loaded: /fake/libcuda.so.580 version 13.0 (13000)";; esac
echo 'test result: ok. 3 passed; 0 failed; 0 ignored'"#;

#[test]
fn the_run_puts_the_driver_probe_and_the_conformance_suites_first_and_hands_back_four_files() {
    let f = FakeFolder::new(
        "order",
        &[
            HALCTL,
            ("tests/crash-1", PASSING),
            ("tests/uvm_conformance-2", PASSING),
            ("tests/conformance-3", SUITE),
            (
                "tests/driver_waits-4",
                "echo 'driver-waits: cuMemFree_v2: waits for the stream: true'; echo 'test result: ok. 1 passed; 0 failed'",
            ),
            ("examples/01_share_buffer", "echo shared"),
            ("examples/uvm_bench", "echo 'uvm-read p50 2.0 baseline 2.0'"),
        ],
    );
    let ran = Command::new(f.0.join("run.sh"))
        .arg(f.out())
        .env_remove("HAL_SMOKE_DEADLINE")
        .env_remove("HAL_SMOKE_STEP_TIMEOUT")
        .output()
        .expect("the script runs");
    assert!(ran.status.success(), "{ran:?}");
    let names: Vec<String> = f
        .steps()
        .into_iter()
        .map(|(n, rc)| {
            assert_eq!(rc, 0, "{n}");
            n
        })
        .collect();
    assert_eq!(
        names,
        [
            "devices",
            "driver",
            "test-driver_waits-4",
            "test-conformance-3",
            "test-uvm_conformance-2",
            "test-crash-1",
            "example-01_share_buffer",
            "example-uvm_bench",
            "demo-cpu-shm",
            "demo-cuda",
            "demo-cuda-uvm",
            "bench-cuda",
            "bench-cpu-shm",
        ]
    );
    assert_eq!(
        f.out_files(),
        ["bench.txt", "logs.tar.gz", "report.jsonl", "summary.txt"]
    );
    let mut packed = f.packed_logs();
    packed.sort();
    assert_eq!(packed.len(), names.len(), "a log per step: {packed:?}");
    assert!(packed.contains(&"test-conformance-3.log".to_owned()));
    let bench = std::fs::read_to_string(f.out().join("bench.txt")).expect("bench.txt");
    assert!(bench.contains("== bench-cuda.log") && bench.contains("scenario x p50"));
    assert!(bench.contains("== example-uvm_bench.log") && bench.contains("uvm-read p50"));
    assert!(bench.contains("driver-waits: cuMemFree_v2: waits for the stream: true"));
    let summary = std::fs::read_to_string(f.out().join("summary.txt")).expect("summary");
    assert!(summary.contains("steps: 13, failed: 0"), "{summary}");
    assert!(
        summary.contains("driver: /fake/libcuda.so.580 version 13.0 (13000)"),
        "{summary}"
    );
    assert!(failed_steps(&f.report().join("\n")).is_empty());
}

#[test]
fn the_python_wheel_is_installed_offline_and_its_scripts_say_what_did_not_run() {
    let f = FakeFolder::new(
        "python",
        &[
            HALCTL,
            ("tests/conformance-1", SUITE),
            (
                "python/hal_ipc-0.1.0-cp311-abi3-manylinux_2_34_x86_64.whl",
                "not a wheel",
            ),
            ("python/torch_share.py", "NOT RUN: PyTorch is not installed"),
            (
                "python/bench.py",
                "python-open-first p50 1.0 us torch p50 2.0 us ratio 0.500",
            ),
            (
                "bin/python",
                r#"if [ "$1" = -m ]; then echo "pip $*" > "$(dirname "$0")/../pip-args"; exit 0; fi
sed -n 's/^NOT RUN/&/p; s/^python-open/&/p' "$1""#,
            ),
        ],
    );
    let ran = Command::new(f.0.join("run.sh"))
        .arg(f.out())
        .env_remove("HAL_SMOKE_DEADLINE")
        .env_remove("HAL_SMOKE_STEP_TIMEOUT")
        .env("HAL_SMOKE_PYTHON", f.0.join("bin/python"))
        .output()
        .expect("the script runs");
    assert!(ran.status.success(), "{ran:?}");
    let pip = std::fs::read_to_string(f.0.join("pip-args")).expect("pip was run");
    assert!(
        pip.contains("-m pip install --no-deps --no-index --target"),
        "{pip}"
    );
    assert!(
        pip.contains("hal_ipc-0.1.0-cp311-abi3-manylinux_2_34_x86_64.whl"),
        "{pip}"
    );
    let report = f.report();
    let line = |step: &str| -> String {
        report
            .iter()
            .find(|l| l.contains(&format!("\"step\":\"{step}\"")))
            .cloned()
            .unwrap_or_else(|| panic!("no step {step}: {report:?}"))
    };
    assert!(line("python-install").contains("\"rc\":0"));
    assert!(line("python-torch_share").contains("\"not_run\":1"));
    assert!(line("bench-python").contains("\"not_run\":0"));
    assert_eq!(
        not_run_steps(&report.join("\n")),
        vec![line("python-torch_share")]
    );
    let summary = std::fs::read_to_string(f.out().join("summary.txt")).expect("summary");
    assert!(
        summary.contains("NOT RUN: 1 check(s) of step python-torch_share"),
        "{summary}"
    );
    let bench = std::fs::read_to_string(f.out().join("bench.txt")).expect("bench.txt");
    assert!(bench.contains("== bench-python.log") && bench.contains("ratio 0.500"));
}

#[test]
fn a_run_that_loaded_no_driver_fails_and_its_summary_says_so() {
    for (tag, steps) in [
        (
            "nodriver",
            &[
                HALCTL,
                (
                    "tests/conformance-1",
                    "echo 'backend `cuda` is unavailable here'; echo 'test result: FAILED. 0 passed; 1 failed'; exit 101",
                ),
            ][..],
        ),
        ("nosuite", &[HALCTL, ("tests/crash-1", PASSING)][..]),
    ] {
        let f = FakeFolder::new(tag, steps);
        let ran = Command::new(f.0.join("run.sh"))
            .arg(f.out())
            .env_remove("HAL_SMOKE_DEADLINE")
            .env_remove("HAL_SMOKE_STEP_TIMEOUT")
            .output()
            .expect("the script runs");
        assert_eq!(ran.status.code(), Some(1), "{tag}: {ran:?}");
        let summary = std::fs::read_to_string(f.out().join("summary.txt")).expect("summary");
        assert!(summary.contains("driver: NONE LOADED"), "{tag}: {summary}");
        assert!(!summary.contains("driver-loaded"), "{tag}: {summary}");
    }
}

#[test]
fn past_the_deadline_a_step_is_cut_and_the_rest_are_reported_not_started() {
    let f = FakeFolder::new(
        "deadline",
        &[
            HALCTL,
            ("tests/conformance-1", "exec sleep 30"),
            ("tests/crash-2", PASSING),
        ],
    );
    let began = std::time::Instant::now();
    let ran = Command::new(f.0.join("run.sh"))
        .arg(f.out())
        .env("HAL_SMOKE_DEADLINE", "2")
        .env("HAL_SMOKE_STEP_TIMEOUT", "240")
        .output()
        .expect("the script runs");
    assert_eq!(ran.status.code(), Some(1), "no driver was loaded: {ran:?}");
    assert!(
        began.elapsed() < std::time::Duration::from_secs(25),
        "the sleeping step was cut at the deadline"
    );
    let steps = f.steps();
    assert_eq!(steps[0], ("devices".to_owned(), 0));
    assert_eq!(steps[1], ("driver".to_owned(), 124), "cut");
    assert_eq!(steps.len(), 9, "{steps:?}");
    for (name, rc) in &steps[2..] {
        assert_eq!(*rc, 125, "{name} is reported as not started");
    }
    let summary = std::fs::read_to_string(f.out().join("summary.txt")).expect("summary");
    assert!(summary.contains("steps: 9, failed: 8"), "{summary}");
    assert!(summary.contains("driver: NONE LOADED"), "{summary}");
    assert_eq!(failed_steps(&f.report().join("\n")).len(), 8);
}

#[test]
fn a_run_stopped_from_outside_still_writes_its_summary_and_logs() {
    let f = FakeFolder::new(
        "term",
        &[
            HALCTL,
            ("tests/conformance-1", "echo started; exec sleep 60"),
        ],
    );
    let mut child = Command::new(f.0.join("run.sh"))
        .arg(f.out())
        .env_remove("HAL_SMOKE_DEADLINE")
        .stdout(Stdio::null())
        .spawn()
        .expect("the script starts");
    // Until the sleeping step has begun.
    let log_began = std::time::Instant::now();
    while !f.report().iter().any(|l| l.contains("\"devices\"")) {
        assert!(log_began.elapsed() < std::time::Duration::from_secs(20));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(send_signal(child.id(), "TERM"), "kill -TERM runs");
    let status = child.wait().expect("the script ends");
    assert_eq!(status.code(), Some(143));
    let steps = f.steps();
    assert_eq!(
        steps.last().map(|s| s.0.as_str()),
        Some("interrupted"),
        "{steps:?}"
    );
    assert!(f.out().join("summary.txt").is_file());
    assert!(f.packed_logs().contains(&"driver.log".to_owned()));
}

#[test]
fn a_step_near_its_limit_has_its_stacks_taken() {
    let f = FakeFolder::new(
        "stacks",
        &[
            HALCTL,
            ("tests/conformance-1", "exec sleep 30"),
            (
                "bin/fake-gdb",
                r#"echo "stacks of $2"; kill -0 "$2" && echo "alive""#,
            ),
        ],
    );
    let ran = Command::new(f.0.join("run.sh"))
        .arg(f.out())
        .env("HAL_SMOKE_STEP_TIMEOUT", "3")
        .env_remove("HAL_SMOKE_DEADLINE")
        .env("HAL_SMOKE_GDB", f.0.join("bin/fake-gdb"))
        .output()
        .expect("the script runs");
    assert_eq!(ran.status.code(), Some(1), "no driver was loaded: {ran:?}");
    let steps = f.steps();
    assert_eq!(steps[1], ("driver".to_owned(), 124));
    assert_eq!(steps[2], ("test-conformance-1".to_owned(), 124));
    let packed = f.packed_logs();
    assert!(
        packed.contains(&"test-conformance-1.stacks".to_owned()),
        "{packed:?}"
    );
    assert!(
        !packed.iter().any(|p| p.starts_with("devices.stacks")),
        "a step that ended in time has none: {packed:?}"
    );
    let list = Command::new("tar")
        .arg("-xzOf")
        .arg(f.out().join("logs.tar.gz"))
        .arg("./test-conformance-1.stacks")
        .output()
        .expect("tar runs");
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.contains("=== pid ") && text.contains("sleep 30") && text.contains("alive"),
        "{text}"
    );
}

/// `kill -SIG pid`, by the system's kill.
fn send_signal(pid: u32, signal: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn a_rehearsal_fails_on_an_exit_code_a_failed_test_or_a_test_step_without_tests() {
    let ok = r#"{"step":"devices","rc":0,"seconds":0.01,"passed":0,"failed":0}
{"step":"test-conformance-1","rc":0,"seconds":0.35,"passed":59,"failed":0}"#;
    assert!(failed_steps(ok).is_empty());
    assert_eq!(failed_steps("").len(), 1, "an empty report");
    for bad in [
        r#"{"step":"demo-cuda","rc":124,"seconds":240.00,"passed":0,"failed":0}"#,
        r#"{"step":"test-raw-2","rc":0,"seconds":0.02,"passed":4,"failed":1}"#,
        r#"{"step":"test-raw-2","rc":0,"seconds":0.02,"passed":0,"failed":0}"#,
    ] {
        assert_eq!(failed_steps(&format!("{ok}\n{bad}")), vec![bad.to_owned()]);
    }
}

#[test]
fn executables_are_read_from_cargos_messages() {
    let msgs = concat!(
        r#"{"reason":"compiler-artifact","executable":"/t/release/deps/conformance-1"}"#,
        "\n",
        r#"{"reason":"compiler-artifact","executable":null}"#,
        "\n",
        r#"{"reason":"build-script-executed"}"#,
        "\n",
        r#"{"reason":"compiler-artifact","executable":"/t/release/build/x/build-script-build"}"#,
        "\n",
        r#"{"reason":"compiler-artifact","executable":"/t/release/halctl"}"#,
    );
    assert_eq!(
        executables(msgs),
        vec![
            PathBuf::from("/t/release/deps/conformance-1"),
            PathBuf::from("/t/release/halctl")
        ]
    );
}
