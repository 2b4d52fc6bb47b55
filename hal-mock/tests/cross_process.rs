//! Real child processes import simulated device memory, events and
//! notifies from the parent's handle text alone (the exporter's descriptor
//! broker serves the descriptors), write, signal, and the parent sees it.

use hal_core::DeviceExt;
mod common;

use hal_core::{Vmm, VmmExt};
use std::io::{BufRead, Write};

use common::{aligned, child_role, spawn_child, LONG};
use hal_core::exchange::{HandleListener, HandleStream};
use hal_core::{
    Allocation, Backend, ByteRange, Device, Error, Event, EventFlags, ExportOptions, Handle,
    ImportOptions, Memory, Notify, SharedHandle, WaitOptions,
};
use hal_mock::MockBackend;

const PAGE: u64 = 4096;
const MEM: &str = "HAL_MOCK_TEST_MEM";
const EVENT: &str = "HAL_MOCK_TEST_EVENT";
const NOTIFY: &str = "HAL_MOCK_TEST_NOTIFY";

fn from_env(name: &str) -> SharedHandle {
    let text = std::env::var(name).expect("handle text in the environment");
    SharedHandle::from(Handle::from_text(&text).expect("a valid handle text"))
}

fn read_str(mem: &impl Memory, offset: u64, len: usize) -> String {
    let mut b = vec![0u8; len];
    mem.read(offset, &mut b).expect("read");
    String::from_utf8_lossy(&b).into_owned()
}

#[test]
fn ascend_child_imports_memory_and_notify() {
    if let Some(role) = child_role() {
        return ascend_child(&role);
    }
    let backend = MockBackend::ascend();
    let dev = backend.open(1).unwrap();
    let a = dev.allocate(&aligned(1, 2 * PAGE)).unwrap();
    a.write(0, b"from parent").unwrap();
    // Default exports: the pid allow-list is on and empty.
    let mut mem = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let n = dev.create_notify().unwrap();
    let mut notify = dev.export_notify(&n, &ExportOptions::default()).unwrap();
    let env = [(MEM, mem.to_text()), (NOTIFY, notify.to_text())];

    // A child that is not on the list is refused by the exporter's broker.
    let denied = spawn_child("ascend_child_imports_memory_and_notify", "denied", &env);
    let out = denied.wait_with_output().unwrap();
    assert!(out.status.success(), "the refused child failed");
    assert!(String::from_utf8_lossy(&out.stdout).contains("child: refused"));

    // A child whose pid is added after the export imports.
    let mut child = spawn_child("ascend_child_imports_memory_and_notify", "importer", &env);
    let pid = child.id();
    dev.allow_importers(&mut mem, &[pid]).unwrap();
    dev.allow_importers(&mut notify, &[pid]).unwrap();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    // The creator waits; the importer recorded.
    n.wait(WaitOptions::timeout(LONG)).unwrap();
    assert_eq!(read_str(&a, PAGE, 10), "from child");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the importing child failed");
    assert!(String::from_utf8_lossy(&out.stdout).contains("child: done"));
    // The child exited: its lease is gone, and the memory can be freed.
    a.wait_unleased(Some(LONG)).unwrap();
    a.free().unwrap();
}

fn ascend_child(role: &str) {
    // The child numbers devices from 0 like any process; the handle names
    // its device by UUID.
    let backend = MockBackend::ascend();
    let dev = backend.open(0).unwrap();
    match role {
        "denied" => {
            let r = dev.import_memory(from_env(MEM), &ImportOptions::default());
            assert!(
                matches!(r, Err(Error::PermissionDenied { .. })),
                "expected PermissionDenied, got {r:?}"
            );
            println!("child: refused");
        }
        "importer" => {
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).unwrap();
            let m = dev
                .import_memory(from_env(MEM), &ImportOptions::default())
                .unwrap();
            assert_eq!(m.location(), hal_core::Location::Device(1));
            assert_eq!(read_str(&m, 0, 11), "from parent");
            m.write(PAGE, b"from child").unwrap();
            let n = dev
                .import_notify(from_env(NOTIFY), &ImportOptions::default())
                .unwrap();
            assert!(matches!(
                n.wait(WaitOptions::timeout(common::SHORT)),
                Err(Error::PermissionDenied { .. })
            ));
            let stream = dev.create_stream().unwrap();
            dev.record_notify(&stream, &n).unwrap();
            dev.synchronize(&stream, Some(LONG)).unwrap();
            println!("child: done");
        }
        other => panic!("unknown role {other}"),
    }
}

