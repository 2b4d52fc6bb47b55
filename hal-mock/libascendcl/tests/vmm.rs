//! VMM at the stand-in's C ABI: granules, access before use, and the
//! 64-bit shareable handle across real processes with and without pid
//! validation.

use std::ffi::{c_char, c_void};
use std::io::Write;
use std::process::Stdio;
use std::sync::OnceLock;

use hal_mock_libascendcl::{MemAccessDesc, MemLocation, PhysicalMemProp};
use libloading::Library;

type Raw = *mut c_void;

const CHILD: &str = "HAL_ASCEND_VMM_CHILD";
const NO_PERMISSION: i32 = 207_006;
const UNINITIALIZE: i32 = 100_001;

/// The stand-in, loaded once and kept for the process's life: nothing
/// unloads a vendor runtime while threads started inside it may still run.
fn lib() -> &'static Library {
    static LIB: OnceLock<Library> = OnceLock::new();
    // SAFETY: the stand-in's initialisers have no preconditions.
    LIB.get_or_init(|| unsafe { Library::new(hal_mock_libascendcl::built_library()).unwrap() })
}

macro_rules! sym {
    ($lib:expr, $name:literal, $t:ty) => {
        // SAFETY: `$t` is the entry point's C signature (`vendor/ascend.md`).
        *unsafe { $lib.get::<$t>($name.as_bytes()) }.unwrap()
    };
}

/// The VMM entry points.
struct Vmm {
    granularity: unsafe extern "C" fn(*mut PhysicalMemProp, u32, *mut usize) -> i32,
    malloc: unsafe extern "C" fn(*mut Raw, usize, *const PhysicalMemProp, u64) -> i32,
    free: unsafe extern "C" fn(Raw) -> i32,
    reserve: unsafe extern "C" fn(*mut Raw, usize, usize, Raw, u64) -> i32,
    release: unsafe extern "C" fn(Raw) -> i32,
    map: unsafe extern "C" fn(Raw, usize, usize, Raw, u64) -> i32,
    unmap: unsafe extern "C" fn(Raw) -> i32,
    access: unsafe extern "C" fn(Raw, usize, *mut MemAccessDesc, usize) -> i32,
    export: unsafe extern "C" fn(Raw, u32, u64, *mut u64) -> i32,
    set_pid: unsafe extern "C" fn(u64, *mut i32, usize) -> i32,
    import: unsafe extern "C" fn(u64, i32, *mut Raw) -> i32,
    memcpy: unsafe extern "C" fn(Raw, usize, *const c_void, usize, i32) -> i32,
    tgid: unsafe extern "C" fn(*mut i32) -> i32,
}

fn vmm(l: &Library) -> Vmm {
    Vmm {
        granularity: sym!(
            l,
            "aclrtMemGetAllocationGranularity",
            unsafe extern "C" fn(*mut PhysicalMemProp, u32, *mut usize) -> i32
        ),
        malloc: sym!(
            l,
            "aclrtMallocPhysical",
            unsafe extern "C" fn(*mut Raw, usize, *const PhysicalMemProp, u64) -> i32
        ),
        free: sym!(l, "aclrtFreePhysical", unsafe extern "C" fn(Raw) -> i32),
        reserve: sym!(
            l,
            "aclrtReserveMemAddress",
            unsafe extern "C" fn(*mut Raw, usize, usize, Raw, u64) -> i32
        ),
        release: sym!(
            l,
            "aclrtReleaseMemAddress",
            unsafe extern "C" fn(Raw) -> i32
        ),
        map: sym!(
            l,
            "aclrtMapMem",
            unsafe extern "C" fn(Raw, usize, usize, Raw, u64) -> i32
        ),
        unmap: sym!(l, "aclrtUnmapMem", unsafe extern "C" fn(Raw) -> i32),
        access: sym!(
            l,
            "aclrtMemSetAccess",
            unsafe extern "C" fn(Raw, usize, *mut MemAccessDesc, usize) -> i32
        ),
        export: sym!(
            l,
            "aclrtMemExportToShareableHandle",
            unsafe extern "C" fn(Raw, u32, u64, *mut u64) -> i32
        ),
        set_pid: sym!(
            l,
            "aclrtMemSetPidToShareableHandle",
            unsafe extern "C" fn(u64, *mut i32, usize) -> i32
        ),
        import: sym!(
            l,
            "aclrtMemImportFromShareableHandle",
            unsafe extern "C" fn(u64, i32, *mut Raw) -> i32
        ),
        memcpy: sym!(
            l,
            "aclrtMemcpy",
            unsafe extern "C" fn(Raw, usize, *const c_void, usize, i32) -> i32
        ),
        tgid: sym!(
            l,
            "aclrtDeviceGetBareTgid",
            unsafe extern "C" fn(*mut i32) -> i32
        ),
    }
}

