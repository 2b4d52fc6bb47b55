//! `halctl bench --only remote` on its tiny configuration: the four remote
//! scenarios run between real processes over UCX's TCP transport, each of
//! the three with a baseline beside `ucx_perftest`'s figure from the same
//! run (or, without ucx_perftest, a note that says so and no ratio).
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

#[test]
fn remote_scenarios_run_beside_ucx_perftest() {
    if !ucx_here() {
        return;
    }
    let out = Command::new(BIN)
        .args(["bench", "--tiny", "--json", "--only", "remote"])
        .stdin(Stdio::null())
        .output()
        .expect("running halctl bench");
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
            "remote-cold"
        ]
    );
    let perftest = perftest_here();
    for l in &lines {
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
            assert!(l["ratio_p50"].is_null(), "{l}");
            assert!(note.contains("ucx_perftest is not installed"), "{l}");
        }
    }
    let rtt = &lines[2];
    if perftest {
        assert!(
            rtt["baseline"].as_str().unwrap().contains("-t ucp_am_lat"),
            "{rtt}"
        );
    }
}
