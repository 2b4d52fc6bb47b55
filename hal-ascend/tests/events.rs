//! Ascend events by the runtime's rules, on the stand-in: the flags each
//! kind is created with, what an IPC event export refuses, and when the
//! exporter's event is destroyed (counted in a child process of its own,
//! where nothing else destroys events).

mod common;

use common::{alone_in_a_child, backend, calls};
use hal_core::kit::vendor::acl;
use hal_core::{
    Backend, ByteRange, Device, Error, EventFlags, ExportOptions, ImportOptions, Importers,
};

fn dev() -> hal_ascend::AscendDevice {
    backend().open(0).unwrap()
}

fn ipc() -> EventFlags {
    EventFlags {
        interprocess: true,
        timing: false,
    }
}

#[test]
fn each_kind_of_event_is_created_with_its_flags() {
    let d = dev();
    // ACL_EVENT_SYNC, SYNC | TIME_LINE and ACL_EVENT_IPC alone are taken
    // (the runtime refuses a flag of 0); IPC with timing is the runtime's
    // refusal, unchanged.
    for timing in [false, true] {
        let _ = d
            .create_event(EventFlags {
                interprocess: false,
                timing,
            })
            .unwrap_or_else(|e| panic!("a plain event, timing {timing}: {e}"));
    }
    let _ = d.create_event(ipc()).unwrap();
    let both = EventFlags {
        interprocess: true,
        timing: true,
    };
    match d.create_event(both) {
        Err(e) => assert!(acl::RT_PARAM_INVALID.matches(&e), "{e}"),
        Ok(_) => panic!("ACL_EVENT_IPC | TIME_LINE was accepted"),
    }
}

#[test]
fn an_ipc_event_export_refuses_a_pid_list_a_range_and_read_only_each_alone() {
    let d = dev();
    let e = d.create_event(ipc()).unwrap();
    for opts in [
        ExportOptions {
            importers: Importers::Pids(vec![1]),
            ..ExportOptions::default()
        },
        ExportOptions {
            range: Some(ByteRange { offset: 0, len: 4 }),
            ..ExportOptions::default()
        },
        ExportOptions {
            read_only: true,
            ..ExportOptions::default()
        },
    ] {
        let err = d.export_event(&e, &opts).unwrap_err();
        assert!(err.is_unsupported(), "{opts:?}: {err}");
    }
    let _ = d.export_event(&e, &ExportOptions::default()).unwrap();
}

#[test]
fn an_imported_event_is_not_exported_again() {
    let d = dev();
    let e = d.create_event(ipc()).unwrap();
    let exported = d.export_event(&e, &ExportOptions::default()).unwrap();
    let opened = d
        .import_event(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    match d.export_event(&opened, &ExportOptions::default()) {
        Err(Error::InvalidArgument { what }) => assert!(what.contains("created here"), "{what}"),
        other => panic!("an imported event exported again: {other:?}"),
    }
}

#[test]
fn an_event_shows_its_kind() {
    let d = dev();
    let plain = format!("{:?}", d.create_event(EventFlags::default()).unwrap());
    assert!(
        plain.contains("AscendEvent") && plain.contains("interprocess: false"),
        "{plain}"
    );
    let e = d.create_event(ipc()).unwrap();
    let exported = d.export_event(&e, &ExportOptions::default()).unwrap();
    let opened = d
        .import_event(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let shown = format!("{e:?} {opened:?}");
    assert!(
        shown.contains("interprocess: true, imported: false")
            && shown.contains("interprocess: true, imported: true"),
        "{shown}"
    );
}

/// In the child: the exporter's event is destroyed at its drop when nobody
/// imported it, and only after the last importer closed when one did.
fn destroy_order() {
    const DESTROY: &str = "aclrtDestroyEvent";
    let d = dev();
    let lone = d.create_event(ipc()).unwrap();
    let _ = d.export_event(&lone, &ExportOptions::default()).unwrap();
    let before = calls(DESTROY);
    drop(lone);
    assert_eq!(calls(DESTROY), before + 1, "destroyed at its drop");

    let e = d.create_event(ipc()).unwrap();
    let exported = d.export_event(&e, &ExportOptions::default()).unwrap();
    let opened = d
        .import_event(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let before = calls(DESTROY);
    drop(e);
    drop(exported);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(calls(DESTROY), before, "not while an importer holds it");
    drop(opened);
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while calls(DESTROY) < before + 2 {
        assert!(
            std::time::Instant::now() < end,
            "the exporter's event was never destroyed after its importer closed"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn the_exporters_event_is_destroyed_after_its_last_importer() {
    alone_in_a_child(
        "the_exporters_event_is_destroyed_after_its_last_importer",
        destroy_order,
    );
}
