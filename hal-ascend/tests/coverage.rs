//! Every entry point this backend resolves is exported by the stand-in
//! and exercised by the backend (the stand-in counts its calls).

use hal_core::DeviceExt;
mod common;

use hal_core::{Vmm, VmmExt};
use std::time::Duration;

use common::{backend, calls};
use hal_core::{
    Access, AllocDesc, Backend, Device, Event, EventFlags, ExportOptions, Granularity, Handle,
    ImportOptions, Importers, MemRef, Memory, Notify, Reservation, SharedHandle, WaitOptions,
};

const LONG: Duration = Duration::from_secs(20);

#[test]
fn every_resolved_entry_point_is_exported_and_exercised() {
    for name in hal_ascend::RESOLVED {
        assert!(
            hal_mock_libascendcl::EXPORTED.contains(name),
            "the stand-in lacks {name}"
        );
    }
    let b = backend();
    let anyone = ExportOptions {
        importers: Importers::Anyone,
        ..ExportOptions::default()
    };
    let (d0, d1) = (b.open(0).unwrap(), b.open(1).unwrap());
    // Memory, copies, memset, keys and their allow-list.
    let desc = AllocDesc {
        align: 4096,
        ..AllocDesc::device(0, 8192)
    };
    let a = d0.allocate(&desc).unwrap();
    a.write(0, b"coverage").unwrap();
    let mut ex = d0.export_memory(&a, &ExportOptions::default()).unwrap();
    d0.allow_importers(&mut ex, &[d0.process_id().unwrap()])
        .unwrap();
    let peer = ImportOptions {
        peer_access: true,
        ..ImportOptions::default()
    };
    let text =
        |e: &hal_core::Exported| SharedHandle::from(Handle::from_text(&e.to_text()).unwrap());
    let m = d1.import_memory(text(&ex), &peer).unwrap();
    let s1 = d1.create_stream().unwrap();
    let b1 = d1.allocate(&AllocDesc::device(1, 4096)).unwrap();
    d1.copy_async(&s1, MemRef::Allocation(&b1), 0, MemRef::Mapping(&m), 0, 8)
        .unwrap();
    d1.write_async(&s1, MemRef::Allocation(&b1), 8, vec![1, 2])
        .unwrap();
    d1.memset_async(&s1, MemRef::Allocation(&b1), 10, 2, 0)
        .unwrap();
    d1.synchronize(&s1, Some(LONG)).unwrap();
    assert!(d1.query_stream(&s1).unwrap());
    let mut out = [0u8; 8];
    b1.read(0, &mut out).unwrap();
    assert_eq!(&out, b"coverage");
    drop(m);
    d1.synchronize_device(Some(LONG)).unwrap();
    // Events and IPC events.
    let e = d0.create_event(EventFlags::default()).unwrap();
    let s0 = d0.create_stream().unwrap();
    d0.record_event(&s0, &e).unwrap();
    d0.stream_wait_event(&s0, &e).unwrap();
    e.wait(WaitOptions::timeout(LONG)).unwrap();
    assert!(e.query().unwrap());
    let ipc = d0
        .create_event(EventFlags {
            interprocess: true,
            timing: false,
        })
        .unwrap();
    let ipc_ex = d0.export_event(&ipc, &anyone).unwrap();
    let opened = d1
        .import_event(text(&ipc_ex), &ImportOptions::default())
        .unwrap();
    d0.record_event(&s0, &ipc).unwrap();
    opened.wait(WaitOptions::timeout(LONG)).unwrap();
    // Notifies.
    let n = d0.create_notify().unwrap();
    let mut n_ex = d0.export_notify(&n, &ExportOptions::default()).unwrap();
    d0.allow_importers(&mut n_ex, &[d0.process_id().unwrap()])
        .unwrap();
    let imported = d1.import_notify(text(&n_ex), &peer).unwrap();
    imported.signal().unwrap();
    n.wait(WaitOptions::timeout(LONG)).unwrap();
    // A range that is not whole pages is refused before the runtime is asked.
    let small = d0.export_memory(&d0.allocate(&AllocDesc::device(0, 100)).unwrap(), &anyone);
    assert!(
        matches!(small, Err(hal_core::Error::Misaligned { len: 100, .. })),
        "{:?}",
        small.map(|_| ())
    );
    // The exporting process imports its own export on device 0 too.
    let same = d0
        .import_memory(
            text(&ex),
            &ImportOptions {
                device: Some(0),
                ..peer
            },
        )
        .unwrap();
    let mut back = [0u8; 8];
    same.read(0, &mut back).unwrap();
    assert_eq!(&back, b"coverage");
    drop((
        imported, n_ex, n, opened, ipc_ex, ipc, e, s0, s1, b1, same, ex, a,
    ));
    // A vendor error, whose text comes from aclGetRecentErrMsg.
    let asked = calls("aclGetRecentErrMsg");
    match d0.allocate(&AllocDesc::device(0, 1 << 50)) {
        Err(hal_core::Error::Vendor(v)) => {
            assert_eq!(v.name, "ACL_ERROR_RT_MEMORY_ALLOCATION", "{v:?}");
            assert!(
                v.message.contains("out of memory"),
                "the runtime's text: {v:?}"
            );
        }
        other => panic!(
            "expected the runtime's out-of-memory error, got {:?}",
            other.map(|_| ())
        ),
    }
    assert!(
        calls("aclGetRecentErrMsg") > asked,
        "the error's text was asked for"
    );
    // VMM: a physical allocation mapped, exported with its allow-list and
    // imported again, then everything released.
    let g = d0.granularity(Granularity::Minimum).unwrap();
    let p = d0.allocate_physical(g).unwrap();
    let r = d0.reserve(g, 0).unwrap();
    d0.map(&r, 0, &p).unwrap();
    d0.set_access(&r, 0, g, Access::ReadWrite).unwrap();
    r.write(0, b"vmm").unwrap();
    let mut p_ex = d0.export_physical(&p, &ExportOptions::default()).unwrap();
    d0.allow_importers(&mut p_ex, &[d0.process_id().unwrap()])
        .unwrap();
    let q = d0
        .import_physical(text(&p_ex), &ImportOptions::default())
        .unwrap();
    let r2 = d0.reserve(g, 0).unwrap();
    d0.map(&r2, 0, &q).unwrap();
    d0.set_access(&r2, 0, g, Access::ReadWrite).unwrap();
    let mut three = [0u8; 3];
    r2.read(0, &mut three).unwrap();
    assert_eq!(&three, b"vmm");
    d0.unmap(&r2, 0, g).unwrap();
    // Onto the other device: peer access enabled first.
    let q1 = d1
        .import_physical(text(&p_ex), &ImportOptions::default())
        .unwrap();
    let r3 = d1.reserve(g, 0).unwrap();
    d1.map(&r3, 0, &q1).unwrap();
    d1.set_access(&r3, 0, g, Access::ReadWrite).unwrap();
    r3.read(0, &mut three).unwrap();
    assert_eq!(&three, b"vmm");
    d1.unmap(&r3, 0, g).unwrap();
    drop((r3, q1, r2, q, p_ex, r, p));
    // A raw key of another library's memory (a key hal did not make),
    // opened and its range checked against what the runtime opened.
    let (ptr, key) = foreign_key(1 << 21);
    let raw = hal_ascend::RawIpcKey {
        key,
        offset: 4096,
        size: 8,
    };
    let m = d0.import_raw(&raw, &ImportOptions::default()).unwrap();
    m.read(0, &mut [0u8; 8]).unwrap();
    drop(m);
    close_and_free(ptr, &key);
    let own = d0.allocate(&AllocDesc::device(0, 1 << 21)).unwrap();
    let own_raw = d0.export_raw(&own, None, &Importers::Anyone).unwrap();
    assert_eq!(own_raw.size, 1 << 21);
    for name in hal_ascend::RESOLVED {
        assert!(calls(name) > 0, "{name} was never called");
    }
}

