//! The bare driver calls that `halctl bench --backend cuda` measures hal
//! against: they do what they name, on the stand-in driver.

use hal_core::{Vmm, VmmExt};
use std::os::fd::AsFd;

use hal_core::Backend;

mod common;

/// The variable that makes this executable the child of
/// `a_bare_allocation_is_freed_by_its_free_and_by_its_drop`.
const CHILD_VAR: &str = "HAL_CUDA_BASELINE_TEST_CHILD";

#[test]
fn a_bare_allocation_of_nothing_is_refused() {
    let dev = common::backend().open(0).unwrap();
    assert!(matches!(
        dev.bare_alloc(0),
        Err(hal_core::Error::InvalidArgument { .. })
    ));
}

#[test]
fn a_bare_allocation_is_freed_by_its_free_and_by_its_drop() {
    if common::on_driver() {
        // It fills the device: the stand-in's, not a GPU someone shares.
        hal_core::testing::not_run("it fills the device, and runs on the stand-in driver only");
        return;
    }
    common::child_passes(
        "child_fills_the_device_with_bare_allocations",
        "the child that fills the device with bare allocations",
        &[(CHILD_VAR, "1")],
    );
}

/// The child of `a_bare_allocation_is_freed_by_its_free_and_by_its_drop`:
/// two of its allocations do not fit on the device at once, so each comes
/// only if the one before was freed.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_fills_the_device_with_bare_allocations() {
    if std::env::var_os(CHILD_VAR).is_none() {
        panic!("a child entry point: run by its parent, which sets its variables");
    }
    let dev = common::backend().open(0).unwrap();
    let big = hal_core::Device::info(&dev).total_memory * 3 / 4;
    let first = dev.bare_alloc(big).unwrap();
    assert!(dev.bare_alloc(big).is_err(), "the device is full");
    first.free().unwrap();
    let second = dev.bare_alloc(big).unwrap();
    assert!(format!("{second:?}").contains("BareAlloc"));
    drop(second);
    let third = dev.bare_alloc(big).unwrap();
    third.free().unwrap();
    println!("child done");
}

/// The variable that hands the child of
/// `a_bare_open_in_another_process_gives_the_allocations_base` the raw
/// handle, in hex.
const RAW_VAR: &str = "HAL_CUDA_BASELINE_TEST_RAW";

#[test]
fn a_bare_open_in_another_process_gives_the_allocations_base() {
    let dev = common::backend().open(0).unwrap();
    let a = hal_core::Device::allocate(&dev, &hal_core::AllocDesc::device(0, 1 << 20)).unwrap();
    let raw = dev.export_raw(&a, None).unwrap();
    let hex: String = raw.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
    common::child_passes(
        "child_opens_bare",
        "the child that opens the raw handle bare",
        &[(RAW_VAR, &hex)],
    );
}

/// The child of `a_bare_open_in_another_process_gives_the_allocations_base`.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_opens_bare() {
    let Ok(hex) = std::env::var(RAW_VAR) else {
        panic!("a child entry point: run by its parent, which sets its variables");
    };
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let raw = hal_cuda::RawIpcHandle::from_bytes(&bytes).unwrap();
    let dev = common::backend().open(0).unwrap();
    let open = dev.bare_ipc_open(&raw).unwrap();
    let base = open.base();
    assert!(base != 0 && base % 256 == 0, "a device address: {base:#x}");
    assert!(format!("{open:?}").contains(&format!("{base:#x}")));
    drop(open);
    println!("child done");
}

#[test]
fn a_bare_vmm_import_maps_the_whole_allocation() {
    if common::on_driver() {
        hal_core::testing::not_run("it runs on the stand-in driver only");
        return;
    }
    common::child_passes(
        "child_imports_bare",
        "the child that imports physical memory bare",
        &[(CHILD_VAR, "vmm")],
    );
}

/// The child of `a_bare_vmm_import_maps_the_whole_allocation`:
/// the physical memory fills most of the device and comes again only after
/// both the bare import and the allocation went: as on the driver, the
/// import's handle and its mapping hold the memory, so a bare import whose
/// drop forgot to unmap or release leaves the device full.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_imports_bare() {
    use hal_core::{Device, ExportOptions, Granularity};
    if std::env::var(CHILD_VAR).as_deref() != Ok("vmm") {
        panic!("a child entry point: run by its parent, which sets its variables");
    }
    let dev = common::backend().open(0).unwrap();
    let g = dev.granularity(Granularity::Minimum).unwrap();
    let big = dev.info().total_memory * 3 / 4 / g * g;
    let p = dev.allocate_physical(big).unwrap();
    let ex = dev.export_physical(&p, &ExportOptions::default()).unwrap();
    let shared = ex.share().unwrap();
    let bare = dev.bare_vmm_import(shared.fds[0].as_fd(), big).unwrap();
    let base = bare.base();
    assert!(base != 0 && base % g == 0, "a mapped range: {base:#x}");
    let shown = format!("{bare:?}");
    assert!(
        shown.contains(&format!("{base:#x}")) && shown.contains(&big.to_string()),
        "{shown}"
    );
    drop(bare);
    drop((shared, ex, p));
    assert!(
        dev.allocate_physical(big).is_ok(),
        "released with the bare import"
    );
    println!("child done");
}
