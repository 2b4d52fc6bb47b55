//! What a drop hands to a teardown worker while the context's queued work
//! waits for a notify is released once that work has run, on the driver
//! the tests run on (the stand-in, or the NVIDIA driver in the GPU smoke
//! run): a mapped reservation (unmapped after `cuCtxSynchronize`), and
//! device memory (`cuMemFree_v2`, which may synchronize). Each check counts
//! the teardowns its process has left to finish, so each runs alone in a
//! process: the reservation's in this one (the only test here that counts),
//! the memory's in a child.

use std::io::Write;

use hal_core::Backend;

mod common;

/// The variable that makes this executable the child of
/// `a_dropped_allocation_is_freed_once_the_work_has_run`.
const CHILD_VAR: &str = "HAL_CUDA_TEARDOWN_TEST_CHILD";

#[test]
fn a_dropped_reservation_is_freed_once_the_work_has_run() {
    hal_tests::cases::dropped_reservation_is_freed_after_the_work(
        &common::backend().open(0).unwrap(),
    );
}

#[test]
fn a_dropped_allocation_is_freed_once_the_work_has_run() {
    // On the stand-in, a free that waits for the device (as the driver API
    // says `cuMemFree_v2` may): the drop must return all the same. On the
    // real driver, the driver's own free, whichever it does.
    let env: &[(&str, &str)] = if common::on_driver() {
        &[(CHILD_VAR, "1")]
    } else {
        &[(CHILD_VAR, "1"), (hal_mock_libcuda::FREE_SYNCS_VAR, "1")]
    };
    let out = common::child_passes(
        "child_drops_memory_behind_queued_work",
        "the child that drops memory behind queued work",
        env,
    );
    let waited = out.contains("the free waited: true");
    if common::on_driver() {
        // What the NVIDIA driver did, in the smoke run's log (written past
        // the test harness's capture).
        let _ = writeln!(
            std::io::stderr(),
            "cuMemFree_v2 waited for queued work on this driver: {waited}"
        );
    } else {
        assert!(waited, "the stand-in's free waits for the device:\n{out}");
    }
}

/// The child of `a_dropped_allocation_is_freed_once_the_work_has_run`.
#[test]
fn child_drops_memory_behind_queued_work() {
    if std::env::var_os(CHILD_VAR).is_none() {
        return;
    }
    let waited = hal_tests::cases::dropped_allocation_is_freed_after_the_work(
        &common::backend().open(0).unwrap(),
    );
    println!("the free waited: {waited}");
    println!("child done");
}
