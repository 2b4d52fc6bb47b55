//! The bare driver calls that `halctl bench --backend cuda` measures hal
//! against: they do what they name, on the stand-in driver.

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
fn child_fills_the_device_with_bare_allocations() {
    if std::env::var_os(CHILD_VAR).is_none() {
        return;
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
