//! `Importers::SameUser` on hal-ascend: the runtime checks its own
//! allow-list of process ids, not the importer's user, so an export to
//! "any process of this user" is refused as Unsupported, naming why.

use hal_core::DeviceExt;
use hal_core::{AllocDesc, Backend, Device, ExportOptions, Importers};

#[test]
fn same_user_exports_are_unsupported() {
    let backend = hal_ascend::AscendBackend::with_library(hal_mock_libascendcl::built_library());
    let dev = backend.open(0).unwrap();
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
    let notify = dev.create_notify().unwrap();
    let e = dev.export_notify(&notify, &opts).unwrap_err();
    assert!(
        e.is_unsupported() && e.to_string().contains("SameUser"),
        "{e}"
    );
}
