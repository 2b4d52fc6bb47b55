//! The `hal_remote_*` entry points as C calls them, in one process: two
//! nodes (an exporter's and an importer's) on the loopback address. The
//! two-process exchange is `tests/c/remote.c`.

use std::ffi::{c_char, CStr, CString};
use std::ptr::null_mut;

use hal_facade::remote::RemoteHandle;

use crate::device::{hal_device, hal_device_open, hal_device_release};
use crate::last_error::hal_last_error;
use crate::memory::HAL_LOCATION_HOST;
use crate::memory::{hal_alloc, hal_memory, hal_memory_release, hal_read, hal_write};
use crate::notify::{hal_notify_create, hal_notify_release, hal_notify_wait};
use crate::remote_export::*;
use crate::remote_memory::*;
use crate::remote_node::*;
use crate::remote_notify::*;
use crate::status::hal_status::{self, *};
use crate::text::hal_string_free;

/// Thirty seconds, as the waits take them: a guard against hangs.
const PATIENCE_NS: i64 = 30_000_000_000;

fn last() -> String {
    // SAFETY: hal_last_error never answers NULL, and its text lives until
    // this thread's next failure.
    unsafe { CStr::from_ptr(hal_last_error()) }
        .to_string_lossy()
        .into_owned()
}

#[track_caller]
fn ok(status: hal_status) {
    assert_eq!(status, HAL_OK, "{}", last());
}

/// A node on the loopback address, or None (and the test says it did not
/// run) where UCX cannot be loaded.
fn node() -> Option<*mut hal_remote_node> {
    let mut node = null_mut();
    // SAFETY: a NUL-terminated address and a valid place for the node.
    let status = unsafe { hal_remote_node_bind(c"127.0.0.1:0".as_ptr(), &mut node) };
    if status == HAL_ERR_UNAVAILABLE {
        hal_core::testing::not_run(&format!("UCX cannot be loaded here: {}", last()));
        return None;
    }
    ok(status);
    Some(node)
}

/// Take a string the library handed out, and free it.
fn take_text(text: *mut c_char) -> String {
    // SAFETY: a string this library handed out, NUL-terminated.
    let owned = unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: as above; freed once.
    unsafe { hal_string_free(text) };
    owned
}

fn export_text(export: *const hal_remote_exported) -> String {
    let mut text = null_mut();
    // SAFETY: a valid place for the text.
    ok(unsafe { hal_remote_export_text(export, &mut text) });
    take_text(text)
}

/// CPU shared memory of `size` bytes, byte `i` being `i % 251`.
fn memory(size: u64) -> (*mut hal_device, *mut hal_memory) {
    let (mut device, mut memory) = (null_mut(), null_mut());
    // SAFETY: NUL-terminated names and valid places for the objects.
    ok(unsafe { hal_device_open(c"cpu-shm".as_ptr(), 0, &mut device) });
    // SAFETY: as above.
    ok(unsafe { hal_alloc(device, size, HAL_LOCATION_HOST, &mut memory) });
    let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    // SAFETY: `bytes` holds `size` bytes.
    ok(unsafe { hal_write(memory, 0, bytes.as_ptr().cast(), bytes.len()) });
    (device, memory)
}

fn connect(node: *const hal_remote_node, text: &str) -> (hal_status, *mut hal_remote_memory) {
    let text = CString::new(text).unwrap();
    let mut remote = null_mut();
    // SAFETY: a NUL-terminated text and a valid place for the object.
    let status = unsafe { hal_remote_connect(node, text.as_ptr(), &mut remote) };
    (status, remote)
}

