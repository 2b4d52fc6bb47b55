//! The CUDA-like profile answers what driver 580 on an H200 answered
//! (`vendor/cuda.md`, "Measured on an H200"). One named test per answer;
//! answers tested where their rule lives elsewhere are listed here too.
//!
//! | measured answer | test |
//! |---|---|
//! | `cuIpcOpenMemHandle_v2` in the exporting process: `CUDA_ERROR_INVALID_CONTEXT` | [`measured_open_in_the_exporting_process_is_invalid_context`] |
//! | `cuIpcGetMemHandle(base + 16 MiB)` equals the base's handle | `cuda_rules::cuda_export_names_the_base_allocation_plus_an_offset` |
//! | a second open of one handle: same pointer, reference counted | `cuda_rules::cuda_second_open_returns_the_same_mapping_refcounted` |
//! | `cuEventCreate(INTERPROCESS)` without `DISABLE_TIMING`: `CUDA_ERROR_INVALID_VALUE` | `cuda_rules::cuda_ipc_events_need_the_interprocess_flag` |
//! | `cuEventElapsedTime` on an IPC event: `CUDA_ERROR_INVALID_HANDLE` | [`measured_elapsed_time_of_an_ipc_event_is_invalid_handle`] |
//! | VMM with a fabric handle type: `CUDA_ERROR_NOT_PERMITTED` | [`measured_fabric_handle_is_not_permitted_and_falls_back`] |
//! | export of a VMM allocation made without a handle type: `CUDA_ERROR_INVALID_VALUE` | [`measured_vmm_export_without_a_handle_type_is_invalid_value`] |
//! | `cuIpcGetMemHandle` on managed memory: `CUDA_ERROR_INVALID_VALUE` | [`measured_managed_memory_handle_is_invalid_value`] |
//! | VMM with location HOST_NUMA: create, map, export, import work | [`measured_host_numa_vmm_is_shared_and_host_accessible`] |

mod common;

use common::assert_vendor;
use hal_core::{
    Access, AccessGrant, AccessTarget, AllocDesc, Backend, Device, ExportOptions, ImportOptions,
    Importers, Memory, Physical, PhysicalDesc, PhysicalLocation, Reservation, ShareableHandle,
};
use hal_core::{Vmm, VmmExt};
use hal_mock::codes::cuda;
use hal_mock::{MockBackend, MockDevice};

const PAGE: u64 = 4096;

fn open() -> (MockBackend, MockDevice) {
    let backend = MockBackend::cuda();
    let dev = backend.open(0).unwrap();
    (backend, dev)
}

fn anyone() -> ExportOptions {
    ExportOptions {
        importers: Importers::Anyone,
        ..ExportOptions::default()
    }
}

#[test]
fn measured_open_in_the_exporting_process_is_invalid_context() {
    let (_b, dev) = open();
    let a = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    a.write(0, b"own").unwrap();
    let ex = dev.export_memory(&a, &anyone()).unwrap();
    let err = dev
        .driver_open_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap_err();
    assert_vendor(&err, cuda::INVALID_CONTEXT);
    // The contract reaches the original memory instead.
    let m = dev
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert_eq!(m.addr(), a.addr(), "the original memory");
    // The Ascend notes document no refusal: the simulator opens it.
    let ascend = MockBackend::ascend();
    let adev = ascend.open(0).unwrap();
    let b = adev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    let bx = adev.export_memory(&b, &anyone()).unwrap();
    let _ = adev
        .driver_open_memory(bx.share().unwrap(), &ImportOptions::default())
        .unwrap();
}

#[test]
fn measured_elapsed_time_of_an_ipc_event_is_invalid_handle() {
    let (_b, dev) = open();
    let event = |interprocess, timing| {
        dev.create_event(hal_core::EventFlags {
            interprocess,
            timing,
        })
        .unwrap()
    };
    let ipc = event(true, false);
    let (start, end) = (event(false, true), event(false, true));
    let stream = dev.create_stream().unwrap();
    assert_vendor(
        &dev.event_elapsed(&start, &end).unwrap_err(),
        cuda::NOT_READY,
    );
    dev.record_event(&stream, &start).unwrap();
    dev.record_event(&stream, &ipc).unwrap();
    dev.record_event(&stream, &end).unwrap();
    dev.synchronize(&stream, None).unwrap();
    dev.event_elapsed(&start, &end).unwrap();
    assert_vendor(
        &dev.event_elapsed(&start, &ipc).unwrap_err(),
        cuda::INVALID_HANDLE,
    );
    let ex = dev.export_event(&ipc, &ExportOptions::default()).unwrap();
    let opened = dev
        .import_event(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert_vendor(
        &dev.event_elapsed(&opened, &end).unwrap_err(),
        cuda::INVALID_HANDLE,
    );
    assert_vendor(
        &dev.event_elapsed(&start, &event(false, false)).unwrap_err(),
        cuda::INVALID_HANDLE,
    );
}

#[test]
fn measured_fabric_handle_is_not_permitted_and_falls_back() {
    hal_tests::warnings::capture();
    let (_b, dev) = open();
    let g = dev.info().granularity_min;
    let p = dev
        .allocate_physical_with(&PhysicalDesc::new(g).handle(ShareableHandle::Fabric))
        .unwrap();
    assert_eq!(p.handle_type(), ShareableHandle::PosixFd, "the fallback");
    let lines = hal_tests::warnings::all();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("CUDA_ERROR_NOT_PERMITTED") && l.contains("POSIX")),
        "one warning names the refusal and the fallback: {lines:?}"
    );
    let _ = dev.export_physical(&p, &ExportOptions::default()).unwrap();
}

