//! Every resource closes its descriptors and leaves nothing in /dev/shm.
//!
//! The count of /proc/self/fd is only meaningful with nothing else running in
//! the process, so the check runs in a child that runs this one test alone.

use hal_core::DeviceExt;
mod common;

use hal_core::{Vmm, VmmExt};
use std::time::Duration;

use common::*;
use hal_core::{
    AllocDesc, Device, Event, EventFlags, ExportOptions, Handle, ImportOptions, Memory, Notify,
    Reservation, SharedHandle, WaitOptions,
};
use hal_cpu_shm::{create_file_backed, named, CpuDevice, NamedOptions};

fn cycle(d: &CpuDevice) {
    // Anonymous: export, import with descriptors and from the text alone.
    let a = d.allocate(&AllocDesc::host(64 * 1024)).unwrap();
    a.write(0, b"cycle").unwrap();
    let ex = d.export_memory(&a, &ExportOptions::default()).unwrap();
    let m = d
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let again = d
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    drop((m, again));
    let text = ex.to_text();
    let m = d
        .import_memory(
            SharedHandle::from(Handle::from_text(&text).unwrap()),
            &ImportOptions::default(),
        )
        .unwrap();
    // A read-only export is of an allocation of its own: one first exported
    // writable cannot be exported read-only.
    let b = d.allocate(&AllocDesc::host(4096)).unwrap();
    let ro = d
        .export_memory(
            &b,
            &ExportOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .unwrap();
    let r = d
        .import_memory(ro.share().unwrap(), &ImportOptions::default())
        .unwrap();
    drop((m, r, ro, ex, a, b));
    // A failed import closes what it was given.
    let mut bad = d
        .export_memory(
            &d.allocate(&AllocDesc::host(4096)).unwrap(),
            &ExportOptions::default(),
        )
        .unwrap()
        .share()
        .unwrap();
    bad.handle.size = 1 << 30;
    assert!(d.import_memory(bad, &ImportOptions::default()).is_err());

    // Notifies and events.
    let n = d.create_notify().unwrap();
    let nex = d.export_notify(&n, &ExportOptions::default()).unwrap();
    let n2 = d
        .import_notify(nex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    n2.signal().unwrap();
    n.wait(WaitOptions::timeout(Duration::from_secs(5)))
        .unwrap();
    let ev = d
        .create_event(EventFlags {
            interprocess: true,
            timing: false,
        })
        .unwrap();
    let eex = d.export_event(&ev, &ExportOptions::default()).unwrap();
    let ev2 = d
        .import_event(eex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    ev2.wait(WaitOptions::default()).unwrap();
    drop((n, nex, n2, ev, eex, ev2));

    // VMM.
    let res = d.reserve(1 << 20, 0).unwrap();
    let p = d.allocate_physical(1 << 20).unwrap();
    d.map(&res, 0, &p).unwrap();
    d.set_access(&res, 0, 1 << 20, hal_core::Access::ReadWrite)
        .unwrap();
    res.write(0, b"vmm").unwrap();
    let pex = d.export_physical(&p, &ExportOptions::default()).unwrap();
    let p2 = d
        .import_physical(pex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    d.unmap(&res, 0, 1 << 20).unwrap();
    d.map(&res, 0, &p2).unwrap();
    drop((res, p, pex, p2));

    // Named and file-backed.
    let name = unique("leak");
    let region = named::create_named(&name, 8192, &NamedOptions::default()).unwrap();
    let opened = named::open_named(&name, Some(8192)).unwrap();
    let nex = d.export_memory(&region, &ExportOptions::default()).unwrap();
    let nm = d
        .import_memory(
            SharedHandle::from(nex.handle().clone()),
            &ImportOptions::default(),
        )
        .unwrap();
    drop((nm, nex, opened, region));
    assert!(shm_entries(&name).is_empty());
    let path = std::env::temp_dir().join(unique("leak-file"));
    let f = create_file_backed(&path, 4096).unwrap();
    f.write(0, b"file").unwrap();
    drop(f);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn descriptors_are_closed_and_nothing_is_left() {
    if let Some(r) = role() {
        if r == "fd-count" {
            fd_count();
        }
        return;
    }
    let mut peer = Peer::spawn(
        "descriptors_are_closed_and_nothing_is_left",
        "fd-count",
        &[],
    );
    let child = peer.pid();
    let counts = peer.recv();
    eprintln!("descriptors before and after three cycles: {counts}");
    assert!(
        peer.finish().success(),
        "the child's descriptor count changed"
    );
    assert!(shm_entries(&format!("hal-t-{child}-")).is_empty());
}

fn fd_count() {
    let d = CpuDevice::new();
    // The first cycle starts the process-wide pieces (the descriptor broker).
    cycle(&d);
    let before = open_fds();
    for _ in 0..3 {
        cycle(&d);
    }
    // The broker thread may still be closing a connection it just served.
    let mut after = open_fds();
    for _ in 0..100 {
        if after == before {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        after = open_fds();
    }
    say(&format!("{before} {after}"));
    assert_eq!(before, after, "descriptors leaked");
}
