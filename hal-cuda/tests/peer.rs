//! Devices found by UUID and imports onto another device, on the stand-in
//! `libcuda.so.1`: a child that sees the devices in another order
//! (`CUDA_VISIBLE_DEVICES=3,2,1,0`) finds the exporter's device by the
//! handle's UUID and reads the right bytes; a child that does not see the
//! device is told so; another device imports with peer access (opened
//! with `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`), and not without it; on a
//! machine without peer access (`HAL_MOCK_LIBCUDA_NO_PEER_ACCESS=1`) the import
//! is refused as unsupported.

use hal_core::DeviceExt;
use hal_core::{
    AllocDesc, Allocation, Backend, Capabilities, Device, Error, ExportOptions, Handle,
    ImportOptions, Memory, SharedHandle,
};
use hal_cuda::CudaBackend;

const PAGE: u64 = 4096;
/// The variable that hands the child the handle's text.
const HANDLE_VAR: &str = "HAL_CUDA_PEER_TEST_HANDLE";
/// The variable that says which child to be.
const ROLE_VAR: &str = "HAL_CUDA_PEER_TEST_ROLE";

fn backend() -> CudaBackend {
    CudaBackend::with_library(hal_mock_libcuda::built_library())
}

fn pattern(len: u64, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

/// Run this executable's `child` test with `role` and the handle of
/// device 1's memory, under extra environment `env`; its stdout.
fn run_child(role: &str, env: &[(&str, &str)]) -> String {
    let cuda = backend();
    let dev = cuda.open(1).unwrap();
    let a = dev.allocate(&AllocDesc::device(1, 2 * PAGE)).unwrap();
    a.write(0, &pattern(2 * PAGE, 0x33)).unwrap();
    let ex = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let mut cmd = hal_core::testing::child("child");
    cmd.env(ROLE_VAR, role).env(HANDLE_VAR, ex.to_text());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("child done"),
        "child {role} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(a.importers().unwrap(), 0, "the child gave its lease back");
    stdout
}

#[test]
fn a_process_that_numbers_the_devices_otherwise_finds_the_device_by_uuid() {
    run_child("reordered", &[("CUDA_VISIBLE_DEVICES", "3,2,1,0")]);
}

#[test]
fn a_process_that_does_not_see_the_device_is_told_so() {
    run_child("hidden", &[("CUDA_VISIBLE_DEVICES", "0,2")]);
}

#[test]
fn another_device_imports_with_peer_access_only() {
    run_child("peer", &[]);
}

#[test]
fn this_process_imports_its_own_memory_onto_another_device_again_and_again() {
    let cuda = backend();
    let (d2, d3) = (cuda.open(2).unwrap(), cuda.open(3).unwrap());
    let a = d2.allocate(&AllocDesc::device(2, PAGE)).unwrap();
    a.write(0, b"device two").unwrap();
    let ex = d2.export_memory(&a, &ExportOptions::default()).unwrap();
    let opts = ImportOptions {
        device: Some(3),
        peer_access: true,
        ..ImportOptions::default()
    };
    // The second import enables peer access again: the driver's
    // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED is success here.
    for _ in 0..2 {
        let m = d3.import_memory(ex.share().unwrap(), &opts).unwrap();
        assert_eq!(m.addr(), a.addr(), "the original memory");
        let mut got = [0u8; 10];
        m.read(0, &mut got).unwrap();
        assert_eq!(&got, b"device two");
    }
}

#[test]
fn without_peer_access_an_import_onto_another_device_is_unsupported() {
    run_child("no-peer", &[(hal_mock_libcuda::NO_PEER_VAR, "1")]);
}

#[test]
fn a_failed_peer_enable_fails_the_import_with_the_drivers_code() {
    // The driver answers CUDA_ERROR_INVALID_CONTEXT (201) to the enable.
    run_child(
        "enable-fails",
        &[(hal_mock_libcuda::FAIL_VAR, "cuCtxEnablePeerAccess:201")],
    );
}

/// The children of the tests above.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child() {
    let (Ok(role), Ok(text)) = (std::env::var(ROLE_VAR), std::env::var(HANDLE_VAR)) else {
        panic!("a child entry point: run by its parent, which sets its variables");
    };
    let handle = Handle::from_text(&text).unwrap();
    let cuda = backend();
    let shared = || SharedHandle::from(handle.clone());
    let expect = pattern(2 * PAGE, 0x33);
    match role.as_str() {
        "reordered" => {
            let ordinal = cuda.device_for(&handle).unwrap();
            assert_eq!(ordinal, 2, "device 1 of the exporter is device 2 here");
            assert_eq!(cuda.devices().unwrap()[2].uuid, handle.device_uuid);
            let dev = cuda.open(ordinal).unwrap();
            let m = dev
                .import_memory(shared(), &ImportOptions::default())
                .unwrap();
            let mut got = vec![0u8; expect.len()];
            m.read(0, &mut got).unwrap();
            assert_eq!(got, expect);
            // The open is counted on the device that made it, and on no other.
            assert_eq!(dev.ipc_opens(), 1, "opened on device 2");
            assert_eq!(cuda.open(0).unwrap().ipc_opens(), 0, "nothing on device 0");
            // Device 1 here is another device: without peer access, refused
            // with the UUID named.
            let other = cuda.open(1).unwrap();
            match other.import_memory(shared(), &ImportOptions::default()) {
                Err(Error::InvalidArgument { what }) => assert!(
                    what.contains(&hal_core::kit::os::hex(&handle.device_uuid)),
                    "{what}"
                ),
                other => panic!("an import through another device: {other:?}"),
            }
        }
        "hidden" => match cuda.device_for(&handle) {
            Err(Error::NotFound { what }) => {
                assert!(what.contains("CUDA_VISIBLE_DEVICES"), "{what}")
            }
            other => panic!("a hidden device: {other:?}"),
        },
        "peer" => {
            let dev = cuda.open(0).unwrap();
            assert!(dev.capabilities().contains(Capabilities::PEER_ACCESS));
            let opts = ImportOptions {
                device: Some(0),
                peer_access: true,
                ..ImportOptions::default()
            };
            let m = dev.import_memory(shared(), &opts).unwrap();
            let mut got = vec![0u8; expect.len()];
            m.read(0, &mut got).unwrap();
            assert_eq!(got, expect, "device 1's memory read through device 0");
            assert_eq!(dev.ipc_opens(), 1, "opened in device 0's context");
            let without = ImportOptions {
                peer_access: false,
                ..opts
            };
            assert!(matches!(
                dev.import_memory(shared(), &without),
                Err(Error::InvalidArgument { .. })
            ));
        }
        "no-peer" => {
            let dev = cuda.open(0).unwrap();
            assert!(!dev.capabilities().contains(Capabilities::PEER_ACCESS));
            let opts = ImportOptions {
                peer_access: true,
                ..ImportOptions::default()
            };
            match dev.import_memory(shared(), &opts) {
                Err(e) if e.is_unsupported() => {
                    assert!(e.to_string().contains("cuDeviceCanAccessPeer"), "{e}")
                }
                other => panic!("an import onto another device without peer: {other:?}"),
            }
        }
        "enable-fails" => {
            // This process's own memory of device 2, imported onto device 3:
            // the enable is the driver call that fails.
            let (d2, d3) = (cuda.open(2).unwrap(), cuda.open(3).unwrap());
            let a = d2.allocate(&AllocDesc::device(2, PAGE)).unwrap();
            let ex = d2.export_memory(&a, &ExportOptions::default()).unwrap();
            let opts = ImportOptions {
                device: Some(3),
                peer_access: true,
                ..ImportOptions::default()
            };
            match d3.import_memory(ex.share().unwrap(), &opts) {
                Err(Error::Vendor(v)) => {
                    assert_eq!(
                        (v.code, v.name.as_str()),
                        (201, "CUDA_ERROR_INVALID_CONTEXT")
                    )
                }
                other => panic!("an import whose peer enable failed: {other:?}"),
            }
        }
        other => panic!("unknown role {other}"),
    }
    println!("child done");
}
