//! Across processes, through hal-ascend over the stand-in runtime, each in
//! real child processes of this test binary: memory, an IPC event and a
//! notify exported on device 0 and imported on device 1 by another process
//! (peer access enabled); a notify's pid allow-list refusing a process not
//! on it; VMM physical memory imported on another device; an export
//! misaligned for a huge-page allocation refused; raw keys both ways (hal
//! to a library that opens keys itself, and back).

use hal_core::DeviceExt;
mod common;

use hal_core::{Vmm, VmmExt};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::time::Duration;

use common::backend;
use hal_ascend::{AscendDevice, RawIpcKey};
use hal_core::{
    Access, AllocDesc, Backend, ByteRange, Device, Error, EventFlags, ExportOptions, Granularity,
    Handle, HugePages, ImportOptions, Importers, MemRef, Memory, Notify, Placement, Reservation,
    SharedHandle, WaitOptions,
};

const LONG: Duration = Duration::from_secs(20);
const HUGE: u64 = 2 << 20;
/// The variables that carry handles and raw keys to a child.
const MEMORY: &str = "HAL_ASCEND_ACROSS_MEMORY";
const EVENT: &str = "HAL_ASCEND_ACROSS_EVENT";
const NOTIFY: &str = "HAL_ASCEND_ACROSS_NOTIFY";
const RAW: &str = "HAL_ASCEND_ACROSS_RAW";

fn dev(ordinal: u32) -> AscendDevice {
    backend().open(ordinal).unwrap()
}

fn anyone() -> ExportOptions {
    ExportOptions {
        importers: Importers::Anyone,
        ..ExportOptions::default()
    }
}

fn shared(var: &str) -> SharedHandle {
    SharedHandle::from(Handle::from_text(&std::env::var(var).unwrap()).unwrap())
}

