//! Helpers shared by the test files.
#![allow(dead_code)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hal_core::{AllocDesc, Error, Location};
use hal_mock::codes::Code;

/// A wait expected to time out gives up after this long.
pub const SHORT: Duration = Duration::from_millis(30);
/// A wait expected to succeed may take this long before the test fails (a
/// guard against hangs, never a timing assertion).
pub const LONG: Duration = Duration::from_secs(30);

/// The environment variable that makes a re-executed test binary play a
/// child role.
pub const ROLE_ENV: &str = "HAL_MOCK_TEST_ROLE";

/// `size` bytes on device `ordinal`, page-aligned (what a program that
/// exports must ask for on Ascend, whose allocator sub-allocates).
pub fn aligned(ordinal: u32, size: u64) -> AllocDesc {
    AllocDesc {
        align: 4096,
        ..AllocDesc::device(ordinal, size)
    }
}

/// Require `err` to be the vendor error `code`.
#[track_caller]
pub fn assert_vendor(err: &Error, code: Code) {
    match err {
        Error::Vendor(v) if v.code == code.code && v.name == code.name => {}
        other => panic!("expected {} ({}), got {other:?}", code.name, code.code),
    }
}

/// Require `Error::Unsupported`, naming `operation`.
#[track_caller]
pub fn assert_unsupported(err: &Error, operation: &str) {
    match err {
        Error::Unsupported { operation: op, .. } if op == operation => {}
        other => panic!("expected Unsupported naming `{operation}`, got {other:?}"),
    }
}

/// Poll `cond` until it holds; fail after [`LONG`].
#[track_caller]
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < LONG, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The role of this process, when a test started it as a child.
pub fn child_role() -> Option<String> {
    std::env::var(ROLE_ENV).ok()
}

/// Re-execute this test binary to run only `test` in the role `role`, with
/// `env` set; stdin and stdout are piped.
pub fn spawn_child(test: &str, role: &str, env: &[(&str, String)]) -> std::process::Child {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("starting a child process")
}

/// True when `loc` is device memory.
pub fn is_device(loc: Location) -> bool {
    matches!(loc, Location::Device(_))
}

/// Open descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Mappings of memfds in this process.
pub fn memfd_maps() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("/memfd:"))
        .count()
}

/// Entries of `/dev/shm` that name this crate or hal.
pub fn shm_entries() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains("hal"))
                .collect()
        })
        .unwrap_or_default()
}
