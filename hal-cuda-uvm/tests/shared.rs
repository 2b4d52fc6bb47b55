//! Shared managed buffers between real processes, over hal-cuda on the
//! stand-in driver and over the simulator's CUDA-like profile: each process
//! writes through its GPU and reads the other's writes, a second open in a
//! process costs a lookup, a read-only import is refused writes, and a
//! process killed while it holds the buffer releases its lease.

use hal_core::DeviceExt;
use std::process::Stdio;

mod child;
use std::time::Duration;

use hal_core::{
    AllocDesc, Allocation, Backend, Device, ExportOptions, ImportOptions, Importers, Location,
    MemRef, Memory, SharedHandle,
};
use hal_cuda_uvm::{registration, GpuDevice, UvmBackend, UvmDevice, UvmMapping};

const PAGE: u64 = 4096;
const HANDLE_VAR: &str = "HAL_UVM_TEST_HANDLE";
const ROLE_VAR: &str = "HAL_UVM_TEST_ROLE";

fn pattern(seed: u8, len: u64) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

/// Write `data` at `offset` of `mem` through the GPU: into device memory
/// first, then a device-to-shared copy on a stream.
fn gpu_write<D: Device>(dev: &D, mem: MemRef<'_, D>, offset: u64, data: &[u8]) {
    let len = data.len() as u64;
    let scratch = dev
        .allocate(&AllocDesc::device(dev.info().ordinal, len))
        .unwrap();
    let stream = dev.create_stream().unwrap();
    dev.write_async(&stream, MemRef::Allocation(&scratch), 0, data.to_vec())
        .unwrap();
    dev.copy_async(&stream, mem, offset, MemRef::Allocation(&scratch), 0, len)
        .unwrap();
    dev.synchronize(&stream, Some(Duration::from_secs(30)))
        .unwrap();
}

/// Read `len` bytes at `offset` of `mem` through the GPU: a shared-to-device
/// copy on a stream, then the device memory read back.
fn gpu_read<D: Device>(dev: &D, mem: MemRef<'_, D>, offset: u64, len: u64) -> Vec<u8> {
    let scratch = dev
        .allocate(&AllocDesc::device(dev.info().ordinal, len))
        .unwrap();
    let stream = dev.create_stream().unwrap();
    dev.memset_async(&stream, MemRef::Allocation(&scratch), 0, len, 0)
        .unwrap();
    dev.copy_async(&stream, MemRef::Allocation(&scratch), 0, mem, offset, len)
        .unwrap();
    dev.synchronize(&stream, Some(Duration::from_secs(30)))
        .unwrap();
    let mut out = vec![0u8; len as usize];
    scratch.read(0, &mut out).unwrap();
    out
}

/// Run the child entry point of `test` (`{test}_child`) as `role`.
fn run_child(test: &str, role: &str, handle: &str) -> std::process::Output {
    child::command(&format!("{test}_child"))
        .env(ROLE_VAR, role)
        .env(HANDLE_VAR, handle)
        .output()
        .unwrap()
}

/// What a child entry point checks first: that its parent runs it.
fn expect_child() {
    assert!(
        child_role().is_some(),
        "a child entry point: run by its parent, with {ROLE_VAR} and {HANDLE_VAR}"
    );
}

fn child_role() -> Option<(String, String)> {
    Some((
        std::env::var(ROLE_VAR).ok()?,
        std::env::var(HANDLE_VAR).ok()?,
    ))
}

fn import<D: Device>(dev: &D, text: &str) -> D::Mapping {
    let handle = hal_core::Handle::from_text(text).unwrap();
    dev.import_memory(SharedHandle::from(handle), &ImportOptions::default())
        .unwrap()
}