fn peer() -> ImportOptions {
    ImportOptions {
        peer_access: true,
        ..ImportOptions::default()
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

/// A child of this binary running `entry`, its stdin and its `@` lines.
struct Kid {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Kid {
    fn spawn(entry: &str, env: &[(&str, String)]) -> Kid {
        let mut cmd = hal_core::testing::child(entry);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Kid {
            child,
            stdin,
            lines,
        }
    }

    /// The child's next `@` line, without the `@`.
    fn next(&mut self) -> String {
        loop {
            let l = self.lines.next().expect("the child's answer").unwrap();
            // The harness may have started the line ("test name ... ").
            if let Some((_, rest)) = l.split_once('@') {
                return rest.to_string();
            }
        }
    }

    fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
    }

    fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the child failed: {status}");
    }
}

/// The child's side: wait for the parent's line.
fn heard() -> String {
    let mut l = String::new();
    std::io::stdin().lock().read_line(&mut l).unwrap();
    l.trim().to_string()
}

// ---- memory, event and notify: device 0 to device 1 ----

#[test]
#[ignore = "child entry point: run by its parent"]
fn child_imports_onto_device_1() {
    let d1 = dev(1);
    // Memory: imported with peer access; device-to-device copies only.
    let m = d1.import_memory(shared(MEMORY), &peer()).unwrap();
    assert!(m.device_copies_only());
    let mut host = [0u8; 4];
    assert!(m.read(0, &mut host).unwrap_err().is_unsupported());
    let own = d1.allocate(&AllocDesc::device(1, 4096)).unwrap();
    let s = d1.create_stream().unwrap();
    d1.copy_async(
        &s,
        MemRef::Allocation(&own),
        0,
        MemRef::Mapping(&m),
        0,
        4096,
    )
    .unwrap();
    // The IPC event the exporter recorded: this stream waits on it.
    let e = d1
        .import_event(shared(EVENT), &ImportOptions::default())
        .unwrap();
    d1.stream_wait_event(&s, &e).unwrap();
    d1.synchronize(&s, Some(LONG)).unwrap();
    let mut got = vec![0u8; 4096];
    own.read(0, &mut got).unwrap();
    assert_eq!(
        got,
        pattern(4096),
        "the bytes of device 0, copied on device 1"
    );
    println!("@memory");
    // The notify: importers record, the creator waits.
    let n = d1.import_notify(shared(NOTIFY), &peer()).unwrap();
    n.signal().unwrap();
    d1.record_notify(&s, &n).unwrap();
    d1.synchronize(&s, Some(LONG)).unwrap();
    println!("@notify");
    assert_eq!(heard(), "done");
    drop((m, e, n));
}

#[test]
fn memory_event_and_notify_exported_on_device_0_are_imported_on_device_1_by_another_process() {
    let d0 = dev(0);
    assert!(d0
        .capabilities()
        .contains(hal_core::Capabilities::PEER_ACCESS));
    let a = d0.allocate(&AllocDesc::device(0, HUGE)).unwrap();
    a.write(0, &pattern(4096)).unwrap();
    let mem = d0.export_memory(&a, &anyone()).unwrap();
    let ipc = EventFlags {
        interprocess: true,
        timing: false,
    };
    let e = d0.create_event(ipc).unwrap();
    let s = d0.create_stream().unwrap();
    d0.record_event(&s, &e).unwrap();
    let ev = d0.export_event(&e, &anyone()).unwrap();
    let n = d0.create_notify().unwrap();
    let nx = d0.export_notify(&n, &anyone()).unwrap();
    let mut kid = Kid::spawn(
        "child_imports_onto_device_1",
        &[
            (MEMORY, mem.to_text()),
            (EVENT, ev.to_text()),
            (NOTIFY, nx.to_text()),
        ],
    );
    assert_eq!(kid.next(), "memory");
    assert_eq!(kid.next(), "notify");
    // Signalled twice (from the host and from a stream): two waits end.
    n.wait(WaitOptions::timeout(LONG)).unwrap();
    kid.say("done");
    kid.finish();
    drop((nx, n, ev, e, mem, a));
}

// ---- a notify's pid allow-list ----

#[test]
#[ignore = "child entry point: run by its parent"]
fn child_tries_the_notify() {
    let d1 = dev(1);
    println!("@{}", d1.process_id().unwrap());
    assert_eq!(heard(), "go");
    match d1.import_notify(shared(NOTIFY), &peer()) {
        Ok(n) => {
            n.signal().unwrap();
            println!("@ok");
        }
        Err(Error::PermissionDenied { .. }) => println!("@refused"),
        Err(e) => panic!("unexpected: {e}"),
    }
}

#[test]
fn a_notify_allow_list_refuses_a_process_not_on_it_and_admits_one_on_it() {
    let d0 = dev(0);
    let n = d0.create_notify().unwrap();
    let mut nx = d0.export_notify(&n, &ExportOptions::default()).unwrap();
    let env = [(NOTIFY, nx.to_text())];
    let mut listed = Kid::spawn("child_tries_the_notify", &env);
    let mut unlisted = Kid::spawn("child_tries_the_notify", &env);
    let tgid: u32 = listed.next().parse().unwrap();
    let other: u32 = unlisted.next().parse().unwrap();
    assert_ne!(tgid, other);
    d0.allow_importers(&mut nx, &[tgid]).unwrap();
    unlisted.say("go");
    assert_eq!(unlisted.next(), "refused", "a process not on the list");
    unlisted.finish();
    listed.say("go");
    assert_eq!(listed.next(), "ok", "the process on the list");
    listed.finish();
    n.wait(WaitOptions::timeout(LONG)).unwrap();
}

// ---- VMM physical memory on another device ----

#[test]
#[ignore = "child entry point: run by its parent"]
fn child_maps_the_physical_memory_on_device_1() {
    let d1 = dev(1);
    let p = d1
        .import_physical(shared(MEMORY), &ImportOptions::default())
        .unwrap();
    let g = d1.granularity(Granularity::Minimum).unwrap();
    let r = d1.reserve(g, 0).unwrap();
    d1.map(&r, 0, &p).unwrap();
    d1.set_access(&r, 0, g, Access::ReadWrite).unwrap();
    let mut got = [0u8; 10];
    r.read(0, &mut got).unwrap();
    assert_eq!(&got, b"vmm across");
    r.write(0, b"written on").unwrap();
    d1.unmap(&r, 0, g).unwrap();
    println!("@mapped");
}

#[test]
fn vmm_memory_of_device_0_is_imported_on_device_1_by_another_process() {
    let d0 = dev(0);
    let g = d0.granularity(Granularity::Minimum).unwrap();
    let p = d0.allocate_physical(g).unwrap();
    let r = d0.reserve(g, 0).unwrap();
    d0.map(&r, 0, &p).unwrap();
    d0.set_access(&r, 0, g, Access::ReadWrite).unwrap();
    r.write(0, b"vmm across").unwrap();
    let px = d0.export_physical(&p, &anyone()).unwrap();
    let mut kid = Kid::spawn(
        "child_maps_the_physical_memory_on_device_1",
        &[(MEMORY, px.to_text())],
    );
    assert_eq!(kid.next(), "mapped");
    kid.finish();
    let mut got = [0u8; 10];
    r.read(0, &mut got).unwrap();
    assert_eq!(&got, b"written on", "one physical allocation, two devices");
    d0.unmap(&r, 0, g).unwrap();
}

// ---- huge pages ----

#[test]
fn an_export_misaligned_for_a_huge_page_allocation_is_refused_naming_the_page() {
    let d = dev(0);
    // Whole 2 MiB pages: huge pages first, as allocated.
    let a = d.allocate(&AllocDesc::device(0, 2 * HUGE)).unwrap();
    let part = |offset, len| ExportOptions {
        range: Some(ByteRange::new(offset, len)),
        ..anyone()
    };
    for (offset, len) in [(4096, HUGE), (0, 4096), (HUGE, HUGE - 4096)] {
        match d.export_memory(&a, &part(offset, len)) {
            Err(
                e @ Error::Misaligned {
                    page_size: HUGE, ..
                },
            ) => {
                assert!(e.to_string().contains("2097152-byte page"), "{e}")
            }
            other => panic!("{offset:#x}+{len:#x}: {:?}", other.map(|_| ())),
        }
    }
    let second = d.export_memory(&a, &part(HUGE, HUGE)).unwrap();
    assert_eq!(second.handle().size, HUGE);
    // Explicit huge pages: a 4 KiB buffer sits on a 2 MiB page, which it
    // does not cover whole.
    let small_huge = d
        .allocate(&AllocDesc {
            placement: Placement {
                huge_pages: HugePages::Explicit(HUGE),
                ..Placement::default()
            },
            ..AllocDesc::device(0, 4096)
        })
        .unwrap();
    assert!(matches!(
        d.export_memory(&small_huge, &anyone()),
        Err(Error::Misaligned {
            page_size: HUGE,
            ..
        })
    ));
    // Normal pages: the same 4 KiB, page-aligned, is exported whole.
    let normal = d
        .allocate(&AllocDesc {
            align: 4096,
            ..AllocDesc::device(0, 4096)
        })
        .unwrap();
    let whole = d.export_memory(&normal, &anyone()).unwrap();
    assert_eq!(whole.handle().size, 4096);
    // A page size the device does not have.
    let odd = AllocDesc {
        placement: Placement {
            huge_pages: HugePages::Explicit(64 << 10),
            ..Placement::default()
        },
        ..AllocDesc::device(0, 4096)
    };
    assert!(matches!(
        d.allocate(&odd),
        Err(Error::InvalidArgument { .. })
    ));
}

// ---- raw keys ----

/// The stand-in's C entry points a library that opens keys itself uses.
mod acl {
    use std::ffi::{c_char, c_void};

    type Raw = *mut c_void;

    fn lib() -> &'static libloading::Library {
        static LIB: std::sync::OnceLock<libloading::Library> = std::sync::OnceLock::new();
        // SAFETY: the stand-in's initialisers have no preconditions.
        LIB.get_or_init(|| unsafe { libloading::Library::new(super::common::standin()).unwrap() })
    }

    macro_rules! call {
        ($name:literal: $t:ty) => {{
            // SAFETY: `$t` is the entry point's C signature (acl_rt.h).
            *unsafe { lib().get::<$t>($name.as_bytes()) }.unwrap()
        }};
    }

    /// Device `device` current on this thread, the runtime initialised.
    pub fn ready(device: i32) {
        let init = call!("aclInit": unsafe extern "C" fn(*const c_char) -> i32);
        let set = call!("aclrtSetDevice": unsafe extern "C" fn(i32) -> i32);
        // SAFETY: a null configuration; a plain device id.
        unsafe {
            let r = init(std::ptr::null());
            assert!(r == 0 || r == 100_002, "{r}");
            assert_eq!(set(device), 0);
        }
    }

    /// `size` bytes of device memory holding `bytes` at `at`, and the key
    /// of all of it to anyone.
    pub fn export(size: usize, at: usize, bytes: &[u8]) -> (Raw, [u8; 65]) {
        let malloc = call!("aclrtMalloc": unsafe extern "C" fn(*mut Raw, usize, u32) -> i32);
        let memcpy = call!(
            "aclrtMemcpy": unsafe extern "C" fn(Raw, usize, *const c_void, usize, u32) -> i32
        );
        let key_of = call!(
            "aclrtIpcMemGetExportKey": unsafe extern "C" fn(Raw, usize, *mut c_char, usize, u64) -> i32
        );
        let mut p: Raw = std::ptr::null_mut();
        let mut key = [0 as c_char; 65];
        // SAFETY: valid places and lengths; the memory is live.
        unsafe {
            assert_eq!(malloc(&mut p, size, 0), 0);
            let dst = p.byte_add(at);
            assert_eq!(
                memcpy(dst, size - at, bytes.as_ptr().cast(), bytes.len(), 1),
                0
            );
            assert_eq!(key_of(p, size, key.as_mut_ptr(), 65, 0x1), 0);
        }
        (p, key.map(|c| c as u8))
    }

    /// Close the key `key` of memory at `p`, then free it.
    pub fn close_and_free(p: Raw, key: &[u8; 65]) {
        let close = call!("aclrtIpcMemClose": unsafe extern "C" fn(*const c_char) -> i32);
        let free = call!("aclrtFree": unsafe extern "C" fn(Raw) -> i32);
        // SAFETY: the key is NUL-terminated; `p` was allocated here.
        unsafe {
            assert_eq!(close(key.as_ptr().cast()), 0);
            assert_eq!(free(p), 0);
        }
    }

    /// Open `key`, read `len` bytes at `offset` of it, close it.
    pub fn import_read(key: &[u8; 65], offset: usize, len: usize) -> Vec<u8> {
        let import = call!(
            "aclrtIpcMemImportByKey": unsafe extern "C" fn(*mut Raw, *const c_char, u64) -> i32
        );
        let memcpy = call!(
            "aclrtMemcpy": unsafe extern "C" fn(*mut c_void, usize, *const c_void, usize, u32) -> i32
        );
        let close = call!("aclrtIpcMemClose": unsafe extern "C" fn(*const c_char) -> i32);
        let mut p: Raw = std::ptr::null_mut();
        let mut out = vec![0u8; len];
        // SAFETY: valid places and lengths; the key is NUL-terminated.
        unsafe {
            assert_eq!(import(&mut p, key.as_ptr().cast(), 0), 0);
            let src = p.byte_add(offset);
            assert_eq!(memcpy(out.as_mut_ptr().cast(), len, src, len, 2), 0);
            assert_eq!(close(key.as_ptr().cast()), 0);
        }
        out
    }
}