#[test]
fn measured_vmm_export_without_a_handle_type_is_invalid_value() {
    let (_b, dev) = open();
    let g = dev.info().granularity_min;
    let none = PhysicalDesc::new(g).handle(ShareableHandle::None);
    let p = dev.allocate_physical_with(&none).unwrap();
    assert_eq!(p.handle_type(), ShareableHandle::None);
    let err = dev
        .export_physical(&p, &ExportOptions::default())
        .unwrap_err();
    assert_vendor(&err, cuda::INVALID_VALUE);
    // Ascend's ACL_MEM_HANDLE_TYPE_NONE exports a key.
    let ascend = MockBackend::ascend();
    let adev = ascend.open(0).unwrap();
    let q = adev
        .allocate_physical_with(
            &PhysicalDesc::new(adev.info().granularity_min).handle(ShareableHandle::None),
        )
        .unwrap();
    let _ = adev.export_physical(&q, &anyone()).unwrap();
}

#[test]
fn measured_managed_memory_handle_is_invalid_value() {
    let (_b, dev) = open();
    let m = dev.allocate(&AllocDesc::managed(PAGE)).unwrap();
    let err = dev
        .driver_export_memory(&m, &ExportOptions::default())
        .unwrap_err();
    assert_vendor(&err, cuda::INVALID_VALUE);
    let contract = dev
        .export_memory(&m, &ExportOptions::default())
        .unwrap_err();
    assert!(contract.is_unsupported(), "{contract:?}");
    assert!(
        contract.to_string().contains("hal-cuda-uvm"),
        "the contract names where managed memory is shared: {contract}"
    );
    // Device memory exports through the same call.
    let a = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    let _ = dev
        .driver_export_memory(&a, &ExportOptions::default())
        .unwrap();
}

#[test]
fn measured_host_numa_vmm_is_shared_and_host_accessible() {
    let (_b, dev) = open();
    let g = dev.info().granularity_min;
    let used = dev.memory_used();
    let p = dev
        .allocate_physical_with(&PhysicalDesc::new(g).location(PhysicalLocation::HostNuma(0)))
        .unwrap();
    assert_eq!(dev.memory_used(), used, "host pages are not device memory");
    let r = dev.reserve(g, g).unwrap();
    dev.map(&r, 0, &p).unwrap();
    dev.set_access_for(
        &r,
        0,
        g,
        &[
            AccessGrant::device(0, Access::ReadWrite),
            AccessGrant::host(Access::ReadWrite),
        ],
    )
    .unwrap();
    assert_eq!(
        dev.access(&r, 0, AccessTarget::Host).unwrap(),
        Access::ReadWrite
    );
    r.write(0, b"numa").unwrap();
    let ex = dev.export_physical(&p, &ExportOptions::default()).unwrap();
    let q = dev
        .import_physical(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert_eq!(q.location(), PhysicalLocation::HostNuma(0));
    // Device memory cannot be made host-accessible.
    let d = dev.allocate_physical(g).unwrap();
    let r2 = dev.reserve(g, g).unwrap();
    dev.map(&r2, 0, &d).unwrap();
    let err = dev
        .set_access_for(&r2, 0, g, &[AccessGrant::host(Access::Read)])
        .unwrap_err();
    assert_vendor(&err, cuda::INVALID_VALUE);
    // No host NUMA VMM on the Ascend profile; a node that does not exist is refused.
    let ascend = MockBackend::ascend();
    let adev = ascend.open(0).unwrap();
    let numa =
        PhysicalDesc::new(adev.info().granularity_min).location(PhysicalLocation::HostNuma(0));
    assert!(adev
        .allocate_physical_with(&numa)
        .unwrap_err()
        .is_unsupported());
    let missing = PhysicalDesc::new(g).location(PhysicalLocation::HostNuma(1 << 20));
    assert_vendor(
        &dev.allocate_physical_with(&missing).unwrap_err(),
        cuda::INVALID_VALUE,
    );
}
