//! `halctl bench` run as a user runs it, on a tiny configuration: every
//! line of its JSON output parses and carries every field, the values are
//! positive and consistent, the text table and the plot are written.
//!
//! Nothing here asserts how fast anything is: the figures depend on the
//! machine and on what else runs on it.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_halctl");
/// Generous: a stuck run fails its test instead of hanging the suite.
const TIMEOUT: Duration = Duration::from_secs(300);

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn halctl(args: &[&str]) -> Out {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn halctl");
    let mut so = child.stdout.take().expect("stdout");
    let mut se = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + TIMEOUT;
    let code = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status.code().unwrap_or(-1);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("halctl {args:?} did not finish within {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Out {
        code,
        stdout: t_out.join().expect("stdout reader"),
        stderr: t_err.join().expect("stderr reader"),
    }
}

fn num(v: &Value, key: &str) -> f64 {
    v.get(key)
        .unwrap_or_else(|| panic!("`{key}` missing: {v}"))
        .as_f64()
        .unwrap_or_else(|| panic!("`{key}` is not a number: {v}"))
}

fn positive(v: &Value, key: &str) -> f64 {
    let x = num(v, key);
    assert!(x > 0.0, "`{key}` is not positive: {v}");
    x
}

const REQUIRED: [&str; 10] = [
    "scenario",
    "backend",
    "n",
    "p50_ns",
    "p99_ns",
    "p999_ns",
    "max_ns",
    "baseline",
    "baseline_p50_ns",
    "ratio_p50",
];

fn check_line(v: &Value) {
    for key in REQUIRED {
        assert!(v.get(key).is_some(), "`{key}` missing: {v}");
    }
    assert_eq!(v["backend"], "cpu-shm", "{v}");
    positive(v, "n");
    let p50 = positive(v, "p50_ns");
    let p99 = positive(v, "p99_ns");
    let p999 = positive(v, "p999_ns");
    let max = positive(v, "max_ns");
    // Percentiles of one series are ordered whatever the machine.
    assert!(p50 <= p99 && p99 <= p999 && p999 <= max, "{v}");
    positive(v, "iqm_ns");
    if v["baseline"].is_null() {
        assert!(v["baseline_p50_ns"].is_null(), "{v}");
        assert!(v["ratio_p50"].is_null(), "{v}");
    } else {
        assert!(v["baseline"].as_str().is_some_and(|s| !s.is_empty()), "{v}");
        let b50 = positive(v, "baseline_p50_ns");
        assert!(b50 <= num(v, "baseline_max_ns"), "{v}");
        positive(v, "baseline_n");
        positive(v, "ratio_p50");
    }
    if !v["target"].is_null() {
        assert!(v["target_met"].is_boolean(), "{v}");
    }
}

#[test]
fn bench_json_lines_carry_every_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plot = dir.path().join("bench.svg");
    let plot_arg = plot.to_str().expect("utf-8 path");
    let out = halctl(&["bench", "--quick", "--tiny", "--json", "--plot", plot_arg]);
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}\n{out:?}")))
        .collect();
    for v in &lines {
        check_line(v);
    }
    let names: Vec<&str> = lines
        .iter()
        .map(|v| v["scenario"].as_str().expect("scenario is a string"))
        .collect();
    // They need UCX and processes of their own: only when asked for.
    assert!(
        !names.iter().any(|n| n.starts_with("remote-")),
        "a remote scenario in a run that did not ask for it: {out:?}"
    );
    for want in [
        "export",
        "import-first",
        "import-first-persistent",
        "import-batch-16",
        "import-cached",
        "notify-pingpong",
        "notify-spin-pingpong",
        "notify-adaptive-pingpong",
        "channel-throughput",
        "read-bandwidth",
    ] {
        assert_eq!(
            names.iter().filter(|&&n| n == want).count(),
            1,
            "one line of {want}: {out:?}"
        );
    }
    // Scaling: three export counts and three importer counts.
    let scaling: Vec<&Value> = lines
        .iter()
        .filter(|v| v["scenario"] == "scaling")
        .collect();
    assert_eq!(scaling.len(), 6, "{out:?}");
    assert_eq!(
        scaling
            .iter()
            .filter(|v| v.get("live_exports").is_some())
            .count(),
        3
    );
    assert_eq!(
        scaling
            .iter()
            .filter(|v| v.get("importers").is_some())
            .count(),
        3
    );

    for v in &lines {
        match v["scenario"].as_str() {
            Some("import-first" | "import-first-persistent" | "import-batch-16") => {
                // The line's baseline and the two other floors, each with a ratio.
                positive(v, "baseline_p50_ns");
                let others = v["other_baselines"].as_array().expect("other baselines");
                assert_eq!(others.len(), 2, "{v}");
                for o in others {
                    positive(o, "p50_ns");
                    positive(o, "ratio_p50");
                    assert!(o["baseline"].is_string(), "{o}");
                }
                assert!(v["target"].is_string(), "{v}");
            }
            Some("import-cached") => {
                assert!(v["baseline"].is_null(), "{v}");
                assert_eq!(v["cached"], true, "{v}");
                assert!(v["timer_overhead_ns"].is_u64(), "{v}");
            }
            Some("read-bandwidth") => {
                positive(v, "gbps");
                positive(v, "baseline_gbps");
                positive(v, "size_bytes");
                assert!(
                    v["note"].as_str().is_some_and(|n| n.contains("instead of")),
                    "{v}"
                );
            }
            Some("channel-throughput") => {
                assert_eq!(v["importers"], 4, "four subscriber processes: {v}");
                assert_eq!(v["target"], "ratio_p50 >= 0.9", "{v}");
                assert!(
                    v["note"].as_str().is_some_and(|n| n.contains("GB/s")),
                    "{v}"
                );
            }
            Some(s) if s.starts_with("notify-") => {
                assert!(num(v, "idle_cpu_pct") >= 0.0, "{v}");
                positive(v, "idle_wait_ns");
            }
            _ => {}
        }
    }

    let svg = std::fs::read_to_string(&plot).expect("the plot is written");
    assert!(svg.starts_with("<svg"), "{svg}");
    assert!(svg.trim_end().ends_with("</svg>"));
    for name in [
        "export",
        "import-first",
        "notify-adaptive-pingpong",
        "scaling",
    ] {
        assert!(svg.contains(name), "the plot lacks {name}");
    }
}