#[test]
#[ignore = "child entry point: run by its parent"]
fn child_is_a_library_that_exchanges_raw_keys() {
    acl::ready(0);
    // Opens hal's raw key itself.
    let raw = RawIpcKey::from_bytes(&hex(&std::env::var(RAW).unwrap())).unwrap();
    let got = acl::import_read(&raw.key, raw.offset as usize, raw.size as usize);
    assert_eq!(got, b"from hal");
    println!("@opened");
    // Makes a key of its own for hal: 8 bytes at 4 KiB into 2 MiB.
    let (p, key) = acl::export(HUGE as usize, 4096, b"from npu");
    let mine = RawIpcKey {
        key,
        offset: 4096,
        size: 8,
    };
    println!("@{}", unhex(&mine.to_bytes()));
    assert_eq!(heard(), "done");
    acl::close_and_free(p, &key);
}

fn unhex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn raw_keys_go_both_ways_between_hal_and_a_library_that_opens_keys_itself() {
    let d = dev(0);
    let a = d.allocate(&AllocDesc::device(0, HUGE)).unwrap();
    a.write(8192, b"from hal").unwrap();
    let range = Some(ByteRange::new(8192, 8));
    let raw = d.export_raw(&a, range, &Importers::Anyone).unwrap();
    assert_eq!((raw.offset, raw.size), (8192, 8));
    assert_eq!(RawIpcKey::from_bytes(&raw.to_bytes()).unwrap(), raw);
    let mut kid = Kid::spawn(
        "child_is_a_library_that_exchanges_raw_keys",
        &[(RAW, unhex(&raw.to_bytes()))],
    );
    assert_eq!(kid.next(), "opened");
    let theirs = RawIpcKey::from_bytes(&hex(&kid.next())).unwrap();
    let m = d.import_raw(&theirs, &ImportOptions::default()).unwrap();
    let mut got = [0u8; 8];
    m.read(0, &mut got).unwrap();
    assert_eq!(&got, b"from npu");
    assert_eq!(m.len(), 8);
    // What was opened, described: no creator, no allow-list of hal's.
    let h = hal_core::Mapping::handle(&m);
    assert_eq!((h.creator_pid, h.offset, h.size), (0, 4096, 8));
    assert!(h.flags.contains(hal_core::HandleFlags::ANY_IMPORTER));
    // A range that ends exactly where the key's memory ends fits.
    let last = RawIpcKey {
        offset: HUGE - 8,
        ..theirs
    };
    let end = d.import_raw(&last, &ImportOptions::default()).unwrap();
    assert_eq!(end.len(), 8);
    drop(end);
    // A range past what the key names is refused, checked against what
    // the runtime opened.
    let past = RawIpcKey {
        offset: HUGE - 4,
        ..theirs
    };
    assert!(matches!(
        d.import_raw(&past, &ImportOptions::default()),
        Err(Error::InvalidArgument { .. })
    ));
    drop(m);
    kid.say("done");
    kid.finish();
    // This process opens its own raw key: the original memory.
    let own = d.import_raw(&raw, &ImportOptions::default()).unwrap();
    let mut back = [0u8; 8];
    own.read(0, &mut back).unwrap();
    assert_eq!(&back, b"from hal");
}

