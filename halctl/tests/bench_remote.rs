//! `halctl bench --only remote` on its tiny configuration: the six remote
//! scenarios run between real processes over UCX's TCP transport, each of
//! the five with a baseline beside `ucx_perftest`'s figure from the same
//! run (or, without ucx_perftest, a note that says so and no ratio); and
//! remote-rendezvous, groups across hosts of member processes, beside a
//! TCP connection of the same run.
//!
//! Nothing here asserts how fast anything is. Where UCX is not installed
//! the test says `NOT RUN` (a failure with `HAL_TESTS_STRICT=1`).

use std::process::{Command, Stdio};

use hal::remote::Node;
use hal::testing::not_run;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_halctl");

fn ucx_here() -> bool {
    match Node::bind("127.0.0.1:0".parse().unwrap()) {
        Ok(_) => true,
        Err(e @ (hal::Error::Unavailable { .. } | hal::Error::Unsupported { .. })) => {
            not_run(&format!("UCX cannot be used here: {e}"));
            false
        }
        Err(e) => panic!("making a node: {e}"),
    }
}

/// ucx_perftest on PATH, as the bench looks for it.
fn perftest_here() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("ucx_perftest").is_file()))
}

/// Run `halctl bench --tiny --json --only remote`, with `PATH` as given;
/// its lines, checked: each with a ratio to ucx_perftest when `perftest`,
/// else a note that it is not installed and no ratio.
fn run_and_check(path: Option<&std::path::Path>, perftest: bool) {
    let mut cmd = Command::new(BIN);
    cmd.args(["bench", "--tiny", "--json", "--only", "remote"])
        .stdin(Stdio::null());
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    let out = cmd.output().expect("running halctl bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let names: Vec<&str> = lines
        .iter()
        .map(|l| l["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "remote-read-bw",
            "remote-read-lat",
            "remote-notify-rtt",
            "remote-cold",
            "remote-channel-throughput",
            "remote-channel-pingpong",
            "remote-rendezvous",
            "remote-rendezvous"
        ]
    );
    for (l, members) in lines[6..].iter().zip([2, 4]) {
        assert_eq!(l["config"], format!("members={members}"), "{l}");
        assert!(l["n"].as_u64().unwrap() > 0, "{l}");
        assert!(
            l["baseline"].as_str().unwrap().contains("TCP connection"),
            "{l}"
        );
        assert!(l["baseline_p50_ns"].as_u64().unwrap() > 0, "{l}");
        assert!(l["ratio_p50"].as_f64().unwrap() > 0.0, "{l}");
        assert!(l["note"].as_str().unwrap().contains("UCX_TLS=tcp"), "{l}");
    }
    for l in &lines[..6] {
        assert!(l["n"].as_u64().unwrap() > 0, "{l}");
        assert!(l["p50_ns"].as_u64().unwrap() > 0, "{l}");
        let note = l["note"].as_str().unwrap();
        assert!(note.contains("UCX_TLS=tcp"), "{l}");
        if l["scenario"] == "remote-cold" {
            assert!(l["baseline"].is_null(), "{l}");
            continue;
        }
        if perftest {
            let base = l["baseline"].as_str().unwrap();
            assert!(base.contains("ucx_perftest 127.0.0.1 -t ucp_"), "{l}");
            assert!(l["baseline_p50_ns"].as_u64().unwrap() > 0, "{l}");
            assert!(l["ratio_p50"].as_f64().unwrap() > 0.0, "{l}");
            assert!(l["target"].is_string(), "{l}");
        } else {
            assert!(l["baseline"].is_null(), "{l}");
            assert!(l["ratio_p50"].is_null(), "{l}");
            assert!(l["target"].is_null(), "{l}");
            assert!(note.contains("ucx_perftest is not installed"), "{l}");
        }
    }
    let (bw, pingpong) = (&lines[4], &lines[5]);
    assert_eq!(bw["size_bytes"], 1 << 20, "{bw}");
    assert_eq!(pingpong["size_bytes"], 64, "{pingpong}");
    if perftest {
        let rtt = &lines[2];
        assert!(
            rtt["baseline"].as_str().unwrap().contains("-t ucp_am_lat"),
            "{rtt}"
        );
        assert!(
            bw["baseline"]
                .as_str()
                .unwrap()
                .contains("-t ucp_am_bw -s 1048576"),
            "{bw}"
        );
        assert!(bw["gbps"].as_f64().unwrap() > 0.0, "{bw}");
        assert!(bw["baseline_gbps"].as_f64().unwrap() > 0.0, "{bw}");
        assert!(
            pingpong["baseline"]
                .as_str()
                .unwrap()
                .contains("-t ucp_am_lat -s 64"),
            "{pingpong}"
        );
    }
}

#[test]
fn remote_scenarios_run_beside_ucx_perftest() {
    if !ucx_here() {
        return;
    }
    if !perftest_here() {
        not_run("ucx_perftest is not installed (package ucx-utils)");
        return;
    }
    run_and_check(None, true);
}

#[test]
fn without_ucx_perftest_the_remote_scenarios_say_so() {
    if !ucx_here() {
        return;
    }
    // A PATH where no ucx_perftest is.
    let empty = tempfile::tempdir().unwrap();
    run_and_check(Some(empty.path()), false);
}
