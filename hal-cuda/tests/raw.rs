//! Raw legacy IPC handles, as other libraries exchange them (PyTorch's CUDA
//! storage sharing): exported by hal and opened by plain driver calls in
//! another process, made by plain driver calls and imported by hal in
//! another process, imported in the exporting process, and a range that
//! leaves the allocation refused. On the stand-in `libcuda.so.1`, or on
//! the real driver with `HAL_CUDA_CONFORMANCE_DRIVER=1`.

use hal_core::{AllocDesc, Backend, ByteRange, Device, Error, HandleError, Memory};
use hal_cuda::{CudaDevice, RawIpcHandle};

mod common;

const PAGE: u64 = 4096;
/// The variables that hand the child its role and the raw handle.
const ROLE_VAR: &str = "HAL_CUDA_RAW_TEST_ROLE";
const RAW_VAR: &str = "HAL_CUDA_RAW_TEST_HANDLE";

fn device() -> CudaDevice {
    common::backend().open(0).unwrap()
}

fn pattern(len: u64) -> Vec<u8> {
    (0..len).map(|i| (i % 249) as u8 ^ 0xa5).collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn run_child(role: &str, raw: &[u8]) {
    let out = hal_core::testing::child("child")
        .env(ROLE_VAR, role)
        .env(RAW_VAR, hex(raw))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("child done"),
        "child {role} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_raw_export_is_opened_by_plain_driver_calls_in_another_process() {
    let dev = device();
    let a = dev.allocate(&AllocDesc::device(0, 4 * PAGE)).unwrap();
    a.write(0, &pattern(4 * PAGE)).unwrap();
    let raw = dev
        .export_raw(&a, Some(ByteRange::new(PAGE + 16, 100)))
        .unwrap();
    assert_eq!((raw.offset, raw.size), (PAGE + 16, 100));
    run_child("plain-open", &raw.to_bytes());
    let mut back = [0u8; 11];
    a.read(PAGE + 16, &mut back).unwrap();
    assert_eq!(&back, b"plain write");
}

#[test]
fn a_handle_made_by_plain_driver_calls_is_imported_in_another_process() {
    let dev = device();
    let a = dev.allocate(&AllocDesc::device(0, 2 * PAGE)).unwrap();
    a.write(0, &pattern(2 * PAGE)).unwrap();
    // Another library takes the handle of the allocation itself.
    type Get = unsafe extern "C" fn(*mut [u8; 64], u64) -> u32;
    let bytes = common::with_driver(|lib| {
        let mut h = [0u8; 64];
        // SAFETY: `h` is a valid place for the 64 bytes; the pointer is live.
        let status = unsafe { (lib.get::<Get>(b"cuIpcGetMemHandle").unwrap())(&mut h, a.addr()) };
        assert_eq!(status, 0);
        h
    });
    let raw = RawIpcHandle {
        bytes,
        offset: 8,
        size: PAGE,
    };
    run_child("hal-import", &raw.to_bytes());
    let mut back = [0u8; 9];
    a.read(8, &mut back).unwrap();
    assert_eq!(&back, b"hal write");
}

#[test]
fn a_raw_import_in_the_exporting_process_reaches_the_original() {
    let dev = device();
    let a = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    a.write(0, b"original").unwrap();
    let raw = dev.export_raw(&a, None).unwrap();
    let m = dev.import_raw(&raw).unwrap();
    assert_eq!(m.addr(), a.addr());
    assert_eq!(dev.ipc_opens(), 0, "nothing opened with the driver");
    // The mapping's handle describes what was opened: a raw handle names
    // no creator and no allow-list.
    let h = hal_core::Mapping::handle(&m);
    assert_eq!(
        (h.creator_pid, h.creator_start, h.creator_pid_ns),
        (0, 0, 0)
    );
    assert!(h.flags.contains(hal_core::HandleFlags::ANY_IMPORTER));
    assert!(!h.is_own());
    assert_eq!((h.offset, h.size), (raw.offset, raw.size));
    let mut back = [0u8; 8];
    m.read(0, &mut back).unwrap();
    assert_eq!(&back, b"original");
    let shown = format!("{m:?}");
    for part in [
        "CudaMapping".to_string(),
        format!("addr: {:#x}", a.addr()),
        format!("len: {PAGE}"),
        "same_process: true".to_string(),
    ] {
        assert!(shown.contains(&part), "{shown} lacks {part}");
    }
}

/// Freeing an exported allocation forgets its raw export, and only its
/// own: another allocation's raw handle still reaches its original, and
/// the freed one's bytes no longer lead to the freed address.
#[test]
fn freeing_an_allocation_forgets_its_raw_export_and_no_other() {
    let dev = device();
    let kept = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    kept.write(0, b"kept").unwrap();
    let kept_raw = dev.export_raw(&kept, None).unwrap();
    let freed = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    let freed_at = freed.addr();
    let freed_raw = dev.export_raw(&freed, None).unwrap();
    drop(freed);
    // Once the free has run, a new allocation may take the freed address:
    // the freed handle must not lead to it.
    // Held to the end, so that the address stays taken.
    let _reused = hal_tests::reuse::allocation_at(
        freed_at,
        || dev.allocate(&AllocDesc::device(0, PAGE)),
        |a| a.addr(),
    );
    let m = dev.import_raw(&kept_raw).unwrap();
    assert_eq!(m.addr(), kept.addr(), "the original, not an open");
    let mut back = [0u8; 4];
    m.read(0, &mut back).unwrap();
    assert_eq!(&back, b"kept");
    if let Ok(stale) = dev.import_raw(&freed_raw) {
        panic!(
            "a freed allocation's raw handle was imported at {:#x} (freed at {freed_at:#x})",
            stale.addr()
        );
    }
}

#[test]
fn raw_handles_of_other_memory_and_lengths_are_refused() {
    let dev = device();
    let managed = dev.allocate(&AllocDesc::managed(PAGE)).unwrap();
    assert!(dev.export_raw(&managed, None).unwrap_err().is_unsupported());
    let a = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    assert!(dev
        .export_raw(&a, Some(ByteRange::new(PAGE - 8, 16)))
        .is_err());
    assert!(RawIpcHandle::from_bytes(&[0u8; 79]).is_err());
}

/// The children of the tests above.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child() {
    let (Ok(role), Ok(hex)) = (std::env::var(ROLE_VAR), std::env::var(RAW_VAR)) else {
        panic!("a child entry point: run by its parent, which sets its variables");
    };
    let raw = RawIpcHandle::from_bytes(&unhex(&hex)).unwrap();
    match role.as_str() {
        "plain-open" => {
            // What another library does with the 64 bytes.
            type Open = unsafe extern "C" fn(*mut u64, [u8; 64], u32) -> u32;
            type Close = unsafe extern "C" fn(u64) -> u32;
            type HtoD = unsafe extern "C" fn(u64, *const u8, usize) -> u32;
            type DtoH = unsafe extern "C" fn(*mut u8, u64, usize) -> u32;
            common::with_driver(|lib| {
                // SAFETY: the stand-in's entry points of these signatures,
                // on the opened range (offset + size inside it).
                unsafe {
                    let mut base = 0u64;
                    let open = lib.get::<Open>(b"cuIpcOpenMemHandle_v2").unwrap();
                    assert_eq!(open(&mut base, raw.bytes, 1), 0);
                    let at = base + raw.offset;
                    let mut got = vec![0u8; raw.size as usize];
                    let dtoh = lib.get::<DtoH>(b"cuMemcpyDtoH_v2").unwrap();
                    assert_eq!(dtoh(got.as_mut_ptr(), at, got.len()), 0);
                    let whole = pattern(4 * PAGE);
                    let start = raw.offset as usize;
                    assert_eq!(got, &whole[start..start + raw.size as usize]);
                    let htod = lib.get::<HtoD>(b"cuMemcpyHtoD_v2").unwrap();
                    assert_eq!(htod(at, b"plain write".as_ptr(), 11), 0);
                    assert_eq!(lib.get::<Close>(b"cuIpcCloseMemHandle").unwrap()(base), 0);
                }
            });
        }
        "hal-import" => {
            let dev = device();
            let m = dev.import_raw(&raw).unwrap();
            let again = dev.import_raw(&raw).unwrap();
            assert_eq!(dev.ipc_opens(), 1, "one open for both imports");
            assert_eq!(again.addr(), m.addr());
            let mut got = vec![0u8; 16];
            m.read(0, &mut got).unwrap();
            assert_eq!(got, &pattern(2 * PAGE)[8..24]);
            m.write(0, b"hal write").unwrap();
            // A range past the allocation, whatever the sender claims.
            let past = RawIpcHandle {
                size: 2 * PAGE,
                ..raw
            };
            match dev.import_raw(&past) {
                Err(Error::InvalidHandle(HandleError::Malformed { field, .. })) => {
                    assert_eq!(field, "size")
                }
                other => panic!("a range past the allocation: {other:?}"),
            }
            drop((m, again));
            assert_eq!(dev.ipc_opens(), 0, "closed at the last drop");
        }
        other => panic!("unknown role {other}"),
    }
    println!("child done");
}

#[test]
fn a_hal_export_carries_the_raw_handle_of_its_range() {
    let dev = device();
    let a = dev.allocate(&AllocDesc::device(0, 2 * PAGE)).unwrap();
    let exported = dev
        .export_memory(&a, &hal_core::ExportOptions::default())
        .unwrap();
    let raw = RawIpcHandle::from_handle(exported.handle()).unwrap();
    assert_eq!(raw, dev.export_raw(&a, None).unwrap());
    let other = hal_core::Handle {
        kind: hal_core::HandleKind::Event,
        ..exported.handle().clone()
    };
    assert!(matches!(
        RawIpcHandle::from_handle(&other),
        Err(Error::InvalidArgument { .. })
    ));
}