fn ready(l: &Library) {
    let init = sym!(l, "aclInit", unsafe extern "C" fn(*const c_char) -> i32);
    // SAFETY: a null configuration path is allowed.
    let r = unsafe { init(std::ptr::null()) };
    assert!(r == 0 || r == 100_002, "{r}");
    let set = sym!(l, "aclrtSetDevice", unsafe extern "C" fn(i32) -> i32);
    // SAFETY: plain integer argument.
    assert_eq!(unsafe { set(0) }, 0);
}

fn prop(device: u32) -> PhysicalMemProp {
    PhysicalMemProp {
        handle_type: 0,
        allocation_type: 0,
        mem_attr: 5,
        location: MemLocation {
            id: device,
            type_: 1,
        },
        reserve: 0,
    }
}

fn rw(device: u32) -> MemAccessDesc {
    MemAccessDesc {
        flags: 3,
        location: MemLocation {
            id: device,
            type_: 1,
        },
        rsv: [0; 12],
    }
}

impl Vmm {
    fn granule(&self) -> usize {
        let mut p = prop(0);
        let mut g = 0usize;
        // SAFETY: valid places.
        assert_eq!(unsafe { (self.granularity)(&mut p, 0, &mut g) }, 0);
        g
    }

    /// Reserve `len` bytes, map `phys` there and make it read-write.
    fn map_rw(&self, phys: Raw, len: usize) -> Raw {
        let mut va: Raw = std::ptr::null_mut();
        // SAFETY: valid places; the hint is null.
        let r = unsafe { (self.reserve)(&mut va, len, 0, std::ptr::null_mut(), 0) };
        assert_eq!(r, 0);
        // SAFETY: handles and addresses are values to the runtime.
        assert_eq!(unsafe { (self.map)(va, len, 0, phys, 0) }, 0);
        let mut d = rw(0);
        // SAFETY: one valid descriptor.
        assert_eq!(unsafe { (self.access)(va, len, &mut d, 1) }, 0);
        va
    }

    fn write(&self, va: Raw, bytes: &[u8]) -> i32 {
        // SAFETY: a host buffer of `bytes.len()` bytes; 1 is host to device.
        unsafe { (self.memcpy)(va, bytes.len(), bytes.as_ptr().cast(), bytes.len(), 1) }
    }

    fn read(&self, va: Raw, out: &mut [u8]) -> i32 {
        // SAFETY: a host buffer of `out.len()` bytes; 2 is device to host.
        unsafe { (self.memcpy)(out.as_mut_ptr().cast(), out.len(), va, out.len(), 2) }
    }

    fn unmap_release(&self, va: Raw) {
        // SAFETY: addresses are values to the runtime.
        unsafe {
            assert_eq!((self.unmap)(va), 0);
            assert_eq!((self.release)(va), 0);
        }
    }
}

#[test]
fn whole_granules_and_access_before_use() {
    let l = lib();
    ready(l);
    let v = vmm(l);
    let g = v.granule();
    assert!(g >= 4096 && g.is_power_of_two(), "{g}");
    let mut phys: Raw = std::ptr::null_mut();
    // SAFETY: valid places.
    unsafe {
        assert_eq!(
            (v.malloc)(&mut phys, g + 1, &prop(0), 0),
            107_000,
            "not a granule"
        );
        assert_eq!(
            (v.malloc)(&mut phys, g, &prop(9), 0),
            107_001,
            "no device 9"
        );
        assert_eq!((v.malloc)(&mut phys, g, &prop(0), 0), 0);
    }
    let mut va: Raw = std::ptr::null_mut();
    // SAFETY: valid places; handles are values.
    unsafe {
        assert_eq!((v.reserve)(&mut va, 2 * g, 0, std::ptr::null_mut(), 0), 0);
        assert_eq!((v.map)(va, g, 0, phys, 0), 0);
        assert_eq!((v.map)(va, g, 0, phys, 0), 107_000, "overlap");
        assert_eq!(
            (v.map)(va, g, 0, 0x1234 as Raw, 0),
            107_017,
            "no such handle"
        );
    }
    assert_ne!(v.write(va, b"early"), 0, "no access yet");
    let mut d = rw(0);
    // SAFETY: one valid descriptor.
    unsafe {
        let beyond = va.cast::<u8>().add(g).cast();
        assert_eq!((v.access)(beyond, g, &mut d, 1), 107_000, "not mapped");
        assert_eq!((v.access)(va, g, &mut d, 1), 0);
    }
    assert_eq!(v.write(va, b"granules"), 0);
    let mut out = [0u8; 8];
    assert_eq!(v.read(va, &mut out), 0);
    assert_eq!(&out, b"granules");
    // SAFETY: addresses and handles are values.
    unsafe {
        assert_eq!((v.release)(va), 107_000, "mapped still");
        assert_eq!((v.unmap)(va), 0);
        assert_eq!((v.unmap)(va), 107_000, "unmapped twice");
        assert_eq!((v.release)(va), 0);
        assert_eq!((v.free)(phys), 0);
        assert_eq!((v.free)(phys), 107_017, "freed twice");
    }
}

