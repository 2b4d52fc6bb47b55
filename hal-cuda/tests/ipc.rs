//! Legacy IPC of device memory on the stand-in `libcuda.so.1`: the
//! exporter's own imports reach the original memory, imports in another
//! process (a child running this executable) share one open per
//! allocation and close it at the last drop, and misaligned ranges are
//! refused.

use hal_core::{
    AllocDesc, Allocation, Backend, ByteRange, Device, Error, ExportOptions, Exported,
    ImportOptions, Mapping, Memory, SharedHandle,
};
use hal_cuda::{CudaBackend, CudaDevice};

const PAGE: u64 = 4096;
/// The variables that hand the child the two handles' texts.
const FIRST_VAR: &str = "HAL_CUDA_IPC_TEST_FIRST";
const SECOND_VAR: &str = "HAL_CUDA_IPC_TEST_SECOND";
const OTHER_VAR: &str = "HAL_CUDA_IPC_TEST_OTHER";

/// The stand-in driver cargo built for this test.
fn standin() -> std::path::PathBuf {
    hal_mock_libcuda::built_library()
}

fn device() -> CudaDevice {
    CudaBackend::with_library(standin()).open(0).unwrap()
}

fn pattern(len: u64) -> Vec<u8> {
    (0..len).map(|i| (i % 253) as u8 ^ 0x5a).collect()
}

fn export_range(
    dev: &CudaDevice,
    a: &<CudaDevice as Device>::Allocation,
    offset: u64,
    len: u64,
) -> hal_core::Result<Exported> {
    let opts = ExportOptions {
        range: Some(ByteRange::new(offset, len)),
        ..ExportOptions::default()
    };
    dev.export_memory(a, &opts)
}

#[test]
fn a_same_process_import_reaches_the_allocation_and_holds_a_lease() {
    let dev = device();
    let a = dev.allocate(&AllocDesc::device(0, 4 * PAGE)).unwrap();
    a.write(0, &pattern(4 * PAGE)).unwrap();
    let ex = export_range(&dev, &a, PAGE, 2 * PAGE).unwrap();
    assert_eq!((ex.handle().offset, ex.handle().size), (PAGE, 2 * PAGE));
    let m = dev
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let text = dev
        .import_memory(
            SharedHandle::from(ex.handle().clone()),
            &ImportOptions::default(),
        )
        .unwrap();
    assert_eq!(m.addr(), a.addr() + PAGE, "the original memory");
    assert_eq!(text.addr(), m.addr());
    assert_eq!(dev.ipc_opens(), 0, "nothing is opened with the driver");
    let mut head = [0u8; 16];
    m.read(0, &mut head).unwrap();
    assert_eq!(&head, &pattern(4 * PAGE)[PAGE as usize..PAGE as usize + 16]);
    assert_eq!(a.importers().unwrap(), 2, "each import holds a lease");
    assert_eq!(m.handle().object_id, ex.handle().object_id);
    drop((m, text));
    assert_eq!(a.importers().unwrap(), 0);
    a.wait_unleased(Some(std::time::Duration::from_secs(1)))
        .unwrap();
}

#[test]
fn freeing_under_an_importer_is_refused_and_dropping_waits_for_it() {
    let dev = device();
    let a = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    let ex = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let m = dev
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let a = match a.free() {
        Err(e) => {
            assert!(
                matches!(e.error, Error::Busy { holders: 1, .. }),
                "{}",
                e.error
            );
            e.resource
        }
        Ok(()) => panic!("freed under an importer"),
    };
    drop(a);
    m.write(0, b"still there").unwrap();
    let mut back = [0u8; 11];
    m.read(0, &mut back).unwrap();
    assert_eq!(
        &back, b"still there",
        "a dropped allocation waits for its importer"
    );
    drop(m);
}

#[test]
fn misaligned_ranges_are_refused_never_widened() {
    let dev = device();
    let a = dev.allocate(&AllocDesc::device(0, 4 * PAGE)).unwrap();
    for (offset, len) in [(1, PAGE), (PAGE, PAGE / 2), (PAGE / 2, PAGE)] {
        match export_range(&dev, &a, offset, len) {
            Err(Error::Misaligned {
                offset: o,
                len: l,
                page_size,
            }) => {
                assert_eq!((o, l, page_size), (offset, len, PAGE));
            }
            other => panic!("{offset:#x}+{len:#x}: {other:?}"),
        }
    }
    let small = dev.allocate(&AllocDesc::device(0, 512)).unwrap();
    assert!(matches!(
        dev.export_memory(&small, &ExportOptions::default()),
        Err(Error::Misaligned { .. })
    ));
}

