//! The Ascend-like profile's rules.

use hal_core::DeviceExt;
mod common;

use common::{aligned, assert_vendor, wait_until, LONG, SHORT};
use hal_core::{
    AllocDesc, Allocation, Backend, Device, Error, Event, EventFlags, ExportOptions, Handle,
    HandleFlags, ImportOptions, Importers, Memory, Notify, SharedHandle, WaitOptions,
};
use hal_core::{Vmm, VmmExt};
use hal_mock::codes::acl;
use hal_mock::{MockBackend, MockDevice};

const PAGE: u64 = 4096;

fn anyone() -> ExportOptions {
    ExportOptions {
        importers: Importers::Anyone,
        ..ExportOptions::default()
    }
}

fn open() -> (MockBackend, MockDevice) {
    let backend = MockBackend::ascend();
    let dev = backend.open(0).unwrap();
    (backend, dev)
}

#[test]
fn ascend_pid_allow_list_is_on_by_default() {
    // Who is refused is shown by real child processes (cross_process.rs);
    // here, what the handles say.
    let (_b, dev) = open();
    let me = std::process::id();
    let other = me.wrapping_add(1).max(1);
    let a = dev.allocate(&aligned(0, PAGE)).unwrap();
    let mut exported = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let h = exported.handle();
    assert!(!h.flags.contains(HandleFlags::ANY_IMPORTER));
    assert!(h.allowed_pids.is_empty(), "nobody until pids are added");
    assert!(!h.allows(other));
    // Importer pids can be added after the export (aclrtIpcMemSetImportPid).
    dev.allow_importers(&mut exported, &[other]).unwrap();
    assert!(exported.handle().allows(other));
    // DISABLE_PID_VALIDATION.
    let open_export = dev.export_memory(&a, &anyone()).unwrap();
    assert!(open_export
        .handle()
        .flags
        .contains(HandleFlags::ANY_IMPORTER));
    // An explicit list from the start.
    let listed = dev
        .export_memory(
            &a,
            &ExportOptions {
                importers: Importers::Pids(vec![other]),
                ..ExportOptions::default()
            },
        )
        .unwrap();
    assert_eq!(listed.handle().allowed_pids, vec![other]);
    // Notifies and physical allocations keep lists too.
    let n = dev.create_notify().unwrap();
    let mut notify = dev.export_notify(&n, &ExportOptions::default()).unwrap();
    assert!(!notify.handle().allows(other));
    dev.allow_importers(&mut notify, &[other]).unwrap();
    assert!(notify.handle().allows(other));
}

/// The allow-list governs other processes: the exporting process imports its
/// own exports with an empty list, from the handle text alone (its broker
/// serves it) and with the descriptors attached (`Exported::share`) alike.
#[test]
fn ascend_exporter_imports_its_own_export_either_way() {
    let (_b, dev) = open();
    let a = dev.allocate(&aligned(0, PAGE)).unwrap();
    a.write(0, b"own export").unwrap();
    let mem = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    assert!(mem.handle().allowed_pids.is_empty());
    let n = dev.create_notify().unwrap();
    let notify = dev.export_notify(&n, &ExportOptions::default()).unwrap();
    let phys = dev.allocate_physical(2 << 20).unwrap();
    let physical = dev
        .export_physical(&phys, &ExportOptions::default())
        .unwrap();
    let text = |e: &hal_core::Exported| {
        SharedHandle::from(Handle::from_text(&e.to_text()).expect("a valid handle text"))
    };
    for (path, shared) in [("attached", mem.share().unwrap()), ("text", text(&mem))] {
        let m = dev
            .import_memory(shared, &ImportOptions::default())
            .unwrap_or_else(|e| panic!("memory, {path}: {e}"));
        let mut out = [0u8; 10];
        m.read(0, &mut out).unwrap();
        assert_eq!(&out, b"own export", "memory, {path}");
    }
    for (path, shared) in [
        ("attached", notify.share().unwrap()),
        ("text", text(&notify)),
    ] {
        let imported = dev
            .import_notify(shared, &ImportOptions::default())
            .unwrap_or_else(|e| panic!("notify, {path}: {e}"));
        imported.signal().unwrap();
        n.wait(WaitOptions::timeout(LONG)).unwrap();
    }
    for (path, shared) in [
        ("attached", physical.share().unwrap()),
        ("text", text(&physical)),
    ] {
        let _ = dev
            .import_physical(shared, &ImportOptions::default())
            .unwrap_or_else(|e| panic!("physical, {path}: {e}"));
    }
}

