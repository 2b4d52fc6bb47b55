//! The fork rule on hal-cuda over the stand-in `libcuda.so.1` (or the
//! NVIDIA driver in the GPU smoke run): CUDA contexts do not survive
//! `fork`, so a child is refused its parent's backend, device and objects
//! with `Error::Forked` before any driver call, and drops them without
//! calling the driver; a backend the parent made but never opened (it
//! loaded no driver) works in the child. The two tests fork one at a time,
//! with no hal work of the other running.

use std::sync::Mutex;

mod common;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn parents_objects_are_refused_in_a_child() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    hal_tests::fork::parents_objects_are_refused_in_a_child(common::backend, true, false);
}

#[test]
fn a_backend_never_opened_before_the_fork_works_in_the_child() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    hal_tests::fork::unopened_backend_works_in_a_child(common::backend);
}
