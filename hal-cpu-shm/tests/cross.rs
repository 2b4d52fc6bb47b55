//! Across real processes (this test binary re-executed in a role): import
//! from the handle text alone through the exporter's broker, a peer's
//! truncation attempt, fixed-address import, notifies and events, VMM chunks
//! and a growable buffer, and SIGKILL of an exporter followed by cleanup.

use hal_core::DeviceExt;
mod common;

use hal_core::{Vmm, VmmExt};
use std::time::Duration;

use common::*;
use hal_core::growable::{GrowableBuffer, GrowableView};
use hal_core::kit::os;
use hal_core::wait::block_on;
use hal_core::{
    Access, AllocDesc, Allocation, Device, Error, Event, EventFlags, ExportOptions, Handle,
    ImportOptions, ImportPlacement, Importers, Memory, Notify, Physical, Reservation, SharedHandle,
    WaitOptions,
};
use hal_cpu_shm::{
    collect_garbage_prefix, list_regions, named, Collected, CpuDevice, NamedOptions,
};

fn dev() -> CpuDevice {
    CpuDevice::new()
}

fn wait(timeout_ms: u64, spin: bool) -> WaitOptions {
    WaitOptions {
        timeout: Some(Duration::from_millis(timeout_ms)),
        spin: if spin {
            Duration::from_micros(50)
        } else {
            Duration::ZERO
        },
    }
}

// --- import from the handle text alone, allow-lists, leases ---------------

#[test]
fn handle_text_import_in_a_child() {
    if let Some(r) = role() {
        if r == "text-importer" {
            text_importer();
        }
        return;
    }
    let d = dev();
    let a = d.allocate(&AllocDesc::host(64 * 1024)).unwrap();
    a.write(0, &pattern(64 * 1024, 1)).unwrap();
    let mut ex = d
        .export_memory(
            &a,
            &ExportOptions {
                importers: Importers::Pids(vec![]),
                ..Default::default()
            },
        )
        .unwrap();
    let mut peer = Peer::spawn(
        "handle_text_import_in_a_child",
        "text-importer",
        &[(HANDLE, ex.to_text())],
    );
    assert_eq!(peer.recv(), "denied");
    d.allow_importers(&mut ex, &[peer.pid()]).unwrap();
    peer.send("retry");
    assert_eq!(peer.recv(), "mapped");
    assert_eq!(a.importers().unwrap(), 1);
    let mut buf = [0u8; 15];
    a.read(100, &mut buf).unwrap();
    assert_eq!(&buf, b"child was here!");
    peer.send("release");
    assert_eq!(peer.recv(), "released");
    a.wait_unleased(Some(Duration::from_secs(30))).unwrap();
    assert_eq!(a.importers().unwrap(), 0);
    assert!(peer.finish().success());
}

fn text_importer() {
    let d = dev();
    let e = d
        .import_memory(handle_from_env(HANDLE), &ImportOptions::default())
        .unwrap_err();
    assert!(matches!(e, Error::PermissionDenied { .. }), "{e}");
    say("denied");
    assert_eq!(hear(), "retry");
    let m = d
        .import_memory(handle_from_env(HANDLE), &ImportOptions::default())
        .unwrap();
    let mut all = vec![0u8; 64 * 1024];
    m.read(0, &mut all).unwrap();
    assert_eq!(all, pattern(64 * 1024, 1));
    m.write(100, b"child was here!").unwrap();
    say("mapped");
    assert_eq!(hear(), "release");
    drop(m);
    say("released");
}

// --- a hostile exporter tries to truncate --------------------------------

#[test]
fn truncation_by_a_peer_is_refused_and_the_importer_is_unaffected() {
    if let Some(r) = role() {
        if r == "truncating-exporter" {
            truncating_exporter();
        }
        return;
    }
    let d = dev();
    let mut peer = Peer::spawn(
        "truncation_by_a_peer_is_refused_and_the_importer_is_unaffected",
        "truncating-exporter",
        &[],
    );
    let text = peer.recv();
    let m = d
        .import_memory(
            SharedHandle::from(Handle::from_text(&text).unwrap()),
            &ImportOptions::default(),
        )
        .unwrap();
    let check = |m: &hal_cpu_shm::CpuMapping| {
        let mut all = vec![0u8; m.len() as usize];
        m.read(0, &mut all).unwrap();
        assert!(all.iter().all(|&b| b == 0xab));
        // Direct loads through the mapping, to the last byte: no SIGBUS.
        let p = m.host_ptr().unwrap();
        // SAFETY: the mapping covers m.len() bytes of a sealed memfd.
        let last = unsafe { std::ptr::read_volatile(p.add(m.len() as usize - 1)) };
        assert_eq!(last, 0xab);
    };
    check(&m);
    peer.send("imported");
    assert_eq!(peer.recv(), "shrink refused, grow refused");
    check(&m);
    peer.send("done");
    assert!(peer.finish().success());
    check(&m); // the exporter is gone; the memory is not
}

