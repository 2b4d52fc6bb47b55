//! The stand-in's rules at its C ABI, loaded as a program loads the
//! runtime (`libloading`).

use std::ffi::{c_char, c_void, CStr};
use std::process::Command;
use std::sync::OnceLock;

use libloading::Library;

type Raw = *mut c_void;

/// The stand-in, loaded once and kept for the process's life: nothing
/// unloads a vendor runtime while threads started inside it may still run.
fn lib() -> &'static Library {
    static LIB: OnceLock<Library> = OnceLock::new();
    // SAFETY: the stand-in's initialisers have no preconditions.
    LIB.get_or_init(|| unsafe { Library::new(hal_mock_libascendcl::built_library()).unwrap() })
}

/// The entry point `name` with the C signature `F`.
macro_rules! sym {
    ($lib:expr, $name:literal, $t:ty) => {
        // SAFETY: `$t` is the entry point's C signature (`vendor/ascend.md`).
        *unsafe { $lib.get::<$t>($name.as_bytes()) }.unwrap()
    };
}

/// `aclInit` (tolerating a repeat) and `aclrtSetDevice(0)` on this thread.
fn ready(l: &Library) {
    let init = sym!(l, "aclInit", unsafe extern "C" fn(*const c_char) -> i32);
    // SAFETY: a null configuration path is allowed.
    let r = unsafe { init(std::ptr::null()) };
    assert!(r == 0 || r == 100_002, "{r}");
    let set = sym!(l, "aclrtSetDevice", unsafe extern "C" fn(i32) -> i32);
    // SAFETY: plain integer argument.
    assert_eq!(unsafe { set(0) }, 0);
}

#[test]
fn calls_before_acl_init_are_uninitialize_and_a_second_init_repeats() {
    if std::env::var("HAL_STANDIN_CHILD").is_err() {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "calls_before_acl_init_are_uninitialize_and_a_second_init_repeats",
                "--exact",
                "--test-threads=1",
            ])
            .env("HAL_STANDIN_CHILD", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains(" 1 passed;"),
            "{out:?}"
        );
        return;
    }
    let l = lib();
    let count = sym!(
        l,
        "aclrtGetDeviceCount",
        unsafe extern "C" fn(*mut u32) -> i32
    );
    let init = sym!(l, "aclInit", unsafe extern "C" fn(*const c_char) -> i32);
    let mut n = 0u32;
    // SAFETY: `n` is a valid place.
    assert_eq!(unsafe { count(&mut n) }, 100_001, "ACL_ERROR_UNINITIALIZE");
    // SAFETY: null configuration.
    assert_eq!(unsafe { init(std::ptr::null()) }, 0);
    // SAFETY: null configuration.
    let r = unsafe { init(std::ptr::null()) };
    assert_eq!(r, 100_002, "REPEAT_INITIALIZE");
    // SAFETY: `n` is a valid place.
    assert_eq!(unsafe { count(&mut n) }, 0);
    assert_eq!(n, 2);
}

#[test]
fn devices_are_per_thread_and_checked() {
    let l = lib();
    ready(l);
    let set = sym!(l, "aclrtSetDevice", unsafe extern "C" fn(i32) -> i32);
    // SAFETY: plain integer.
    assert_eq!(unsafe { set(7) }, 107_001, "ACL_ERROR_RT_INVALID_DEVICEID");
    let get = sym!(l, "aclrtGetDevice", unsafe extern "C" fn(*mut i32) -> i32);
    std::thread::spawn(move || {
        let mut d = -1;
        // SAFETY: `d` is a valid place.
        assert_eq!(unsafe { get(&mut d) }, 107_002, "no device on a new thread");
    })
    .join()
    .unwrap();
    let msg = sym!(
        l,
        "aclGetRecentErrMsg",
        unsafe extern "C" fn() -> *const c_char
    );
    // SAFETY: returns null or a NUL-terminated string of this thread.
    let text = unsafe { CStr::from_ptr(msg()) }
        .to_string_lossy()
        .into_owned();
    assert!(
        text.contains("aclrtSetDevice") && text.contains("107001"),
        "{text}"
    );
}

