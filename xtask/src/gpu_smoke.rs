//! `cargo xtask gpu-smoke`: build, here, what a machine with an NVIDIA GPU
//! and no Rust toolchain runs against its real driver, and the script that
//! runs it.
//!
//! The folder `target/gpu-smoke/` gets, in release mode and stripped: the
//! test executables of `hal-cuda` and `hal-cuda-uvm` (their conformance
//! suites among them, switched to the real driver by
//! `HAL_CUDA_CONFORMANCE_DRIVER=1`), the numbered examples of `hal` (with
//! `cuda-uvm`), `hal-cuda-uvm`'s benchmark (`uvm_bench`), `halctl`, and
//! `run.sh`. The script runs each
//! and writes `report.jsonl` (one line per step: name, exit code, seconds,
//! tests passed and failed) and `summary.txt` into the folder named by its
//! first argument (default: `./out`).
//!
//! `--rehearse` then runs the script here, with the stand-in `libcuda.so.1`
//! the release build made as the driver (`HAL_CUDA_LIBRARY`), into
//! `target/gpu-smoke-rehearsal/`, and fails unless every step passed and
//! every test step ran tests: the script and the folder are proven before
//! a GPU's short lease is spent on them.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

/// The most the folder may hold, in bytes: what a run on a lent machine
/// can carry.
const BUDGET: u64 = 60 << 20;

/// The test executables of hal-cuda that run on the machine's driver (the
/// conformance suites, the crash checks, the raw-handle tests and the
/// teardowns of a dropped reservation and of dropped memory switch to it;
/// the others test a missing driver and the crate's units). The rest need
/// the stand-in's devices and switches.
const RUN_ON_THE_DRIVER: &[&str] = &[
    "conformance-",
    "no_driver-",
    "hal_cuda-",
    "crash-",
    "raw-",
    "teardown-",
    "uvm_conformance-",
];