#[test]
fn a_raw_key_from_bytes_is_checked() {
    assert!(RawIpcKey::from_bytes(&[0; 80]).is_err());
    let zero = RawIpcKey::from_bytes(&[0; hal_ascend::RAW_KEY_LEN]).unwrap();
    assert!(zero.key_str().is_err(), "an empty key");
    let d = dev(0);
    assert!(d.import_raw(&zero, &ImportOptions::default()).is_err());
    let a = d.allocate(&AllocDesc::device(0, HUGE)).unwrap();
    let empty = Some(ByteRange::new(0, 0));
    assert!(d.export_raw(&a, empty, &Importers::Anyone).is_err());
    let past = Some(ByteRange::new(HUGE, 1));
    assert!(d.export_raw(&a, past, &Importers::Anyone).is_err());
}

#[test]
fn vmm_memory_of_device_1_is_imported_on_device_0_the_other_way() {
    let (d0, d1) = (dev(0), dev(1));
    let g = d1.granularity(Granularity::Minimum).unwrap();
    let p = d1.allocate_physical(g).unwrap();
    let r = d1.reserve(g, 0).unwrap();
    d1.map(&r, 0, &p).unwrap();
    d1.set_access(&r, 0, g, Access::ReadWrite).unwrap();
    r.write(0, b"from one").unwrap();
    let px = d1.export_physical(&p, &anyone()).unwrap();
    let text = SharedHandle::from(Handle::from_text(&px.to_text()).unwrap());
    // Peer access from device 0 to device 1, the memory's own device.
    let q = d0.import_physical(text, &ImportOptions::default()).unwrap();
    let r0 = d0.reserve(g, 0).unwrap();
    d0.map(&r0, 0, &q).unwrap();
    d0.set_access(&r0, 0, g, Access::ReadWrite).unwrap();
    let mut got = [0u8; 8];
    r0.read(0, &mut got).unwrap();
    assert_eq!(&got, b"from one");
    d0.unmap(&r0, 0, g).unwrap();
    d1.unmap(&r, 0, g).unwrap();
}