#[test]
fn ascend_only_the_creator_waits_on_a_notify() {
    let (_b, dev) = open();
    let n = dev.create_notify().unwrap();
    let exported = dev.export_notify(&n, &anyone()).unwrap();
    let imported = dev
        .import_notify(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert!(!imported.is_creator());
    assert!(matches!(
        imported.wait(WaitOptions::timeout(SHORT)),
        Err(Error::PermissionDenied { .. })
    ));
    assert!(matches!(
        hal_core::wait::block_on(imported.wait_async(WaitOptions::timeout(SHORT))),
        Err(Error::PermissionDenied { .. })
    ));
    let stream = dev.create_stream().unwrap();
    assert!(matches!(
        dev.stream_wait_notify(&stream, &imported, Some(SHORT)),
        Err(Error::PermissionDenied { .. })
    ));
    // The importer records; the creator waits (and the wait resets it).
    dev.record_notify(&stream, &imported).unwrap();
    n.wait(WaitOptions::timeout(LONG)).unwrap();
    assert!(n
        .wait(WaitOptions::timeout(SHORT))
        .unwrap_err()
        .is_timeout());
    imported.signal().unwrap();
    n.wait(WaitOptions::timeout(LONG)).unwrap();
}

#[test]
fn ascend_ipc_events_cannot_be_queried_or_timed() {
    let (_b, dev) = open();
    let timed_ipc = dev.create_event(EventFlags {
        interprocess: true,
        timing: true,
    });
    assert_vendor(&timed_ipc.unwrap_err(), acl::RT_PARAM_INVALID);
    let e = dev
        .create_event(EventFlags {
            interprocess: true,
            timing: false,
        })
        .unwrap();
    assert!(e.query().unwrap_err().is_unsupported());
    let exported = dev.export_event(&e, &ExportOptions::default()).unwrap();
    assert!(exported.handle().flags.contains(HandleFlags::NO_QUERY));
    let imported = dev
        .import_event(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert!(imported.query().unwrap_err().is_unsupported());
    // Waiting works: the exporter records, the importer waits.
    let stream = dev.create_stream().unwrap();
    dev.record_event(&stream, &e).unwrap();
    imported.wait(WaitOptions::timeout(LONG)).unwrap();
    // A local event without the IPC flag can be queried, but not exported.
    let local = dev.create_event(EventFlags::default()).unwrap();
    assert!(local.query().unwrap());
    assert_vendor(
        &dev.export_event(&local, &ExportOptions::default())
            .unwrap_err(),
        acl::RT_PARAM_INVALID,
    );
}

#[test]
fn ascend_free_under_importers_is_busy_and_drop_defers() {
    let (_b, dev) = open();
    let neighbour = dev.allocate(&AllocDesc::device(0, 512)).unwrap();
    let a = dev.allocate(&aligned(0, PAGE)).unwrap();
    a.write(0, b"kept alive").unwrap();
    let exported = dev.export_memory(&a, &anyone()).unwrap();
    let m = dev
        .import_memory(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert_eq!(a.importers().unwrap(), 1);
    let a = match a.free() {
        Err(e) => {
            assert!(
                matches!(e.error, Error::Busy { holders: 1, .. }),
                "{:?}",
                e.error
            );
            e.resource
        }
        Ok(()) => panic!("free with a live importer must be refused"),
    };
    assert!(a.wait_unleased(Some(SHORT)).unwrap_err().is_timeout());
    let (start, end) = (a.addr(), a.addr() + a.len());
    // Dropping defers the release: the range stays out of the pool.
    drop(a);
    assert_eq!(dev.deferred_frees(), 1);
    let mut out = [0u8; 10];
    m.read(0, &mut out).unwrap();
    assert_eq!(&out, b"kept alive");
    let mut others = Vec::new();
    for _ in 0..16 {
        let b = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
        assert!(
            b.addr() + b.len() <= start || b.addr() >= end,
            "the freed range was handed out again while imported"
        );
        others.push(b);
    }
    drop(others);
    drop((m, exported));
    wait_until("the deferred release", || dev.deferred_frees() == 0);
    drop(neighbour);
    assert_eq!(dev.memory_used(), 0);
}

#[test]
fn ascend_peer_import_is_for_device_copies_only() {
    let (backend, dev0) = open();
    let dev1 = backend.open(1).unwrap();
    let a = dev0.allocate(&aligned(0, PAGE)).unwrap();
    a.write(0, b"peer bytes").unwrap();
    let exported = dev0.export_memory(&a, &anyone()).unwrap();
    let peer = dev1
        .import_memory(
            exported.share().unwrap(),
            &ImportOptions {
                device: Some(1),
                peer_access: true,
                ..ImportOptions::default()
            },
        )
        .unwrap();
    assert!(peer.is_peer_only());
    let mut out = [0u8; 10];
    assert!(peer.read(0, &mut out).unwrap_err().is_unsupported());
    assert!(peer.write(0, &out).unwrap_err().is_unsupported());
    let local = dev1.allocate(&aligned(1, PAGE)).unwrap();
    let stream = dev1.create_stream().unwrap();
    assert!(dev1
        .write_async(&stream, &peer, 0, vec![1, 2, 3])
        .unwrap_err()
        .is_unsupported());
    dev1.copy_async(&stream, &local, 0, &peer, 0, 10).unwrap();
    dev1.synchronize(&stream, Some(LONG)).unwrap();
    local.read(0, &mut out).unwrap();
    assert_eq!(&out, b"peer bytes");
}

#[test]
fn ascend_has_no_managed_memory() {
    let (_b, dev) = open();
    assert!(dev
        .allocate(&AllocDesc::managed(PAGE))
        .unwrap_err()
        .is_unsupported());
}

#[test]
fn ascend_ipc_event_destroyed_before_import_is_refused() {
    let (_b, dev) = open();
    let ipc = EventFlags {
        interprocess: true,
        timing: false,
    };
    // Destroyed with no importer: an import after it is refused.
    let e = dev.create_event(ipc).unwrap();
    let exported = dev.export_event(&e, &ExportOptions::default()).unwrap();
    drop(e);
    let err = dev
        .import_event(exported.share().unwrap(), &ImportOptions::default())
        .unwrap_err();
    assert_vendor(&err, acl::RT_INVALID_HANDLE);
    // With an importer holding it, the exporter's drop waits for that
    // importer's lease: its event stays usable, and the event is destroyed
    // once it lets go.
    let e = dev.create_event(ipc).unwrap();
    let exported = dev.export_event(&e, &ExportOptions::default()).unwrap();
    let early = dev
        .import_event(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    drop(e);
    early.wait(WaitOptions::timeout(SHORT)).unwrap();
    drop(early);
    let mut refused = None;
    for _ in 0..3000 {
        match dev.import_event(exported.share().unwrap(), &ImportOptions::default()) {
            Err(e) => {
                refused = Some(e);
                break;
            }
            // Destruction runs on a thread once the lease is given back.
            Ok(late) => {
                drop(late);
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
    assert_vendor(
        &refused.expect("the event is destroyed once its importer let go"),
        acl::RT_INVALID_HANDLE,
    );
}