#[test]
fn keys_are_printable_and_the_close_order_is_enforced() {
    let l = lib();
    ready(l);
    let malloc = sym!(
        l,
        "aclrtMalloc",
        unsafe extern "C" fn(*mut Raw, usize, i32) -> i32
    );
    let free = sym!(l, "aclrtFree", unsafe extern "C" fn(Raw) -> i32);
    let get_key = sym!(
        l,
        "aclrtIpcMemGetExportKey",
        unsafe extern "C" fn(Raw, usize, *mut c_char, usize, u64) -> i32
    );
    let close = sym!(
        l,
        "aclrtIpcMemClose",
        unsafe extern "C" fn(*const c_char) -> i32
    );
    let import = sym!(
        l,
        "aclrtIpcMemImportByKey",
        unsafe extern "C" fn(*mut Raw, *const c_char, u64) -> i32
    );
    let mut key = [0 as c_char; 65];
    // Huge pages first: 2 MiB sits on one 2 MiB page, exported whole only.
    let mut h: Raw = std::ptr::null_mut();
    // SAFETY: `h` is a valid place; `key` holds 65 bytes; the memory is
    // live until freed last.
    unsafe {
        assert_eq!(malloc(&mut h, 2 << 20, 0), 0);
        let part = get_key(h, 4096, key.as_mut_ptr(), 65, 0x1);
        assert_eq!(part, 107_000, "4 KiB of a huge page");
        assert_eq!(get_key(h, 2 << 20, key.as_mut_ptr(), 65, 0x1), 0);
        assert_eq!(close(key.as_ptr()), 0);
        assert_eq!(free(h), 0);
    }
    let mut p: Raw = std::ptr::null_mut();
    // SAFETY: `p` is a valid place; 2 MiB on normal pages (NORMAL_ONLY) is
    // its own, page-aligned memory.
    assert_eq!(unsafe { malloc(&mut p, 2 << 20, 2) }, 0);
    // SAFETY: a 64-byte buffer is too short: refused before any write.
    let r = unsafe { get_key(p, 4096, key.as_mut_ptr(), 64, 0) };
    assert_eq!(r, 100_000);
    // SAFETY: an unaligned range of live memory.
    let odd = unsafe { get_key(p.byte_add(512), 4096, key.as_mut_ptr(), 65, 0) };
    assert_eq!(odd, 107_000, "a range not on a page is refused");
    // SAFETY: `key` holds 65 bytes.
    assert_eq!(unsafe { get_key(p, 4096, key.as_mut_ptr(), 65, 0x1) }, 0);
    // SAFETY: the runtime wrote a NUL-terminated key.
    let k = unsafe { CStr::from_ptr(key.as_ptr()) };
    assert_eq!(k.to_bytes().len(), 64);
    assert!(k.to_bytes().iter().all(u8::is_ascii_graphic));
    // SAFETY: the memory still has an open key: refused.
    assert_eq!(unsafe { free(p) }, 107_000, "free before the key is closed");
    let mut q: Raw = std::ptr::null_mut();
    // SAFETY: `q` is a valid place; the key is NUL-terminated.
    assert_eq!(unsafe { import(&mut q, key.as_ptr(), 0) }, 0);
    // SAFETY: imported memory is closed, not freed.
    assert_eq!(unsafe { free(q) }, 107_000);
    // SAFETY: closes the import, then the exporter's key.
    assert_eq!(unsafe { close(key.as_ptr()) }, 0);
    // SAFETY: as above.
    assert_eq!(unsafe { close(key.as_ptr()) }, 0);
    // SAFETY: nothing is open any more.
    assert_eq!(unsafe { close(key.as_ptr()) }, 107_000);
    let msg = sym!(
        l,
        "aclGetRecentErrMsg",
        unsafe extern "C" fn() -> *const c_char
    );
    // SAFETY: `p` came from aclrtMalloc.
    let r = unsafe { free(p) };
    // SAFETY: null or a NUL-terminated string of this thread.
    let text = unsafe { CStr::from_ptr(msg()) }
        .to_string_lossy()
        .into_owned();
    assert_eq!(r, 0, "{text}");
}