/// The exporter's half: the first half written through its GPU, the child
/// reads it through its own and writes the second half, which comes back.
fn both_ways<B>(backend: B, test: &str)
where
    B: Backend<Device = UvmDevice<<B as UvmGpu>::Gpu>> + UvmGpu,
    <B as UvmGpu>::Gpu: GpuDevice,
{
    let dev = backend.open(0).unwrap();
    if let Some((role, text)) = child_role() {
        assert_eq!(role, "both-ways");
        let m = import(&dev, &text);
        let view = m.shared().expect("a shared managed buffer");
        let addr = view
            .device_addr()
            .expect("registered with this process's GPU");
        assert!(registration::holds(dev.info().uuid, addr, m.len()));
        let first = gpu_read(&dev, MemRef::Mapping(&m), 0, 2 * PAGE);
        assert_eq!(first, pattern(1, 2 * PAGE), "the exporter's GPU write");
        gpu_write(&dev, MemRef::Mapping(&m), 2 * PAGE, &pattern(2, 2 * PAGE));
        m.write(4 * PAGE - 5, b"child").unwrap();
        println!("child done");
        return;
    }
    let a = dev.allocate(&AllocDesc::managed(4 * PAGE)).unwrap();
    assert_eq!(a.location(), Location::Managed);
    assert!(a.shared().unwrap().device_addr().is_some());
    gpu_write(&dev, MemRef::Allocation(&a), 0, &pattern(1, 2 * PAGE));
    let ex = dev
        .export_memory(
            &a,
            &ExportOptions {
                importers: Importers::Anyone,
                ..ExportOptions::default()
            },
        )
        .unwrap();
    assert_eq!(ex.handle().backend, hal_core::BackendId::CudaUvm);
    assert_eq!(ex.handle().device_uuid, dev.info().uuid);
    let out = run_child(test, "both-ways", &ex.to_text());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("child done"),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut second = gpu_read(&dev, MemRef::Allocation(&a), 2 * PAGE, 2 * PAGE);
    assert_eq!(
        &second[2 * PAGE as usize - 5..],
        b"child",
        "the child's CPU write"
    );
    second.truncate(2 * PAGE as usize - 5);
    assert_eq!(second, pattern(2, 2 * PAGE - 5), "the child's GPU write");
    assert_eq!(a.importers().unwrap(), 0, "the child's lease went with it");
}

/// The GPU device type under a [`UvmBackend`].
trait UvmGpu {
    type Gpu: Device;
}

impl<B: Backend> UvmGpu for UvmBackend<B> {
    type Gpu = B::Device;
}

/// A second import in a process shares the first one's registration (a
/// second registration of the same pages would be refused by the driver);
/// the last drop unregisters.
fn second_open_is_a_lookup<B>(backend: B)
where
    B: Backend<Device = UvmDevice<<B as UvmGpu>::Gpu>> + UvmGpu,
    <B as UvmGpu>::Gpu: GpuDevice,
{
    let dev = backend.open(0).unwrap();
    let a = dev.allocate(&AllocDesc::host(2 * PAGE)).unwrap();
    let ex = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let one = import(&dev, &ex.to_text());
    let two = dev
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let (UvmMapping::Shared(v1), UvmMapping::Shared(v2)) = (&one, &two) else {
        panic!("shared managed buffers")
    };
    assert!(v1.same_registration(v2), "one registration per region");
    let b = dev.allocate(&AllocDesc::host(2 * PAGE)).unwrap();
    let bx = dev.export_memory(&b, &ExportOptions::default()).unwrap();
    let other = import(&dev, &bx.to_text());
    let UvmMapping::Shared(v3) = &other else {
        panic!("a shared managed buffer")
    };
    assert!(
        !v1.same_registration(v3),
        "another region, another registration"
    );
    drop((other, bx, b));
    let addr = v1.device_addr().unwrap();
    assert!(registration::holds(dev.info().uuid, addr, 2 * PAGE));
    drop(one);
    assert!(
        registration::holds(dev.info().uuid, addr, 2 * PAGE),
        "still used"
    );
    drop(two);
    assert!(
        !registration::holds(dev.info().uuid, addr, 2 * PAGE),
        "unregistered at the last drop"
    );
    // The exporter's own pages keep their registration.
    let own = a.shared().unwrap().device_addr().unwrap();
    assert!(registration::holds(dev.info().uuid, own, 2 * PAGE));
    drop(ex);
    drop(a);
    assert!(!registration::holds(dev.info().uuid, own, 2 * PAGE));
}

