//! Residency between real processes on the simulator's CUDA-like profile
//! (VMM): one process prefetches, another uses the same device copy, the
//! consistency rule is enforced where it can be and a process breaking it
//! is detected at the writeback; a server killed with device copies leaves
//! them to the processes that map them (on the simulator and over hal-cuda
//! on the stand-in driver, which offers VMM); and over hal-cuda on the
//! stand-in, a chunk goes to the device and comes home.

use hal_core::DeviceExt;
mod child;

use hal_core::Vmm;
use hal_core::{
    AllocDesc, Backend, Device, Error, ExportOptions, Granularity, Handle, ImportOptions, Memory,
    SharedHandle,
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
fn taker(buffer: &str, header: &str) {
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
#[ignore = "child entry point: run by its parent"]
fn a_device_copy_is_shared_and_handed_back_child() {
    let var = |name| std::env::var(name).expect("run by its parent, with the handles");
    taker(&var(BUFFER_VAR), &var(HEADER_VAR));
}

#[test]
fn a_device_copy_is_shared_and_handed_back() {
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
    child::passes(
        "a_device_copy_is_shared_and_handed_back_child",
        "the process that takes the device copy",
        &[(BUFFER_VAR, &ex.to_text()), (HEADER_VAR, r.header_text())],
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

/// The chunk size of the dead-server test, and its buffer of three chunks.
const C: u64 = 2 * MIB;
const THREE: u64 = 3 * C;

/// The server that dies: makes device copies of the three chunks, writes
/// each, says so, and waits on its stdin to be killed (or for its parent to
/// go).
fn serve_and_wait<G: GpuDevice>(dev: &UvmDevice<G>, buffer: &str, header: &str) {
    let m = dev
        .import_memory(
            SharedHandle::from(Handle::from_text(buffer).unwrap()),
            &ImportOptions::default(),
        )
        .unwrap();
    let mut r = Residency::attach(dev, &m, header).unwrap();
    r.prefetch(0, THREE).unwrap();
    r.write_device(0, b"served").unwrap();
    r.write_device(C, b"kept").unwrap();
    r.write_device(2 * C, b"lost").unwrap();
    println!("serving");
    let _ = std::io::Read::read(&mut std::io::stdin(), &mut [0u8; 1]);
}

/// [`serve_and_wait`] on `dev`, with its parent's handles.
fn serve<G: GpuDevice>(dev: UvmDevice<G>) {
    let var = |name| std::env::var(name).expect("run by its parent, with the handles");
    serve_and_wait(&dev, &var(BUFFER_VAR), &var(HEADER_VAR));
}

/// A server killed with three device copies: the one this process maps is
/// written home at its next call, the one a second attachment here maps
/// when that attachment lets go, and the third, which nobody maps, is lost
/// until reclaimed. `server` names the child entry point that serves.
fn dead_server<G: GpuDevice>(dev: UvmDevice<G>, server: &str) {
    use std::io::BufRead;
    use std::process::Stdio;
    let at = |x: u64| x as usize;
    let a = dev.allocate(&AllocDesc::managed(THREE)).unwrap();
    let before = pattern(THREE);
    a.write(0, &before).unwrap();
    let ex = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let mut r = Residency::create(&dev, &a, C).unwrap();
    let mut server = child::command(server)
        .env(BUFFER_VAR, ex.to_text())
        .env(HEADER_VAR, r.header_text())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(server.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.contains("serving"))),
        "the server never served"
    );
    // `r` maps chunk 0's device copy and writes it; a second attachment
    // maps chunk 1's; chunk 2's nobody here touches.
    let mut got = [0u8; 6];
    r.read(0, &mut got).unwrap();
    assert_eq!(&got, b"served");
    r.write_device(8, b"parent").unwrap();
    let mapping = dev
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let mut second = Residency::attach(&dev, &mapping, r.header_text()).unwrap();
    let mut kept = [0u8; 4];
    second.read(C, &mut kept).unwrap();
    assert_eq!(&kept, b"kept");
    assert!(!r.slot(0).unwrap().server_gone(), "the server lives");
    server.kill().unwrap();
    server.wait().unwrap();
    for i in 0..3 {
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

    // Chunk 1: written home when the attachment that maps it lets go.
    drop(second);
    let slot = r.slot(1).unwrap();
    assert!(!slot.on_device && slot.generation == 2, "{slot:?}");
    a.read(C, &mut kept).unwrap();
    assert_eq!(&kept, b"kept", "the last mapping wrote it home");

    // Chunk 2: nobody maps it; every call says it is lost.
    let mut tail = [0u8; 4];
    for (what, result) in [
        ("read", r.read(2 * C, &mut tail)),
        ("write", r.write(2 * C, b"host")),
        ("write_device", r.write_device(2 * C, b"dev")),
        ("device_addr", r.device_addr(2 * C).map(|_| ())),
        ("prefetch", r.prefetch(2 * C, 1)),
        ("writeback", r.writeback(2 * C, 1).map(|_| ())),
    ] {
        match result {
            Err(Error::Closed { what: why }) => {
                assert!(why.contains("chunk 2") && why.contains("reclaim"), "{why}")
            }
            other => panic!("{what} on a lost chunk: {other:?}"),
        }
    }
    assert_eq!(r.reclaim(0, THREE).unwrap(), vec![2], "only chunk 2 lost");
    let slot = r.slot(2).unwrap();
    assert!(!slot.on_device && slot.generation == 2, "{slot:?}");
    r.read(2 * C, &mut tail).unwrap();
    assert_eq!(
        &tail[..],
        &before[at(2 * C)..][..4],
        "the home pages from before the prefetch"
    );
    assert!(r.reclaim(0, THREE).unwrap().is_empty(), "nothing more");

    // The chunk serves again, from this process; a live server's chunk is
    // not given up.
    r.prefetch(2 * C, 1).unwrap();
    assert_eq!(r.slot(2).unwrap().owner, std::process::id());
    assert!(matches!(
        r.reclaim(2 * C, 1),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(r.writeback(0, THREE).unwrap().is_empty());
}

#[test]
fn mock_dead_server() {
    dead_server(mock(), "mock_dead_server_child");
}

#[test]
#[ignore = "child entry point: run by its parent"]
fn mock_dead_server_child() {
    serve(mock());
}

#[test]
fn standin_dead_server() {
    dead_server(standin(), "standin_dead_server_child");
}

#[test]
#[ignore = "child entry point: run by its parent"]
fn standin_dead_server_child() {
    serve(standin());
}

/// The simulator's CUDA-like profile, changed by `change`.
fn mock_with(change: impl FnOnce(&mut hal_mock::Profile)) -> MockUvm {
    let mut profile = hal_mock::Profile::cuda();
    change(&mut profile);
    UvmBackend::over(hal_mock::MockBackend::new(profile))
        .open(0)
        .unwrap()
}

#[test]
fn every_chunk_is_its_own() {
    let dev = mock();
    let min = dev.granularity(Granularity::Minimum).unwrap();
    let len = 3 * min;
    let at = |x: u64| x as usize;
    let a = dev.allocate(&AllocDesc::managed(len)).unwrap();
    let before = pattern(len);
    a.write(0, &before).unwrap();
    let mut r = Residency::create(&dev, &a, min).unwrap();
    assert_eq!(r.chunk_size(), min);
    let shown = format!("{r:?}");
    assert!(
        shown.contains(&format!("chunk: {min}")) && shown.contains("chunks: 3"),
        "{shown}"
    );
    r.prefetch(0, len).unwrap();
    for i in 0..3 {
        let slot = r.slot(i).unwrap();
        assert!(
            slot.on_device && slot.generation == 1,
            "chunk {i}: {slot:?}"
        );
    }
    let mut got = vec![0u8; at(len)];
    r.read(0, &mut got).unwrap();
    assert_eq!(got, before, "each device copy holds its own chunk");
    // One reservation, chunk after chunk.
    let base = r.device_addr(0).unwrap().expect("device-resident");
    assert_eq!(r.device_addr(min + 16).unwrap(), Some(base + min + 16));
    assert_eq!(
        r.device_addr(2 * min + 5).unwrap(),
        Some(base + 2 * min + 5)
    );
    // Writes on the device, one across a chunk boundary.
    r.write_device(min - 3, b"across").unwrap();
    r.write_device(2 * min + 7, b"third").unwrap();
    assert!(r.writeback(0, len).unwrap().is_empty());
    let mut want = before.clone();
    want[at(min - 3)..at(min + 3)].copy_from_slice(b"across");
    want[at(2 * min + 7)..at(2 * min + 12)].copy_from_slice(b"third");
    let mut home = vec![0u8; at(len)];
    a.read(0, &mut home).unwrap();
    assert_eq!(home, want, "every chunk came home to its own place");
    assert_eq!(r.device_addr(min).unwrap(), None, "at home");
    // A second round: the first round's mappings went with its writeback.
    r.prefetch(min, 1).unwrap();
    assert_eq!(r.slot(1).unwrap().generation, 3);
    let mut mid = [0u8; 3];
    r.read(min, &mut mid).unwrap();
    assert_eq!(&mid, b"oss");
    // One read over chunks at home and on the device: each piece from its
    // chunk's current copy.
    r.write_device(min + 100, b"dev").unwrap();
    let mut mixed = want.clone();
    mixed[at(min + 100)..at(min + 103)].copy_from_slice(b"dev");
    r.read(0, &mut home).unwrap();
    assert_eq!(home, mixed);
    want = mixed;
    assert!(r.writeback(0, len).unwrap().is_empty());
    // Past the last chunk.
    assert!(matches!(r.slot(3), Err(Error::InvalidArgument { .. })));
    assert!(r.device_addr(len).is_err());
    // The server lets go: every chunk it serves comes home first.
    r.prefetch(0, len).unwrap();
    for i in 0..3 {
        r.write_device(i * min + 1, &[b'A' + i as u8; 2]).unwrap();
    }
    drop(r);
    a.read(0, &mut home).unwrap();
    for i in 0..3 {
        want[at(i * min + 1)..at(i * min + 3)].fill(b'A' + i as u8);
    }
    assert_eq!(home, want, "written back at the drop, each to its place");
}

#[test]
fn any_attachment_writes_a_chunk_back() {
    let dev = mock();
    let a = dev.allocate(&AllocDesc::managed(4 * MIB)).unwrap();
    let ex = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let mut server = Residency::create(&dev, &a, 2 * MIB).unwrap();
    server.prefetch(0, 1).unwrap();
    server.write_device(0, b"on the device").unwrap();
    // Another attachment, which maps nothing yet, brings it home.
    let mapping = dev
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let mut other = Residency::attach(&dev, &mapping, server.header_text()).unwrap();
    assert!(other.writeback(0, 4 * MIB).unwrap().is_empty());
    assert!(!server.slot(0).unwrap().on_device);
    let mut home = [0u8; 13];
    a.read(0, &mut home).unwrap();
    assert_eq!(&home, b"on the device");
}

#[test]
fn a_buffer_smaller_than_its_header_says_is_refused() {
    let dev = mock();
    let a = dev.allocate(&AllocDesc::managed(4 * MIB)).unwrap();
    let r = Residency::create(&dev, &a, 2 * MIB).unwrap();
    let import = |m: &dyn Fn() -> hal_cuda_uvm::UvmAllocation<hal_mock::MockDevice>| {
        let m = m();
        let ex = dev.export_memory(&m, &ExportOptions::default()).unwrap();
        let mapping = dev
            .import_memory(ex.share().unwrap(), &ImportOptions::default())
            .unwrap();
        (m, ex, mapping)
    };
    let (_small, _sx, small) = import(&|| dev.allocate(&AllocDesc::managed(3 * MIB)).unwrap());
    match Residency::attach(&dev, &small, r.header_text()) {
        Err(Error::InvalidArgument { what }) => assert!(what.contains("smaller"), "{what}"),
        other => panic!("a 3 MiB buffer for a header of two 2 MiB chunks: {other:?}"),
    }
    let (_same, _ex, same) = import(&|| dev.allocate(&AllocDesc::managed(4 * MIB)).unwrap());
    let _attached = Residency::attach(&dev, &same, r.header_text()).unwrap();
}

#[test]
fn without_vmm_there_is_no_residency() {
    let dev =
        mock_with(|p| p.capabilities = p.capabilities.difference(hal_core::Capabilities::VMM));
    let a = dev.allocate(&AllocDesc::managed(4 * MIB)).unwrap();
    let err = Residency::create(&dev, &a, 0).unwrap_err();
    assert!(
        err.is_unsupported() && err.to_string().contains("VMM"),
        "{err}"
    );
}

#[test]
fn chunk_0_is_the_recommended_granularity() {
    let dev = mock_with(|p| p.granularity_recommended = 4 * MIB);
    let a = dev.allocate(&AllocDesc::managed(8 * MIB)).unwrap();
    let r = Residency::create(&dev, &a, 0).unwrap();
    assert_eq!(r.chunk_size(), 4 * MIB);
    assert!(format!("{r:?}").contains("chunks: 2"));
}

#[test]
fn a_misfit_chunk_is_refused() {
    let dev = mock();
    let a = dev.allocate(&AllocDesc::host(4 * MIB)).unwrap();
    // Off the 2 MiB granularity, not dividing the buffer, or both.
    for chunk in [MIB, 3 * MIB, 8 * MIB] {
        assert!(
            matches!(
                Residency::create(&dev, &a, chunk),
                Err(Error::InvalidArgument { .. })
            ),
            "a chunk of {chunk:#x}"
        );
    }
    let b = dev.allocate(&AllocDesc::host(6 * MIB)).unwrap();
    assert!(
        matches!(
            Residency::create(&dev, &b, 4 * MIB),
            Err(Error::InvalidArgument { .. })
        ),
        "a granular chunk that does not divide the buffer"
    );
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

#[test]
fn over_hal_cuda_a_residency_drop_never_waits_for_queued_work() {
    use hal_core::Notify;
    // 'static, so that the residency can be dropped on a thread that the
    // test may have to leave behind.
    let dev: &'static _ = Box::leak(Box::new(standin()));
    let a = dev.allocate(&AllocDesc::managed(4 * MIB)).unwrap();
    a.write(0, &pattern(4 * MIB)).unwrap();
    let mut r = Residency::create(dev, &a, 2 * MIB).unwrap();
    r.prefetch(0, 4 * MIB).unwrap();
    r.write_device(0, b"device").unwrap();
    // Work that waits for a notify nobody rings yet: the driver's unmap
    // would wait for it (cuCtxSynchronize).
    let stream = dev.create_stream().unwrap();
    let gate = dev.create_notify().unwrap();
    dev.stream_wait_notify(&stream, &gate, None).unwrap();
    let (dropped, returned) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(r);
        let _ = dropped.send(());
    });
    assert!(
        returned
            .recv_timeout(std::time::Duration::from_secs(30))
            .is_ok(),
        "dropping a residency waited for queued work"
    );
    let mut home = [0u8; 6];
    a.read(0, &mut home).unwrap();
    assert_eq!(&home, b"device", "its chunks were written back first");
    gate.signal().unwrap();
    dev.synchronize(&stream, Some(std::time::Duration::from_secs(30)))
        .unwrap();
}