#[test]
fn imports_in_another_process_share_one_open_closed_at_the_last_drop() {
    let dev = device();
    let a = dev.allocate(&AllocDesc::device(0, 4 * PAGE)).unwrap();
    a.write(0, &pattern(4 * PAGE)).unwrap();
    let first = export_range(&dev, &a, 0, 2 * PAGE).unwrap();
    let second = export_range(&dev, &a, 2 * PAGE, 2 * PAGE).unwrap();
    let b = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    let other = dev.export_memory(&b, &ExportOptions::default()).unwrap();
    let out = hal_core::testing::child("child_imports_twice")
        .env(FIRST_VAR, first.to_text())
        .env(SECOND_VAR, second.to_text())
        .env(OTHER_VAR, other.to_text())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("child done"),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut back = [0u8; 10];
    a.read(2 * PAGE + 8, &mut back).unwrap();
    assert_eq!(&back, b"from child");
    assert_eq!(a.importers().unwrap(), 0, "the child gave its leases back");
}

/// The child of `imports_in_another_process_share_one_open_closed_at_the_last_drop`.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_imports_twice() {
    let (Ok(first), Ok(second), Ok(other)) = (
        std::env::var(FIRST_VAR),
        std::env::var(SECOND_VAR),
        std::env::var(OTHER_VAR),
    ) else {
        panic!("a child entry point: run by its parent, which sets its variables");
    };
    let dev = device();
    let import = |text: &str| {
        let h = hal_core::Handle::from_text(text).unwrap();
        dev.import_memory(SharedHandle::from(h), &ImportOptions::default())
            .unwrap()
    };
    let m1 = import(&first);
    // Another allocation opened between the two ranges leaves the first
    // one's open found.
    let m3 = import(&other);
    let m2 = import(&second);
    assert_eq!(
        dev.ipc_opens(),
        2,
        "one open for both ranges, one for the other"
    );
    drop(m3);
    assert_eq!(
        dev.ipc_opens(),
        1,
        "the other allocation closed at its drop"
    );
    assert_eq!(m2.addr(), m1.addr() + 2 * PAGE, "ranges of one open");
    let whole = pattern(4 * PAGE);
    let mut got = vec![0u8; 2 * PAGE as usize];
    m2.read(0, &mut got).unwrap();
    assert_eq!(got, &whole[2 * PAGE as usize..]);
    let base = m1.addr();
    drop(m1);
    assert_eq!(dev.ipc_opens(), 1, "still open for the second import");
    m2.write(8, b"from child").unwrap();
    drop(m2);
    assert_eq!(dev.ipc_opens(), 0, "closed at the last drop");
    // The driver agrees: nothing is left to close at that address.
    assert_eq!(
        standin_close(base),
        1,
        "CUDA_ERROR_INVALID_VALUE: already closed"
    );
    println!("child done");
}

/// `cuIpcCloseMemHandle(ptr)` of the stand-in hal-cuda loaded, with device
/// 0's primary context pushed: its `CUresult`.
fn standin_close(ptr: u64) -> u32 {
    type Retain = unsafe extern "C" fn(*mut *mut std::ffi::c_void, i32) -> u32;
    type Push = unsafe extern "C" fn(*mut std::ffi::c_void) -> u32;
    type Pop = unsafe extern "C" fn(*mut *mut std::ffi::c_void) -> u32;
    type Release = unsafe extern "C" fn(i32) -> u32;
    type Close = unsafe extern "C" fn(u64) -> u32;
    // SAFETY: the library is already loaded by the backend (this is the
    // same file, so the same instance); its initialisers set up statics only.
    let lib = unsafe { libloading::Library::new(standin()) }.unwrap();
    // SAFETY: the symbols are the stand-in's entry points of these
    // signatures; the context is pushed and popped on this thread, and the
    // retained reference is released.
    unsafe {
        let retain = *lib.get::<Retain>(b"cuDevicePrimaryCtxRetain").unwrap();
        let push = *lib.get::<Push>(b"cuCtxPushCurrent_v2").unwrap();
        let pop = *lib.get::<Pop>(b"cuCtxPopCurrent_v2").unwrap();
        let release = *lib.get::<Release>(b"cuDevicePrimaryCtxRelease_v2").unwrap();
        let close = *lib.get::<Close>(b"cuIpcCloseMemHandle").unwrap();
        let mut ctx = std::ptr::null_mut();
        assert_eq!(retain(&mut ctx, 0), 0);
        assert_eq!(push(ctx), 0);
        let r = close(ptr);
        let mut popped = std::ptr::null_mut();
        assert_eq!(pop(&mut popped), 0);
        assert_eq!(release(0), 0);
        r
    }
}
