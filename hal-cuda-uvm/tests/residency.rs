//! Residency between real processes on the simulator's CUDA-like profile
//! (VMM): one process prefetches, another uses the same device copy, the
//! consistency rule is enforced where it can be and a process breaking it
//! is detected at the writeback; a server killed with device copies leaves
//! them to the processes that map them (on the simulator and over hal-cuda
//! on the stand-in driver, which offers VMM); and over hal-cuda on the
//! stand-in, a chunk goes to the device and comes home.

use std::process::Command;

use hal_core::{
    AllocDesc, Backend, Device, Error, ExportOptions, Handle, ImportOptions, Memory, SharedHandle,
};
use hal_cuda_uvm::{GpuDevice, Residency, UvmBackend, UvmDevice};

const MIB: u64 = 1 << 20;
const BUFFER_VAR: &str = "HAL_UVM_RES_BUFFER";
const HEADER_VAR: &str = "HAL_UVM_RES_HEADER";

type MockUvm = UvmDevice<hal_mock::MockDevice>;

fn mock() -> MockUvm {
    UvmBackend::over(hal_mock::MockBackend::cuda())
        .open(0)
        .unwrap()
}

fn standin() -> UvmDevice<hal_cuda::CudaDevice> {
    UvmBackend::with_library(hal_mock_libcuda::built_library())
        .open(0)
        .unwrap()
}

fn pattern(len: u64) -> Vec<u8> {
    (0..len).map(|i| (i % 241) as u8).collect()
}

/// The child: attaches, sees the parent's device copy, is refused a host
/// write to it, writes the device copy, and breaks the rule through the
/// home pages' address.
fn child(buffer: &str, header: &str) {
    let dev = mock();
    let m = dev
        .import_memory(
            SharedHandle::from(Handle::from_text(buffer).unwrap()),
            &ImportOptions::default(),
        )
        .unwrap();
    let mut r = Residency::attach(&dev, &m, header).unwrap();
    let mut got = [0u8; 6];
    r.read(0, &mut got).unwrap();
    assert_eq!(&got, b"device", "the parent's device copy");
    let mut home = [0u8; 6];
    m.read(0, &mut home).unwrap();
    assert_ne!(&home, b"device", "the home pages are not the current copy");
    assert!(r.device_addr(0).unwrap().is_some());
    match r.write(10, b"host") {
        Err(Error::PermissionDenied { reason, .. }) => assert!(reason.contains("chunk 0")),
        other => panic!("a host write to a device-resident chunk: {other:?}"),
    }
    r.write_device(100, b"child").unwrap();
    // Breaking the rule: the home pages of a device-resident chunk.
    m.write(200, b"broken").unwrap();
    // Chunk 1 is at home: host writes go through.
    r.write(2 * MIB + 8, b"home write").unwrap();
    println!("child done");
}

#[test]
fn a_device_copy_is_shared_and_handed_back() {
    if let (Ok(b), Ok(h)) = (std::env::var(BUFFER_VAR), std::env::var(HEADER_VAR)) {
        return child(&b, &h);
    }
    let dev = mock();
    let a = dev.allocate(&AllocDesc::managed(4 * MIB)).unwrap();
    a.write(0, &pattern(4 * MIB)).unwrap();
    let ex = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let mut r = Residency::create(&dev, &a, 2 * MIB).unwrap();
    assert!(!r.slot(0).unwrap().on_device);
    r.prefetch(0, 1).unwrap();
    let slot = r.slot(0).unwrap();
    assert!(slot.on_device && slot.generation == 1 && slot.owner == std::process::id());
    assert!(!r.slot(1).unwrap().on_device, "only the chunk asked for");
    r.write_device(0, b"device").unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "a_device_copy_is_shared_and_handed_back",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(BUFFER_VAR, ex.to_text())
        .env(HEADER_VAR, r.header_text())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("child done"),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let broken = r.writeback(0, 4 * MIB).unwrap();
    assert_eq!(
        broken,
        vec![0],
        "the child's write to the home pages is detected"
    );
    let slot = r.slot(0).unwrap();
    assert!(!slot.on_device && slot.generation == 2);
    let mut home = vec![0u8; 300];
    a.read(0, &mut home).unwrap();
    assert_eq!(&home[..6], b"device");
    assert_eq!(
        &home[100..105],
        b"child",
        "the child's device write came home"
    );
    assert_eq!(
        &home[200..206],
        &pattern(4 * MIB)[200..206],
        "the device copy wins over the broken home write"
    );
    let mut tail = [0u8; 10];
    a.read(2 * MIB + 8, &mut tail).unwrap();
    assert_eq!(&tail, b"home write");
    // Home again: host writes are taken.
    r.write(10, b"host").unwrap();
}

const SERVE_VAR: &str = "HAL_UVM_RES_SERVE";

/// The server that dies: makes device copies of both chunks, writes each,
/// says so, and waits on its stdin to be killed (or for its parent to go).
fn serve_and_wait<G: GpuDevice>(dev: &UvmDevice<G>, buffer: &str, header: &str) {
    let m = dev
        .import_memory(
            SharedHandle::from(Handle::from_text(buffer).unwrap()),
            &ImportOptions::default(),
        )
        .unwrap();
    let mut r = Residency::attach(dev, &m, header).unwrap();
    r.prefetch(0, 4 * MIB).unwrap();
    r.write_device(0, b"served").unwrap();
    r.write_device(2 * MIB, b"lost").unwrap();
    println!("serving");
    let _ = std::io::Read::read(&mut std::io::stdin(), &mut [0u8; 1]);
}