/// A stream copy between registered home pages and device memory is the
/// GPU's own copy through the registration, never a host step (only the
/// host reaches unregistered pages), and a buffer is never read-only to
/// its creator. In a child of its own: the driver's calls are the
/// process's.
#[test]
fn standin_registered_pages_are_copied_by_the_gpu() {
    const TEST: &str = "standin_registered_pages_are_copied_by_the_gpu";
    let out = run_child(TEST, "gpu-copies", "-");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("@gpu copies"),
        "child failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "child entry point: run by its parent"]
fn standin_registered_pages_are_copied_by_the_gpu_child() {
    expect_child();
    gpu_copies();
}

fn gpu_copies() {
    let backend = standin();
    let dev = backend.open(0).unwrap();
    let home = dev.allocate(&AllocDesc::managed(PAGE)).unwrap();
    let device = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    assert!(!home.is_read_only() && !device.is_read_only());
    home.write(0, &pattern(9, PAGE)).unwrap();
    let stream = dev.create_stream().unwrap();
    let to_device = (MemRef::Allocation(&device), 0, MemRef::Allocation(&home), 0);
    dev.copy_async(
        &stream,
        to_device.0,
        to_device.1,
        to_device.2,
        to_device.3,
        PAGE,
    )
    .unwrap();
    dev.copy_async(
        &stream,
        MemRef::Allocation(&home),
        PAGE / 2,
        MemRef::Allocation(&device),
        0,
        8,
    )
    .unwrap();
    // And through an import of the same pages (a view with the same
    // registration).
    let ex = dev.export_memory(&home, &ExportOptions::default()).unwrap();
    let view = import(&dev, &ex.to_text());
    dev.copy_async(
        &stream,
        MemRef::Mapping(&view),
        PAGE / 4,
        MemRef::Allocation(&device),
        8,
        8,
    )
    .unwrap();
    dev.synchronize(&stream, Some(Duration::from_secs(30)))
        .unwrap();
    let mut back = [0u8; 8];
    home.read(PAGE / 2, &mut back).unwrap();
    assert_eq!(&back[..], &pattern(9, PAGE)[..8]);
    home.read(PAGE / 4, &mut back).unwrap();
    assert_eq!(&back[..], &pattern(9, PAGE)[8..16]);
    let shown = format!("{home:?}");
    assert!(
        shown.contains("SharedManaged") && shown.contains(&format!("len: {PAGE}")),
        "{shown}"
    );
    // A host step would gate the stream on a notify and copy with the
    // synchronous calls.
    let called = backend.gpu().entry_points_called();
    assert!(called.contains(&"cuMemcpyAsync"), "{called:?}");
    for host_step in [
        "cuStreamWaitValue32_v2",
        "cuMemcpyHtoD_v2",
        "cuMemcpyDtoH_v2",
    ] {
        assert!(!called.contains(&host_step), "{host_step}: {called:?}");
    }
    println!("@gpu copies");
}

/// A read-only import is not registered (the driver registers writable
/// pages), reaches the GPU through copies, and refuses writes of every kind.
fn read_only_import<B>(backend: B)
where
    B: Backend<Device = UvmDevice<<B as UvmGpu>::Gpu>> + UvmGpu,
    <B as UvmGpu>::Gpu: GpuDevice,
{
    let dev = backend.open(0).unwrap();
    let a = dev.allocate(&AllocDesc::host(PAGE)).unwrap();
    a.write(0, &pattern(7, PAGE)).unwrap();
    let ex = dev
        .export_memory(
            &a,
            &ExportOptions {
                read_only: true,
                ..ExportOptions::default()
            },
        )
        .unwrap();
    let m = import(&dev, &ex.to_text());
    assert!(m.is_read_only());
    assert_eq!(m.shared().unwrap().device_addr(), None);
    assert_eq!(
        gpu_read(&dev, MemRef::Mapping(&m), 0, PAGE),
        pattern(7, PAGE)
    );
    assert!(m.write(0, b"x").is_err());
    let stream = dev.create_stream().unwrap();
    for r in [
        dev.memset_async(&stream, MemRef::Mapping(&m), 0, 8, 1),
        dev.write_async(&stream, MemRef::Mapping(&m), 0, vec![1; 8]),
        dev.copy_async(
            &stream,
            MemRef::Mapping(&m),
            0,
            MemRef::Allocation(&a),
            0,
            8,
        ),
    ] {
        assert!(
            matches!(r, Err(hal_core::Error::PermissionDenied { .. })),
            "{r:?}"
        );
    }
}

/// An importer killed while it holds the buffer (mapped, registered, in the
/// middle of GPU work) gives its lease back: the exporter sees no importer
/// and may free at once.
fn killed_importer<B>(backend: B, test: &str)
where
    B: Backend<Device = UvmDevice<<B as UvmGpu>::Gpu>> + UvmGpu,
    <B as UvmGpu>::Gpu: GpuDevice,
{
    let dev = backend.open(0).unwrap();
    if let Some((role, text)) = child_role() {
        assert_eq!(role, "killed");
        let m = import(&dev, &text);
        assert!(m.shared().unwrap().device_addr().is_some());
        gpu_write(&dev, MemRef::Mapping(&m), 0, b"before the kill");
        println!("child ready");
        use std::io::Write;
        std::io::stdout().flush().unwrap();
        // Killed by the parent; gone on its own if the parent went first,
        // and never after two minutes.
        let parent = std::os::unix::process::parent_id();
        let end = std::time::Instant::now() + Duration::from_secs(120);
        while std::os::unix::process::parent_id() == parent && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
        }
        std::process::exit(0);
    }
    let a = dev.allocate(&AllocDesc::managed(PAGE)).unwrap();
    let ex = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let mut child = child::command(&format!("{test}_child"))
        .env(ROLE_VAR, "killed")
        .env(HANDLE_VAR, ex.to_text())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("child ready") {
        line.clear();
        let n = std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert!(n > 0, "the child ended before it was ready");
    }
    assert_eq!(a.importers().unwrap(), 1, "the child holds a lease");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(a.importers().unwrap(), 0, "a dead importer holds nothing");
    a.wait_unleased(Some(Duration::ZERO)).unwrap();
    let mut got = [0u8; 15];
    a.read(0, &mut got).unwrap();
    assert_eq!(&got, b"before the kill");
    drop(ex);
    assert!(a.free().is_ok(), "nothing holds the buffer");
}

