//! A reservation dropped while the device's queued work waits for a notify
//! is unmapped and released once that work has run, on the stand-in
//! runtime, and physical memory asked for meanwhile waits for what it
//! releases. The first counts the teardowns this process has left to
//! finish, so the other runs in a child.

use hal_core::Backend;
use hal_core::DeviceExt;
use hal_core::{Vmm, VmmExt};

mod common;

#[test]
fn a_dropped_reservation_is_released_once_the_work_has_run() {
    hal_tests::cases::dropped_reservation_is_freed_after_the_work(
        &common::backend().open(0).unwrap(),
    );
}

/// In a child of its own (the parent's test counts teardowns): physical
/// memory asked for while a dropped reservation still holds what it needs
/// comes once the teardown released that.
fn physical_behind_a_pending_unmap() {
    use hal_core::{Access, Device, Granularity, Notify, WaitOptions};
    let dev = common::backend().open(0).unwrap();
    let g = dev.granularity(Granularity::Minimum).unwrap();
    // Two of these do not fit on the device at once.
    let big = dev.info().total_memory * 3 / 4 / g * g;
    let physical = dev.allocate_physical(big).unwrap();
    let reservation = dev.reserve(big, g).unwrap();
    dev.map(&reservation, 0, &physical).unwrap();
    dev.set_access(&reservation, 0, big, Access::ReadWrite)
        .unwrap();
    // The mapping holds the memory now.
    drop(physical);
    let stream = dev.create_stream().unwrap();
    let gate = dev.create_notify().unwrap();
    let done = dev.create_notify().unwrap();
    dev.stream_wait_notify(&stream, &gate, None).unwrap();
    dev.record_notify(&stream, &done).unwrap();
    drop(reservation);
    assert_eq!(
        hal_core::kit::stream::teardown::unfinished(),
        1,
        "the unmap waits"
    );
    let opener = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        gate.signal().unwrap();
    });
    let again = dev.allocate_physical(big);
    opener.join().unwrap();
    assert!(again.is_ok(), "{again:?}");
    done.wait(WaitOptions::timeout(std::time::Duration::from_secs(30)))
        .unwrap();
}

#[test]
fn physical_memory_waits_for_what_a_pending_teardown_releases() {
    common::alone_in_a_child(
        "physical_memory_waits_for_what_a_pending_teardown_releases",
        physical_behind_a_pending_unmap,
    );
}