type Raw = *mut std::ffi::c_void;

/// `size` bytes of device 0 memory allocated through the stand-in's C
/// entry points, and its key to anyone, as another library makes them.
fn foreign_key(size: usize) -> (Raw, [u8; 65]) {
    use std::ffi::c_char;
    let lib = common::standin();
    // SAFETY: the stand-in is loaded (by the backend); each symbol has the
    // C signature given (acl_rt.h).
    unsafe {
        let lib = libloading::Library::new(lib).unwrap();
        let set = *lib
            .get::<unsafe extern "C" fn(i32) -> i32>(b"aclrtSetDevice")
            .unwrap();
        let malloc = *lib
            .get::<unsafe extern "C" fn(*mut Raw, usize, u32) -> i32>(b"aclrtMalloc")
            .unwrap();
        let key_of = *lib
            .get::<unsafe extern "C" fn(Raw, usize, *mut c_char, usize, u64) -> i32>(
                b"aclrtIpcMemGetExportKey",
            )
            .unwrap();
        assert_eq!(set(0), 0);
        let mut p: Raw = std::ptr::null_mut();
        assert_eq!(malloc(&mut p, size, 0), 0);
        let mut key = [0 as c_char; 65];
        assert_eq!(key_of(p, size, key.as_mut_ptr(), 65, 0x1), 0);
        (p, key.map(|c| c as u8))
    }
}

/// Close the key of memory `foreign_key` made, then free it.
fn close_and_free(p: Raw, key: &[u8; 65]) {
    // SAFETY: as in `foreign_key`; the key is NUL-terminated.
    unsafe {
        let lib = libloading::Library::new(common::standin()).unwrap();
        let close = *lib
            .get::<unsafe extern "C" fn(*const std::ffi::c_char) -> i32>(b"aclrtIpcMemClose")
            .unwrap();
        let free = *lib
            .get::<unsafe extern "C" fn(Raw) -> i32>(b"aclrtFree")
            .unwrap();
        assert_eq!(close(key.as_ptr().cast()), 0);
        assert_eq!(free(p), 0);
    }
}
