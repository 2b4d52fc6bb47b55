//! VMM on the stand-in `libcuda.so.1`: physical memory (device and host
//! NUMA) shared with a real child process (this executable run again) by
//! descriptor through the broker, importers counted with leases, and
//! unmaps that wait for the stream work queued before them.

use hal_core::DeviceExt;
use hal_core::{Vmm, VmmExt};
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use hal_core::{
    Access, AccessGrant, Backend, Capabilities, Device, ExportOptions, Granularity, ImportOptions,
    Notify, Physical, PhysicalDesc, PhysicalLocation, Reservation, SharedHandle,
};
use hal_cuda::{CudaBackend, CudaDevice, CudaPhysical, CudaReservation};

mod common;

/// The variable that hands the child the handle's text.
const HANDLE_VAR: &str = "HAL_CUDA_VMM_TEST_HANDLE";

/// The stand-in driver cargo built for this test.
fn standin() -> std::path::PathBuf {
    hal_mock_libcuda::built_library()
}

fn device() -> CudaDevice {
    CudaBackend::with_library(standin()).open(0).unwrap()
}

fn pattern(seed: u8, len: u64) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

fn gran(dev: &CudaDevice) -> u64 {
    dev.granularity(Granularity::Minimum).unwrap()
}

/// `physical` mapped whole into a new reservation, with `grants`.
fn mapped(dev: &CudaDevice, physical: &CudaPhysical, grants: &[AccessGrant]) -> CudaReservation {
    let len = physical.size();
    let r = dev.reserve(len, gran(dev)).unwrap();
    dev.map(&r, 0, physical).unwrap();
    dev.set_access_for(&r, 0, len, grants).unwrap();
    r
}

fn rw() -> Vec<AccessGrant> {
    vec![AccessGrant::device(0, Access::ReadWrite)]
}

fn host_and_device() -> Vec<AccessGrant> {
    vec![
        AccessGrant::device(0, Access::ReadWrite),
        AccessGrant::host(Access::ReadWrite),
    ]
}

#[test]
fn the_standin_device_claims_vmm_and_host_numa_vmm() {
    let dev = device();
    let caps = dev.info().capabilities;
    assert!(caps.contains(Capabilities::VMM), "{caps:?}");
    assert!(caps.contains(Capabilities::HOST_NUMA_VMM), "{caps:?}");
    assert!(caps.contains(Capabilities::GROWABLE), "{caps:?}");
    assert_eq!(gran(&dev), 2 << 20, "the driver's granularity");
    assert_eq!(dev.info().granularity_min, 2 << 20);
}

/// Export `physical`, run the child role `role` on its handle, and check
/// that the child counted as an importer while it held the memory.
fn share_with_child(dev: &CudaDevice, physical: &CudaPhysical, role: &str) {
    let ex = dev
        .export_physical(physical, &ExportOptions::default())
        .unwrap();
    let mut child = hal_core::testing::child(role)
        .env(HANDLE_VAR, ex.to_text())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let imported = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.ends_with("imported"));
    if imported {
        assert_eq!(physical.importers(), 1, "the child holds a lease");
    }
    let mut stdin = child.stdin.take().unwrap();
    let _ = writeln!(stdin, "go");
    drop(stdin);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let out = child.wait_with_output().unwrap();
    assert!(
        imported && out.status.success() && rest.iter().any(|l| l.contains("child done")),
        "child failed:\n{rest:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(physical.importers(), 0, "the child gave its lease back");
}

/// The child's side: import the handle, report, wait for the parent, then
/// run `body` on the imported allocation.
fn child_side(body: impl FnOnce(&CudaDevice, CudaPhysical)) {
    let Ok(text) = std::env::var(HANDLE_VAR) else {
        panic!("a child entry point: run by its parent, which sets its variables");
    };
    let dev = device();
    let h = hal_core::Handle::from_text(&text).unwrap();
    let p = dev
        .import_physical(SharedHandle::from(h), &ImportOptions::default())
        .unwrap();
    println!("imported");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    body(&dev, p);
    println!("child done");
}