fn standin() -> UvmBackend {
    UvmBackend::with_library(hal_mock_libcuda::built_library())
}

fn mock() -> UvmBackend<hal_mock::MockBackend> {
    UvmBackend::over(hal_mock::MockBackend::cuda())
}

/// In a child of its own (the counts are the process's): a buffer's
/// pages are registered once, an import maps and registers them once
/// however often it is opened, and each registration ends with its last
/// user.
#[test]
fn the_process_counts_its_registrations() {
    let out = run_child("the_process_counts_its_registrations", "counts", "-");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "child failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "child entry point: run by its parent"]
fn the_process_counts_its_registrations_child() {
    expect_child();
    let dev = standin().open(0).unwrap();
    assert_eq!(
        (
            registration::live_registrations(),
            registration::registrations_made()
        ),
        (0, 0)
    );
    let a = dev.allocate(&AllocDesc::host(2 * PAGE)).unwrap();
    assert_eq!(
        (
            registration::live_registrations(),
            registration::registrations_made()
        ),
        (1, 1)
    );
    let ex = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let one = import(&dev, &ex.to_text());
    let two = import(&dev, &ex.to_text());
    assert_eq!(
        (
            registration::live_registrations(),
            registration::registrations_made()
        ),
        (2, 2),
        "the imported mapping registered once for both opens"
    );
    let UvmMapping::Shared(view) = &one else {
        panic!("a shared managed buffer")
    };
    assert!(format!("{view:?}").contains("device_addr"), "{view:?}");
    drop((one, two));
    assert_eq!(registration::live_registrations(), 1, "the import's ended");
    drop(ex);
    drop(a);
    assert_eq!(
        (
            registration::live_registrations(),
            registration::registrations_made()
        ),
        (0, 2)
    );
}

#[test]
fn standin_both_ways() {
    both_ways(standin(), "standin_both_ways");
}

#[test]
#[ignore = "child entry point: run by its parent"]
fn standin_both_ways_child() {
    expect_child();
    both_ways(standin(), "standin_both_ways");
}

#[test]
fn mock_both_ways() {
    both_ways(mock(), "mock_both_ways");
}

#[test]
#[ignore = "child entry point: run by its parent"]
fn mock_both_ways_child() {
    expect_child();
    both_ways(mock(), "mock_both_ways");
}

#[test]
fn standin_second_open_is_a_lookup() {
    second_open_is_a_lookup(standin());
}

#[test]
fn mock_second_open_is_a_lookup() {
    second_open_is_a_lookup(mock());
}

#[test]
fn standin_read_only_import() {
    read_only_import(standin());
}

#[test]
fn mock_read_only_import() {
    read_only_import(mock());
}

#[test]
fn standin_killed_importer() {
    killed_importer(standin(), "standin_killed_importer");
}

#[test]
#[ignore = "child entry point: run by its parent"]
fn standin_killed_importer_child() {
    expect_child();
    killed_importer(standin(), "standin_killed_importer");
}

#[test]
fn mock_killed_importer() {
    killed_importer(mock(), "mock_killed_importer");
}

#[test]
#[ignore = "child entry point: run by its parent"]
fn mock_killed_importer_child() {
    expect_child();
    killed_importer(mock(), "mock_killed_importer");
}

/// A process without any GPU backend maps the buffer with `open_on_cpu`,
/// reads the exporter's GPU write and writes back.
#[test]
#[ignore = "child entry point: run by its parent"]
fn a_cpu_only_process_maps_it_child() {
    expect_child();
    let (role, text) = child_role().unwrap();
    assert_eq!(role, "cpu-only");
    let handle = hal_core::Handle::from_text(&text).unwrap();
    let pages = hal_cuda_uvm::open_on_cpu(handle.into(), &ImportOptions::default()).unwrap();
    let mut got = vec![0u8; PAGE as usize];
    pages.read(0, &mut got).unwrap();
    assert_eq!(got, pattern(3, PAGE), "the exporter's GPU write");
    pages.write(PAGE, b"from a CPU-only process").unwrap();
    println!("child done");
}

#[test]
fn a_cpu_only_process_maps_it() {
    let dev = standin().open(0).unwrap();
    let a = dev.allocate(&AllocDesc::managed(2 * PAGE)).unwrap();
    gpu_write(&dev, MemRef::Allocation(&a), 0, &pattern(3, PAGE));
    let ex = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let out = run_child("a_cpu_only_process_maps_it", "cpu-only", &ex.to_text());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("child done"),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        gpu_read(&dev, MemRef::Allocation(&a), PAGE, 23),
        b"from a CPU-only process"
    );
    // Device memory is not for CPU-only processes.
    let d = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    let dx = dev.export_memory(&d, &ExportOptions::default()).unwrap();
    let e = hal_cuda_uvm::open_on_cpu(dx.share().unwrap(), &ImportOptions::default()).unwrap_err();
    assert!(matches!(e, hal_core::Error::InvalidArgument { .. }), "{e}");
}