#[test]
fn the_shareable_handle_needs_the_none_type_and_known_flags() {
    let l = lib();
    ready(l);
    let v = vmm(l);
    let g = v.granule();
    let mut phys: Raw = std::ptr::null_mut();
    let mut n = 0u64;
    let set = sym!(l, "aclrtSetDevice", unsafe extern "C" fn(i32) -> i32);
    let enable = sym!(
        l,
        "aclrtDeviceEnablePeerAccess",
        unsafe extern "C" fn(i32, u32) -> i32
    );
    // SAFETY: valid places; handles are values.
    unsafe {
        assert_eq!((v.malloc)(&mut phys, g, &prop(0), 0), 0);
        assert_eq!((v.export)(phys, 2, 0, &mut n), 207_000, "POSIX type");
        assert_eq!((v.export)(phys, 0, 0x4, &mut n), 100_000, "unknown flag");
        assert_eq!((v.export)(phys, 0, 0, &mut n), 0);
        assert_ne!(n, 0);
        let mut me = 0;
        assert_eq!((v.tgid)(&mut me), 0);
        // This process's pid and a number half the counter's range away
        // from `n`: exported by no test of this process, which export in
        // parallel with consecutive numbers.
        let unexported = (n & !0xffff_ffff) | u64::from((n as u32).wrapping_add(1 << 31));
        assert_eq!(
            (v.set_pid)(unexported, &mut me, 1),
            107_000,
            "not exported here"
        );
        assert_eq!((v.set_pid)(n, &mut me, 1), 0);
        // This process, listed, imports its own export: onto device 1
        // only once device 1 has peer access to device 0.
        let mut again: Raw = std::ptr::null_mut();
        assert_eq!((v.import)(n, 1, &mut again), 207_006, "no peer access");
        assert_eq!(set(1), 0);
        assert_eq!(enable(0, 0), 0);
        assert_eq!(set(0), 0);
        assert_eq!((v.import)(n, 1, &mut again), 0);
        let va = v.map_rw(again, g);
        assert_eq!(v.write(va, b"own"), 0);
        v.unmap_release(va);
        assert_eq!((v.free)(again), 0);
        assert_eq!((v.free)(phys), 0);
        // Freed: the number names nothing any more.
        assert_eq!((v.import)(n, 0, &mut again), 107_000);
    }
}

