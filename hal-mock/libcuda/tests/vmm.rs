//! VMM through the C ABI: granularity, physical memory on a device and in
//! host NUMA memory, reservations, mappings that refuse copies until
//! `cuMemSetAccess`, POSIX descriptors that another process imports on its
//! own, the measured refusals (fabric without IMEX, export without a
//! handle type), and the environment switches (a child running this
//! executable). Tests that run in parallel use devices of their own.

mod common;

use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use common::{cu, init, Current, OK};
use cudarc::driver::sys::{CUdeviceptr, CUresult};
use hal_mock_libcuda::{AccessDesc, AllocationProp, MemLocation};

use CUresult::{
    CUDA_ERROR_INVALID_VALUE as INVALID_VALUE, CUDA_ERROR_NOT_PERMITTED as NOT_PERMITTED,
    CUDA_ERROR_NOT_SUPPORTED as NOT_SUPPORTED, CUDA_ERROR_OUT_OF_MEMORY as OUT_OF_MEMORY,
};

const G: usize = 2 << 20;
const POSIX: u32 = 1;
const FABRIC: u32 = 8;
const DEVICE: u32 = 1;
const HOST: u32 = 2;
const HOST_NUMA: u32 = 3;
/// What the child of a test is handed.
const CHILD_VAR: &str = "HAL_LIBCUDA_VMM_TEST_CHILD";

fn prop(location_type: u32, id: c_int, handle_types: u32) -> AllocationProp {
    AllocationProp {
        type_: 1,
        requested_handle_types: handle_types,
        location: MemLocation {
            type_: location_type,
            id,
        },
        win32_handle_meta_data: std::ptr::null_mut(),
        alloc_flags: [0; 8],
    }
}

fn create(p: &AllocationProp, size: usize) -> Result<u64, CUresult> {
    let mut h = 0;
    // SAFETY: valid output and property pointers.
    match unsafe { (cu().cuMemCreate)(&mut h, size, p, 0) } {
        OK => Ok(h),
        e => Err(e),
    }
}

fn reserve(size: usize) -> CUdeviceptr {
    let mut base = 0;
    // SAFETY: valid output pointer.
    let status = unsafe { (cu().cuMemAddressReserve)(&mut base, size, 0, 0, 0) };
    assert_eq!(status, OK);
    base
}

fn access(ptr: CUdeviceptr, size: usize, descs: &[(u32, c_int, u32)]) -> CUresult {
    let descs: Vec<AccessDesc> = descs
        .iter()
        .map(|&(type_, id, flags)| AccessDesc {
            location: MemLocation { type_, id },
            flags,
        })
        .collect();
    // SAFETY: `descs` holds `descs.len()` descriptors.
    unsafe { (cu().cuMemSetAccess)(ptr, size, descs.as_ptr(), descs.len()) }
}

fn write(ptr: CUdeviceptr, bytes: &[u8]) -> CUresult {
    // SAFETY: `bytes` is readable for its length.
    unsafe { (cu().cuMemcpyHtoD_v2)(ptr, bytes.as_ptr().cast(), bytes.len()) }
}

fn read(ptr: CUdeviceptr, len: usize) -> Result<Vec<u8>, CUresult> {
    let mut v = vec![0u8; len];
    // SAFETY: `v` is writable for `len` bytes.
    match unsafe { (cu().cuMemcpyDtoH_v2)(v.as_mut_ptr().cast(), ptr, len) } {
        OK => Ok(v),
        e => Err(e),
    }
}

fn export(h: u64, handle_type: u32) -> Result<OwnedFd, CUresult> {
    let mut fd: c_int = -1;
    // SAFETY: an `int` is the output of a POSIX descriptor export.
    match unsafe { (cu().cuMemExportToShareableHandle)((&raw mut fd).cast(), h, handle_type, 0) } {
        // SAFETY: on success the descriptor is new and ours.
        OK => Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
        e => Err(e),
    }
}

fn import(fd: &impl AsRawFd) -> Result<u64, CUresult> {
    let mut h = 0;
    let raw = std::ptr::without_provenance_mut::<c_void>(fd.as_raw_fd() as usize);
    // SAFETY: valid output pointer; the descriptor is open.
    match unsafe { (cu().cuMemImportFromShareableHandle)(&mut h, raw, POSIX) } {
        OK => Ok(h),
        e => Err(e),
    }
}

fn map(ptr: CUdeviceptr, size: usize, offset: usize, h: u64) -> CUresult {
    // SAFETY: plain values.
    unsafe { (cu().cuMemMap)(ptr, size, offset, h, 0) }
}

fn unmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    // SAFETY: plain values.
    unsafe { (cu().cuMemUnmap)(ptr, size) }
}

