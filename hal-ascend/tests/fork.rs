//! The fork rule on hal-ascend over the stand-in `libascendcl.so` (or the
//! CANN runtime in driver mode): the runtime's contexts do not survive
//! `fork`, so a child is refused its parent's backend, device and objects
//! with `Error::Forked` before any runtime call; a backend the parent made
//! but never opened (it loaded no runtime) works in the child. The check
//! of a backend never opened runs in a process of its own, which has not
//! loaded the driver.

fn backend() -> hal_ascend::AscendBackend {
    if hal_tests::driver::driver_mode(hal_tests::driver::ASCEND_DRIVER_VAR) {
        hal_ascend::AscendBackend::new()
    } else {
        hal_ascend::AscendBackend::with_library(hal_mock_libascendcl::built_library())
    }
}

#[test]
fn parents_objects_are_refused_in_a_child() {
    hal_tests::fork::parents_objects_are_refused_in_a_child(backend, true, false);
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
    hal_tests::fork::unopened_backend_works_in_a_child(backend);
    println!("child done");
}
