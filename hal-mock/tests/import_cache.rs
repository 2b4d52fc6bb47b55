//! The CUDA-like profile's import cache and same-process short-circuit:
//! a second open of an allocation in this process returns the first mapping
//! (one lease), whatever else was allocated and imported in between; an
//! import of this process's own export reaches the original memory; an
//! import with descriptors that are not the exporter's is never cached; and
//! the bound on importer pids.

mod common;

use std::io::Write;
use std::os::fd::AsFd;

use hal_core::handle::wire::MAX_PIDS;
use hal_core::kit::os;
use hal_core::{
    AllocDesc, Allocation, Backend, Device, ExportOptions, ImportOptions, Importers, Memory,
};
use hal_mock::{MockBackend, MockDevice};

const PAGE: u64 = 4096;

fn cuda() -> (MockBackend, MockDevice) {
    let backend = MockBackend::cuda();
    let dev = backend.open(0).unwrap();
    (backend, dev)
}

fn on_device_1() -> ImportOptions {
    ImportOptions {
        device: Some(1),
        peer_access: true,
        ..ImportOptions::default()
    }
}

#[test]
fn own_export_reaches_the_original_after_other_allocations() {
    let (_b, dev) = cuda();
    let a = dev.allocate(&AllocDesc::device(0, 2 * PAGE)).unwrap();
    // Allocations after `a` leave its entry in the table of this process's
    // own buffers alone.
    let b = dev.allocate(&AllocDesc::device(0, 2 * PAGE)).unwrap();
    let c = dev.allocate(&AllocDesc::device(0, 2 * PAGE)).unwrap();
    let ex = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let m = dev
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert_eq!(m.addr(), a.addr(), "the original memory, not a new mapping");
    // Onto another device it is a mapping of its own.
    let peer = dev
        .import_memory(ex.share().unwrap(), &on_device_1())
        .unwrap();
    assert_ne!(peer.addr(), a.addr());
    drop((m, peer, b, c));
}

#[test]
fn repeated_opens_share_one_mapping_across_other_imports() {
    let (_b, dev) = cuda();
    let a = dev.allocate(&AllocDesc::device(0, 2 * PAGE)).unwrap();
    let b = dev.allocate(&AllocDesc::device(0, 2 * PAGE)).unwrap();
    let ea = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let eb = dev.export_memory(&b, &ExportOptions::default()).unwrap();

    // On the exporter's device (the original memory): A, then B, then A
    // again, which is the first open (no second lease).
    let a1 = dev
        .import_memory(ea.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let b1 = dev
        .import_memory(eb.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let a2 = dev
        .import_memory(ea.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert_eq!(a.importers().unwrap(), 1, "one open per process");
    assert_eq!(b.importers().unwrap(), 1);
    assert_eq!(a1.addr(), a2.addr());

    // On another device (a mapping made for the import): the same.
    let p1 = dev
        .import_memory(ea.share().unwrap(), &on_device_1())
        .unwrap();
    let q1 = dev
        .import_memory(eb.share().unwrap(), &on_device_1())
        .unwrap();
    let p2 = dev
        .import_memory(ea.share().unwrap(), &on_device_1())
        .unwrap();
    assert_eq!(p1.addr(), p2.addr(), "the same mapping");
    assert_ne!(p1.addr(), q1.addr());
    assert_eq!(a.importers().unwrap(), 2, "one per device");
    drop((a1, b1, a2, p1, q1, p2));
    assert_eq!(a.importers().unwrap(), 0);
}

#[test]
fn an_import_with_foreign_descriptors_is_never_cached() {
    let (_b, dev) = cuda();
    let a = dev.allocate(&AllocDesc::device(0, 2 * PAGE)).unwrap();
    a.write(0, b"genuine").unwrap();
    let ex = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    // The genuine handle with a peer's sealed memory of the same size: the
    // import maps what came (the handle is all it checks against), ...
    let mut file = std::fs::File::from(os::memfd("fake", 2 * PAGE, None).unwrap());
    file.write_all(b"forged!").unwrap();
    let fake = std::os::fd::OwnedFd::from(file);
    os::add_seals(fake.as_fd(), os::EXPORT_SEALS).unwrap();
    let mut forged = ex.share().unwrap();
    forged.fds[0] = fake;
    let f = dev.import_memory(forged, &on_device_1()).unwrap();
    let mut out = [0u8; 7];
    f.read(0, &mut out).unwrap();
    assert_eq!(&out, b"forged!");
    // ... but a later import of the genuine export, while that mapping
    // lives, gets the exporter's memory.
    let g = dev
        .import_memory(ex.share().unwrap(), &on_device_1())
        .unwrap();
    g.read(0, &mut out).unwrap();
    assert_eq!(&out, b"genuine");
    assert_ne!(f.addr(), g.addr());
}

#[test]
fn importer_pids_up_to_the_bound() {
    let backend = MockBackend::ascend();
    let dev = backend.open(0).unwrap();
    let a = dev.allocate(&common::aligned(0, PAGE)).unwrap();
    let mut ex = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let pids: Vec<u32> = (1..=MAX_PIDS as u32).collect();
    dev.allow_importers(&mut ex, &pids).unwrap();
    assert_eq!(ex.handle().allowed_pids.len(), MAX_PIDS);
    dev.allow_importers(&mut ex, &[MAX_PIDS as u32 + 1])
        .unwrap_err();
    // The bound counts every pid of the call, as the vendor does.
    let mut ex = dev
        .export_memory(
            &a,
            &ExportOptions {
                importers: Importers::Pids(vec![1, 2]),
                ..ExportOptions::default()
            },
        )
        .unwrap();
    let more: Vec<u32> = (3..=MAX_PIDS as u32).collect();
    dev.allow_importers(&mut ex, &more).unwrap();
    assert_eq!(ex.handle().allowed_pids.len(), MAX_PIDS);
}
