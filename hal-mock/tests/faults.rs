//! Fault injection: injected vendor errors, lost devices, missing entry
//! points, and how the layers above report them.

use hal_core::DeviceExt;
mod common;

use common::{aligned, assert_unsupported, assert_vendor, LONG};
use hal_core::VmmExt;
use hal_core::{
    AllocDesc, Backend, Device, Error, Event, EventFlags, ExportOptions, ImportOptions, Importers,
    Memory, Notify, WaitOptions,
};
use hal_mock::codes::{acl, cuda, Code};
use hal_mock::fault::FaultOp;
use hal_mock::MockBackend;

const PAGE: u64 = 4096;

fn anyone() -> ExportOptions {
    ExportOptions {
        importers: Importers::Anyone,
        ..ExportOptions::default()
    }
}

#[test]
fn next_allocate_export_import_and_wait_fail_with_the_chosen_error() {
    let backend = MockBackend::cuda();
    let dev = backend.open(0).unwrap();
    let faults = backend.faults();
    let custom = Code::new(217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED");

    faults.fail_next(FaultOp::Allocate, cuda::OUT_OF_MEMORY);
    assert_vendor(
        &dev.allocate(&AllocDesc::device(0, PAGE)).unwrap_err(),
        cuda::OUT_OF_MEMORY,
    );
    let a = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();

    faults.fail_next(FaultOp::Export, cuda::UNKNOWN);
    assert_vendor(
        &dev.export_memory(&a, &anyone()).unwrap_err(),
        cuda::UNKNOWN,
    );
    let exported = dev.export_memory(&a, &anyone()).unwrap();

    faults.fail_next(FaultOp::Import, custom);
    let err = dev
        .import_memory(exported.share().unwrap(), &ImportOptions::default())
        .unwrap_err();
    assert_vendor(&err, custom);
    assert!(err
        .to_string()
        .contains("CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"));
    assert!(err.to_string().contains("217"));
    let _ = dev
        .import_memory(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();

    let n = dev.create_notify().unwrap();
    n.signal().unwrap();
    faults.fail_next(FaultOp::Wait, cuda::NOT_PERMITTED);
    assert_vendor(
        &n.wait(WaitOptions::timeout(LONG)).unwrap_err(),
        cuda::NOT_PERMITTED,
    );
    n.wait(WaitOptions::timeout(LONG)).unwrap();

    let ev = dev.create_event(EventFlags::default()).unwrap();
    faults.fail_next(FaultOp::Wait, cuda::UNKNOWN);
    assert_vendor(
        &hal_core::wait::block_on(ev.wait_async(WaitOptions::timeout(LONG))).unwrap_err(),
        cuda::UNKNOWN,
    );
    let stream = dev.create_stream().unwrap();
    faults.fail_next(FaultOp::Wait, cuda::UNKNOWN);
    assert_vendor(
        &dev.synchronize(&stream, Some(LONG)).unwrap_err(),
        cuda::UNKNOWN,
    );
    faults.assert_consumed().unwrap();

    // Faults queue up.
    faults.fail_next(FaultOp::Allocate, cuda::OUT_OF_MEMORY);
    faults.fail_next(FaultOp::Allocate, cuda::INVALID_VALUE);
    assert_eq!(faults.pending(FaultOp::Allocate), 2);
    assert_vendor(
        &dev.allocate_physical(2 << 20).unwrap_err(),
        cuda::OUT_OF_MEMORY,
    );
    assert_vendor(
        &dev.allocate(&AllocDesc::device(0, PAGE)).unwrap_err(),
        cuda::INVALID_VALUE,
    );
    assert!(faults.assert_consumed().is_ok());
}

#[test]
fn a_lost_device_fails_every_later_call() {
    for (backend, lost) in [
        (MockBackend::cuda(), cuda::DEVICE_UNAVAILABLE),
        (MockBackend::ascend(), acl::RT_LOST_HEARTBEAT),
    ] {
        let dev = backend.open(0).unwrap();
        let a = dev.allocate(&aligned(0, PAGE)).unwrap();
        let exported = dev.export_memory(&a, &anyone()).unwrap();
        let m = dev
            .import_memory(exported.share().unwrap(), &ImportOptions::default())
            .unwrap();
        let stream = dev.create_stream().unwrap();
        let gate = dev.create_notify().unwrap();
        dev.stream_wait_notify(&stream, &gate, None).unwrap();
        dev.write_async(&stream, &a, 0, vec![1; 16]).unwrap();

        backend.faults().lose_device(0);
        let mut buf = [0u8; 4];
        assert_vendor(&a.read(0, &mut buf).unwrap_err(), lost);
        assert_vendor(&m.write(0, &buf).unwrap_err(), lost);
        assert_vendor(&dev.allocate(&aligned(0, PAGE)).unwrap_err(), lost);
        assert_vendor(&dev.export_memory(&a, &anyone()).unwrap_err(), lost);
        assert_vendor(&dev.create_stream().unwrap_err(), lost);
        assert_vendor(&gate.wait(WaitOptions::timeout(LONG)).unwrap_err(), lost);
        assert_vendor(&dev.synchronize(&stream, Some(LONG)).unwrap_err(), lost);
        assert_vendor(&backend.open(0).unwrap_err(), lost);
        // The queued work failed instead of running.
        assert!(backend.faults().is_lost(0));
        // Other devices are untouched.
        let dev1 = backend.open(1).unwrap();
        let _ = dev1.allocate(&aligned(1, PAGE)).unwrap();
    }
}

#[test]
fn a_missing_entry_point_is_unsupported_naming_it() {
    let backend = MockBackend::cuda();
    let dev = backend.open(0).unwrap();
    let a = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    backend.faults().remove_entry_point("cuIpcGetMemHandle");
    assert_unsupported(
        &dev.export_memory(&a, &anyone()).unwrap_err(),
        "cuIpcGetMemHandle",
    );
    backend.faults().remove_entry_point("cuMemCreate");
    assert_unsupported(&dev.allocate_physical(2 << 20).unwrap_err(), "cuMemCreate");
    backend.faults().restore_entry_point("cuIpcGetMemHandle");
    let _ = dev.export_memory(&a, &anyone()).unwrap();

    let ascend = MockBackend::ascend();
    let dev = ascend.open(0).unwrap();
    ascend
        .faults()
        .remove_entry_point("aclrtIpcMemGetExportKey");
    let a = dev.allocate(&aligned(0, PAGE)).unwrap();
    assert_unsupported(
        &dev.export_memory(&a, &anyone()).unwrap_err(),
        "aclrtIpcMemGetExportKey",
    );
    ascend.faults().remove_entry_point("aclrtCreateNotify");
    assert_unsupported(&dev.create_notify().unwrap_err(), "aclrtCreateNotify");
    ascend.faults().clear();
    let _ = dev.create_notify().unwrap();
}

#[test]
fn faults_belong_to_one_backend_instance() {
    let (faulty, clean) = (MockBackend::cuda(), MockBackend::cuda());
    faulty.faults().lose_device(0);
    faulty
        .faults()
        .fail_next(FaultOp::Allocate, cuda::OUT_OF_MEMORY);
    faulty.faults().remove_entry_point("cuMemAlloc_v2");
    let dev = clean.open(0).unwrap();
    let _ = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    assert!(faulty.open(0).is_err());
    assert_eq!(faulty.faults().pending(FaultOp::Allocate), 1);
}

#[test]
fn the_dynamic_layer_reports_injected_faults_unchanged() {
    let backend = MockBackend::ascend();
    backend
        .faults()
        .fail_next(FaultOp::Allocate, acl::RT_MEMORY_ALLOCATION);
    use hal_core::dynamic::DynBackend;
    let dynamic: &dyn DynBackend = &backend;
    let dev = dynamic.open(0).unwrap();
    let Err(err) = dev.allocate(&AllocDesc::device(0, PAGE)) else {
        panic!("the injected fault was lost");
    };
    assert_vendor(&err, acl::RT_MEMORY_ALLOCATION);
    assert_eq!(err.kind_name(), "vendor");
    match &err {
        Error::Vendor(v) => assert_eq!(v.backend, "mock-ascend"),
        other => panic!("{other:?}"),
    }
    backend.faults().remove_entry_point("aclrtMalloc");
    let Err(err) = dev.allocate(&AllocDesc::device(0, PAGE)) else {
        panic!("the missing entry point was called");
    };
    assert_unsupported(&err, "aclrtMalloc");
    assert!(err.to_string().contains("aclrtMalloc"));
}
