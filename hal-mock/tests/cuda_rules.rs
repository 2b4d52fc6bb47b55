//! The CUDA-like profile's rules.

use hal_core::DeviceExt;
mod common;

use common::{assert_vendor, LONG};
use hal_core::{
    AllocDesc, Allocation, Backend, ByteRange, Device, Event, EventFlags, ExportOptions,
    HandleFlags, ImportOptions, Importers, Memory, WaitOptions,
};
use hal_mock::codes::cuda;
use hal_mock::{MockBackend, MockDevice};

const PAGE: u64 = 4096;

fn open() -> (MockBackend, MockDevice) {
    let backend = MockBackend::cuda();
    let dev = backend.open(0).unwrap();
    (backend, dev)
}

fn range(offset: u64, len: u64) -> ExportOptions {
    ExportOptions {
        range: Some(ByteRange::new(offset, len)),
        ..ExportOptions::default()
    }
}

#[test]
fn cuda_export_names_the_base_allocation_plus_an_offset() {
    let (_b, dev) = open();
    let a = dev.allocate(&AllocDesc::device(0, 4 * PAGE)).unwrap();
    a.write(PAGE, b"second page").unwrap();
    a.write(3 * PAGE, b"fourth page").unwrap();
    let e1 = dev.export_memory(&a, &range(PAGE, PAGE)).unwrap();
    let e3 = dev.export_memory(&a, &range(3 * PAGE, PAGE)).unwrap();
    assert_eq!(e1.handle().offset, PAGE);
    assert_eq!(e3.handle().offset, 3 * PAGE);
    assert!(e1.handle().flags.contains(HandleFlags::ANY_IMPORTER));
    let m1 = dev
        .import_memory(e1.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let m3 = dev
        .import_memory(e3.share().unwrap(), &ImportOptions::default())
        .unwrap();
    // Both ranges come from one mapping of the base allocation.
    assert_eq!(m3.addr() - m1.addr(), 2 * PAGE);
    assert_eq!(m1.len(), PAGE);
    let mut out = [0u8; 11];
    m1.read(0, &mut out).unwrap();
    assert_eq!(&out, b"second page");
    m3.read(0, &mut out).unwrap();
    assert_eq!(&out, b"fourth page");
    assert!(m1.read(PAGE - 5, &mut out).is_err(), "bounded to the range");
}

#[test]
fn cuda_second_open_returns_the_same_mapping_refcounted() {
    let (_b, dev) = open();
    let a = dev.allocate(&AllocDesc::device(0, 2 * PAGE)).unwrap();
    a.write(0, b"shared").unwrap();
    let exported = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let first = dev
        .import_memory(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let second = dev
        .import_memory(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert_eq!(first.addr(), second.addr(), "the same mapping");
    assert_eq!(a.importers().unwrap(), 1, "one open per process");
    drop(first);
    let mut out = [0u8; 6];
    second.read(0, &mut out).unwrap();
    assert_eq!(
        &out, b"shared",
        "closing the first did not unmap the second"
    );
    assert_eq!(a.importers().unwrap(), 1);
    drop(second);
    assert_eq!(a.importers().unwrap(), 0);
    // Another device's open is another mapping.
    let other = dev
        .import_memory(
            exported.share().unwrap(),
            &ImportOptions {
                device: Some(1),
                peer_access: true,
                ..ImportOptions::default()
            },
        )
        .unwrap();
    let again = dev
        .import_memory(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert_ne!(other.addr(), again.addr());
    a.free().unwrap_err();
}

#[test]
fn cuda_ipc_events_need_the_interprocess_flag() {
    let (_b, dev) = open();
    let plain = dev.create_event(EventFlags::default()).unwrap();
    let err = dev
        .export_event(&plain, &ExportOptions::default())
        .unwrap_err();
    assert_vendor(&err, cuda::INVALID_VALUE);
    let timed = dev.create_event(EventFlags {
        interprocess: true,
        timing: true,
    });
    assert_vendor(&timed.unwrap_err(), cuda::INVALID_VALUE);
    let ipc = dev
        .create_event(EventFlags {
            interprocess: true,
            timing: false,
        })
        .unwrap();
    let exported = dev.export_event(&ipc, &ExportOptions::default()).unwrap();
    assert!(!exported.handle().flags.contains(HandleFlags::NO_QUERY));
    let imported = dev
        .import_event(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    // CUDA IPC events can be queried.
    assert!(imported.query().unwrap());
    let stream = dev.create_stream().unwrap();
    dev.record_event(&stream, &ipc).unwrap();
    imported.wait(WaitOptions::timeout(LONG)).unwrap();
    assert!(imported.query().unwrap());
}

#[test]
fn cuda_managed_memory_allocates_but_cannot_be_exported() {
    let (_b, dev) = open();
    let m = dev.allocate(&AllocDesc::managed(PAGE)).unwrap();
    assert!(m.host_ptr().is_some(), "managed memory is host-visible");
    m.write(0, b"managed").unwrap();
    let err = dev
        .export_memory(&m, &ExportOptions::default())
        .unwrap_err();
    assert!(err.is_unsupported(), "{err:?}");
}

#[test]
fn cuda_has_no_pid_allow_list_and_no_read_only_export() {
    let (_b, dev) = open();
    let a = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    let pids = ExportOptions {
        importers: Importers::Pids(vec![std::process::id()]),
        ..ExportOptions::default()
    };
    assert!(dev.export_memory(&a, &pids).unwrap_err().is_unsupported());
    let read_only = ExportOptions {
        read_only: true,
        ..ExportOptions::default()
    };
    assert!(dev
        .export_memory(&a, &read_only)
        .unwrap_err()
        .is_unsupported());
    let mut exported = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    assert!(dev
        .allow_importers(&mut exported, &[1])
        .unwrap_err()
        .is_unsupported());
    // Anyone may wait on a CUDA-like notify.
    let n = dev.create_notify().unwrap();
    let en = dev.export_notify(&n, &ExportOptions::default()).unwrap();
    let imported = dev
        .import_notify(en.share().unwrap(), &ImportOptions::default())
        .unwrap();
    hal_core::Notify::signal(&n).unwrap();
    hal_core::Notify::wait(&imported, WaitOptions::timeout(LONG)).unwrap();
}

/// The import cache returns an existing mapping only to an import of the
/// same access: a writable import of a buffer this process imported
/// read-only (here, its handle with the flag cleared) is not given the
/// read-only mapping (whose writes would fault), it is refused.
#[test]
fn cuda_import_cache_keeps_read_only_and_writable_apart() {
    let mut profile = hal_mock::Profile::cuda();
    profile.capabilities = profile
        .capabilities
        .union(hal_core::Capabilities::READ_ONLY_EXPORT);
    let backend = MockBackend::new(profile);
    let dev = backend.open(0).unwrap();
    let a = dev.allocate(&AllocDesc::device(0, 2 * PAGE)).unwrap();
    a.write(0, b"exporter").unwrap();
    let read_only = ExportOptions {
        read_only: true,
        ..ExportOptions::default()
    };
    let ex = dev.export_memory(&a, &read_only).unwrap();
    let ro = dev
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert!(ro.is_read_only());
    // The same access shares the cached mapping.
    let again = dev
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert_eq!(again.addr(), ro.addr(), "a second read-only open is cached");
    let mut writable = ex.handle().clone();
    writable.flags.0 &= !HandleFlags::READ_ONLY.0;
    let r = dev.import_memory(
        hal_core::SharedHandle::from(writable),
        &ImportOptions::default(),
    );
    match r {
        Err(hal_core::Error::PermissionDenied { .. }) => {}
        Err(e) => panic!("a writable import of a read-only buffer: {e}"),
        Ok(m) => panic!(
            "a writable import of a read-only buffer was given a mapping (read-only: {}, \
             write: {:?})",
            m.is_read_only(),
            m.write(0, b"x")
        ),
    }
    let mut got = [0u8; 8];
    ro.read(0, &mut got).unwrap();
    assert_eq!(&got, b"exporter");
}

#[test]
fn cuda_free_under_importers_is_busy() {
    let (_b, dev) = open();
    let a = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    let exported = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let m = dev
        .import_memory(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let a = a.free().unwrap_err().resource;
    drop(m);
    a.wait_unleased(Some(LONG)).unwrap();
    a.free().unwrap();
}
