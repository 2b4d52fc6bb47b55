//! IPC events on the stand-in `libcuda.so.1`: the capabilities, and an
//! import in another process (a child running this executable) that sees
//! the exporter's pending record, waits for it, and makes a stream wait on
//! it; and an exported event dropped while another process holds it.

use hal_core::DeviceExt;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

use hal_core::{
    Backend, Capabilities, Device, Event, EventFlags, ExportOptions, ImportOptions, Notify,
    SharedHandle, WaitOptions,
};
use hal_cuda::{CudaBackend, CudaDevice};

/// The variable that hands the child the handle's text.
const HANDLE_VAR: &str = "HAL_CUDA_IPC_EVENT_TEST_HANDLE";
/// The variable naming the file where the child says what it saw.
const MARKER_VAR: &str = "HAL_CUDA_IPC_EVENT_TEST_MARKER";
const IPC: EventFlags = EventFlags {
    interprocess: true,
    timing: false,
};

/// The stand-in driver cargo built for this test.
fn standin() -> std::path::PathBuf {
    hal_mock_libcuda::built_library()
}

fn device() -> CudaDevice {
    CudaBackend::with_library(standin()).open(0).unwrap()
}

#[test]
fn ipc_events_and_their_queries_are_claimed() {
    let caps = device().capabilities();
    assert!(caps.contains(Capabilities::IPC_EVENT));
    assert!(caps.contains(Capabilities::IPC_EVENT_QUERY), "measured");
    let timed = EventFlags {
        interprocess: true,
        timing: true,
    };
    match device().create_event(timed) {
        Err(hal_core::Error::Vendor(v)) => assert_eq!(v.name, "CUDA_ERROR_INVALID_VALUE"),
        other => panic!("an interprocess event with timing: {other:?}"),
    }
}

#[test]
fn another_process_imports_the_event_and_follows_its_record() {
    let dev = device();
    let stream = dev.create_stream().unwrap();
    let gate = dev.create_notify().unwrap();
    dev.stream_wait_notify(&stream, &gate, None).unwrap();
    let e = dev.create_event(IPC).unwrap();
    dev.record_event(&stream, &e).unwrap();
    let ex = dev.export_event(&e, &ExportOptions::default()).unwrap();
    let marker = std::env::temp_dir().join(format!("hal-cuda-ipc-event-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let child = hal_core::testing::child("child_imports_the_event")
        .env(HANDLE_VAR, ex.to_text())
        .env(MARKER_VAR, &marker)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The child writes what its import saw, then waits for the record.
    let seen = (0..1000)
        .find_map(|_| {
            std::thread::sleep(Duration::from_millis(10));
            std::fs::read_to_string(&marker)
                .ok()
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_default();
    let _ = std::fs::remove_file(&marker);
    gate.signal().unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}");
    assert_eq!(
        seen, "pending",
        "the exporter's record was pending at the import"
    );
    assert!(stdout.contains("child done"), "the child ran: {stdout}");
    dev.synchronize(&stream, Some(Duration::from_secs(10)))
        .unwrap();
    assert!(e.query().unwrap());
}

/// The child of `another_process_imports_the_event_and_follows_its_record`.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_imports_the_event() {
    let Ok(text) = std::env::var(HANDLE_VAR) else {
        panic!("a child entry point: run by its parent, which sets its variables");
    };
    let dev = device();
    let handle = hal_core::Handle::from_text(&text).unwrap();
    let e = dev
        .import_event(SharedHandle::from(handle), &ImportOptions::default())
        .unwrap();
    let pending = !e.query().unwrap();
    let marker = std::env::var(MARKER_VAR).unwrap();
    let tmp = format!("{marker}.tmp");
    std::fs::write(&tmp, if pending { "pending" } else { "complete" }).unwrap();
    std::fs::rename(&tmp, &marker).unwrap();
    e.wait(WaitOptions::timeout(Duration::from_secs(10)))
        .unwrap();
    assert!(e.query().unwrap(), "complete after the exporter's work ran");
    let s = dev.create_stream().unwrap();
    dev.stream_wait_event(&s, &e).unwrap();
    dev.synchronize(&s, Some(Duration::from_secs(10))).unwrap();
    drop(e);
    println!("child done");
}

/// The variable that makes the child hold its import until told.
const HOLD_VAR: &str = "HAL_CUDA_IPC_EVENT_TEST_HOLD";

#[test]
fn an_exported_event_dropped_while_another_process_holds_it_returns() {
    let dev = device();
    let e = dev.create_event(IPC).unwrap();
    let stream = dev.create_stream().unwrap();
    dev.record_event(&stream, &e).unwrap();
    let ex = dev.export_event(&e, &ExportOptions::default()).unwrap();
    let mut child = hal_core::testing::child("child_holds_the_event")
        .env(HOLD_VAR, ex.to_text())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.ends_with("holding")),
        "the child imported the event"
    );
    // The driver's destroy of an event other processes opened makes their
    // later use of it undefined (on the stand-in it fails), so the drop
    // leaves the destroy to a thread that waits for the importer's lease,
    // and returns: the child's wait below must still succeed.
    let (dropped, returned) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop((ex, e));
        let _ = dropped.send(());
    });
    let in_time = returned.recv_timeout(Duration::from_secs(20)).is_ok();
    let mut stdin = child.stdin.take().unwrap();
    let _ = writeln!(stdin, "go");
    drop(stdin);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(child.wait().unwrap().success(), "child: {rest:?}");
    assert!(
        in_time,
        "dropping an exported event its importer still holds must not wait for the importer"
    );
    assert!(rest.iter().any(|l| l.contains("child done")), "{rest:?}");
}

/// The child of `an_exported_event_dropped_while_another_process_holds_it_returns`.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_holds_the_event() {
    let Ok(text) = std::env::var(HOLD_VAR) else {
        panic!("a child entry point: run by its parent, which sets its variables");
    };
    let dev = device();
    let handle = hal_core::Handle::from_text(&text).unwrap();
    let e = dev
        .import_event(SharedHandle::from(handle), &ImportOptions::default())
        .unwrap();
    println!("holding");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    e.wait(WaitOptions::timeout(Duration::from_secs(10)))
        .unwrap();
    drop(e);
    println!("child done");
}