#[test]
fn device_memory_is_shared_with_another_process() {
    let dev = device();
    let g = gran(&dev);
    let p = dev.allocate_physical(2 * g).unwrap();
    let r = mapped(&dev, &p, &rw());
    r.write(0, &pattern(1, 2 * g)).unwrap();
    share_with_child(&dev, &p, "child_maps_device_memory");
    let mut back = [0u8; 10];
    r.read(g + 3, &mut back).unwrap();
    assert_eq!(
        &back, b"from child",
        "the child's write through its mapping"
    );
}

/// The child of `device_memory_is_shared_with_another_process`.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_maps_device_memory() {
    child_side(|dev, p| {
        let g = gran(dev);
        assert_eq!(p.size(), 2 * g);
        assert_eq!(p.location(), PhysicalLocation::Device(0));
        let r = dev.reserve(2 * g, g).unwrap();
        dev.map(&r, 0, &p).unwrap();
        let mut got = vec![0u8; 2 * g as usize];
        assert!(r.read(0, &mut got).is_err(), "no access before set_access");
        dev.set_access(&r, 0, 2 * g, Access::ReadWrite).unwrap();
        r.read(0, &mut got).unwrap();
        assert_eq!(got, pattern(1, 2 * g), "the parent's bytes");
        r.write(g + 3, b"from child").unwrap();
    });
}

#[test]
fn host_numa_memory_is_shared_with_another_process() {
    let dev = device();
    let g = gran(&dev);
    let desc = PhysicalDesc::new(g).location(PhysicalLocation::HostNuma(0));
    let p = dev.allocate_physical_with(&desc).unwrap();
    assert_eq!(p.location(), PhysicalLocation::HostNuma(0));
    let r = mapped(&dev, &p, &host_and_device());
    r.write(0, &pattern(2, g)).unwrap();
    share_with_child(&dev, &p, "child_maps_host_numa_memory");
    let mut back = [0u8; 9];
    r.read(64, &mut back).unwrap();
    assert_eq!(&back, b"host numa");
}

/// The child of `host_numa_memory_is_shared_with_another_process`.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_maps_host_numa_memory() {
    child_side(|dev, p| {
        let g = gran(dev);
        assert_eq!(
            p.location(),
            PhysicalLocation::HostNuma(0),
            "the handle says where the pages live"
        );
        let r = mapped(dev, &p, &host_and_device());
        assert_eq!(
            dev.access(&r, 0, hal_core::AccessTarget::Host).unwrap(),
            Access::ReadWrite
        );
        let mut got = vec![0u8; g as usize];
        r.read(0, &mut got).unwrap();
        assert_eq!(got, pattern(2, g));
        r.write(64, b"host numa").unwrap();
    });
}

#[test]
fn host_access_is_refused_for_device_memory() {
    let dev = device();
    let g = gran(&dev);
    let p = dev.allocate_physical(g).unwrap();
    let r = dev.reserve(g, g).unwrap();
    dev.map(&r, 0, &p).unwrap();
    assert!(dev.set_access_for(&r, 0, g, &host_and_device()).is_err());
    assert_eq!(
        dev.access(&r, 0, hal_core::AccessTarget::Device(0))
            .unwrap(),
        Access::None,
        "a refused list changes nothing"
    );
}

#[test]
fn an_allocation_made_without_a_handle_type_is_not_exported() {
    let dev = device();
    let g = gran(&dev);
    let desc = PhysicalDesc::new(g).handle(hal_core::ShareableHandle::None);
    let p = dev.allocate_physical_with(&desc).unwrap();
    assert_eq!(
        hal_core::Physical::handle_type(&p),
        hal_core::ShareableHandle::None
    );
    let shown = format!("{p:?}");
    for part in [
        "CudaPhysical".to_string(),
        "handle: 0x".to_string(),
        format!("size: {g}"),
        "made_for: None".to_string(),
    ] {
        assert!(shown.contains(&part), "{shown} lacks {part}");
    }
    match dev.export_physical(&p, &ExportOptions::default()) {
        Err(hal_core::Error::Vendor(v)) => {
            assert_eq!(v.name, "CUDA_ERROR_INVALID_VALUE", "measured");
            assert!(v.message.contains("cuMemExportToShareableHandle"));
        }
        other => panic!("export of an allocation made for no handle: {other:?}"),
    }
}

