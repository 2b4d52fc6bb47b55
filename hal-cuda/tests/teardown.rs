//! A reservation dropped while the context's queued work waits for a
//! notify is unmapped and freed once that work has run, on the driver the
//! tests run on (the stand-in, or the NVIDIA driver in the GPU smoke run).
//! The only test of its binary: it counts the teardowns this process has
//! left to finish.

use hal_core::Backend;

mod common;

#[test]
fn a_dropped_reservation_is_freed_once_the_work_has_run() {
    hal_tests::cases::dropped_reservation_is_freed_after_the_work(
        &common::backend().open(0).unwrap(),
    );
}
