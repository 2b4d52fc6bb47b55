//! `Importers::SameUser` on hal-cuda: a legacy IPC handle, an IPC event
//! and a VMM export are opened by whoever holds the handle, with no broker
//! checking the importer's user, so each export to "any process of this
//! user" is refused as Unsupported, naming why.

use hal_core::DeviceExt;
use hal_core::{AllocDesc, Backend, Device, EventFlags, ExportOptions, Importers};

mod common;

#[test]
fn same_user_exports_are_unsupported() {
    let dev = common::backend().open(0).unwrap();
    let opts = ExportOptions {
        importers: Importers::SameUser,
        ..Default::default()
    };
    let mem = dev.allocate(&AllocDesc::device(0, 2 << 20)).unwrap();
    let e = dev.export_memory(&mem, &opts).unwrap_err();
    assert!(
        e.is_unsupported() && e.to_string().contains("SameUser"),
        "{e}"
    );
    let event = dev
        .create_event(EventFlags {
            interprocess: true,
            ..Default::default()
        })
        .unwrap();
    let e = dev.export_event(&event, &opts).unwrap_err();
    assert!(
        e.is_unsupported() && e.to_string().contains("SameUser"),
        "{e}"
    );
    let notify = dev.create_notify().unwrap();
    let e = dev.export_notify(&notify, &opts).unwrap_err();
    assert!(
        e.is_unsupported() && e.to_string().contains("SameUser"),
        "{e}"
    );
}
