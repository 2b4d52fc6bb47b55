//! Memory another library allocated, adopted by address
//! (`Device::adopt_memory`): a plain `cuMemAlloc_v2` allocation, as a
//! framework's caching allocator holds one, exported through hal and
//! imported in another process; two ranges of one allocation adopted apart;
//! managed and pinned host memory keeping their kind; and ranges that are
//! not one allocation of this device refused. On the stand-in
//! `libcuda.so.1`, or on the real driver with
//! `HAL_CUDA_CONFORMANCE_DRIVER=1`.

use std::time::Duration;

use hal_core::{
    Allocation, Backend, Device, Error, ExportOptions, Handle, ImportOptions, Location, Memory,
};
use hal_cuda::CudaDevice;

mod common;

const PAGE: u64 = 4096;
/// The variable that hands the child the handle's text.
const HANDLE_VAR: &str = "HAL_CUDA_ADOPT_TEST_HANDLE";

type Alloc = unsafe extern "C" fn(*mut u64, usize) -> u32;
type AllocManaged = unsafe extern "C" fn(*mut u64, usize, u32) -> u32;
type AllocHost = unsafe extern "C" fn(*mut *mut std::ffi::c_void, usize) -> u32;
type Free = unsafe extern "C" fn(u64) -> u32;
type FreeHost = unsafe extern "C" fn(*mut std::ffi::c_void) -> u32;
type HtoD = unsafe extern "C" fn(u64, *const u8, usize) -> u32;
type DtoH = unsafe extern "C" fn(*mut u8, u64, usize) -> u32;

/// `CU_MEM_ATTACH_GLOBAL`.
const ATTACH_GLOBAL: u32 = 1;

fn device() -> CudaDevice {
    common::backend().open(0).unwrap()
}

fn pattern(len: u64) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ 0x3c).collect()
}

/// `size` bytes of device `ordinal` from plain `cuMemAlloc_v2`, filled
/// with `pattern(size)`, as another library allocates them.
fn plain_alloc(ordinal: i32, size: u64) -> u64 {
    common::with_driver_on(ordinal, |lib| {
        let mut p = 0u64;
        // SAFETY: the entry points of these signatures; `p` is a valid
        // place, and the copy stays inside the new allocation.
        unsafe {
            assert_eq!(
                lib.get::<Alloc>(b"cuMemAlloc_v2").unwrap()(&mut p, size as usize),
                0
            );
            let bytes = pattern(size);
            let htod = lib.get::<HtoD>(b"cuMemcpyHtoD_v2").unwrap();
            assert_eq!(htod(p, bytes.as_ptr(), bytes.len()), 0);
        }
        p
    })
}

/// The driver's answer to freeing `p` with plain `cuMemFree_v2`: 0 once,
/// for memory hal never freed.
fn plain_free(ordinal: i32, p: u64) -> u32 {
    common::with_driver_on(ordinal, |lib| {
        // SAFETY: the entry point of this signature; the driver checks `p`.
        unsafe { lib.get::<Free>(b"cuMemFree_v2").unwrap()(p) }
    })
}

fn plain_read(p: u64, len: usize) -> Vec<u8> {
    common::with_driver(|lib| {
        let mut out = vec![0u8; len];
        // SAFETY: the entry point of this signature; `out` has `len` bytes.
        let status =
            unsafe { lib.get::<DtoH>(b"cuMemcpyDtoH_v2").unwrap()(out.as_mut_ptr(), p, len) };
        assert_eq!(status, 0);
        out
    })
}

#[test]
fn a_framework_allocation_is_adopted_exported_and_imported_in_another_process() {
    let dev = device();
    let p = plain_alloc(0, 4 * PAGE);
    // SAFETY: inside the allocation above, freed only at the end, after
    // the adopted value and every import of it are gone.
    let adopted = unsafe { dev.adopt_memory(p + PAGE, 2 * PAGE) }.unwrap();
    assert_eq!(
        (adopted.addr(), adopted.len(), adopted.location()),
        (p + PAGE, 2 * PAGE, Location::Device(0))
    );
    let mut got = vec![0u8; 2 * PAGE as usize];
    adopted.read(0, &mut got).unwrap();
    assert_eq!(got, &pattern(4 * PAGE)[PAGE as usize..3 * PAGE as usize]);
    let exported = dev
        .export_memory(&adopted, &ExportOptions::default())
        .unwrap();
    assert_eq!(
        exported.handle().size,
        2 * PAGE,
        "the adopted range, not widened"
    );
    common::child_passes(
        "child",
        "the importing child",
        &[(HANDLE_VAR, &exported.handle().to_text())],
    );
    assert_eq!(
        plain_read(p + PAGE, 11),
        b"child wrote",
        "the child wrote in place"
    );
    adopted
        .wait_unleased(Some(Duration::from_secs(20)))
        .unwrap();
    assert_eq!(adopted.importers().unwrap(), 0);
    drop(exported);
    drop(adopted);
    assert_eq!(plain_free(0, p), 0, "hal freed nothing it adopted");
}

