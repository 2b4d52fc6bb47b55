//! VMM: granularity checks, physical handles, reserve / map / access.

mod common;

use common::assert_vendor;
use hal_core::growable::{GrowableBuffer, GrowableView};
use hal_core::{
    Access, Backend, Device, ExportOptions, Granularity, ImportOptions, Importers, Physical,
    Reservation,
};
use hal_core::{Vmm, VmmExt};
use hal_mock::codes::{acl, cuda, Code};
use hal_mock::{MockBackend, MockDevice, MockPhysical, Profile};

const G: u64 = 2 << 20;

fn backends() -> [(MockBackend, Code); 2] {
    [
        (MockBackend::cuda(), cuda::INVALID_VALUE),
        (MockBackend::ascend(), acl::RT_PARAM_INVALID),
    ]
}

fn anyone() -> ExportOptions {
    ExportOptions {
        importers: Importers::Anyone,
        ..ExportOptions::default()
    }
}

#[test]
fn vmm_sizes_and_offsets_must_be_granular() {
    for (backend, invalid) in backends() {
        let dev = backend.open(0).unwrap();
        assert_eq!(dev.granularity(Granularity::Minimum).unwrap(), G);
        assert_eq!(dev.granularity(Granularity::Recommended).unwrap(), G);
        assert_vendor(&dev.allocate_physical(4096).unwrap_err(), invalid);
        assert_vendor(&dev.allocate_physical(G + 4096).unwrap_err(), invalid);
        assert_vendor(&dev.allocate_physical(0).unwrap_err(), invalid);
        assert_vendor(&dev.reserve(G + 4096, 0).unwrap_err(), invalid);
        assert_vendor(&dev.reserve(4 * G, 4096).unwrap_err(), invalid);
        let res = dev.reserve(4 * G, 2 * G).unwrap();
        assert_eq!(res.base() % (2 * G), 0, "aligned as asked");
        assert_eq!(res.len(), 4 * G);
        let phys = dev.allocate_physical(G).unwrap();
        assert_vendor(&dev.map(&res, 4096, &phys).unwrap_err(), invalid);
        assert_vendor(&dev.map(&res, 4 * G, &phys).unwrap_err(), invalid);
        dev.map(&res, G, &phys).unwrap();
        assert_vendor(&dev.map(&res, G, &phys).unwrap_err(), invalid);
        assert_vendor(
            &dev.set_access(&res, G, 4096, Access::ReadWrite)
                .unwrap_err(),
            invalid,
        );
        assert_vendor(&dev.unmap(&res, G, G / 2).unwrap_err(), invalid);
    }
}

#[test]
fn vmm_access_to_unmapped_or_inaccessible_memory_is_refused() {
    for (backend, invalid) in backends() {
        let dev = backend.open(0).unwrap();
        let res = dev.reserve(3 * G, 0).unwrap();
        let phys = dev.allocate_physical(2 * G).unwrap();
        let mut buf = [0u8; 8];
        assert_vendor(&res.read(0, &mut buf).unwrap_err(), invalid);
        dev.map(&res, 0, &phys).unwrap();
        // Mapped but no access yet (cuMemSetAccess / aclrtMemSetAccess).
        assert_vendor(&res.read(0, &mut buf).unwrap_err(), invalid);
        assert_vendor(
            &dev.set_access(&res, 2 * G, G, Access::ReadWrite)
                .unwrap_err(),
            invalid,
        );
        dev.set_access(&res, 0, 2 * G, Access::ReadWrite).unwrap();
        res.write(G - 4, b"straddles").unwrap();
        res.read(G - 4, &mut buf).unwrap();
        assert_eq!(&buf, b"straddle");
        // Past the mapped part.
        assert_vendor(&res.read(2 * G - 4, &mut buf).unwrap_err(), invalid);
        // Read-only part.
        dev.set_access(&res, G, G, Access::Read).unwrap();
        res.read(G, &mut buf).unwrap();
        assert_vendor(&res.write(G, b"x").unwrap_err(), invalid);
        res.write(0, b"still rw").unwrap();
        dev.set_access(&res, 0, G, Access::None).unwrap();
        assert_vendor(&res.read(0, &mut buf).unwrap_err(), invalid);
        // Unmap takes whole mappings only.
        assert_vendor(&dev.unmap(&res, 0, G).unwrap_err(), invalid);
        assert_vendor(&dev.unmap(&res, 0, 3 * G).unwrap_err(), invalid);
        dev.unmap(&res, 0, 2 * G).unwrap();
        assert_vendor(&res.read(G, &mut buf).unwrap_err(), invalid);
        // The physical memory survives its unmapping and maps again.
        dev.map(&res, G, &phys).unwrap();
        dev.set_access(&res, G, 2 * G, Access::ReadWrite).unwrap();
        res.read(G + G - 4, &mut buf).unwrap();
        assert_eq!(&buf, b"straddle");
    }
}