#[test]
fn notify_flags_are_the_notify_s_and_only_the_creator_waits() {
    let l = lib();
    ready(l);
    let create = sym!(
        l,
        "aclrtCreateNotify",
        unsafe extern "C" fn(*mut Raw, u64) -> i32
    );
    let get_key = sym!(
        l,
        "aclrtNotifyGetExportKey",
        unsafe extern "C" fn(Raw, *mut c_char, usize, u64) -> i32
    );
    let import = sym!(
        l,
        "aclrtNotifyImportByKey",
        unsafe extern "C" fn(*mut Raw, *const c_char, u64) -> i32
    );
    let wait = sym!(
        l,
        "aclrtWaitAndResetNotify",
        unsafe extern "C" fn(Raw, Raw, u32) -> i32
    );
    let mut n: Raw = std::ptr::null_mut();
    // SAFETY: `n` is a valid place.
    assert_eq!(unsafe { create(&mut n, 0) }, 0);
    let mut key = [0 as c_char; 65];
    // SAFETY: memory's DISABLE_PID_VALIDATION (0x1) is no notify flag.
    assert_eq!(unsafe { get_key(n, key.as_mut_ptr(), 65, 0x1) }, 100_000);
    // SAFETY: the notify's own flag (0x02).
    assert_eq!(unsafe { get_key(n, key.as_mut_ptr(), 65, 0x02) }, 0);
    let mut m: Raw = std::ptr::null_mut();
    // SAFETY: `m` is a valid place; the key is NUL-terminated.
    assert_eq!(unsafe { import(&mut m, key.as_ptr(), 0) }, 0);
    // SAFETY: the null stream is the current device's default stream.
    let r = unsafe { wait(m, std::ptr::null_mut(), 1) };
    assert_eq!(r, 207_006, "importers do not wait");
}

#[test]
fn ipc_events_come_alone_and_are_not_queried() {
    let l = lib();
    ready(l);
    let create = sym!(
        l,
        "aclrtCreateEventExWithFlag",
        unsafe extern "C" fn(*mut Raw, u32) -> i32
    );
    let query = sym!(
        l,
        "aclrtQueryEventStatus",
        unsafe extern "C" fn(Raw, *mut i32) -> i32
    );
    let mut e: Raw = std::ptr::null_mut();
    // SAFETY: `e` is a valid place.
    let r = unsafe { create(&mut e, 0x40 | 0x8) };
    assert_eq!(r, 107_000, "IPC | TIME_LINE");
    // SAFETY: as above.
    assert_eq!(unsafe { create(&mut e, 0x40) }, 0);
    let mut st = 0;
    // SAFETY: `st` is a valid place.
    let r = unsafe { query(e, &mut st) };
    assert_eq!(r, 207_000, "an IPC event is not queried");
}

#[test]
fn ascend_rt_visible_devices_renumbers_the_devices_by_their_uuids() {
    let l = lib();
    ready(l);
    let uuid = sym!(
        l,
        "aclrtDeviceGetUuid",
        unsafe extern "C" fn(i32, *mut [u8; 16]) -> i32
    );
    let child = std::env::var("HAL_STANDIN_UUID").ok();
    let mut all = [[0u8; 16]; 2];
    let seen = if child.is_some() { 1 } else { 2 };
    for (i, u) in all.iter_mut().enumerate().take(seen) {
        // SAFETY: `u` is a valid place for 16 bytes.
        let r = unsafe { uuid(i as i32, u) };
        assert_eq!(r, 0);
    }
    if let Some(want) = child {
        // The child: one device, physical device 1.
        let count = sym!(
            l,
            "aclrtGetDeviceCount",
            unsafe extern "C" fn(*mut u32) -> i32
        );
        let mut n = 0u32;
        // SAFETY: `n` is a valid place.
        let r = unsafe { count(&mut n) };
        assert_eq!((r, n), (0, 1));
        assert_eq!(format!("{:?}", all[0]), want);
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "ascend_rt_visible_devices_renumbers_the_devices_by_their_uuids",
            "--exact",
            "--test-threads=1",
        ])
        .env("ASCEND_RT_VISIBLE_DEVICES", "1")
        .env("HAL_STANDIN_UUID", format!("{:?}", all[1]))
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains(" 1 passed;"),
        "{out:?}"
    );
    assert_ne!(all[0], all[1]);
}

#[test]
fn the_stand_in_is_linked_never_to_be_unloaded() {
    // Threads the simulator starts inside the library outlive a test's
    // handle: a `dlclose` that unmapped it would crash them.
    let path = hal_mock_libascendcl::built_library();
    assert_eq!(
        hal_mock::standin::is_nodelete(&path),
        Ok(true),
        "{} lacks DF_1_NODELETE (build.rs links it -z nodelete)",
        path.display()
    );
}
