//! What a drop hands to a teardown worker while the context's queued work
//! waits for a notify is released once that work has run, on the driver
//! the tests run on (the stand-in, or the NVIDIA driver in the GPU smoke
//! run): a mapped reservation (unmapped after `cuCtxSynchronize`), and
//! device memory (`cuMemFree_v2`, which may synchronize), and an allocation
//! that needs the memory such a free gives back waits for it. Each check
//! counts the teardowns its process has left to finish, so each runs alone
//! in a process: the reservation's in this one (the only test here that
//! counts), the memory's in children.

use hal_core::DeviceExt;
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
#[ignore = "child entry point: run by its parent"]
fn child_drops_memory_behind_queued_work() {
    if std::env::var_os(CHILD_VAR).is_none() {
        panic!("a child entry point: run by its parent, which sets its variables");
    }
    let waited = hal_tests::cases::dropped_allocation_is_freed_after_the_work(
        &common::backend().open(0).unwrap(),
    );
    println!("the free waited: {waited}");
    println!("child done");
}

#[test]
fn an_allocation_waits_for_the_memory_a_pending_free_gives_back() {
    if common::on_driver() {
        // It fills the device: the stand-in's, not a GPU someone shares.
        hal_core::testing::not_run("it fills the device, and runs on the stand-in driver only");
        return;
    }
    common::child_passes(
        "child_allocates_behind_a_pending_free",
        "the child that allocates what a pending free gives back",
        &[(CHILD_VAR, "1"), (hal_mock_libcuda::FREE_SYNCS_VAR, "1")],
    );
}

/// The child of `an_allocation_waits_for_the_memory_a_pending_free_gives_back`:
/// its stand-in's free waits for the device.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_allocates_behind_a_pending_free() {
    use hal_core::{AllocDesc, Device, Notify};
    if std::env::var_os(CHILD_VAR).is_none() {
        panic!("a child entry point: run by its parent, which sets its variables");
    }
    let dev = common::backend().open(0).unwrap();
    // Two of these do not fit on the device at once.
    let big = dev.info().total_memory * 3 / 4;
    let first = dev.allocate(&AllocDesc::device(0, big)).unwrap();
    let stream = dev.create_stream().unwrap();
    let gate = dev.create_notify().unwrap();
    let done = dev.create_notify().unwrap();
    dev.stream_wait_notify(&stream, &gate, None).unwrap();
    dev.record_notify(&stream, &done).unwrap();
    drop(first);
    assert_eq!(
        hal_core::kit::stream::teardown::unfinished(),
        1,
        "the free waits"
    );
    let opener = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        gate.signal().unwrap();
    });
    // Refused at first (the memory is still taken), then given once the
    // free ran.
    let second = dev.allocate(&AllocDesc::device(0, big));
    opener.join().unwrap();
    assert!(second.is_ok(), "{second:?}");
    assert_eq!(hal_core::kit::stream::teardown::unfinished(), 0);
    done.wait(hal_core::WaitOptions::timeout(
        std::time::Duration::from_secs(30),
    ))
    .unwrap();
    println!("child done");
}
