//! The rules of `vendor/ascend.md`, each checked by name on the stand-in
//! runtime, through the backend and, where the runtime itself must refuse,
//! through its entry points.

use hal_core::testing::ContextProbe;
use hal_core::DeviceExt;
mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{backend, role, ROLE};
use hal_core::kit::vendor::acl;
use hal_core::{
    AllocDesc, Allocation, Backend, ByteRange, Capabilities, Device, Error, Event, EventFlags,
    ExportOptions, Handle, HandleFlags, ImportOptions, Importers, MemRef, Memory, Notify, PidKind,
    SharedHandle, WaitOptions,
};

const PAGE: u64 = 4096;
const LONG: Duration = Duration::from_secs(20);

fn dev(ordinal: u32) -> hal_ascend::AscendDevice {
    backend().open(ordinal).unwrap()
}

/// An export to anyone (`DISABLE_PID_VALIDATION`).
fn anyone() -> ExportOptions {
    ExportOptions {
        importers: Importers::Anyone,
        ..ExportOptions::default()
    }
}

fn page_aligned(d: &hal_ascend::AscendDevice, pages: u64) -> hal_ascend::AscendAllocation {
    let desc = AllocDesc {
        align: PAGE,
        ..AllocDesc::device(d.info().ordinal, pages * PAGE)
    };
    d.allocate(&desc).unwrap()
}

/// The child of the allow-list tests: prints its `process_id()` and OS
/// pid, then for every line `try` on stdin imports the handle text of
/// `HAL_ASCEND_TEST_HANDLE` and answers `ok` or `refused`.
fn importer_child() {
    let d = dev(0);
    println!("\n@id {} {}", d.process_id().unwrap(), std::process::id());
    let text = std::env::var("HAL_ASCEND_TEST_HANDLE").unwrap();
    for line in std::io::stdin().lock().lines() {
        if line.unwrap() != "try" {
            break;
        }
        let shared = SharedHandle::from(Handle::from_text(&text).unwrap());
        match d.import_memory(shared, &ImportOptions::default()) {
            Ok(m) => {
                let mut b = [0u8; 5];
                m.read(0, &mut b).unwrap();
                assert_eq!(&b, b"tgids");
                println!("@ok");
            }
            Err(Error::PermissionDenied { .. }) => println!("@refused"),
            Err(e) => panic!("unexpected: {e}"),
        }
    }
}

#[test]
fn pid_validation_is_on_by_default_and_lists_bare_tgids_not_os_pids() {
    if role().as_deref() == Some("importer") {
        return importer_child();
    }
    let d = dev(0);
    let a = page_aligned(&d, 1);
    a.write(0, b"tgids").unwrap();
    let mut exported = d.export_memory(&a, &ExportOptions::default()).unwrap();
    let h = exported.handle().clone();
    assert!(
        !h.flags.contains(HandleFlags::ANY_IMPORTER),
        "on by default"
    );
    assert!(h.allowed_pids.is_empty());
    assert_eq!(h.pid_kind, PidKind::Vendor, "the runtime checks bare tgids");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "pid_validation_is_on_by_default_and_lists_bare_tgids_not_os_pids",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, "importer")
        .env("HAL_ASCEND_TEST_HANDLE", exported.to_text())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = || loop {
        let l = lines.next().expect("the child's answer").unwrap();
        if let Some(rest) = l.strip_prefix("@id ") {
            return rest.to_string();
        }
        if let Some(answer) = l.strip_prefix('@') {
            return answer.to_string();
        }
    };
    let ids = next();
    let (tgid, pid) = ids.split_once(' ').unwrap();
    let (tgid, pid): (u32, u32) = (tgid.parse().unwrap(), pid.parse().unwrap());
    assert_ne!(
        tgid, pid,
        "a bare tgid is not the OS pid (as in a container)"
    );
    let mut ask = |stdin: &mut std::process::ChildStdin| {
        writeln!(stdin, "try").unwrap();
        next()
    };
    assert_eq!(ask(&mut stdin), "refused", "nobody is allowed by default");
    // The OS pid is the wrong id: the runtime's list holds bare tgids.
    d.allow_importers(&mut exported, &[pid]).unwrap();
    assert_eq!(ask(&mut stdin), "refused", "an OS pid admits nobody");
    d.allow_importers(&mut exported, &[tgid]).unwrap();
    assert_eq!(ask(&mut stdin), "ok", "the child's process_id() admits it");
    drop(stdin);
    assert!(child.wait().unwrap().success());
    // DISABLE_PID_VALIDATION: an export to anyone.
    let open = d.export_memory(&a, &anyone()).unwrap();
    assert!(open.handle().flags.contains(HandleFlags::ANY_IMPORTER));
}

