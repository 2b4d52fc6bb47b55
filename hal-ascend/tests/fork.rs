//! The fork rule on hal-ascend over the stand-in `libascendcl.so` (or the
//! CANN runtime in driver mode): the runtime's contexts do not survive
//! `fork`, so a child is refused its parent's backend, device and objects
//! with `Error::Forked` before any runtime call; a backend the parent made
//! but never opened (it loaded no runtime) works in the child. The two
//! tests fork one at a time, with no hal work of the other running.

use std::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn backend() -> hal_ascend::AscendBackend {
    if hal_tests::driver::driver_mode(hal_tests::driver::ASCEND_DRIVER_VAR) {
        hal_ascend::AscendBackend::new()
    } else {
        hal_ascend::AscendBackend::with_library(hal_mock_libascendcl::built_library())
    }
}

#[test]
fn parents_objects_are_refused_in_a_child() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    hal_tests::fork::parents_objects_are_refused_in_a_child(backend, true, false);
}

#[test]
fn a_backend_never_opened_before_the_fork_works_in_the_child() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    hal_tests::fork::unopened_backend_works_in_a_child(backend);
}