#[test]
fn unmapping_waits_for_the_stream_work_queued_before_it() {
    let dev = device();
    let g = gran(&dev);
    // Two pieces, each a physical allocation mapped from its start.
    let (p, q) = (
        dev.allocate_physical(g).unwrap(),
        dev.allocate_physical(g).unwrap(),
    );
    let r = dev.reserve(2 * g, g).unwrap();
    dev.map_range(&r, 0, &p, 0, g).unwrap();
    dev.map_range(&r, g, &q, 0, g).unwrap();
    let stream = dev.create_stream().unwrap();
    let notify = dev.create_notify().unwrap();
    // Work that cannot run until the notify is signalled.
    dev.stream_wait_notify(&stream, &notify, None).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            dev.unmap(&r, 0, g).unwrap();
            tx.send("unmapped").unwrap();
            drop(r);
            tx.send("dropped").unwrap();
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "the unmap went ahead of the queued stream work"
        );
        notify.signal().unwrap();
        assert_eq!(rx.recv().unwrap(), "unmapped");
        assert_eq!(rx.recv().unwrap(), "dropped");
    });
    dev.synchronize(&stream, Some(Duration::from_secs(20)))
        .unwrap();
}

#[test]
fn an_unmap_covers_whole_mappings_only() {
    let dev = device();
    let g = gran(&dev);
    let p = dev.allocate_physical(2 * g).unwrap();
    let r = dev.reserve(2 * g, g).unwrap();
    dev.map(&r, 0, &p).unwrap();
    dev.set_access(&r, 0, g, Access::ReadWrite).unwrap();
    assert!(dev.unmap(&r, 0, g).is_err(), "half of one mapping");
    dev.unmap(&r, 0, 2 * g).unwrap();
    let mut b = [0u8; 4];
    assert!(r.read(0, &mut b).is_err(), "unmapped");
    assert!(dev.unmap(&r, 0, 2 * g).is_err(), "nothing left to unmap");
}

#[test]
fn a_reservation_of_another_device_is_refused() {
    let cuda = CudaBackend::with_library(standin());
    let n = cuda.devices().unwrap().len();
    assert!(n >= 2, "the stand-in has several devices, not {n}");
    let (d0, d1) = (cuda.open(0).unwrap(), cuda.open(1).unwrap());
    let g = gran(&d0);
    let p = d0.allocate_physical(g).unwrap();
    let r = d1.reserve(g, g).unwrap();
    assert!(matches!(
        d0.map(&r, 0, &p),
        Err(hal_core::Error::InvalidArgument { .. })
    ));
}

#[test]
fn a_failed_driver_call_keeps_its_code_and_changes_nothing() {
    common::child_passes(
        "child_with_failures",
        "the child with failures",
        &[
            (HANDLE_VAR, "failures"),
            (
                hal_mock_libcuda::FAIL_VAR,
                "cuMemMap:2,cuMemImportFromShareableHandle:1",
            ),
        ],
    );
}

