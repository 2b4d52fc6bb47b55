//! Crashed peers, on the stand-in `libcuda.so.1`: an exporter killed with
//! SIGKILL while an importer holds its memory (the importer keeps reading
//! the right bytes, then releases cleanly), and an importer killed while
//! holding (the exporter's lease count drops and it frees). On the real
//! driver too, with `HAL_CUDA_CONFORMANCE_DRIVER=1`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};
use std::time::Duration;

use hal_core::{
    AllocDesc, Allocation, Backend, Device, Error, ExportOptions, Handle, ImportOptions, Memory,
    SharedHandle,
};
use hal_cuda::CudaDevice;
use serial_test::serial;

mod common;

const PAGE: u64 = 4096;
/// The variables that make a run of this executable a child, and hand it a handle.
const ROLE_VAR: &str = "HAL_CUDA_CRASH_TEST_ROLE";
const HANDLE_VAR: &str = "HAL_CUDA_CRASH_TEST_HANDLE";

fn device() -> CudaDevice {
    common::backend().open(0).unwrap()
}

fn pattern(len: u64) -> Vec<u8> {
    (0..len).map(|i| (i % 241) as u8 ^ 0x3c).collect()
}

/// Start this executable's `child` test as `role`; its stdout, line by line.
fn spawn(role: &str, handle: Option<&str>) -> (Held, impl Iterator<Item = String>) {
    let mut cmd = hal_core::testing::child("child");
    cmd.env(ROLE_VAR, role)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(h) = handle {
        cmd.env(HANDLE_VAR, h);
    }
    let mut child = cmd.spawn().unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok);
    (Held(child), lines)
}

/// What follows `prefix` on the first line of `lines` holding it (the
/// test harness may print its own words before it on the line).
fn expect_line(lines: &mut impl Iterator<Item = String>, prefix: &str) -> String {
    lines
        .find_map(|l| l.find(prefix).map(|at| l[at + prefix.len()..].to_string()))
        .unwrap_or_else(|| panic!("the child never printed {prefix}"))
}

/// A child that is killed and reaped when dropped, should a test fail
/// before it kills it.
struct Held(Child);

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An allocation of two pages holding [`pattern`], and an export of each
/// page.
fn two_ranges(
    dev: &CudaDevice,
) -> (
    <CudaDevice as Device>::Allocation,
    hal_core::Exported,
    hal_core::Exported,
) {
    let a = dev.allocate(&AllocDesc::device(0, 2 * PAGE)).unwrap();
    a.write(0, &pattern(2 * PAGE)).unwrap();
    let range = |offset| ExportOptions {
        range: Some(hal_core::ByteRange::new(offset, PAGE)),
        ..ExportOptions::default()
    };
    let first = dev.export_memory(&a, &range(0)).unwrap();
    let second = dev.export_memory(&a, &range(PAGE)).unwrap();
    (a, first, second)
}

/// SIGKILL (what `Child::kill` sends on Unix), then reap.
fn kill(mut child: Held) {
    child.0.kill().unwrap();
    let status = child.0.wait().unwrap();
    assert!(!status.success(), "the child was killed");
}

#[test]
#[serial(ipc_opens)]
fn an_importer_keeps_the_right_bytes_after_its_exporter_is_killed() {
    let (child, mut lines) = spawn("exporter", None);
    let text = expect_line(&mut lines, "handle ");
    let dev = device();
    let m = dev
        .import_memory(
            SharedHandle::from(Handle::from_text(&text).unwrap()),
            &ImportOptions::default(),
        )
        .unwrap();
    let expect = pattern(2 * PAGE);
    let mut got = vec![0u8; expect.len()];
    m.read(0, &mut got).unwrap();
    assert_eq!(got, expect);
    kill(child);
    m.read(0, &mut got).unwrap();
    assert_eq!(got, expect, "the bytes after the exporter died");
    m.write(0, b"still writable").unwrap();
    drop(m);
    assert_eq!(dev.ipc_opens(), 0, "released cleanly");
}