const PHYS: &str = "HAL_MOCK_TEST_PHYS";
const SOCK: &str = "HAL_MOCK_TEST_SOCK";

/// Read the child's output up to the line that contains `want`.
fn expect_line(out: &mut impl BufRead, want: &str) {
    let mut line = String::new();
    loop {
        line.clear();
        let n = out
            .read_line(&mut line)
            .expect("reading the child's output");
        assert!(n > 0, "the child ended before saying `{want}`");
        if line.contains(want) {
            return;
        }
    }
}

/// The pid allow-list governs every process but the exporter's: a child
/// that is not on it is refused from the handle text alone (by the
/// exporter's broker) and with the descriptors attached (by the import
/// itself), for memory, notifies and physical allocations; once
/// `allow_importers` adds it, both ways work.
#[test]
fn ascend_allow_list_refuses_other_processes_either_way() {
    if let Some(role) = child_role() {
        assert_eq!(role, "outsider");
        return ascend_outsider();
    }
    let backend = MockBackend::ascend();
    let dev = backend.open(0).unwrap();
    let a = dev.allocate(&aligned(0, PAGE)).unwrap();
    a.write(0, b"listed").unwrap();
    let mut mem = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let n = dev.create_notify().unwrap();
    let mut notify = dev.export_notify(&n, &ExportOptions::default()).unwrap();
    let phys = dev.allocate_physical(2 << 20).unwrap();
    let mut physical = dev
        .export_physical(&phys, &ExportOptions::default())
        .unwrap();
    let sock = format!(
        "hal-mock-test-{}-{}",
        std::process::id(),
        hal_core::kit::os::hex(&hal_core::kit::os::random_id())
    );
    let listener = HandleListener::bind_abstract(&sock).unwrap();
    let env = [
        (MEM, mem.to_text()),
        (NOTIFY, notify.to_text()),
        (PHYS, physical.to_text()),
        (SOCK, sock),
    ];
    let mut child = spawn_child(
        "ascend_allow_list_refuses_other_processes_either_way",
        "outsider",
        &env,
    );
    let pid = child.id();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let stream = listener.accept_timeout(LONG).unwrap();
    stream.set_timeout(Some(LONG)).unwrap();
    // The descriptors reach the child beside a copy of each handle that
    // lists it (the socket checks that much); the child imports them with
    // the genuine handle, whose list is empty.
    for e in [&mem, &notify, &physical] {
        let mut listing_child = e.handle().clone();
        listing_child.allowed_pids.push(pid);
        stream.send(&listing_child, e.fds()).unwrap();
    }
    expect_line(&mut out, "child: refused");

    dev.allow_importers(&mut mem, &[pid]).unwrap();
    dev.allow_importers(&mut notify, &[pid]).unwrap();
    dev.allow_importers(&mut physical, &[pid]).unwrap();
    for e in [&mem, &notify, &physical] {
        stream.send_exported(e).unwrap();
    }
    n.wait(WaitOptions::timeout(LONG)).unwrap();
    expect_line(&mut out, "child: done");
    assert_eq!(read_str(&a, 0, 10), "from child");
    assert!(child.wait().unwrap().success(), "the child failed");
    a.wait_unleased(Some(LONG)).unwrap();
}