fn truncating_exporter() {
    let d = dev();
    let a = d.allocate(&AllocDesc::host(64 * 1024)).unwrap();
    a.write(0, &[0xab; 64 * 1024]).unwrap();
    let ex = d.export_memory(&a, &ExportOptions::default()).unwrap();
    say(&ex.to_text());
    assert_eq!(hear(), "imported");
    let shrink = os::set_len(a.fd(), 0);
    let grow = os::set_len(a.fd(), 1 << 20);
    let word = |r: &hal_core::Result<()>| if r.is_err() { "refused" } else { "allowed" };
    say(&format!("shrink {}, grow {}", word(&shrink), word(&grow)));
    assert_eq!(hear(), "done");
}

// --- fixed-address import ----------------------------------------------------

#[test]
fn fixed_address_import_in_a_child() {
    if let Some(r) = role() {
        if r == "fixed-importer" {
            fixed_importer();
        }
        return;
    }
    let d = dev();
    let a = d.allocate(&AllocDesc::host(8192)).unwrap();
    // A pointer-rich structure: the word at 0 points at the bytes at 64.
    a.write(0, &(a.addr() + 64).to_le_bytes()).unwrap();
    a.write(64, b"pointed-to").unwrap();
    let ex = d.export_memory(&a, &ExportOptions::default()).unwrap();
    let peer = Peer::spawn(
        "fixed_address_import_in_a_child",
        "fixed-importer",
        &[(HANDLE, ex.to_text())],
    );
    assert!(peer.finish().success());
}

