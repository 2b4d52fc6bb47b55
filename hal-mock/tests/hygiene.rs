//! A full cycle of every kind of resource leaves no descriptor, no memfd
//! mapping and nothing in /dev/shm behind. One test in its own binary, so
//! that no other test opens descriptors meanwhile.

use hal_core::DeviceExt;
mod common;

use common::{aligned, memfd_maps, open_fds, shm_entries, wait_until, LONG};
use hal_core::{
    Access, AllocDesc, Backend, Device, EventFlags, ExportOptions, ImportOptions, Importers,
    Memory, Notify, WaitOptions,
};
use hal_core::{Vmm, VmmExt};
use hal_mock::{MockBackend, MockDevice};

const PAGE: u64 = 4096;
const G: u64 = 2 << 20;

fn anyone() -> ExportOptions {
    ExportOptions {
        importers: Importers::Anyone,
        ..ExportOptions::default()
    }
}

fn cycle(dev: &MockDevice) {
    let ordinal = dev.info().ordinal;
    // Memory: pool and own, export, import, stream copies.
    let small = dev.allocate(&AllocDesc::device(ordinal, 100)).unwrap();
    let a = dev.allocate(&aligned(ordinal, 2 * PAGE)).unwrap();
    let exported = dev.export_memory(&a, &anyone()).unwrap();
    let m = dev
        .import_memory(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let stream = dev.create_stream().unwrap();
    dev.write_async(&stream, &a, 0, b"bytes".to_vec()).unwrap();
    dev.copy_async(&stream, &m, PAGE, &a, 0, 5).unwrap();
    // Events and notifies, exported and imported.
    let ev = dev
        .create_event(EventFlags {
            interprocess: true,
            timing: false,
        })
        .unwrap();
    dev.record_event(&stream, &ev).unwrap();
    let eev = dev.export_event(&ev, &ExportOptions::default()).unwrap();
    let iev = dev
        .import_event(eev.share().unwrap(), &ImportOptions::default())
        .unwrap();
    dev.stream_wait_event(&stream, &iev).unwrap();
    let n = dev.create_notify().unwrap();
    let en = dev.export_notify(&n, &anyone()).unwrap();
    let inn = dev
        .import_notify(en.share().unwrap(), &ImportOptions::default())
        .unwrap();
    dev.record_notify(&stream, &inn).unwrap();
    dev.synchronize(&stream, Some(LONG)).unwrap();
    n.wait(WaitOptions::timeout(LONG)).unwrap();
    let mut out = [0u8; 5];
    a.read(PAGE, &mut out).unwrap();
    assert_eq!(&out, b"bytes");
    // VMM.
    let phys = dev.allocate_physical(G).unwrap();
    let ep = dev.export_physical(&phys, &anyone()).unwrap();
    let ip = dev
        .import_physical(ep.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let res = dev.reserve(2 * G, 0).unwrap();
    dev.map(&res, 0, &phys).unwrap();
    dev.map(&res, G, &ip).unwrap();
    dev.set_access(&res, 0, 2 * G, Access::ReadWrite).unwrap();
    dev.unmap(&res, G, G).unwrap();
    // A deferred free: the allocation goes first, its importer after.
    drop(a);
    drop((m, exported));
    drop((stream, ev, eev, iev, n, en, inn, phys, ep, ip, res, small));
    wait_until("deferred frees", || dev.deferred_frees() == 0);
    assert_eq!(dev.memory_used(), 0);
}

#[test]
fn full_cycle_leaves_no_descriptors_mappings_or_shm() {
    let shm_before = shm_entries();
    let (cuda, ascend) = (MockBackend::cuda(), MockBackend::ascend());
    let (d0, d1) = (cuda.open(0).unwrap(), ascend.open(1).unwrap());
    // The first export starts this process's descriptor broker, which stays.
    cycle(&d0);
    let (fds, maps) = (open_fds(), memfd_maps());
    for _ in 0..2 {
        cycle(&d0);
        cycle(&d1);
    }
    assert_eq!(open_fds(), fds, "descriptors were left open");
    assert_eq!(memfd_maps(), maps, "memfd mappings were left");
    assert_eq!(shm_entries(), shm_before, "/dev/shm changed");
    // Notify signals left pending do not keep anything either.
    let n = d1.create_notify().unwrap();
    n.signal().unwrap();
    drop(n);
    assert_eq!(open_fds(), fds);
}