#[test]
fn memory_is_read_written_and_signalled_through_the_c_calls() {
    let (Some(exporter), Some(importer)) = (node(), node()) else {
        return;
    };
    let (device, mem) = memory(1 << 20);
    let mut export = null_mut();
    // SAFETY: a valid place for the export.
    ok(unsafe { hal_remote_export(exporter, mem, false, &mut export) });
    let text = export_text(export);
    assert!(text.starts_with("hal1r."), "{text}");
    let mut address = null_mut();
    // SAFETY: a valid place for the text.
    ok(unsafe { hal_remote_node_address(exporter, &mut address) });
    let address = take_text(address);
    assert!(address.starts_with("127.0.0.1:"), "{address}");
    assert_ne!(address, "127.0.0.1:0");

    let (status, remote) = connect(importer, &text);
    ok(status);
    ok(hal_remote_export_wait_importers(export, 1, PATIENCE_NS));
    let mut count = 0;
    // SAFETY: a valid place for the count.
    ok(unsafe { hal_remote_export_importers(export, &mut count) });
    assert_eq!(count, 1);
    let mut size = 0;
    // SAFETY: a valid place for the size.
    ok(unsafe { hal_remote_size(remote, &mut size) });
    assert_eq!(size, 1 << 20);

    let mut got = vec![0u8; 5000];
    // SAFETY: `got` holds the bytes read.
    ok(unsafe { hal_remote_read(remote, 1000, got.as_mut_ptr().cast(), got.len()) });
    assert!(got
        .iter()
        .enumerate()
        .all(|(i, b)| *b == ((1000 + i) % 251) as u8));

    // Written and flushed: in the exporter's memory.
    let data = [7u8; 300];
    // SAFETY: `data` holds the bytes written.
    ok(unsafe { hal_remote_write(remote, 4096, data.as_ptr().cast(), data.len()) });
    ok(hal_remote_flush(remote));
    let mut here = [0u8; 300];
    // SAFETY: `here` holds the bytes read.
    ok(unsafe { hal_read(mem, 4096, here.as_mut_ptr().cast(), here.len()) });
    assert_eq!(here, data);

    // Into local hal memory and back from it to another place.
    let (local_device, local) = memory(8192);
    ok(hal_remote_read_into(remote, 4096, local, 100, 300));
    let mut landed = [0u8; 300];
    // SAFETY: `landed` holds the bytes read.
    ok(unsafe { hal_read(local, 100, landed.as_mut_ptr().cast(), landed.len()) });
    assert_eq!(landed, data);
    ok(hal_remote_write_from(remote, 65536, local, 100, 300));
    ok(hal_remote_flush(remote));
    // SAFETY: `here` holds the bytes read.
    ok(unsafe { hal_read(mem, 65536, here.as_mut_ptr().cast(), here.len()) });
    assert_eq!(here, data);

    // Written, then signalled: the bytes are there when the signal is taken.
    let word = b"signalled";
    // SAFETY: `word` holds the bytes written.
    ok(unsafe { hal_remote_write_signal(remote, 9000, word.as_ptr().cast(), word.len()) });
    ok(hal_remote_export_wait_signal(export, PATIENCE_NS));
    let mut seen = [0u8; 9];
    // SAFETY: `seen` holds the bytes read.
    ok(unsafe { hal_read(mem, 9000, seen.as_mut_ptr().cast(), seen.len()) });
    assert_eq!(&seen, word);
    // Each signal is taken once.
    assert_eq!(hal_remote_export_wait_signal(export, 0), HAL_ERR_TIMEOUT);

    // Out of range: refused before anything is sent.
    // SAFETY: `got` holds the bytes read.
    let past = unsafe { hal_remote_read(remote, (1 << 20) - 2, got.as_mut_ptr().cast(), 3) };
    assert_eq!(past, HAL_ERR_INVALID_ARGUMENT);
    assert_eq!(
        hal_remote_read_into(remote, 0, local, 8000, 300),
        HAL_ERR_INVALID_ARGUMENT
    );

    ok(hal_remote_memory_release(remote));
    assert_eq!(hal_remote_memory_release(remote), HAL_ERR_DOUBLE_RELEASE);
    ok(hal_remote_export_wait_unused(export, PATIENCE_NS));
    // The memory lives while it is exported: released first, still served.
    ok(hal_memory_release(mem));
    let (status, again) = connect(importer, &text);
    ok(status);
    // SAFETY: `got` holds the bytes read.
    ok(unsafe { hal_remote_read(again, 0, got.as_mut_ptr().cast(), 10) });
    assert_eq!(&got[..10], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    // An export released closes its importers, and ends.
    ok(hal_remote_export_release(export));
    // SAFETY: `got` holds the bytes read.
    let closed = unsafe { hal_remote_read(again, 0, got.as_mut_ptr().cast(), 10) };
    assert_eq!(closed, HAL_ERR_CLOSED, "{}", last());
    let (late, _) = connect(importer, &text);
    assert_eq!(late, HAL_ERR_NOT_FOUND, "{}", last());
    ok(hal_remote_memory_release(again));
    ok(hal_memory_release(local));
    for d in [device, local_device] {
        ok(hal_device_release(d));
    }
    ok(hal_remote_node_release(exporter));
    ok(hal_remote_node_release(importer));
}

#[test]
fn a_wrong_secret_is_refused_and_bad_texts_never_reach_the_network() {
    let (Some(exporter), Some(importer)) = (node(), node()) else {
        return;
    };
    let (device, mem) = memory(4096);
    let mut export = null_mut();
    // SAFETY: a valid place for the export.
    ok(unsafe { hal_remote_export(exporter, mem, false, &mut export) });
    let text = export_text(export);
    let mut forged = RemoteHandle::from_text(&text).unwrap();
    forged.secret[3] ^= 0x10;
    let (status, _) = connect(importer, &forged.to_text());
    assert_eq!(status, HAL_ERR_PERMISSION_DENIED, "{}", last());
    let mut gone = RemoteHandle::from_text(&text).unwrap();
    gone.export_id += 1000;
    let (status, _) = connect(importer, &gone.to_text());
    assert_eq!(status, HAL_ERR_NOT_FOUND, "{}", last());
    let cut = &text[..text.len() - 2];
    for bad in [cut, "hal1r.", "hal1r.AAAA", "not a handle", "hal1.AAAA"] {
        let (status, _) = connect(importer, bad);
        assert_eq!(status, HAL_ERR_INVALID_HANDLE, "{bad}: {}", last());
    }
    // A memory's text is no notify's.
    let text_c = CString::new(text.clone()).unwrap();
    let mut notify = null_mut();
    // SAFETY: a NUL-terminated text and a valid place for the object.
    let wrong_kind = unsafe { hal_remote_connect_notify(importer, text_c.as_ptr(), &mut notify) };
    assert_eq!(wrong_kind, HAL_ERR_INVALID_HANDLE, "{}", last());
    let mut count = 9;
    // SAFETY: a valid place for the count.
    ok(unsafe { hal_remote_export_importers(export, &mut count) });
    assert_eq!(count, 0);
    ok(hal_remote_export_release(export));
    ok(hal_memory_release(mem));
    ok(hal_device_release(device));
    ok(hal_remote_node_release(exporter));
    ok(hal_remote_node_release(importer));
}

#[test]
fn a_read_only_export_refuses_writes() {
    let (Some(exporter), Some(importer)) = (node(), node()) else {
        return;
    };
    let (device, mem) = memory(8192);
    let mut export = null_mut();
    // SAFETY: a valid place for the export.
    ok(unsafe { hal_remote_export(exporter, mem, true, &mut export) });
    let (status, remote) = connect(importer, &export_text(export));
    ok(status);
    let data = [9u8; 16];
    for status in [
        // SAFETY: `data` holds the bytes written.
        unsafe { hal_remote_write(remote, 0, data.as_ptr().cast(), data.len()) },
        // SAFETY: as above.
        unsafe { hal_remote_write_signal(remote, 0, data.as_ptr().cast(), data.len()) },
        hal_remote_write_from(remote, 0, mem, 0, 16),
    ] {
        assert_eq!(status, HAL_ERR_PERMISSION_DENIED, "{}", last());
    }
    assert!(last().contains("read-only"), "{}", last());
    let mut got = [0u8; 16];
    // SAFETY: `got` holds the bytes read.
    ok(unsafe { hal_remote_read(remote, 0, got.as_mut_ptr().cast(), got.len()) });
    assert_eq!(got[..4], [0, 1, 2, 3]);
    ok(hal_remote_memory_release(remote));
    ok(hal_remote_export_release(export));
    ok(hal_memory_release(mem));
    ok(hal_device_release(device));
    ok(hal_remote_node_release(exporter));
    ok(hal_remote_node_release(importer));
}

/// A node on the loopback address whose waits drive its worker for
/// `spin_ns` (`hal_remote_node_options.spin_ns`), or None where UCX cannot
/// be loaded.
fn spinning_node(spin_ns: i64) -> Option<*mut hal_remote_node> {
    let opts = hal_remote_node_options {
        size: std::mem::size_of::<hal_remote_node_options>() as u32,
        advertise: std::ptr::null(),
        timeout_ns: 0,
        spin_ns,
    };
    let mut node = null_mut();
    // SAFETY: a NUL-terminated address, options of their size, and a valid
    // place for the node.
    let status = unsafe { hal_remote_node_bind_with(c"127.0.0.1:0".as_ptr(), &opts, &mut node) };
    if status == HAL_ERR_UNAVAILABLE {
        hal_core::testing::not_run(&format!("UCX cannot be loaded here: {}", last()));
        return None;
    }
    ok(status);
    Some(node)
}

/// Signals between two spinning nodes, each taken by the export's wait
/// (which drives its worker): a ping-pong in both directions.
#[test]
fn signals_between_spinning_nodes_are_taken_by_waits_that_drive_the_worker() {
    let (Some(a), Some(b)) = (spinning_node(200_000), spinning_node(200_000)) else {
        return;
    };
    let mut device = null_mut();
    // SAFETY: a NUL-terminated name and a valid place for the device.
    ok(unsafe { hal_device_open(c"cpu-shm".as_ptr(), 0, &mut device) });
    let (mut na, mut nb) = (null_mut(), null_mut());
    // SAFETY: valid places for the notifies.
    ok(unsafe { hal_notify_create(device, &mut na) });
    // SAFETY: as above.
    ok(unsafe { hal_notify_create(device, &mut nb) });
    let (mut ea, mut eb) = (null_mut(), null_mut());
    // SAFETY: valid places for the exports.
    ok(unsafe { hal_remote_export_notify(a, na, &mut ea) });
    // SAFETY: as above.
    ok(unsafe { hal_remote_export_notify(b, nb, &mut eb) });
    let (ta, tb) = (
        CString::new(export_text(ea)).unwrap(),
        CString::new(export_text(eb)).unwrap(),
    );
    let (mut to_b, mut to_a) = (null_mut(), null_mut());
    // SAFETY: NUL-terminated texts and valid places for the objects.
    ok(unsafe { hal_remote_connect_notify(a, tb.as_ptr(), &mut to_b) });
    // SAFETY: as above.
    ok(unsafe { hal_remote_connect_notify(b, ta.as_ptr(), &mut to_a) });
    for _ in 0..20 {
        ok(hal_remote_notify_signal(to_b));
        ok(hal_remote_export_wait_signal(eb, PATIENCE_NS));
        ok(hal_remote_notify_signal(to_a));
        ok(hal_remote_export_wait_signal(ea, PATIENCE_NS));
    }
    // Each signal was taken once.
    assert_eq!(hal_remote_export_wait_signal(ea, 0), HAL_ERR_TIMEOUT);
    assert_eq!(hal_remote_export_wait_signal(eb, 0), HAL_ERR_TIMEOUT);
    for r in [to_a, to_b] {
        ok(hal_remote_notify_release(r));
    }
    for e in [ea, eb] {
        ok(hal_remote_export_release(e));
    }
    for n in [na, nb] {
        ok(hal_notify_release(n));
    }
    ok(hal_device_release(device));
    ok(hal_remote_node_release(a));
    ok(hal_remote_node_release(b));
}

#[test]
fn a_notify_is_signalled_from_another_node() {
    let (Some(exporter), Some(importer)) = (node(), node()) else {
        return;
    };
    let (mut device, mut notify) = (null_mut(), null_mut());
    // SAFETY: NUL-terminated names and valid places for the objects.
    ok(unsafe { hal_device_open(c"cpu-shm".as_ptr(), 0, &mut device) });
    // SAFETY: a valid place for the notify.
    ok(unsafe { hal_notify_create(device, &mut notify) });
    let mut export = null_mut();
    // SAFETY: a valid place for the export.
    ok(unsafe { hal_remote_export_notify(exporter, notify, &mut export) });
    let text = CString::new(export_text(export)).unwrap();
    let mut remote = null_mut();
    // SAFETY: a NUL-terminated text and a valid place for the object.
    ok(unsafe { hal_remote_connect_notify(importer, text.as_ptr(), &mut remote) });
    for _ in 0..3 {
        ok(hal_remote_notify_signal(remote));
        ok(hal_notify_wait(notify, PATIENCE_NS));
    }
    // A notify's text is no memory's.
    let (status, _) = connect(importer, text.to_str().unwrap());
    assert_eq!(status, HAL_ERR_INVALID_HANDLE, "{}", last());
    ok(hal_remote_notify_release(remote));
    assert_eq!(hal_remote_notify_signal(remote), HAL_ERR_DOUBLE_RELEASE);
    ok(hal_remote_export_release(export));
    ok(hal_notify_release(notify));
    ok(hal_device_release(device));
    ok(hal_remote_node_release(exporter));
    ok(hal_remote_node_release(importer));
}

#[test]
fn null_pointers_forged_objects_and_bad_addresses_answer_their_statuses() {
    let mut node_out = null_mut();
    // SAFETY: NULL is what is being refused.
    let status = unsafe { hal_remote_node_bind(std::ptr::null(), &mut node_out) };
    assert_eq!(status, HAL_ERR_NULL_ARGUMENT);
    // SAFETY: as above.
    let status = unsafe { hal_remote_node_bind(c"127.0.0.1:0".as_ptr(), null_mut()) };
    assert_eq!(status, HAL_ERR_NULL_ARGUMENT);
    // SAFETY: a NUL-terminated address and a valid place for the node.
    let status = unsafe { hal_remote_node_bind(c"nowhere".as_ptr(), &mut node_out) };
    assert_eq!(status, HAL_ERR_INVALID_ARGUMENT);
    assert!(last().contains("IP:PORT"), "{}", last());
    let forged = 0x51 as *mut hal_remote_memory;
    let mut byte = [0u8; 1];
    // SAFETY: `byte` holds the byte read.
    let status = unsafe { hal_remote_read(forged, 0, byte.as_mut_ptr().cast(), 1) };
    assert_eq!(status, HAL_ERR_INVALID_OBJECT);
    assert_eq!(hal_remote_flush(null_mut()), HAL_ERR_NULL_ARGUMENT);
    assert_eq!(
        hal_remote_export_wait_signal(null_mut(), 0),
        HAL_ERR_NULL_ARGUMENT
    );
    assert_eq!(
        hal_remote_notify_signal(0x51 as *mut hal_remote_notify),
        HAL_ERR_INVALID_OBJECT
    );
    let Some(node) = node() else {
        return;
    };
    let mut remote = null_mut();
    // SAFETY: NULL is what is being refused.
    let status = unsafe { hal_remote_connect(node, std::ptr::null(), &mut remote) };
    assert_eq!(status, HAL_ERR_NULL_ARGUMENT);
    let mut text = null_mut();
    // SAFETY: as above.
    let status = unsafe { hal_remote_export_text(null_mut(), &mut text) };
    assert_eq!(status, HAL_ERR_NULL_ARGUMENT);
    // A node is no export.
    // SAFETY: a valid place for the text; the token is looked up first.
    let status = unsafe { hal_remote_export_text(node.cast(), &mut text) };
    assert_eq!(status, HAL_ERR_INVALID_OBJECT);
    assert!(
        last().contains("is a hal_remote_node, not a hal_remote_exported"),
        "{}",
        last()
    );
    let mut export = null_mut();
    // SAFETY: NULL memory is what is being refused.
    let status = unsafe { hal_remote_export(node, null_mut(), false, &mut export) };
    assert_eq!(status, HAL_ERR_NULL_ARGUMENT);
    let (status, _) = connect(node, "hal1r.");
    assert_eq!(status, HAL_ERR_INVALID_HANDLE);
    ok(hal_remote_node_release(node));
    assert_eq!(hal_remote_node_release(node), HAL_ERR_DOUBLE_RELEASE);
}