#[test]
fn granularity_is_a_device_property() {
    let cu = init();
    let mut g = 0usize;
    let p = prop(DEVICE, 0, POSIX);
    // SAFETY: valid pointers; no context is current on this thread.
    unsafe {
        assert_eq!((cu.cuMemGetAllocationGranularity)(&mut g, &p, 0), OK);
        assert_eq!(g, G);
        assert_eq!((cu.cuMemGetAllocationGranularity)(&mut g, &p, 1), OK);
        assert_eq!(g, G);
        assert_eq!(
            (cu.cuMemGetAllocationGranularity)(&mut g, &p, 2),
            INVALID_VALUE
        );
        let bad = prop(DEVICE, 99, POSIX);
        assert_ne!((cu.cuMemGetAllocationGranularity)(&mut g, &bad, 0), OK);
    }
}

#[test]
fn mappings_refuse_copies_until_access_is_set() {
    let _c = Current::on(0);
    let h = create(&prop(DEVICE, 0, POSIX), 2 * G).unwrap();
    assert_eq!(create(&prop(DEVICE, 0, POSIX), G + 1), Err(INVALID_VALUE));
    let base = reserve(4 * G);
    assert_eq!(base % G as u64, 0);
    assert_eq!(map(base + 1, G, 0, h), INVALID_VALUE, "unaligned");
    assert_eq!(map(base, G, 0, h), OK);
    assert_eq!(map(base, G, 0, h), INVALID_VALUE, "over a mapping");
    assert_eq!(
        map(base + G as u64, G, G, h),
        CUresult::CUDA_ERROR_NOT_SUPPORTED,
        "from an offset (driver 580)"
    );
    assert_eq!(map(base + G as u64, G, 0, h), OK, "the same memory again");
    assert_eq!(write(base, b"before access"), INVALID_VALUE);
    assert_eq!(read(base, 4), Err(INVALID_VALUE));
    assert_eq!(access(base, 2 * G, &[(DEVICE, 0, 3)]), OK);
    assert_eq!(write(base + G as u64 - 4, b"across mappings"), OK);
    assert_eq!(read(base + G as u64 - 4, 15).unwrap(), b"across mappings");
    assert_eq!(access(base, G, &[(DEVICE, 0, 1)]), OK);
    assert_eq!(write(base, b"read only"), INVALID_VALUE);
    assert_eq!(access(base, G, &[(DEVICE, 0, 2)]), INVALID_VALUE, "flags");
    assert_eq!(access(base, G, &[(HOST, 0, 3)]), INVALID_VALUE, "host");
    assert_eq!(access(base, G, &[]), INVALID_VALUE, "empty");
    assert_eq!(
        access(base + 2 * G as u64, G, &[(DEVICE, 0, 3)]),
        INVALID_VALUE
    );
    // SAFETY: plain value.
    assert_eq!(unsafe { (cu().cuMemRelease)(h) }, OK);
    // SAFETY: plain value.
    assert_eq!(unsafe { (cu().cuMemRelease)(h) }, INVALID_VALUE, "twice");
    assert_eq!(
        read(base + G as u64, 11).unwrap(),
        b"ss mappings",
        "a mapping keeps released memory"
    );
    assert_eq!(unmap(base, 2 * G), OK);
    assert_eq!(read(base, 4), Err(INVALID_VALUE), "unmapped");
    // SAFETY: plain values.
    unsafe {
        assert_eq!((cu().cuMemAddressFree)(base, G), INVALID_VALUE, "size");
        assert_eq!((cu().cuMemAddressFree)(base, 4 * G), OK);
        assert_eq!((cu().cuMemAddressFree)(base, 4 * G), INVALID_VALUE);
    }
}

#[test]
fn measured_refusals() {
    let _c = Current::on(1);
    assert_eq!(
        create(&prop(DEVICE, 1, FABRIC), G),
        Err(NOT_PERMITTED),
        "fabric without an IMEX daemon"
    );
    assert_eq!(create(&prop(DEVICE, 1, 2), G), Err(INVALID_VALUE), "win32");
    let mut p = prop(DEVICE, 1, POSIX);
    p.type_ = 0;
    assert_eq!(create(&p, G), Err(INVALID_VALUE), "allocation type");
    let none = create(&prop(DEVICE, 1, 0), G).unwrap();
    assert_eq!(
        export(none, POSIX).err(),
        Some(INVALID_VALUE),
        "export of an allocation made for no handle type"
    );
    let posix = create(&prop(DEVICE, 1, POSIX), G).unwrap();
    assert_eq!(export(posix, FABRIC).err(), Some(INVALID_VALUE));
    let null = std::fs::File::open("/dev/null").unwrap();
    assert_eq!(
        import(&null),
        Err(INVALID_VALUE),
        "not a physical allocation"
    );
    // SAFETY: plain values.
    unsafe {
        assert_eq!((cu().cuMemRelease)(none), OK);
        assert_eq!((cu().cuMemRelease)(posix), OK);
    }
}