/// The child of the test above.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child() {
    let Ok(text) = std::env::var(HANDLE_VAR) else {
        panic!("a child entry point: run by its parent, which sets {HANDLE_VAR}");
    };
    let dev = device();
    let handle = Handle::from_text(&text).unwrap();
    let m = dev
        .import_memory(handle.into(), &ImportOptions::default())
        .unwrap();
    assert_eq!(m.len(), 2 * PAGE);
    let mut got = vec![0u8; 2 * PAGE as usize];
    m.read(0, &mut got).unwrap();
    assert_eq!(got, &pattern(4 * PAGE)[PAGE as usize..3 * PAGE as usize]);
    m.write(0, b"child wrote").unwrap();
    println!("child done");
}

/// Two ranges of one allocation adopted apart share the driver's buffer
/// id: dropping one (and its export) leaves the other exported, and this
/// process's own import of it still reaches the memory.
#[test]
fn two_ranges_of_one_allocation_adopted_apart_outlive_each_other() {
    let dev = device();
    let p = plain_alloc(0, 4 * PAGE);
    // SAFETY: inside the allocation above, freed after both values.
    let (first, second) = unsafe {
        (
            dev.adopt_memory(p, PAGE).unwrap(),
            dev.adopt_memory(p + 2 * PAGE, PAGE).unwrap(),
        )
    };
    let opts = ExportOptions::default();
    let first_export = dev.export_memory(&first, &opts).unwrap();
    let second_export = dev.export_memory(&second, &opts).unwrap();
    drop(first_export);
    drop(first);
    let text = second_export.handle().to_text();
    let m = dev
        .import_memory(
            Handle::from_text(&text).unwrap().into(),
            &ImportOptions::default(),
        )
        .unwrap();
    assert_eq!(
        m.addr(),
        p + 2 * PAGE,
        "this process's import is the memory itself"
    );
    let mut got = vec![0u8; 64];
    m.read(0, &mut got).unwrap();
    assert_eq!(
        got,
        &pattern(4 * PAGE)[2 * PAGE as usize..2 * PAGE as usize + 64]
    );
    drop(m);
    drop(second_export);
    drop(second);
    assert_eq!(plain_free(0, p), 0, "hal freed nothing it adopted");
}

/// Managed and pinned host memory adopted by address keep their kind: they
/// are host-visible, and exporting them is refused as for hal's own (no
/// legacy IPC handle exists for them).
#[test]
fn adopted_managed_and_pinned_host_memory_keep_their_kind() {
    let dev = device();
    let (managed, host) = common::with_driver(|lib| {
        let (mut m, mut h) = (0u64, std::ptr::null_mut());
        // SAFETY: the entry points of these signatures; valid places.
        unsafe {
            let am = lib.get::<AllocManaged>(b"cuMemAllocManaged").unwrap();
            assert_eq!(am(&mut m, PAGE as usize, ATTACH_GLOBAL), 0);
            let ah = lib.get::<AllocHost>(b"cuMemAllocHost_v2").unwrap();
            assert_eq!(ah(&mut h, PAGE as usize), 0);
        }
        (m, h)
    });
    for (addr, location) in [(managed, Location::Managed), (host as u64, Location::Host)] {
        // SAFETY: the allocations above, freed after the values.
        let adopted = unsafe { dev.adopt_memory(addr, PAGE) }.unwrap();
        assert_eq!(adopted.location(), location);
        assert_eq!(adopted.host_ptr(), Some(addr as *mut u8), "{location:?}");
        adopted.write(0, b"kind kept").unwrap();
        let mut back = [0u8; 9];
        adopted.read(0, &mut back).unwrap();
        assert_eq!(&back, b"kind kept");
        let refused = dev
            .export_memory(&adopted, &ExportOptions::default())
            .unwrap_err();
        assert!(refused.is_unsupported(), "{location:?}: {refused}");
    }
    common::with_driver(|lib| {
        // SAFETY: the entry points of these signatures, on live memory.
        unsafe {
            assert_eq!(lib.get::<Free>(b"cuMemFree_v2").unwrap()(managed), 0);
            assert_eq!(lib.get::<FreeHost>(b"cuMemFreeHost").unwrap()(host), 0);
        }
    });
}

/// A range that leaves its allocation, memory never allocated, zero bytes,
/// and memory of another device are refused before anything is touched.
#[test]
fn ranges_that_are_not_one_allocation_of_this_device_are_refused() {
    let dev = device();
    let p = plain_alloc(0, 2 * PAGE);
    // SAFETY: each is refused before any byte is touched.
    unsafe {
        let past = dev.adopt_memory(p + PAGE, 2 * PAGE).unwrap_err();
        assert!(
            matches!(past, Error::InvalidArgument { .. })
                && past.to_string().contains("not inside one allocation"),
            "{past}"
        );
        assert!(dev.adopt_memory(p, 0).is_err(), "zero bytes");
        assert!(dev.adopt_memory(0x10, PAGE).is_err(), "never allocated");
    }
    assert_eq!(plain_free(0, p), 0);
    let devices = common::backend().devices().unwrap().len();
    if devices < 2 {
        assert!(common::on_driver(), "the stand-in has several devices");
        return;
    }
    // Device 1 held open, so that its primary context (and the memory made
    // in it) outlives the plain calls' retain and release.
    let _one = common::backend().open(1).unwrap();
    let other = plain_alloc(1, PAGE);
    // SAFETY: refused before any byte is touched.
    let refused = unsafe { dev.adopt_memory(other, PAGE) }.unwrap_err();
    assert!(refused.to_string().contains("device 1"), "{refused}");
    assert_eq!(plain_free(1, other), 0);
}