/// The child of `a_failed_driver_call_keeps_its_code_and_changes_nothing`,
/// whose stand-in fails `cuMemMap` and `cuMemImportFromShareableHandle`.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_with_failures() {
    if std::env::var(HANDLE_VAR).as_deref() != Ok("failures") {
        panic!("a child entry point: run by its parent, which sets its variables");
    }
    let dev = device();
    let g = gran(&dev);
    let p = dev.allocate_physical(g).unwrap();
    let r = dev.reserve(g, g).unwrap();
    match dev.map(&r, 0, &p) {
        Err(hal_core::Error::Vendor(v)) => {
            assert_eq!((v.code, v.name.as_str()), (2, "CUDA_ERROR_OUT_OF_MEMORY"));
            assert!(v.message.contains("cuMemMap"), "{}", v.message);
        }
        other => panic!("an injected cuMemMap failure: {other:?}"),
    }
    assert!(
        dev.access(&r, 0, hal_core::AccessTarget::Device(0))
            .is_err(),
        "nothing was mapped"
    );
    assert!(dev.unmap(&r, 0, g).is_err(), "nothing to unmap");
    let ex = dev.export_physical(&p, &ExportOptions::default()).unwrap();
    match dev.import_physical(ex.share().unwrap(), &ImportOptions::default()) {
        Err(hal_core::Error::Vendor(v)) => assert_eq!(v.code, 1),
        other => panic!("an injected import failure: {other:?}"),
    }
    assert_eq!(p.importers(), 0, "the failed import gave its lease back");
    println!("child done");
}

/// True for hal's own refusal of an argument (never the driver's).
fn refused_here<T: std::fmt::Debug>(r: hal_core::Result<T>) -> bool {
    matches!(r, Err(hal_core::Error::InvalidArgument { .. }))
}

#[test]
fn sizes_alignments_and_devices_are_checked_before_the_driver_is_asked() {
    let dev = device();
    let g = gran(&dev);
    assert!(refused_here(dev.allocate_physical(g / 2)), "half a granule");
    assert!(
        refused_here(dev.reserve(g / 2, 0)),
        "a reservation of half a granule"
    );
    assert!(
        refused_here(dev.reserve(g, 3 * g)),
        "an alignment that is no power of two"
    );
    assert!(
        dev.reserve(g, 0).is_ok(),
        "alignment 0 is the driver's own choice"
    );
    let other = PhysicalDesc::new(g).location(PhysicalLocation::Device(1));
    assert!(
        refused_here(dev.allocate_physical_with(&other)),
        "device 1's memory asked of device 0"
    );
}

#[test]
fn a_physical_handle_naming_part_of_an_allocation_is_refused() {
    let dev = device();
    let p = dev.allocate_physical(gran(&dev)).unwrap();
    hal_tests::cases::partial_physical_handles_are_refused(&dev, &p);
    assert_eq!(p.importers(), 0, "nothing was imported");
}

/// The variable that names the case of `child_descriptor`.
const DESCRIPTOR_VAR: &str = "HAL_CUDA_VMM_TEST_DESCRIPTOR";

#[test]
fn the_drivers_descriptor_is_checked_and_may_be_numbered_zero() {
    common::child_passes(
        "child_descriptor",
        "a driver that gives no descriptor",
        &[
            (DESCRIPTOR_VAR, "none"),
            (hal_mock_libcuda::FAIL_VAR, "cuMemExportToShareableHandle:0"),
        ],
    );
    common::child_passes(
        "child_descriptor",
        "descriptor 0",
        &[(DESCRIPTOR_VAR, "zero")],
    );
}

/// The child of `the_drivers_descriptor_is_checked_and_may_be_numbered_zero`:
/// "none", whose stand-in answers `cuMemExportToShareableHandle` with
/// success and writes no descriptor (code 0 injected); "zero", whose
/// standard input is closed, so the driver's descriptor is numbered 0.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_descriptor() {
    let Ok(case) = std::env::var(DESCRIPTOR_VAR) else {
        panic!("a child entry point: run by its parent, which sets its variables");
    };
    let dev = device();
    let g = gran(&dev);
    let p = dev.allocate_physical(g).unwrap();
    match case.as_str() {
        "none" => match dev.export_physical(&p, &ExportOptions::default()) {
            Err(e @ hal_core::Error::InvalidArgument { .. }) => {
                assert!(e.to_string().contains("without a descriptor"), "{e}");
            }
            other => panic!("an export the driver gave no descriptor for: {other:?}"),
        },
        _ => {
            // SAFETY: descriptor 0 is this child's standard input, which
            // nothing in this process reads or closes.
            drop(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(0) });
            let ex = dev
                .export_physical(&p, &ExportOptions::default())
                .expect("a descriptor numbered 0 is a descriptor");
            let back = dev
                .import_physical(ex.share().unwrap(), &ImportOptions::default())
                .unwrap();
            assert_eq!(back.size(), g);
        }
    }
    println!("child done");
}

