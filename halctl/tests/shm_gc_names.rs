//! `halctl shm gc` removes the name a killed channel publisher left, and
//! says so; a live publisher's name stays. (A file of its own: a run over
//! everything collects every dead region of the machine, which the other
//! `shm gc` tests, in their own binary, must not see go meanwhile.)

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use hal::channel::{ChannelOptions, Publisher};
use hal::cpu_shm::CpuShm;
use hal::Backend;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_halctl");
const NAME_VAR: &str = "HALCTL_GC_NAMES_TEST_NAME";

fn unique(tag: &str) -> String {
    format!(
        "halctl-gc-names-{}-{:x}-{tag}",
        std::process::id(),
        u64::from_le_bytes(hal::kit::os::random_id()[..8].try_into().unwrap())
    )
}

fn options() -> ChannelOptions {
    ChannelOptions::default().slots(2).slot_size(64)
}

/// Removes a channel's name, whatever happened.
struct Sweep(std::path::PathBuf);

impl Drop for Sweep {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A child process that publishes channel `$HALCTL_GC_NAMES_TEST_NAME`,
/// says `ready` (a line of its own), and waits to be killed.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_process() {
    let name = std::env::var(NAME_VAR).expect("a child entry point: its parent names the channel");
    let device = CpuShm::new().open(0).expect("open cpu-shm");
    let _p = Publisher::create(&device, &name, &options()).expect("a publisher");
    // On a line of its own: the harness's "test child_process ... " has
    // no newline of its own yet.
    println!("\nready");
    std::thread::sleep(std::time::Duration::from_secs(60));
}

#[test]
fn gc_removes_and_reports_a_dead_channel_name() {
    let dead = unique("dead");
    let live = unique("live");
    let dead_path = hal::kit::os::private_path("channel", &dead).unwrap();
    let live_path = hal::kit::os::private_path("channel", &live).unwrap();
    let _s1 = Sweep(dead_path.clone());
    let _s2 = Sweep(live_path.clone());
    let mut child = hal::testing::child("child_process")
        .env(NAME_VAR, &dead)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the publisher");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l == "ready")),
        "the publisher did not start"
    );
    let pid = child.id();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(dead_path.exists(), "a killed publisher leaves its name");
    let device = CpuShm::new().open(0).expect("open cpu-shm");
    let publisher = Publisher::create(&device, &live, &options()).expect("a live publisher");

    // A dry run in JSON names it and removes nothing.
    let out = Command::new(BIN)
        .args(["shm", "gc", "--dry-run", "--json"])
        .output()
        .expect("run halctl");
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let names = v["names"].as_array().expect("a list of names");
    let entry = names
        .iter()
        .find(|n| n["name"] == dead.as_str())
        .unwrap_or_else(|| panic!("the dead channel is not listed: {v}"));
    assert_eq!(entry["kind"], "channel", "{v}");
    assert_eq!(entry["pids"], serde_json::json!([pid]), "{v}");
    assert_eq!(
        entry["uid"],
        serde_json::json!(nix::unistd::geteuid().as_raw()),
        "the caller's own name: {v}"
    );
    assert!(!names.iter().any(|n| n["name"] == live.as_str()), "{v}");
    assert!(dead_path.exists(), "a dry run removes nothing");

    let out = Command::new(BIN)
        .args(["shm", "gc"])
        .output()
        .expect("run halctl");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let said = format!(
        "removed channel name {dead} ({}, publisher pid {pid} is gone)",
        dead_path.display()
    );
    assert!(
        stdout.lines().any(|l| l == said),
        "{said:?} not in {stdout}"
    );
    assert!(!stdout.contains(&live), "{stdout}");
    assert!(!dead_path.exists(), "the dead channel's name is gone");
    assert!(live_path.exists(), "the live publisher's name stays");
    drop(publisher);
    assert!(!live_path.exists());
}
