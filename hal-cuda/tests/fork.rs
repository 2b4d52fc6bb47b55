//! The fork rule on hal-cuda over the stand-in `libcuda.so.1` (or the
//! NVIDIA driver in the GPU smoke run): CUDA contexts do not survive
//! `fork`, so a child is refused its parent's backend, device and objects
//! with `Error::Forked` before any driver call, and drops them without
//! calling the driver; a backend the parent made but never opened (it
//! loaded no driver) works in the child, checked in a process of its own,
//! which has not loaded the driver.

mod common;

#[test]
fn parents_objects_are_refused_in_a_child() {
    hal_tests::fork::parents_objects_are_refused_in_a_child(common::backend, true, false);
}

/// In a process of its own: this binary's other tests load the driver,
/// and a process that loaded it before forking is not the case checked.
#[test]
fn a_backend_never_opened_before_the_fork_works_in_the_child() {
    hal_tests::process::child_passes(
        "child_forks_before_opening",
        "the child that forks before opening its backend",
        &[],
    );
}

#[test]
#[ignore = "child entry point: run by its parent"]
fn child_forks_before_opening() {
    hal_tests::fork::unopened_backend_works_in_a_child(common::backend);
    println!("child done");
}