#[test]
fn process_id_is_the_bare_tgid() {
    let d = dev(0);
    let id = d.process_id().unwrap();
    assert_ne!(id, std::process::id());
    assert_eq!(
        id,
        hal_mock_libascendcl::tgid::bare_tgid(std::process::id())
    );
}

#[test]
fn unaligned_export_is_refused_never_widened() {
    let d = dev(0);
    // Small allocations come from the runtime's pools: not on a page.
    let mut misaligned = None;
    let mut keep = Vec::new();
    for _ in 0..16 {
        let a = d.allocate(&AllocDesc::device(0, 3 * 512)).unwrap();
        if a.addr() % PAGE != 0 {
            misaligned = Some(a);
            break;
        }
        keep.push(a);
    }
    let a = misaligned.expect("a pool sub-allocation that is not page-aligned");
    match d.export_memory(&a, &ExportOptions::default()) {
        Err(Error::Misaligned { page_size, .. }) => assert_eq!(page_size, PAGE),
        other => panic!("expected Misaligned, got {other:?}"),
    }
    // Alignment is the device address's, not the offset's: inside an
    // allocation that does not start on a page, the whole page it holds
    // is exported (and nothing that starts off a page is).
    let big = (0..16)
        .map(|_| d.allocate(&AllocDesc::device(0, 3 * PAGE)).unwrap())
        .find(|a| a.addr() % PAGE != 0 && a.addr() % PAGE != PAGE / 2)
        .expect("a large allocation that is not page-aligned");
    let into_page = PAGE - big.addr() % PAGE;
    let inner = ExportOptions {
        range: Some(ByteRange::new(into_page, PAGE)),
        ..ExportOptions::default()
    };
    let e = d.export_memory(&big, &inner).unwrap();
    assert_eq!((e.handle().offset, e.handle().size), (into_page, PAGE));
    let off_page = ExportOptions {
        range: Some(ByteRange::new(PAGE - into_page, PAGE)),
        ..ExportOptions::default()
    };
    assert!(matches!(
        d.export_memory(&big, &off_page),
        Err(Error::Misaligned { .. })
    ));
    let b = page_aligned(&d, 2);
    for (offset, len) in [(512, PAGE), (0, PAGE + 512), (PAGE, 100)] {
        let opts = ExportOptions {
            range: Some(ByteRange::new(offset, len)),
            ..ExportOptions::default()
        };
        assert!(
            matches!(d.export_memory(&b, &opts), Err(Error::Misaligned { .. })),
            "{offset:#x}+{len:#x}"
        );
    }
    let whole = ExportOptions {
        range: Some(ByteRange::new(PAGE, PAGE)),
        ..ExportOptions::default()
    };
    let e = d.export_memory(&b, &whole).unwrap();
    assert_eq!((e.handle().offset, e.handle().size), (PAGE, PAGE));
    assert_eq!(e.handle().payload.len(), 65, "a 65-byte key");
}

#[test]
fn peer_flag_imports_onto_another_device_for_device_copies_only() {
    let (d0, d1) = (dev(0), dev(1));
    let a = page_aligned(&d0, 1);
    a.write(0, b"peer bytes").unwrap();
    let exported = d0.export_memory(&a, &anyone()).unwrap();
    let text = || SharedHandle::from(Handle::from_text(&exported.to_text()).unwrap());
    let without = d1.import_memory(text(), &ImportOptions::default());
    assert!(
        matches!(without, Err(Error::PermissionDenied { .. })),
        "without ENABLE_PEER_ACCESS: {without:?}"
    );
    let peer = ImportOptions {
        peer_access: true,
        ..ImportOptions::default()
    };
    let m = d1.import_memory(text(), &peer).unwrap();
    assert!(m.device_copies_only());
    let mut b = [0u8; 10];
    assert!(m.read(0, &mut b).unwrap_err().is_unsupported());
    assert!(m.write(0, b"x").unwrap_err().is_unsupported());
    let s = d1.create_stream().unwrap();
    assert!(d1
        .write_async(&s, MemRef::Mapping(&m), 0, vec![1])
        .unwrap_err()
        .is_unsupported());
    assert!(d1
        .memset_async(&s, MemRef::Mapping(&m), 0, 1, 0)
        .unwrap_err()
        .is_unsupported());
    // The one use: an asynchronous device-to-device copy.
    let local = page_aligned(&d1, 1);
    d1.copy_async(
        &s,
        MemRef::Allocation(&local),
        0,
        MemRef::Mapping(&m),
        0,
        10,
    )
    .unwrap();
    d1.synchronize(&s, Some(LONG)).unwrap();
    local.read(0, &mut b).unwrap();
    assert_eq!(&b, b"peer bytes");
}