#[test]
#[serial(ipc_opens)]
fn another_range_of_an_open_allocation_imports_after_its_exporter_is_killed() {
    let (child, mut lines) = spawn("exporter-two", None);
    let texts = expect_line(&mut lines, "handles ");
    let (first, second) = texts.split_once(' ').unwrap();
    let dev = device();
    let import = |text: &str| {
        dev.import_memory(
            SharedHandle::from(Handle::from_text(text).unwrap()),
            &ImportOptions::default(),
        )
    };
    let m1 = import(first).unwrap();
    kill(child);
    // The allocation is open here: a second range is a lookup in this
    // process, with no round trip to the dead exporter.
    let m2 = import(second).unwrap();
    assert_eq!(dev.ipc_opens(), 1);
    let mut got = vec![0u8; PAGE as usize];
    m2.read(0, &mut got).unwrap();
    assert_eq!(got, &pattern(2 * PAGE)[PAGE as usize..]);
    drop((m1, m2));
    assert_eq!(dev.ipc_opens(), 0, "released cleanly");
}

#[test]
fn an_exporter_frees_after_its_importer_is_killed() {
    let dev = device();
    let a = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    a.write(0, b"held by a child").unwrap();
    let ex = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let (child, mut lines) = spawn("importer", Some(&ex.to_text()));
    expect_line(&mut lines, "imported");
    assert_eq!(a.importers().unwrap(), 1, "the child holds a lease");
    let a = match a.free() {
        Err(e) => {
            assert!(matches!(e.error, Error::Busy { .. }), "{}", e.error);
            e.resource
        }
        Ok(()) => panic!("freed under a live importer"),
    };
    kill(child);
    a.wait_unleased(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(
        a.importers().unwrap(),
        0,
        "the dead importer's lease is gone"
    );
    a.free().unwrap();
    drop(ex);
}

#[test]
fn a_process_holding_two_ranges_of_an_allocation_holds_one_lease() {
    let dev = device();
    let (a, first, second) = two_ranges(&dev);
    let both = format!("{} {}", first.to_text(), second.to_text());
    let (child, mut lines) = spawn("two-ranges", Some(&both));
    expect_line(&mut lines, "imported");
    assert_eq!(
        a.importers().unwrap(),
        1,
        "one lease for the process: the second range was a lookup"
    );
    kill(child);
    a.wait_unleased(Some(Duration::from_secs(10))).unwrap();
    drop((first, second));
}

/// The children of the tests above.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child() {
    let Ok(role) = std::env::var(ROLE_VAR) else {
        panic!("a child entry point: run by its parent, which sets its variables");
    };
    let dev = device();
    let mut out = std::io::stdout();
    match role.as_str() {
        "exporter" => {
            let a = dev.allocate(&AllocDesc::device(0, 2 * PAGE)).unwrap();
            a.write(0, &pattern(2 * PAGE)).unwrap();
            let ex = dev.export_memory(&a, &ExportOptions::default()).unwrap();
            writeln!(out, "handle {}", ex.to_text()).unwrap();
            out.flush().unwrap();
            // Held until killed.
            std::thread::sleep(Duration::from_secs(120));
        }
        "exporter-two" => {
            let (_a, first, second) = two_ranges(&dev);
            writeln!(out, "handles {} {}", first.to_text(), second.to_text()).unwrap();
            out.flush().unwrap();
            // Held until killed.
            std::thread::sleep(Duration::from_secs(120));
        }
        "importer" => {
            let text = std::env::var(HANDLE_VAR).unwrap();
            let m = dev
                .import_memory(
                    SharedHandle::from(Handle::from_text(&text).unwrap()),
                    &ImportOptions::default(),
                )
                .unwrap();
            let mut got = [0u8; 15];
            m.read(0, &mut got).unwrap();
            assert_eq!(&got, b"held by a child");
            writeln!(out, "imported").unwrap();
            out.flush().unwrap();
            std::thread::sleep(Duration::from_secs(120));
        }
        "two-ranges" => {
            let texts = std::env::var(HANDLE_VAR).unwrap();
            let maps: Vec<_> = texts
                .split(' ')
                .map(|t| {
                    dev.import_memory(
                        SharedHandle::from(Handle::from_text(t).unwrap()),
                        &ImportOptions::default(),
                    )
                    .unwrap()
                })
                .collect();
            assert_eq!(dev.ipc_opens(), 1);
            let mut got = vec![0u8; PAGE as usize];
            maps[1].read(0, &mut got).unwrap();
            assert_eq!(got, &pattern(2 * PAGE)[PAGE as usize..]);
            writeln!(out, "imported").unwrap();
            out.flush().unwrap();
            std::thread::sleep(Duration::from_secs(120));
        }
        other => panic!("unknown role {other}"),
    }
}