/// The run script.
const RUN_SH: &str = r#"#!/usr/bin/env bash
# Run on a machine with an NVIDIA GPU: every step against the real driver.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/out}"
mkdir -p "$out"
report="$out/report.jsonl"
: > "$report"
export HAL_CUDA_CONFORMANCE_DRIVER=1
export RUST_BACKTRACE=1
# A step that hangs on a driver ends after this many seconds (rc 124) and the
# run goes on: the lent machine's time is short.
step_timeout="${HAL_SMOKE_STEP_TIMEOUT:-240}"
step() {
    local name="$1"; shift
    local start end rc passed failed
    start=$(date +%s.%N)
    timeout --kill-after=10 "$step_timeout" "$@" > "$out/$name.log" 2>&1
    rc=$?
    end=$(date +%s.%N)
    passed=$(grep -o '[0-9]* passed' "$out/$name.log" | awk '{s+=$1} END {print s+0}')
    failed=$(grep -o '[0-9]* failed' "$out/$name.log" | awk '{s+=$1} END {print s+0}')
    printf '{"step":"%s","rc":%d,"seconds":%.2f,"passed":%d,"failed":%d}\n' \
        "$name" "$rc" "$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')" "$passed" "$failed" >> "$report"
}
step devices "$here/bin/halctl" devices --json
for t in "$here"/tests/*; do
    step "test-$(basename "$t")" "$t" --test-threads=4
done
for e in "$here"/examples/*; do
    step "example-$(basename "$e")" "$e"
done
step demo-cpu-shm "$here/bin/halctl" demo --json
step demo-cuda "$here/bin/halctl" demo --backend cuda --json
step demo-cuda-uvm "$here/bin/halctl" demo --backend cuda-uvm --json
# The CUDA scenarios and the host notify ones, each against its baseline of
# the same run; the lines stay in bench-cuda.log for the figures.
step bench-cuda "$here/bin/halctl" bench --backend cuda --quick --json
# The host scenarios on this machine's cores: the importer-scaling figure
# (32 importer processes against one) where there are 16 of them.
step bench-cpu-shm "$here/bin/halctl" bench --json --only export,import,scaling
{
    echo "gpu-smoke: $(date -u +%FT%TZ) on $(hostname)"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
    echo "driver: ${HAL_CUDA_LIBRARY:-libcuda.so.1, the system library}"
    awk -F'"rc":' '{split($2, a, ","); if (a[1] != 0) bad++} END {printf "steps: %d, failed: %d\n", NR, bad+0}' "$report"
    cat "$report"
} > "$out/summary.txt" || exit 1
cat "$out/summary.txt"
"#;

pub(crate) fn gpu_smoke(root: &Path, cargo: &str, rehearse: bool) -> ExitCode {
    let dir = root.join("target").join("gpu-smoke");
    let _ = std::fs::remove_dir_all(&dir);
    for sub in ["bin", "tests", "examples"] {
        if let Err(e) = std::fs::create_dir_all(dir.join(sub)) {
            eprintln!("xtask gpu-smoke: {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    }
    let mut copied: Vec<(PathBuf, PathBuf)> = Vec::new();
    let steps: [(&[&str], &str); 4] = [
        (
            &[
                "build",
                "--release",
                "-p",
                "halctl",
                "--message-format=json",
            ],
            "bin",
        ),
        (
            &[
                "test",
                "--release",
                "-p",
                "hal-cuda",
                "-p",
                "hal-cuda-uvm",
                "--no-run",
                "--message-format=json",
            ],
            "tests",
        ),
        (
            &[
                "build",
                "--release",
                "-p",
                "hal",
                "--examples",
                "--features",
                "cuda-uvm,mock",
                "--message-format=json",
            ],
            "examples",
        ),
        (
            &[
                "build",
                "--release",
                "-p",
                "hal-cuda-uvm",
                "--examples",
                "--message-format=json",
            ],
            "examples",
        ),
    ];
    for (args, sub) in steps {
        println!("\n$ cargo {}", args.join(" "));
        let out = match Command::new(cargo)
            .args(args)
            .current_dir(root)
            .stderr(Stdio::inherit())
            .output()
        {
            Ok(o) => o,
            Err(e) => {
                eprintln!("xtask gpu-smoke: could not run cargo: {e}");
                return ExitCode::FAILURE;
            }
        };
        if !out.status.success() {
            eprintln!("xtask gpu-smoke: `cargo {}` failed", args.join(" "));
            return ExitCode::FAILURE;
        }
        for exe in executables(&String::from_utf8_lossy(&out.stdout)) {
            let name = exe.file_name().map(|n| n.to_owned()).unwrap_or_default();
            // Of hal-cuda's tests, those that run on whatever driver there
            // is; the others load the stand-in driver, which a GPU machine
            // does not need.
            let n = name.to_string_lossy();
            if sub == "tests" && !RUN_ON_THE_DRIVER.iter().any(|t| n.starts_with(t)) {
                continue;
            }
            copied.push((exe, dir.join(sub).join(name)));
        }
    }
    for (from, to) in &copied {
        if let Err(e) = std::fs::copy(from, to) {
            eprintln!("xtask gpu-smoke: copying {}: {e}", from.display());
            return ExitCode::FAILURE;
        }
        // Debug information stays here; the machine that runs them needs none.
        let _ = Command::new("strip").arg(to).status();
    }
    let script = dir.join("run.sh");
    if let Err(e) = std::fs::write(&script, RUN_SH) {
        eprintln!("xtask gpu-smoke: {}: {e}", script.display());
        return ExitCode::FAILURE;
    }
    let _ = Command::new("chmod").arg("+x").arg(&script).status();
    let size: u64 = copied
        .iter()
        .filter_map(|(_, to)| std::fs::metadata(to).ok())
        .map(|m| m.len())
        .sum();
    println!(
        "\ngpu-smoke: {} files, {:.1} MiB in {}; run `{}/run.sh OUT` on the GPU machine",
        copied.len() + 1,
        size as f64 / f64::from(1 << 20),
        dir.display(),
        dir.display()
    );
    if size > BUDGET {
        eprintln!(
            "xtask gpu-smoke: {size} bytes, over the {BUDGET}-byte budget of a run; strip failed?"
        );
        return ExitCode::FAILURE;
    }
    if rehearse {
        return rehearsal(root, &script);
    }
    ExitCode::SUCCESS
}

/// Run `script` with the release stand-in as the driver and check its report.
fn rehearsal(root: &Path, script: &Path) -> ExitCode {
    let standin = root
        .join("target")
        .join("release")
        .join("deps")
        .join("libhal_mock_libcuda.so");
    if !standin.is_file() {
        eprintln!(
            "xtask gpu-smoke: the stand-in driver {} was not built",
            standin.display()
        );
        return ExitCode::FAILURE;
    }
    let out = root.join("target").join("gpu-smoke-rehearsal");
    let _ = std::fs::remove_dir_all(&out);
    println!(
        "\n$ HAL_CUDA_LIBRARY={} {} {}",
        standin.display(),
        script.display(),
        out.display()
    );
    let ran = Command::new(script)
        .arg(&out)
        .env("HAL_CUDA_LIBRARY", &standin)
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status();
    match ran {
        Ok(status) if status.success() => {}
        Ok(status) => {
            eprintln!("xtask gpu-smoke: {} ended with {status}", script.display());
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("xtask gpu-smoke: could not run {}: {e}", script.display());
            return ExitCode::FAILURE;
        }
    }
    if !out.join("summary.txt").is_file() {
        eprintln!("xtask gpu-smoke: the script wrote no summary.txt");
        return ExitCode::FAILURE;
    }
    let report = match std::fs::read_to_string(out.join("report.jsonl")) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("xtask gpu-smoke: no report in {}: {e}", out.display());
            return ExitCode::FAILURE;
        }
    };
    let bad = failed_steps(&report);
    if bad.is_empty() {
        println!("gpu-smoke rehearsal: every step passed on the stand-in driver");
        ExitCode::SUCCESS
    } else {
        for line in &bad {
            eprintln!("xtask gpu-smoke: rehearsal step failed: {line}");
        }
        eprintln!("(logs in {})", out.display());
        ExitCode::FAILURE
    }
}

/// The report's lines whose step failed: a non-zero exit, a failed test,
/// or a test step that ran no test. An empty report fails as a whole.
fn failed_steps(report: &str) -> Vec<String> {
    let field = |line: &str, key: &str| -> Option<i64> {
        let at = line.find(&format!("\"{key}\":"))? + key.len() + 3;
        let rest = &line[at..];
        let end = rest.find([',', '}']).unwrap_or(rest.len());
        rest[..end].trim().parse().ok()
    };
    let lines: Vec<&str> = report.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return vec!["the report has no steps".into()];
    }
    lines
        .into_iter()
        .filter(|l| {
            let test = l.contains("\"step\":\"test-");
            field(l, "rc") != Some(0)
                || field(l, "failed") != Some(0)
                || (test && field(l, "passed").is_none_or(|p| p == 0))
        })
        .map(str::to_owned)
        .collect()
}

/// The executables cargo's JSON messages name (`"executable":"/path"`),
/// build scripts excluded.
fn executables(messages: &str) -> Vec<PathBuf> {
    const KEY: &str = "\"executable\":\"";
    let mut found = Vec::new();
    for line in messages.lines() {
        if !line.contains("\"reason\":\"compiler-artifact\"") {
            continue;
        }
        if let Some(at) = line.find(KEY) {
            let rest = &line[at + KEY.len()..];
            if let Some(end) = rest.find('"') {
                let path = PathBuf::from(&rest[..end]);
                if !path.to_string_lossy().contains("/build/") {
                    found.push(path);
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[cfg(test)]
mod tests {
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
}