#[test]
fn close_order_importers_close_then_the_exporter_frees() {
    let (d0, d1) = (dev(0), dev(1));
    let a = page_aligned(&d0, 1);
    let exported = d0.export_memory(&a, &anyone()).unwrap();
    let peer = ImportOptions {
        peer_access: true,
        ..ImportOptions::default()
    };
    let m = d1
        .import_memory(
            SharedHandle::from(Handle::from_text(&exported.to_text()).unwrap()),
            &peer,
        )
        .unwrap();
    assert_eq!(a.importers().unwrap(), 1);
    let a = match a.free() {
        Err(f) => {
            assert!(
                matches!(f.error, Error::Busy { holders: 1, .. }),
                "{}",
                f.error
            );
            f.resource
        }
        Ok(()) => panic!("freed under an importer"),
    };
    assert!(a
        .wait_unleased(Some(Duration::from_millis(20)))
        .unwrap_err()
        .is_timeout());
    drop(m);
    a.wait_unleased(Some(LONG)).unwrap();
    a.free().unwrap();
}

/// An import from another process opens the key, and dropping it closes
/// the key once (`aclrtIpcMemClose`, counted in the importing child) and
/// gives its lease back: the exporter frees after.
#[test]
fn dropping_an_import_from_another_process_closes_its_key() {
    const CLOSER: &str = "closer";
    if role().as_deref() == Some(CLOSER) {
        let d = dev(0);
        let text = std::env::var("HAL_ASCEND_TEST_HANDLE").unwrap();
        let shared = SharedHandle::from(Handle::from_text(&text).unwrap());
        let m = d.import_memory(shared, &ImportOptions::default()).unwrap();
        let mut b = [0u8; 5];
        m.read(0, &mut b).unwrap();
        assert_eq!(&b, b"close");
        let closes = common::calls("aclrtIpcMemClose");
        drop(m);
        assert_eq!(common::calls("aclrtIpcMemClose"), closes + 1, "closed once");
        println!("@closed");
        return;
    }
    let d = dev(0);
    let a = page_aligned(&d, 1);
    a.write(0, b"close").unwrap();
    let exported = d.export_memory(&a, &anyone()).unwrap();
    let out = common::child(
        "dropping_an_import_from_another_process_closes_its_key",
        &[
            (ROLE, CLOSER),
            ("HAL_ASCEND_TEST_HANDLE", exported.to_text().as_str()),
        ],
    );
    common::assert_ok(&out, "the importing child");
    assert!(String::from_utf8_lossy(&out.stdout).contains("@closed"));
    a.wait_unleased(Some(LONG)).unwrap();
    a.free().unwrap();
}