#[test]
fn host_numa_memory_is_made_host_accessible() {
    let _c = Current::on(2);
    let h = create(&prop(HOST_NUMA, 0, POSIX), G).unwrap();
    let base = reserve(G);
    assert_eq!(map(base, G, 0, h), OK);
    assert_eq!(access(base, G, &[(DEVICE, 2, 3), (HOST_NUMA, 0, 3)]), OK);
    assert_eq!(write(base, b"numa"), OK);
    let fd = export(h, POSIX).unwrap();
    let again = import(&fd).unwrap();
    let other = reserve(G);
    assert_eq!(map(other, G, 0, again), OK);
    assert_eq!(
        access(other, G, &[(DEVICE, 2, 3), (HOST, 0, 3)]),
        OK,
        "an import knows its pages are host memory"
    );
    assert_eq!(read(other, 4).unwrap(), b"numa");
    for (b, m) in [(base, h), (other, again)] {
        assert_eq!(unmap(b, G), OK);
        // SAFETY: plain values.
        unsafe {
            assert_eq!((cu().cuMemRelease)(m), OK);
            assert_eq!((cu().cuMemAddressFree)(b, G), OK);
        }
    }
}

fn run_child(test: &str, value: &str, env: &[(&str, &str)]) -> String {
    let out = hal_core::testing::child(test)
        .env(CHILD_VAR, value)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("child done"),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn another_process_imports_the_descriptor_alone() {
    let _c = Current::on(3);
    let h = create(&prop(DEVICE, 3, POSIX), G).unwrap();
    let base = reserve(G);
    assert_eq!(map(base, G, 0, h), OK);
    assert_eq!(access(base, G, &[(DEVICE, 3, 3)]), OK);
    assert_eq!(write(base, b"parent"), OK);
    let fd = export(h, POSIX).unwrap();
    // The child reaches the descriptor through /proc, as a descriptor
    // passed over a socket would arrive: nothing else travels.
    let path = format!("/proc/{}/fd/{}", std::process::id(), fd.as_raw_fd());
    run_child("child_imports", &path, &[]);
    assert_eq!(read(base, 6).unwrap(), b"child!", "the child's write");
    assert_eq!(unmap(base, G), OK);
}

/// The child of `another_process_imports_the_descriptor_alone`.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_imports() {
    let Ok(path) = std::env::var(CHILD_VAR) else {
        panic!("a child entry point: run by its parent, which sets its variables");
    };
    let _c = Current::on(3);
    let file = std::fs::File::options()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let h = import(&file).unwrap();
    drop(file);
    let base = reserve(G);
    assert_eq!(map(base, G, 0, h), OK);
    assert_eq!(read(base, 6), Err(INVALID_VALUE), "no access yet");
    assert_eq!(access(base, G, &[(DEVICE, 3, 3)]), OK);
    assert_eq!(read(base, 6).unwrap(), b"parent");
    assert_eq!(write(base, b"child!"), OK);
    println!("child done");
}

#[test]
fn switches_say_an_imex_daemon_is_there_and_inject_failures() {
    run_child(
        "child_switches",
        "imex",
        &[(hal_mock_libcuda::IMEX_VAR, "1")],
    );
    run_child(
        "child_switches",
        "fail",
        &[(
            hal_mock_libcuda::FAIL_VAR,
            "cuMemMap:2,cuMemCreate:not-a-code,cuMemAlloc_v2:2",
        )],
    );
}

/// The child of `switches_say_an_imex_daemon_is_there_and_inject_failures`.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_switches() {
    let Ok(which) = std::env::var(CHILD_VAR) else {
        panic!("a child entry point: run by its parent, which sets its variables");
    };
    let _c = Current::on(0);
    match which.as_str() {
        "imex" => {
            let h = create(&prop(DEVICE, 0, FABRIC | POSIX), G).unwrap();
            assert_eq!(export(h, FABRIC).err(), Some(NOT_SUPPORTED));
            assert!(export(h, POSIX).is_ok(), "shared by descriptor too");
        }
        "fail" => {
            let h = create(&prop(DEVICE, 0, POSIX), G).unwrap();
            let base = reserve(G);
            assert_eq!(map(base, G, 0, h), OUT_OF_MEMORY, "injected");
            let mut p = 0;
            // SAFETY: valid output pointer.
            let status = unsafe { (cu().cuMemAlloc_v2)(&mut p, 4096) };
            assert_eq!(status, OUT_OF_MEMORY, "every entry point takes failures");
            assert_eq!(
                create(&prop(DEVICE, 0, FABRIC), G),
                Err(NOT_PERMITTED),
                "no IMEX daemon in this child"
            );
        }
        other => panic!("unknown child {other}"),
    }
    println!("child done");
}