fn fixed_importer() {
    let d = dev();
    let shared = handle_from_env(HANDLE);
    let want = shared.handle.address;
    let m = d
        .import_memory(
            shared,
            &ImportOptions {
                placement: ImportPlacement::ExporterAddress,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(m.addr(), want, "mapped at the exporter's address");
    let mut w = [0u8; 8];
    m.read(0, &mut w).unwrap();
    let ptr = u64::from_le_bytes(w) as usize as *const u8;
    // SAFETY: the pointer was written by the exporter for the same address
    // range, which this process maps at the same place, 10 bytes in bounds.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, 10) };
    assert_eq!(bytes, b"pointed-to");
    // The same handle again, now that the range is taken by the first import:
    // the import cache returns it.
    let again = d
        .import_memory(
            handle_from_env(HANDLE),
            &ImportOptions {
                placement: ImportPlacement::ExporterAddress,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(again.same_mapping(&m));
}

// --- notifies and events ---------------------------------------------------

const ROUNDS: usize = 200;

#[test]
fn notify_ping_pong_across_processes() {
    if let Some(r) = role() {
        if r == "pong" {
            pong();
        }
        return;
    }
    let d = dev();
    let ping = d.create_notify().unwrap();
    let pong = d.create_notify().unwrap();
    let ping_ex = d.export_notify(&ping, &ExportOptions::default()).unwrap();
    let pong_ex = d.export_notify(&pong, &ExportOptions::default()).unwrap();
    let peer = Peer::spawn(
        "notify_ping_pong_across_processes",
        "pong",
        &[("PING", ping_ex.to_text()), ("PONG", pong_ex.to_text())],
    );
    let mut peer = peer;
    assert_eq!(peer.recv(), "ready");
    for i in 0..ROUNDS {
        ping.signal().unwrap();
        pong.wait(wait(30_000, i % 2 == 0)).unwrap();
    }
    // An awaitable wait on this side, a blocking one on the other.
    ping.signal().unwrap();
    block_on(pong.wait_async(wait(30_000, false))).unwrap();
    // Nobody signals now: the wait times out.
    assert!(pong.wait(wait(20, true)).unwrap_err().is_timeout());
    // The importer may wait and the creator signal, and the other way round.
    assert_eq!(peer.recv(), "timed out");
    assert!(peer.finish().success());
}

fn pong() {
    let d = dev();
    let ping = d
        .import_notify(handle_from_env("PING"), &ImportOptions::default())
        .unwrap();
    let pong = d
        .import_notify(handle_from_env("PONG"), &ImportOptions::default())
        .unwrap();
    say("ready");
    for i in 0..ROUNDS {
        ping.wait(wait(30_000, i % 3 == 0)).unwrap();
        pong.signal().unwrap();
    }
    block_on(ping.wait_async(wait(30_000, true))).unwrap();
    pong.signal().unwrap();
    assert!(ping.wait(wait(20, false)).unwrap_err().is_timeout());
    say("timed out");
}

#[test]
fn events_across_processes() {
    if let Some(r) = role() {
        if r == "event-recorder" {
            event_recorder();
        }
        return;
    }
    let d = dev();
    let ev = d
        .create_event(EventFlags {
            interprocess: true,
            timing: false,
        })
        .unwrap();
    assert!(ev.query().unwrap(), "never recorded: complete");
    let ex = d.export_event(&ev, &ExportOptions::default()).unwrap();
    let mut peer = Peer::spawn(
        "events_across_processes",
        "event-recorder",
        &[(HANDLE, ex.to_text())],
    );
    assert_eq!(peer.recv(), "recorded");
    assert!(ev.query().unwrap());
    ev.wait(wait(30_000, true)).unwrap();
    let s = d.create_stream().unwrap();
    d.record_event(&s, &ev).unwrap();
    peer.send("your turn");
    assert_eq!(peer.recv(), "waited");
    assert!(peer.finish().success());
}

fn event_recorder() {
    let d = dev();
    let ev = d
        .import_event(handle_from_env(HANDLE), &ImportOptions::default())
        .unwrap();
    let s = d.create_stream().unwrap();
    for _ in 0..3 {
        d.record_event(&s, &ev).unwrap();
    }
    d.synchronize(&s, None).unwrap();
    say("recorded");
    assert_eq!(hear(), "your turn");
    ev.wait(wait(30_000, false)).unwrap();
    d.stream_wait_event(&s, &ev).unwrap();
    assert!(ev.query().unwrap());
    say("waited");
}

// --- VMM: chunks, and a growable buffer ----------------------------------

const CHUNK: u64 = 256 * 1024;

#[test]
fn vmm_chunks_followed_by_a_child() {
    if let Some(r) = role() {
        if r == "vmm-importer" {
            vmm_importer();
        }
        return;
    }
    let d = dev();
    let res = d.reserve(4 * CHUNK, 0).unwrap();
    let c0 = d.allocate_physical(CHUNK).unwrap();
    d.map(&res, 0, &c0).unwrap();
    d.set_access(&res, 0, CHUNK, Access::ReadWrite).unwrap();
    res.write(0, &pattern(CHUNK as usize, 10)).unwrap();
    let e0 = d.export_physical(&c0, &ExportOptions::default()).unwrap();
    let mut peer = Peer::spawn(
        "vmm_chunks_followed_by_a_child",
        "vmm-importer",
        &[(HANDLE, e0.to_text())],
    );
    assert_eq!(peer.recv(), "mapped 1");
    // Grow: a new chunk at the end, exported, followed by the importer.
    let c1 = d.allocate_physical(CHUNK).unwrap();
    d.map(&res, CHUNK, &c1).unwrap();
    d.set_access(&res, CHUNK, CHUNK, Access::ReadWrite).unwrap();
    res.write(CHUNK, &pattern(CHUNK as usize, 11)).unwrap();
    let e1 = d
        .export_physical(
            &c1,
            &ExportOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .unwrap();
    peer.send(&e1.to_text());
    assert_eq!(peer.recv(), "mapped 2");
    let mut buf = [0u8; 5];
    res.read(10, &mut buf).unwrap();
    assert_eq!(&buf, b"child", "the child wrote into chunk 0");
    assert!(peer.finish().success());
}

fn vmm_importer() {
    let d = dev();
    let res = d.reserve(4 * CHUNK, 0).unwrap();
    let c0 = d
        .import_physical(handle_from_env(HANDLE), &ImportOptions::default())
        .unwrap();
    assert_eq!(c0.size(), CHUNK);
    d.map(&res, 0, &c0).unwrap();
    let mut got = vec![0u8; CHUNK as usize];
    assert!(
        matches!(res.read(0, &mut got), Err(Error::PermissionDenied { .. })),
        "a new mapping gives no access until set_access"
    );
    d.set_access(&res, 0, CHUNK, Access::ReadWrite).unwrap();
    res.read(0, &mut got).unwrap();
    assert_eq!(got, pattern(CHUNK as usize, 10));
    // Beyond the mapped chunk nothing is accessible.
    assert!(res.read(CHUNK, &mut got[..1]).is_err());
    res.write(10, b"child").unwrap();
    say("mapped 1");
    let text = hear();
    let c1 = d
        .import_physical(
            SharedHandle::from(Handle::from_text(&text).unwrap()),
            &ImportOptions::default(),
        )
        .unwrap();
    assert!(c1.is_read_only());
    d.map(&res, CHUNK, &c1).unwrap();
    d.set_access(&res, CHUNK, CHUNK, Access::Read).unwrap();
    res.read(CHUNK, &mut got).unwrap();
    assert_eq!(got, pattern(CHUNK as usize, 11));
    assert!(matches!(
        res.write(CHUNK, b"x"),
        Err(Error::PermissionDenied { .. })
    ));
    assert!(matches!(
        d.set_access(&res, CHUNK, CHUNK, Access::ReadWrite),
        Err(Error::PermissionDenied { .. })
    ));
    say("mapped 2");
}

#[test]
fn growable_buffer_followed_by_a_child() {
    if let Some(r) = role() {
        if r == "growable-view" {
            growable_view();
        }
        return;
    }
    let d = dev();
    let mut gb = GrowableBuffer::create(&d, 8 * CHUNK, CHUNK, ExportOptions::default()).unwrap();
    gb.grow_to(CHUNK).unwrap();
    gb.write(0, &pattern(CHUNK as usize, 20)).unwrap();
    let mut peer = Peer::spawn(
        "growable_buffer_followed_by_a_child",
        "growable-view",
        &[(HANDLE, gb.handle().to_text())],
    );
    assert_eq!(peer.recv(), format!("len {CHUNK}"));
    assert_eq!(gb.importers().unwrap(), 1);
    gb.grow_to(3 * CHUNK).unwrap();
    gb.write(2 * CHUNK, &pattern(CHUNK as usize, 22)).unwrap();
    peer.send("grown");
    assert_eq!(peer.recv(), format!("len {}", 3 * CHUNK));
    let mut buf = [0u8; 6];
    gb.read(2 * CHUNK + 1, &mut buf).unwrap();
    assert_eq!(&buf, b"viewer");
    assert!(peer.finish().success());
}

fn growable_view() {
    let d = dev();
    let mut v = GrowableView::open(&d, handle_from_env(HANDLE), &ImportOptions::default()).unwrap();
    let mut got = vec![0u8; CHUNK as usize];
    v.read(0, &mut got).unwrap();
    assert_eq!(got, pattern(CHUNK as usize, 20));
    say(&format!("len {}", v.len()));
    assert_eq!(hear(), "grown");
    assert_eq!(v.refresh().unwrap(), 3 * CHUNK);
    v.read(2 * CHUNK, &mut got).unwrap();
    assert_eq!(got, pattern(CHUNK as usize, 22));
    v.write(2 * CHUNK + 1, b"viewer").unwrap();
    say(&format!("len {}", v.len()));
}

// --- SIGKILL of an exporter, then cleanup ---------------------------------

#[test]
fn sigkill_of_an_exporter_leaves_nothing_after_cleanup() {
    if let Some(r) = role() {
        if r == "victim" {
            victim();
        }
        return;
    }
    let mut peer = Peer::spawn(
        "sigkill_of_an_exporter_leaves_nothing_after_cleanup",
        "victim",
        &[],
    );
    let name = peer.recv();
    let child = peer.pid();
    let prefix = format!("hal-t-{child}-");
    assert!(name.starts_with(&prefix));
    let info = list_regions()
        .unwrap()
        .into_iter()
        .find(|r| r.name == name)
        .unwrap();
    assert!(
        info.alive && info.present && info.owner_pid == child,
        "{info:?}"
    );
    assert!(
        collect_garbage_prefix(&prefix, false).unwrap().is_empty(),
        "live owner kept"
    );
    assert!(!shm_entries(&name).is_empty());

    peer.kill();
    let info = list_regions()
        .unwrap()
        .into_iter()
        .find(|r| r.name == name)
        .unwrap();
    assert!(!info.alive && info.present, "{info:?}");
    let would = collect_garbage_prefix(&prefix, true).unwrap();
    assert_eq!(
        would.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
        [name.as_str()]
    );
    assert_eq!(shm_entries(&name).len(), 2, "a dry run removes nothing");
    assert_eq!(would[0].collected(), Collected::RegionAndMetadata);
    let removed = collect_garbage_prefix(&prefix, false).unwrap();
    assert_eq!(removed.len(), 1);
    // The entry says the region itself went, not only its metadata.
    assert_eq!(removed[0].collected(), Collected::RegionAndMetadata);
    assert!(
        shm_entries(&prefix).is_empty(),
        "{:?}",
        shm_entries(&prefix)
    );
    assert!(!list_regions().unwrap().iter().any(|r| r.name == name));
    // The anonymous region, notify and event of the victim left nothing anywhere.
}

fn victim() {
    let d = dev();
    let name = unique("victim");
    let region = named::create_named(&name, 1 << 20, &NamedOptions::default()).unwrap();
    region.write(0, b"doomed").unwrap();
    let anon = d.allocate(&AllocDesc::host(1 << 20)).unwrap();
    let _ex = d.export_memory(&anon, &ExportOptions::default()).unwrap();
    let n = d.create_notify().unwrap();
    let _nex = d.export_notify(&n, &ExportOptions::default()).unwrap();
    say(&name);
    // Wait to be killed.
    let _ = hear();
    std::thread::sleep(Duration::from_secs(60));
}