#[test]
fn ipc_events_come_alone_and_cannot_be_queried_or_timed() {
    let d = dev(0);
    assert!(!d.capabilities().contains(Capabilities::IPC_EVENT_QUERY));
    let timed = d.create_event(EventFlags {
        interprocess: true,
        timing: true,
    });
    match timed {
        Err(e) => assert!(acl::RT_PARAM_INVALID.matches(&e), "{e}"),
        Ok(_) => panic!("ACL_EVENT_IPC | TIME_LINE was accepted"),
    }
    let plain = d.create_event(EventFlags::default()).unwrap();
    assert!(d.export_event(&plain, &ExportOptions::default()).is_err());
    let e = d
        .create_event(EventFlags {
            interprocess: true,
            timing: false,
        })
        .unwrap();
    assert!(e.query().unwrap_err().is_unsupported());
    let exported = d.export_event(&e, &ExportOptions::default()).unwrap();
    assert!(exported.handle().flags.contains(HandleFlags::NO_QUERY));
    assert_eq!(exported.handle().payload.len(), 64);
    let opened = d
        .import_event(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert!(opened.query().unwrap_err().is_unsupported());
    // The exporter records, the importer's stream waits.
    let s = d.create_stream().unwrap();
    d.record_event(&s, &e).unwrap();
    let waiter = d.create_stream().unwrap();
    d.stream_wait_event(&waiter, &opened).unwrap();
    d.synchronize(&waiter, Some(LONG)).unwrap();
    opened.wait(WaitOptions::timeout(LONG)).unwrap();
}

#[test]
fn an_exported_ipc_event_outlives_its_exporter_until_importers_close() {
    let d = dev(0);
    let e = d
        .create_event(EventFlags {
            interprocess: true,
            timing: false,
        })
        .unwrap();
    let exported = d.export_event(&e, &ExportOptions::default()).unwrap();
    let opened = d
        .import_event(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    // Dropping the exporter's event defers its destroy behind the lease.
    drop(e);
    drop(exported);
    opened.wait(WaitOptions::timeout(LONG)).unwrap();
    drop(opened);
}

#[test]
fn creator_only_notify_wait_and_importers_record() {
    let d = dev(0);
    let n = d.create_notify().unwrap();
    let exported = d.export_notify(&n, &anyone()).unwrap();
    assert_eq!(exported.handle().payload.len(), 65);
    let imported = d
        .import_notify(
            SharedHandle::from(Handle::from_text(&exported.to_text()).unwrap()),
            &ImportOptions::default(),
        )
        .unwrap();
    // Which side may wait shows in the notify's debug form too.
    assert!(format!("{n:?}").contains("creator: true"), "{n:?}");
    assert!(
        format!("{imported:?}").contains("creator: false"),
        "{imported:?}"
    );
    assert!(matches!(
        imported.wait(WaitOptions::timeout(Duration::from_millis(5))),
        Err(Error::PermissionDenied { .. })
    ));
    let s = d.create_stream().unwrap();
    assert!(matches!(
        d.stream_wait_notify(&s, &imported, None),
        Err(Error::PermissionDenied { .. })
    ));
    d.record_notify(&s, &imported).unwrap();
    n.wait(WaitOptions::timeout(LONG)).unwrap();
    imported.signal().unwrap();
    n.wait(WaitOptions::timeout(LONG)).unwrap();
    assert!(n
        .wait(WaitOptions::timeout(Duration::from_millis(5)))
        .unwrap_err()
        .is_timeout());
}

#[test]
fn a_notify_export_has_no_range_and_no_read_only_form() {
    let d = dev(0);
    let n = d.create_notify().unwrap();
    for opts in [
        ExportOptions {
            read_only: true,
            ..ExportOptions::default()
        },
        ExportOptions {
            range: Some(ByteRange { offset: 0, len: 4 }),
            ..ExportOptions::default()
        },
    ] {
        let e = d.export_notify(&n, &opts).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    }
    let _ = d.export_notify(&n, &ExportOptions::default()).unwrap();
}

#[test]
fn a_notify_imported_onto_another_device_needs_the_peer_flag() {
    let (d0, d1) = (dev(0), dev(1));
    let n = d0.create_notify().unwrap();
    let exported = d0.export_notify(&n, &anyone()).unwrap();
    let shared = || SharedHandle::from(Handle::from_text(&exported.to_text()).unwrap());
    let no_peer = ImportOptions {
        peer_access: false,
        ..ImportOptions::default()
    };
    assert!(
        d1.import_notify(shared(), &no_peer).is_err(),
        "another device's notify without ENABLE_PEER_ACCESS"
    );
    // On its own device the import needs no peer flag.
    let _ = d0.import_notify(shared(), &no_peer).unwrap();
    let peer = ImportOptions {
        peer_access: true,
        ..ImportOptions::default()
    };
    let imported = d1.import_notify(shared(), &peer).unwrap();
    let s = d1.create_stream().unwrap();
    d1.record_notify(&s, &imported).unwrap();
    n.wait(WaitOptions::timeout(LONG)).unwrap();
}

#[test]
fn dropping_an_exported_notify_forgets_its_key_and_no_other() {
    let d = dev(0);
    let (a, b) = (d.create_notify().unwrap(), d.create_notify().unwrap());
    let mut ea = d.export_notify(&a, &ExportOptions::default()).unwrap();
    let mut eb = d.export_notify(&b, &ExportOptions::default()).unwrap();
    let me = d.process_id().unwrap();
    drop(a);
    let e = d.allow_importers(&mut ea, &[me]).unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e:?}");
    d.allow_importers(&mut eb, &[me]).unwrap();
}

#[test]
fn timeout_mapping_a_bounded_stream_wait_ends_with_the_runtime_timeout() {
    assert_eq!(hal_ascend::vendor_timeout(None), 0, "0 is forever");
    assert_eq!(hal_ascend::vendor_timeout(Some(Duration::ZERO)), 1);
    let d = dev(0);
    let n = d.create_notify().unwrap();
    let s = d.create_stream().unwrap();
    d.stream_wait_notify(&s, &n, Some(Duration::from_millis(10)))
        .unwrap();
    let e = d.synchronize(&s, Some(LONG)).unwrap_err();
    assert!(acl::RT_WAIT_TIMEOUT.matches(&e), "{e}");
}

#[test]
fn a_host_wait_reports_a_runtime_error_and_retries_only_its_own_slice_timeouts() {
    if role().as_deref() == Some("wait-fault") {
        // The host wait runs in slices, each a bounded wait-and-reset on
        // the notify's stream whose ACL_ERROR_RT_WAIT_TIMEOUT means "not
        // yet"; any other error of the runtime ends the wait with it.
        let d = dev(0);
        let n = d.create_notify().unwrap();
        let e = n
            .wait(WaitOptions {
                timeout: Some(LONG),
                ..WaitOptions::default()
            })
            .unwrap_err();
        assert!(acl::RT_INTERNAL_ERROR.matches(&e), "{e}");
        // One fault: the next wait sees only slice timeouts, then its own.
        let e = n
            .wait(WaitOptions {
                timeout: Some(Duration::from_millis(50)),
                ..WaitOptions::default()
            })
            .unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
        return;
    }
    let out = common::child(
        "a_host_wait_reports_a_runtime_error_and_retries_only_its_own_slice_timeouts",
        &[
            (ROLE, "wait-fault"),
            (hal_mock_libascendcl::visible::FAIL_VAR, "wait=507000"),
        ],
    );
    common::assert_ok(&out, "the fault-injected child");
}

#[test]
fn vendor_errors_keep_number_name_and_the_runtime_text() {
    if role().as_deref() == Some("fault") {
        let d = dev(0);
        let e = d.allocate(&AllocDesc::device(0, PAGE)).unwrap_err();
        assert!(acl::RT_MEMORY_ALLOCATION.matches(&e), "{e}");
        let Error::Vendor(v) = &e else {
            panic!("{e:?}")
        };
        assert_eq!(v.code, 207_001);
        assert_eq!(v.name, "ACL_ERROR_RT_MEMORY_ALLOCATION");
        // aclGetRecentErrMsg's text names the entry point.
        assert!(v.message.contains("aclrtMalloc"), "{}", v.message);
        assert!(d.allocate(&AllocDesc::device(0, PAGE)).is_ok(), "one fault");
        return;
    }
    let out = common::child(
        "vendor_errors_keep_number_name_and_the_runtime_text",
        &[
            (ROLE, "fault"),
            (hal_mock_libascendcl::visible::FAIL_VAR, "allocate=207001"),
        ],
    );
    common::assert_ok(&out, "the fault-injected child");
}

#[test]
fn every_call_leaves_the_threads_current_device_as_it_was() {
    let b = backend();
    let (d0, d1) = (b.open(0).unwrap(), b.open(1).unwrap());
    std::thread::spawn(move || {
        assert_eq!(d0.current_context().unwrap(), None);
        let a = d0.allocate(&AllocDesc::device(0, PAGE)).unwrap();
        assert_eq!(d0.current_context().unwrap(), None, "still none");
        // A thread on device 1 (a framework's) calls into device 0.
        let _on1 = d1.allocate(&AllocDesc::device(1, PAGE)).unwrap();
        drop(_on1);
        let set = common::set_device(1);
        assert_eq!(set, 0);
        a.write(0, b"x").unwrap();
        assert_eq!(d0.current_context().unwrap(), Some(2), "device 1 again");
    })
    .join()
    .unwrap();
}

#[test]
fn a_second_initialisation_is_tolerated_and_the_runtime_never_finalised() {
    let (a, b) = (backend(), backend());
    assert!(a.open(0).is_ok() && b.open(0).is_ok());
    assert!(!hal_ascend::RESOLVED.contains(&"aclFinalize"));
}

#[test]
fn a_dropped_stream_runs_its_work_on_and_lets_go_of_it_then() {
    hal_tests::cases::dropped_stream_runs_its_work_on(&dev(0));
}

#[test]
fn a_device_shows_its_ordinal_and_name() {
    let d = dev(0);
    let shown = format!("{d:?}");
    for part in [
        "AscendDevice".to_string(),
        "ordinal: 0".to_string(),
        format!("name: {:?}", d.info().name),
    ] {
        assert!(shown.contains(&part), "{shown} lacks {part}");
    }
}

#[test]
fn memory_for_another_device_is_refused() {
    match dev(0).allocate(&AllocDesc::device(1, 4096)) {
        Err(Error::InvalidArgument { what }) => assert!(what.contains("device 1"), "{what}"),
        other => panic!("device 1's memory from device 0: {other:?}"),
    }
}

#[test]
fn a_stream_shows_its_handle_and_whether_it_owns_it() {
    let s = dev(0).create_stream().unwrap();
    let shown = format!("{s:?}");
    for part in ["AscendStream", "raw: 0x", "owned: true"] {
        assert!(shown.contains(part), "{shown} lacks {part}");
    }
}

/// Peer access is a capability only where there is a peer: with one
/// visible device (`ASCEND_RT_VISIBLE_DEVICES=0`, in a child) it is not
/// offered; with the stand-in's several it is.
#[test]
fn peer_access_needs_a_second_device() {
    const ONE: &str = "one-device";
    let devices = backend().devices().unwrap();
    if role().as_deref() == Some(ONE) {
        assert_eq!(devices.len(), 1);
        assert!(!devices[0].capabilities.contains(Capabilities::PEER_ACCESS));
        println!("@one done");
        return;
    }
    assert!(devices.len() > 1, "the stand-in has several devices");
    for d in &devices {
        assert!(d.capabilities.contains(Capabilities::PEER_ACCESS));
    }
    let out = common::child(
        "peer_access_needs_a_second_device",
        &[(ROLE, ONE), ("ASCEND_RT_VISIBLE_DEVICES", "0")],
    );
    common::assert_ok(&out, "the one-device child");
    assert!(String::from_utf8_lossy(&out.stdout).contains("@one done"));
}

#[test]
fn a_backend_shows_its_name() {
    assert!(format!("{:?}", backend()).contains("AscendBackend"));
}

/// Freeing exported memory forgets its key in this process: the handle,
/// imported here after the free, finds nothing, even where a new
/// allocation took the freed address.
#[test]
fn an_export_of_freed_memory_is_not_found_here() {
    let d = dev(0);
    let a = d.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    let freed_at = a.addr();
    let ex = d.export_memory(&a, &ExportOptions::default()).unwrap();
    drop(a);
    // Held to the end, so that the address stays taken.
    let _reused = hal_tests::reuse::allocation_at(
        freed_at,
        || d.allocate(&AllocDesc::device(0, PAGE)),
        |a| a.addr(),
    );
    let shared = SharedHandle::from(Handle::from_text(&ex.to_text()).unwrap());
    if let Ok(m) = d.import_memory(shared, &ImportOptions::default()) {
        panic!("freed memory imported at {:#x}", m.addr());
    }
}

#[test]
fn a_mapping_shows_its_address_length_and_device() {
    let d = dev(0);
    let a = d.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    let ex = d.export_memory(&a, &ExportOptions::default()).unwrap();
    let shared = SharedHandle::from(Handle::from_text(&ex.to_text()).unwrap());
    let m = d.import_memory(shared, &ImportOptions::default()).unwrap();
    assert!(!m.device_copies_only(), "this process's own memory");
    let shown = format!("{m:?}");
    for part in [
        "AscendMapping".to_string(),
        format!("addr: {:#x}", a.addr()),
        format!("len: {PAGE}"),
        "device: 0".to_string(),
        "copies_only: false".to_string(),
    ] {
        assert!(shown.contains(&part), "{shown} lacks {part}");
    }
}

#[test]
fn devices_declare_the_dlpack_types_of_ascend_memory() {
    use hal_core::dlpack::{dl_device, DLDeviceType};
    use hal_core::Location;
    let d = dev(0);
    let info = d.info();
    let device = dl_device(info, Location::Device(0)).unwrap();
    assert_eq!(
        device.device_type,
        DLDeviceType::EXT_DEV,
        "DLPack 1.x has no Ascend type"
    );
    assert_eq!(
        dl_device(info, Location::Host).unwrap().device_type,
        DLDeviceType::CPU
    );
    let err = dl_device(info, Location::Managed).unwrap_err();
    assert!(err.is_unsupported(), "Ascend has no managed memory: {err}");
}