/// The variable that names the case of `child_without_attribute`.
const LACKS_VAR: &str = "HAL_CUDA_VMM_TEST_LACKS";

#[test]
fn what_the_device_says_it_lacks_is_never_asked_of_the_driver() {
    // CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, and host NUMA VMM;
    // IMEX, so that the stand-in would make fabric memory if asked.
    let host_numa = format!(
        "{}:0",
        hal_core::kit::vendor::cuda::ATTRIBUTE_HOST_NUMA_VMM_SUPPORTED
    );
    for (case, attributes) in [("fabric", "128:0"), ("host-numa", host_numa.as_str())] {
        common::child_passes(
            "child_without_attribute",
            case,
            &[
                (LACKS_VAR, case),
                (hal_mock_libcuda::ATTRIBUTES_VAR, attributes),
                (hal_mock_libcuda::IMEX_VAR, "1"),
            ],
        );
    }
}

/// The child of `what_the_device_says_it_lacks_is_never_asked_of_the_driver`,
/// whose device answers 0 for fabric handles ("fabric") or for host NUMA
/// VMM ("host-numa"), while the stand-in would still make either.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_without_attribute() {
    let Ok(case) = std::env::var(LACKS_VAR) else {
        panic!("a child entry point: run by its parent, which sets its variables");
    };
    let dev = device();
    let g = gran(&dev);
    if case == "fabric" {
        let fabric = PhysicalDesc::new(g).handle(hal_core::ShareableHandle::Fabric);
        let p = dev.allocate_physical_with(&fabric).unwrap();
        assert_eq!(
            p.handle_type(),
            hal_core::ShareableHandle::PosixFd,
            "no fabric handle on a device without them: the POSIX fallback"
        );
    } else {
        assert!(!dev
            .info()
            .capabilities
            .contains(Capabilities::HOST_NUMA_VMM));
        let numa = PhysicalDesc::new(g).location(PhysicalLocation::HostNuma(0));
        match dev.allocate_physical_with(&numa) {
            Err(e @ hal_core::Error::Unsupported { .. }) => {
                let said = "Capabilities::HOST_NUMA_VMM is absent: the device answers \
                            CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 0";
                assert!(e.to_string().contains(said), "{e}");
            }
            other => panic!("host NUMA memory on a device without it: {other:?}"),
        }
    }
    println!("child done");
}

#[test]
fn copies_through_a_reservation_need_this_devices_access() {
    let dev = device();
    let g = gran(&dev);
    let p = dev.allocate_physical(2 * g).unwrap();
    let r = dev.reserve(3 * g, g).unwrap();
    dev.map(&r, 0, &p).unwrap();
    let denied = |what: &str, got: hal_core::Result<()>| match got {
        Err(hal_core::Error::PermissionDenied { reason, .. }) => {
            assert!(reason.contains("set_access"), "{what}: {reason}")
        }
        other => panic!("{what}: {other:?}"),
    };
    // Mapped, no access yet: refused before the driver is asked.
    denied("a write with no access", r.write(0, b"x"));
    denied("a read with no access", r.read(0, &mut [0u8; 1]));
    dev.set_access_for(&r, 0, 2 * g, &[AccessGrant::device(0, Access::Read)])
        .unwrap();
    denied("a write with read access", r.write(g, b"x"));
    r.read(g, &mut [0u8; 1]).unwrap();
    // Past the mapping: nothing there to copy.
    assert!(r.read(2 * g, &mut [0u8; 1]).is_err(), "an unmapped byte");
    let shown = format!("{r:?}");
    for part in [
        "CudaReservation".to_string(),
        format!("base: {:#x}", r.base()),
        format!("len: {}", 3 * g),
        "mapped: 1".to_string(),
    ] {
        assert!(shown.contains(&part), "{shown} lacks {part}");
    }
}