fn ascend_outsider() {
    let backend = MockBackend::ascend();
    let dev = backend.open(0).unwrap();
    let me = std::process::id();
    let opts = ImportOptions::default();
    let sock = std::env::var(SOCK).expect("the socket name in the environment");
    let stream = HandleStream::connect_abstract(&sock).unwrap();
    stream.set_timeout(Some(LONG)).unwrap();
    let attached = |env: &str| {
        let (mut shared, _) = stream.recv().unwrap();
        shared.handle = from_env(env).handle;
        shared
    };

    // Not on the list: refused by the broker (text) and by the import
    // (descriptors attached).
    fn refused<T: std::fmt::Debug>(r: hal_core::Result<T>, me: u32, attached: bool, what: &str) {
        match r {
            Err(Error::PermissionDenied { pid, .. }) if !attached || pid == Some(me) => {}
            other => panic!("{what}: expected PermissionDenied, got {other:?}"),
        }
    }
    refused(
        dev.import_memory(from_env(MEM), &opts),
        me,
        false,
        "memory, text",
    );
    refused(
        dev.import_notify(from_env(NOTIFY), &opts),
        me,
        false,
        "notify, text",
    );
    refused(
        dev.import_physical(from_env(PHYS), &opts),
        me,
        false,
        "physical, text",
    );
    refused(
        dev.import_memory(attached(MEM), &opts),
        me,
        true,
        "memory, attached",
    );
    refused(
        dev.import_notify(attached(NOTIFY), &opts),
        me,
        true,
        "notify, attached",
    );
    refused(
        dev.import_physical(attached(PHYS), &opts),
        me,
        true,
        "physical, attached",
    );
    println!("child: refused");

    // Added by the exporter: both ways work. The handles now list this pid.
    let (mem, _) = stream.recv().unwrap();
    let (notify, _) = stream.recv().unwrap();
    let (physical, _) = stream.recv().unwrap();
    let m = dev.import_memory(mem, &opts).unwrap();
    assert_eq!(read_str(&m, 0, 6), "listed");
    let by_text = dev.import_memory(from_env(MEM), &opts).unwrap();
    assert_eq!(read_str(&by_text, 0, 6), "listed");
    let _ = dev.import_physical(physical, &opts).unwrap();
    let _ = dev.import_physical(from_env(PHYS), &opts).unwrap();
    let _ = dev.import_notify(from_env(NOTIFY), &opts).unwrap();
    let n = dev.import_notify(notify, &opts).unwrap();
    m.write(0, b"from child").unwrap();
    n.signal().unwrap();
    println!("child: done");
}

#[test]
fn cuda_child_waits_on_an_ipc_event_and_replies_by_notify() {
    if let Some(role) = child_role() {
        return cuda_child(&role);
    }
    let backend = MockBackend::cuda();
    let dev = backend.open(2).unwrap();
    let a = dev.allocate(&aligned(2, 2 * PAGE)).unwrap();
    // The second page: the handle names the base allocation plus an offset.
    let mem = dev
        .export_memory(
            &a,
            &ExportOptions {
                range: Some(ByteRange::new(PAGE, PAGE)),
                ..ExportOptions::default()
            },
        )
        .unwrap();
    assert_eq!(mem.handle().offset, PAGE);
    let ev = dev
        .create_event(EventFlags {
            interprocess: true,
            timing: false,
        })
        .unwrap();
    let event = dev.export_event(&ev, &ExportOptions::default()).unwrap();
    let reply = dev.create_notify().unwrap();
    let notify = dev
        .export_notify(&reply, &ExportOptions::default())
        .unwrap();
    // Queue: wait for the gate, write, record. The child's wait on the event
    // can only finish after the write.
    let stream = dev.create_stream().unwrap();
    let gate = dev.create_notify().unwrap();
    dev.stream_wait_notify(&stream, &gate, None).unwrap();
    dev.write_async(&stream, &a, PAGE, b"from parent".to_vec())
        .unwrap();
    dev.record_event(&stream, &ev).unwrap();
    let child = spawn_child(
        "cuda_child_waits_on_an_ipc_event_and_replies_by_notify",
        "importer",
        &[
            (MEM, mem.to_text()),
            (EVENT, event.to_text()),
            (NOTIFY, notify.to_text()),
        ],
    );
    gate.signal().unwrap();
    reply.wait(WaitOptions::timeout(LONG)).unwrap();
    assert_eq!(read_str(&a, PAGE + 100, 10), "from child");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the child failed");
    assert!(String::from_utf8_lossy(&out.stdout).contains("child: done"));
    dev.synchronize(&stream, Some(LONG)).unwrap();
    a.wait_unleased(Some(LONG)).unwrap();
}

fn cuda_child(role: &str) {
    assert_eq!(role, "importer");
    let backend = MockBackend::cuda();
    let dev = backend.open(0).unwrap();
    let m = dev
        .import_memory(from_env(MEM), &ImportOptions::default())
        .unwrap();
    assert_eq!(m.len(), PAGE);
    let ev = dev
        .import_event(from_env(EVENT), &ImportOptions::default())
        .unwrap();
    ev.wait(WaitOptions::timeout(LONG)).unwrap();
    assert_eq!(read_str(&m, 0, 11), "from parent");
    m.write(100, b"from child").unwrap();
    let reply = dev
        .import_notify(from_env(NOTIFY), &ImportOptions::default())
        .unwrap();
    reply.signal().unwrap();
    println!("child: done");
}