/// Spawn the child `mode` of this test binary; it reads a shareable
/// handle from its stdin and prints what it got.
fn spawn(mode: &str) -> std::process::Child {
    hal_core::testing::child("child_imports_a_shareable_handle")
        .env(CHILD, mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Send `n` to the child and take its answer line (`ok <bytes>` or
/// `refused <code>`).
fn answer(mut child: std::process::Child, n: u64) -> String {
    writeln!(child.stdin.take().unwrap(), "{n}").unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    let line = out
        .lines()
        .find_map(|l| l.split_once("answer: ").map(|(_, a)| a.to_owned()))
        .unwrap_or_default();
    assert!(child.wait().unwrap().success());
    line
}

/// Export `text` in a fresh physical allocation with `flags`.
fn exported(v: &Vmm, text: &[u8], flags: u64) -> (Raw, Raw, u64) {
    let g = v.granule();
    let mut phys: Raw = std::ptr::null_mut();
    // SAFETY: valid places.
    assert_eq!(unsafe { (v.malloc)(&mut phys, g, &prop(0), 0) }, 0);
    let va = v.map_rw(phys, g);
    assert_eq!(v.write(va, text), 0);
    let mut n = 0u64;
    // SAFETY: valid places; the handle is a value.
    assert_eq!(unsafe { (v.export)(phys, 0, flags, &mut n) }, 0);
    (phys, va, n)
}

#[test]
fn a_listed_child_imports_and_one_not_listed_is_refused() {
    let l = lib();
    ready(l);
    let v = vmm(l);
    let (phys, va, n) = exported(&v, b"vmm-pid", 0);
    let listed = spawn("import");
    let other = spawn("import");
    let mut tgid = hal_mock_libascendcl::tgid::bare_tgid(listed.id()) as i32;
    // SAFETY: one valid pid.
    assert_eq!(unsafe { (v.set_pid)(n, &mut tgid, 1) }, 0);
    assert_eq!(answer(listed, n), "ok vmm-pid");
    assert_eq!(answer(other, n), format!("refused {NO_PERMISSION}"));
    // An OS pid is no bare tgid: it admits nobody.
    let os = spawn("import");
    let mut pid = os.id() as i32;
    // SAFETY: one valid pid.
    assert_eq!(unsafe { (v.set_pid)(n, &mut pid, 1) }, 0);
    assert_eq!(answer(os, n), format!("refused {NO_PERMISSION}"));
    v.unmap_release(va);
    // SAFETY: the handle is a value.
    assert_eq!(unsafe { (v.free)(phys) }, 0);
}

#[test]
fn disabled_pid_validation_admits_any_child() {
    let l = lib();
    ready(l);
    let v = vmm(l);
    let (phys, va, n) = exported(&v, b"vmm-any", 1);
    assert_eq!(answer(spawn("import"), n), "ok vmm-any");
    v.unmap_release(va);
    // SAFETY: the handle is a value.
    assert_eq!(unsafe { (v.free)(phys) }, 0);
}

/// The child side: import the handle read from stdin on device 0, map it
/// and print its first bytes.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_imports_a_shareable_handle() {
    if std::env::var(CHILD).is_err() {
        panic!("a child entry point: run by its parent, which sets its variables");
    }
    let l = lib();
    ready(l);
    let v = vmm(l);
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let n: u64 = line.trim().parse().unwrap();
    let mut phys: Raw = std::ptr::null_mut();
    // SAFETY: a valid place.
    let r = unsafe { (v.import)(n, 0, &mut phys) };
    if r != 0 {
        println!("\nanswer: refused {r}");
        return;
    }
    let g = v.granule();
    let va = v.map_rw(phys, g);
    let mut out = [0u8; 7];
    assert_eq!(v.read(va, &mut out), 0);
    println!("\nanswer: ok {}", String::from_utf8_lossy(&out));
    v.unmap_release(va);
    // SAFETY: the handle is a value.
    assert_eq!(unsafe { (v.free)(phys) }, 0);
}

#[test]
fn vmm_calls_before_acl_init_are_uninitialize() {
    if std::env::var(CHILD).as_deref() != Ok("uninit") {
        let out = hal_core::testing::child("vmm_calls_before_acl_init_are_uninitialize")
            .env(CHILD, "uninit")
            .output()
            .unwrap();
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains(" 1 passed;"),
            "{out:?}"
        );
        return;
    }
    let l = lib();
    let v = vmm(l);
    let mut p = prop(0);
    let (mut g, mut raw, mut n) = (0usize, std::ptr::null_mut(), 0u64);
    let mut d = rw(0);
    let mut pid = 1;
    let null = std::ptr::null_mut();
    // SAFETY: valid places; handles are values.
    let answers = unsafe {
        [
            (v.granularity)(&mut p, 0, &mut g),
            (v.malloc)(&mut raw, 4096, &p, 0),
            (v.free)(null),
            (v.reserve)(&mut raw, 4096, 0, null, 0),
            (v.release)(null),
            (v.map)(null, 4096, 0, null, 0),
            (v.unmap)(null),
            (v.access)(null, 4096, &mut d, 1),
            (v.export)(null, 0, 0, &mut n),
            (v.set_pid)(1, &mut pid, 1),
            (v.import)(1, 0, &mut raw),
        ]
    };
    assert_eq!(answers, [UNINITIALIZE; 11]);
}