#[test]
fn a_strict_unmap_whose_wait_failed_unmaps_nothing_and_the_drop_still_does() {
    common::child_passes(
        "child_whose_synchronize_fails",
        "the child whose cuCtxSynchronize fails",
        &[
            (HANDLE_VAR, "sync-fails"),
            (hal_mock_libcuda::FAIL_VAR, "cuCtxSynchronize:999"),
        ],
    );
}

/// The child of
/// `a_strict_unmap_whose_wait_failed_unmaps_nothing_and_the_drop_still_does`:
/// its stand-in answers CUDA_ERROR_UNKNOWN to every `cuCtxSynchronize`.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_whose_synchronize_fails() {
    if std::env::var(HANDLE_VAR).as_deref() != Ok("sync-fails") {
        panic!("a child entry point: run by its parent, which sets its variables");
    }
    hal_tests::warnings::capture();
    let dev = device();
    let g = gran(&dev);
    let p = dev.allocate_physical(g).unwrap();
    let r = mapped(&dev, &p, &rw());
    match dev.unmap(&r, 0, g) {
        Err(hal_core::Error::Vendor(v)) => {
            assert_eq!((v.code, v.name.as_str()), (999, "CUDA_ERROR_UNKNOWN"));
            assert!(v.message.contains("cuCtxSynchronize"), "{}", v.message);
        }
        other => panic!("a strict unmap whose wait failed: {other:?}"),
    }
    r.write(0, b"still mapped").unwrap();
    // The drop unmaps all the same (the failed work will not run again),
    // and says why it went on.
    drop(r);
    let said = hal_tests::warnings::containing("unmapping after the context's work failed");
    assert_eq!(said.len(), 1, "{:?}", hal_tests::warnings::all());
    assert!(said[0].contains("CUDA_ERROR_UNKNOWN"), "{}", said[0]);
    println!("child done");
}

#[test]
fn a_dropped_reservation_unmaps_every_mapping_at_its_own_address() {
    common::child_passes(
        "child_drops_two_mappings",
        "the child that drops a reservation of two mappings",
        &[(HANDLE_VAR, "two-mappings")],
    );
}

/// The child of `a_dropped_reservation_unmaps_every_mapping_at_its_own_address`:
/// the second mapping holds most of the device, which comes back, and no
/// unmap of the drop failed (each names its mapping's own address).
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_drops_two_mappings() {
    if std::env::var(HANDLE_VAR).as_deref() != Ok("two-mappings") {
        panic!("a child entry point: run by its parent, which sets its variables");
    }
    hal_tests::warnings::capture();
    let dev = device();
    let g = gran(&dev);
    let big = dev.info().total_memory * 3 / 4 / g * g;
    let small = dev.allocate_physical(g).unwrap();
    let large = dev.allocate_physical(big).unwrap();
    let r = dev.reserve(g + big, g).unwrap();
    dev.map(&r, 0, &small).unwrap();
    dev.map(&r, g, &large).unwrap();
    drop((small, large));
    drop(r);
    while hal_core::kit::stream::teardown::unfinished() != 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let again = dev.allocate_physical(big);
    assert!(
        again.is_ok(),
        "the large mapping's memory came back: {again:?}"
    );
    let said = hal_tests::warnings::all();
    assert!(
        said.is_empty(),
        "every unmap of the drop succeeded: {said:?}"
    );
    println!("child done");
}

#[test]
fn a_physical_allocation_is_mapped_from_its_start_only() {
    let dev = device();
    let g = gran(&dev);
    let p = dev.allocate_physical(2 * g).unwrap();
    let r = dev.reserve(g, g).unwrap();
    let err = dev.map_range(&r, 0, &p, g, g).unwrap_err();
    assert!(err.is_unsupported(), "{err:?}");
    assert!(err.to_string().contains("from its start"), "{err}");
    // From the start, a part of it maps.
    dev.map_range(&r, 0, &p, 0, g).unwrap();
    dev.unmap(&r, 0, g).unwrap();
}
