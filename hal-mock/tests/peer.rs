//! Import onto another device needs peer access, on both vendors.

use hal_core::DeviceExt;
mod common;

use common::{aligned, assert_vendor};
use hal_core::{
    Backend, Device, ExportOptions, ImportOptions, Importers, Memory, Notify, WaitOptions,
};
use hal_mock::codes::{acl, cuda, Code};
use hal_mock::MockBackend;

const PAGE: u64 = 4096;

fn onto(device: u32, peer_access: bool) -> ImportOptions {
    ImportOptions {
        device: Some(device),
        peer_access,
        ..ImportOptions::default()
    }
}

fn check_peer_rule(backend: MockBackend, refused: Code) {
    let dev0 = backend.open(0).unwrap();
    let dev1 = backend.open(1).unwrap();
    let a = dev0.allocate(&aligned(0, PAGE)).unwrap();
    let exported = dev0
        .export_memory(
            &a,
            &ExportOptions {
                importers: Importers::Anyone,
                ..ExportOptions::default()
            },
        )
        .unwrap();
    // The exporter's own device needs nothing (default: matched by UUID).
    let same = dev1
        .import_memory(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert_eq!(same.location(), hal_core::Location::Device(0));
    // Another device without peer access: the vendor's error.
    let err = dev1
        .import_memory(exported.share().unwrap(), &onto(1, false))
        .unwrap_err();
    assert_vendor(&err, refused);
    // With the import flag.
    let m = dev1
        .import_memory(exported.share().unwrap(), &onto(1, true))
        .unwrap();
    assert_eq!(m.device(), 1);
    drop(m);
    // With peer access enabled first.
    assert!(!dev1.peer_access_enabled(0));
    dev1.enable_peer_access(0).unwrap();
    assert!(dev1.peer_access_enabled(0));
    let _ = dev1
        .import_memory(exported.share().unwrap(), &onto(1, false))
        .unwrap();
    // Peer access is directional.
    assert!(!dev0.peer_access_enabled(1));
}

#[test]
fn cuda_import_onto_another_device_needs_peer_access() {
    check_peer_rule(MockBackend::cuda(), cuda::PEER_ACCESS_NOT_ENABLED);
    let backend = MockBackend::cuda();
    let dev = backend.open(2).unwrap();
    dev.enable_peer_access(3).unwrap();
    assert_vendor(
        &dev.enable_peer_access(3).unwrap_err(),
        cuda::PEER_ACCESS_ALREADY_ENABLED,
    );
    assert_vendor(
        &dev.enable_peer_access(2).unwrap_err(),
        cuda::INVALID_DEVICE,
    );
    assert_vendor(
        &dev.enable_peer_access(9).unwrap_err(),
        cuda::INVALID_DEVICE,
    );
}

#[test]
fn ascend_import_onto_another_device_needs_peer_access() {
    check_peer_rule(MockBackend::ascend(), acl::RT_NO_PERMISSION);
}

#[test]
fn ascend_notify_import_onto_another_device_needs_peer_access() {
    let backend = MockBackend::ascend();
    let dev0 = backend.open(0).unwrap();
    let n = dev0.create_notify().unwrap();
    let exported = dev0
        .export_notify(
            &n,
            &ExportOptions {
                importers: Importers::Anyone,
                ..ExportOptions::default()
            },
        )
        .unwrap();
    let err = dev0
        .import_notify(exported.share().unwrap(), &onto(1, false))
        .unwrap_err();
    assert_vendor(&err, acl::RT_NO_PERMISSION);
    let imported = dev0
        .import_notify(exported.share().unwrap(), &onto(1, true))
        .unwrap();
    imported.signal().unwrap();
    n.wait(WaitOptions::timeout(common::LONG)).unwrap();
}

#[test]
fn handle_of_an_unknown_device_is_refused() {
    let exporter = MockBackend::cuda();
    let dev = exporter.open(3).unwrap();
    let a = dev.allocate(&hal_core::AllocDesc::device(3, PAGE)).unwrap();
    let exported = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    // An importer whose profile has fewer devices does not know device 3.
    let importer = MockBackend::new(hal_mock::Profile::cuda().with_devices(2));
    let err = importer
        .open(0)
        .unwrap()
        .import_memory(exported.share().unwrap(), &ImportOptions::default())
        .unwrap_err();
    assert_vendor(&err, cuda::INVALID_DEVICE);
    // The other vendor's profile refuses it as another backend's handle.
    let ascend = MockBackend::ascend().open(0).unwrap();
    assert!(matches!(
        ascend.import_memory(exported.share().unwrap(), &ImportOptions::default()),
        Err(hal_core::Error::InvalidHandle(_))
    ));
}