/// A server killed with two device copies: the one this process maps is
/// written home by it, the other is lost until reclaimed.
fn dead_server<G: GpuDevice>(dev: UvmDevice<G>, test: &str) {
    if let (Ok(b), Ok(h), Ok(_)) = (
        std::env::var(BUFFER_VAR),
        std::env::var(HEADER_VAR),
        std::env::var(SERVE_VAR),
    ) {
        return serve_and_wait(&dev, &b, &h);
    }
    use std::io::BufRead;
    use std::process::Stdio;
    let a = dev.allocate(&AllocDesc::managed(4 * MIB)).unwrap();
    let before = pattern(4 * MIB);
    a.write(0, &before).unwrap();
    let ex = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let mut r = Residency::create(&dev, &a, 2 * MIB).unwrap();
    let mut server = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(BUFFER_VAR, ex.to_text())
        .env(HEADER_VAR, r.header_text())
        .env(SERVE_VAR, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(server.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.contains("serving"))),
        "the server never served"
    );
    // This process maps chunk 0's device copy and writes it; chunk 1's it
    // never touches.
    let mut got = [0u8; 6];
    r.read(0, &mut got).unwrap();
    assert_eq!(&got, b"served");
    r.write_device(8, b"parent").unwrap();
    assert!(!r.slot(0).unwrap().server_gone(), "the server lives");
    server.kill().unwrap();
    server.wait().unwrap();
    for i in [0, 1] {
        let slot = r.slot(i).unwrap();
        assert!(slot.on_device && slot.server_gone(), "chunk {i}: {slot:?}");
    }

    // Chunk 0: written home at this process's next call, nothing lost.
    let want = [&b"served"[..], &before[6..8], b"parent"].concat();
    let mut got = [0u8; 14];
    r.read(0, &mut got).unwrap();
    assert_eq!(&got[..], want);
    let slot = r.slot(0).unwrap();
    assert!(!slot.on_device && slot.generation == 2, "{slot:?}");
    let mut home = [0u8; 14];
    a.read(0, &mut home).unwrap();
    assert_eq!(&home[..], want, "the device writes came home");
    r.write(0, b"host").unwrap();

    // Chunk 1: nobody here maps it; every call says it is lost.
    let mut tail = [0u8; 4];
    for (what, result) in [
        ("read", r.read(2 * MIB, &mut tail)),
        ("write", r.write(2 * MIB, b"host")),
        ("write_device", r.write_device(2 * MIB, b"dev")),
        ("device_addr", r.device_addr(2 * MIB).map(|_| ())),
        ("prefetch", r.prefetch(2 * MIB, 1)),
        ("writeback", r.writeback(2 * MIB, 1).map(|_| ())),
    ] {
        match result {
            Err(Error::Closed { what: why }) => {
                assert!(why.contains("chunk 1") && why.contains("reclaim"), "{why}")
            }
            other => panic!("{what} on a lost chunk: {other:?}"),
        }
    }
    assert_eq!(r.reclaim(0, 4 * MIB).unwrap(), vec![1], "only chunk 1 lost");
    let slot = r.slot(1).unwrap();
    assert!(!slot.on_device && slot.generation == 2, "{slot:?}");
    r.read(2 * MIB, &mut tail).unwrap();
    assert_eq!(
        &tail[..],
        &before[2 * MIB as usize..][..4],
        "the home pages from before the prefetch"
    );
    assert!(r.reclaim(0, 4 * MIB).unwrap().is_empty(), "nothing more");

    // The chunk serves again, from this process; a live server's chunk is
    // not given up.
    r.prefetch(2 * MIB, 1).unwrap();
    assert_eq!(r.slot(1).unwrap().owner, std::process::id());
    assert!(matches!(
        r.reclaim(2 * MIB, 1),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(r.writeback(0, 4 * MIB).unwrap().is_empty());
}

#[test]
fn mock_dead_server() {
    dead_server(mock(), "mock_dead_server");
}

#[test]
fn standin_dead_server() {
    dead_server(standin(), "standin_dead_server");
}

#[test]
fn a_misfit_chunk_is_refused() {
    let dev = mock();
    let a = dev.allocate(&AllocDesc::host(4 * MIB)).unwrap();
    assert!(matches!(
        Residency::create(&dev, &a, 3 * MIB),
        Err(Error::InvalidArgument { .. })
    ));
    let d = dev.allocate(&AllocDesc::device(0, 2 * MIB)).unwrap();
    assert!(
        Residency::create(&dev, &d, 0).is_err(),
        "device memory has no home"
    );
}

#[test]
fn over_hal_cuda_a_chunk_goes_to_the_device_and_comes_home() {
    // hal-cuda offers VMM where the driver says so (the stand-in does).
    let dev = standin();
    let a = dev.allocate(&AllocDesc::managed(4 * MIB)).unwrap();
    a.write(0, &pattern(4 * MIB)).unwrap();
    let mut r = Residency::create(&dev, &a, 2 * MIB).unwrap();
    r.prefetch(0, 1).unwrap();
    let mut got = vec![0u8; 64];
    r.read(0, &mut got).unwrap();
    assert_eq!(got, &pattern(4 * MIB)[..64], "the device copy");
    assert!(
        r.write(10, b"host").is_err(),
        "host writes wait for the writeback"
    );
    r.write_device(0, b"device").unwrap();
    let broken = r.writeback(0, 4 * MIB).unwrap();
    assert!(broken.is_empty(), "{broken:?}");
    let mut home = [0u8; 6];
    a.read(0, &mut home).unwrap();
    assert_eq!(&home, b"device", "the device write came home");
}