/// Where the GPU reads pageable memory (the stand-in told so by
/// `HAL_MOCK_LIBCUDA_PAGEABLE_MEMORY_ACCESS=1`, in a child process of its own),
/// nothing is registered and the GPU reaches the pages at their host
/// address; elsewhere (the H200 measured, the stand-in's default) they are
/// registered.
#[test]
#[ignore = "child entry point: run by its parent"]
fn pageable_access_skips_registration_child() {
    const VAR: &str = hal_mock_libcuda::PAGEABLE_VAR;
    assert!(
        std::env::var_os(VAR).is_some(),
        "a child entry point: run by its parent, with {VAR}"
    );
    let dev = standin().open(0).unwrap();
    assert!(dev
        .capabilities()
        .contains(hal_core::Capabilities::PAGEABLE_MEMORY_ACCESS));
    assert_eq!(dev.strategy(), hal_cuda_uvm::Strategy::Pageable);
    let a = dev.allocate(&AllocDesc::managed(PAGE)).unwrap();
    let at = a.shared().unwrap().device_addr().unwrap();
    assert_eq!(at, a.addr(), "the host address itself");
    assert!(
        !registration::holds(dev.info().uuid, at, PAGE),
        "not registered"
    );
    gpu_write(&dev, MemRef::Allocation(&a), 0, b"pageable");
    assert_eq!(gpu_read(&dev, MemRef::Allocation(&a), 0, 8), b"pageable");
    println!("child done");
}

#[test]
fn pageable_access_skips_registration() {
    const VAR: &str = hal_mock_libcuda::PAGEABLE_VAR;
    let dev = standin().open(0).unwrap();
    assert_eq!(dev.strategy(), hal_cuda_uvm::Strategy::Registered);
    let a = dev.allocate(&AllocDesc::managed(PAGE)).unwrap();
    let at = a.shared().unwrap().device_addr().unwrap();
    assert!(registration::holds(dev.info().uuid, at, PAGE));
    child::passes(
        "pageable_access_skips_registration_child",
        "the child whose driver reads pageable memory",
        &[(VAR, "1")],
    );
}

/// Device memory of the GPU under the backend keeps that GPU's lease rule:
/// its free is refused while an importer holds it, and goes through after.
fn device_memory_is_not_freed_under_an_importer<B>(backend: B)
where
    B: Backend<Device = UvmDevice<<B as UvmGpu>::Gpu>> + UvmGpu,
    <B as UvmGpu>::Gpu: GpuDevice,
{
    let dev = backend.open(0).unwrap();
    let a = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    let ex = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let held = dev
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert_eq!(a.importers().unwrap(), 1);
    let a = match a.free() {
        Err(e) => {
            assert!(
                matches!(e.error, hal_core::Error::Busy { holders: 1, .. }),
                "{}",
                e.error
            );
            e.resource
        }
        Ok(()) => panic!("device memory freed under its importer"),
    };
    drop(held);
    drop(ex);
    assert!(a.free().is_ok(), "nothing holds it any more");
}

#[test]
fn mock_device_memory_is_not_freed_under_an_importer() {
    device_memory_is_not_freed_under_an_importer(mock());
}

#[test]
fn standin_device_memory_is_not_freed_under_an_importer() {
    device_memory_is_not_freed_under_an_importer(standin());
}