#[test]
fn bench_prints_a_table_with_its_baselines() {
    let out = halctl(&["bench", "--tiny", "--only", "export,import"]);
    assert_eq!(out.code, 0, "{out:?}");
    for text in [
        "export",
        "import-first",
        "import-first-persistent",
        "import-batch-16",
        "baselines",
        "ratio",
        "[1]",
        "[2]",
        "[3]",
        "[4]",
        "shm_open",
        "recvmsg",
    ] {
        assert!(out.stdout.contains(text), "lacks {text:?}: {out:?}");
    }
    // Only the scenarios asked for have rows.
    let rows: Vec<&str> = out
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("  "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        rows.contains(&"export") && rows.contains(&"import-first"),
        "{out:?}"
    );
    assert!(!rows.contains(&"read-bandwidth"), "{out:?}");
}

#[test]
fn bench_refuses_bad_usage_with_2() {
    let out = halctl(&["bench", "--backend", "no-such-backend", "--tiny"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("unknown backend"), "{out:?}");
    let out = halctl(&["bench", "--tiny", "--only", "no-such-scenario"]);
    assert_eq!(out.code, 2, "{out:?}");
    let out = halctl(&["bench", "--no-such-option"]);
    assert_eq!(out.code, 2, "{out:?}");
    // A plot that cannot be written is refused before the run, not after
    // it: the full run (no --tiny, no --quick) would take many seconds, and
    // its header would be on stdout.
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("no-such-dir").join("bench.svg");
    let out = halctl(&["bench", "--plot", plot.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stdout.is_empty(), "nothing ran: {out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(out.stderr.contains("--plot"), "{out:?}");
    assert!(!plot.exists());
}

#[test]
fn bench_export_row_carries_its_target() {
    let out = halctl(&["bench", "--tiny", "--json", "--only", "export"]);
    assert_eq!(out.code, 0, "{out:?}");
    let export: Value = out
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["scenario"] == "export")
        .unwrap_or_else(|| panic!("no export line: {out:?}"));
    assert_eq!(export["target"], "ratio_p50 <= 2", "{export}");
    let met = export["target_met"].as_bool().expect("target_met");
    assert_eq!(met, num(&export, "ratio_p50") <= 2.0, "{export}");
    let out = halctl(&["bench", "--tiny", "--only", "export"]);
    assert_eq!(out.code, 0, "{out:?}");
    let row = out
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("export "))
        .unwrap_or_else(|| panic!("no export row: {out:?}"));
    assert!(row.contains("(<= 2)"), "{row}");
    // The last line says what the exit status means; --check turns a miss
    // into exit 1.
    let last = out.stdout.lines().last().unwrap_or_default();
    let missed = !met;
    if missed {
        assert!(
            last.contains("MISSED") && last.contains("--check"),
            "{last}"
        );
    } else {
        assert!(last.contains("met"), "{last}");
    }
    let out = halctl(&["bench", "--tiny", "--check", "--only", "export"]);
    assert_eq!(out.code, if missed { 1 } else { 0 }, "{out:?}");
}

#[test]
fn bench_text_fits_in_100_columns() {
    // Every scenario of the host backend, on the tiny configuration.
    let out = halctl(&["bench", "--tiny"]);
    assert_eq!(out.code, 0, "{out:?}");
    for l in out.stdout.lines() {
        assert!(
            l.chars().count() <= 100,
            "{} columns: {l:?}",
            l.chars().count()
        );
    }
    let header = out
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("scenario"))
        .unwrap_or_else(|| panic!("no header: {out:?}"));
    assert!(!header.contains("max"), "{header}");
}