#[test]
fn vmm_physical_handles_export_and_import() {
    for (backend, _) in backends() {
        let dev = backend.open(0).unwrap();
        let phys = dev.allocate_physical(G).unwrap();
        let exported = dev.export_physical(&phys, &anyone()).unwrap();
        assert_eq!(exported.handle().size, G);
        let imported = dev
            .import_physical(exported.share().unwrap(), &ImportOptions::default())
            .unwrap();
        assert!(imported.is_imported());
        assert_eq!(imported.size(), G);
        let (r1, r2) = (dev.reserve(G, 0).unwrap(), dev.reserve(G, 0).unwrap());
        dev.map(&r1, 0, &phys).unwrap();
        dev.map(&r2, 0, &imported).unwrap();
        dev.set_access(&r1, 0, G, Access::ReadWrite).unwrap();
        dev.set_access(&r2, 0, G, Access::Read).unwrap();
        r1.write(12345, b"same pages").unwrap();
        let mut out = [0u8; 10];
        r2.read(12345, &mut out).unwrap();
        assert_eq!(&out, b"same pages");
        drop((exported, phys));
        r2.read(12345, &mut out).unwrap();
    }
}

/// As the driver's `cuMemRelease`: a physical allocation's memory comes
/// back when its own handle, the handles imported from it in this process
/// and its mappings have all gone, whichever goes last.
#[test]
fn vmm_physical_memory_comes_back_at_its_last_handle_or_mapping() {
    let dev = MockBackend::new(Profile::cuda().with_total_memory(8 << 20))
        .open(0)
        .unwrap();
    let big = 3 * G;
    let fits = |dev: &MockDevice| dev.allocate_physical(big).map(drop).is_ok();
    let import_of = |phys: &MockPhysical| {
        let ex = dev.export_physical(phys, &anyone()).unwrap();
        dev.import_physical(ex.share().unwrap(), &ImportOptions::default())
            .unwrap()
    };

    let phys = dev.allocate_physical(big).unwrap();
    let imported = import_of(&phys);
    drop(phys);
    assert!(!fits(&dev), "the import still holds the memory");
    drop(imported);
    assert!(fits(&dev), "back when the import went");

    let phys = dev.allocate_physical(big).unwrap();
    let imported = import_of(&phys);
    let r = dev.reserve(big, 0).unwrap();
    dev.map(&r, 0, &imported).unwrap();
    drop((imported, phys));
    assert!(!fits(&dev), "the mapping still holds the memory");
    dev.unmap(&r, 0, big).unwrap();
    assert!(fits(&dev), "back when the mapping went");

    let phys = dev.allocate_physical(big).unwrap();
    let imported = import_of(&phys);
    drop(imported);
    assert!(!fits(&dev), "the allocation's own handle still holds it");
    drop(phys);
    assert!(fits(&dev), "back when the last handle went");
}

#[test]
fn ascend_physical_export_keeps_a_pid_allow_list() {
    let backend = MockBackend::ascend();
    let dev = backend.open(0).unwrap();
    let phys = dev.allocate_physical(G).unwrap();
    let mut exported = dev
        .export_physical(&phys, &ExportOptions::default())
        .unwrap();
    // On by default and empty: other processes are refused
    // (cross_process.rs); the exporting process itself imports.
    let other = std::process::id().wrapping_add(1).max(1);
    assert!(exported.handle().allowed_pids.is_empty());
    assert!(!exported.handle().allows(other));
    let _ = dev
        .import_physical(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    // aclrtMemSetPidToShareableHandle, after the export.
    dev.allow_importers(&mut exported, &[other]).unwrap();
    assert!(exported.handle().allows(other));
}

#[test]
fn vmm_growable_buffer_follows_in_process() {
    let backend = MockBackend::cuda();
    let dev = backend.open(0).unwrap();
    let mut buf = GrowableBuffer::create(&dev, 4 * G, 0, anyone()).unwrap();
    buf.grow_to(G).unwrap();
    buf.write(100, b"first chunk").unwrap();
    let mut view =
        GrowableView::open(&dev, buf.share().unwrap(), &ImportOptions::default()).unwrap();
    assert_eq!(view.len(), G);
    buf.grow_to(3 * G).unwrap();
    buf.write(2 * G + 7, b"third chunk").unwrap();
    assert_eq!(view.refresh().unwrap(), 3 * G);
    let mut out = [0u8; 11];
    view.read(100, &mut out).unwrap();
    assert_eq!(&out, b"first chunk");
    view.read(2 * G + 7, &mut out).unwrap();
    assert_eq!(&out, b"third chunk");
}
