//! The conformance suite on hal-ascend over the stand-in `libascendcl.so`
//! (`hal-mock-libascendcl`): every case runs against the backend's real
//! code paths, VMM and the growable buffer included, answering
//! `Unsupported` where a capability is not claimed (pinned host memory,
//! managed memory, host NUMA VMM, IPC event queries).
//!
//! With `HAL_ASCEND_CONFORMANCE_DRIVER=1` the same cases run on the CANN
//! runtime the backend finds (`HAL_ASCEND_LIBRARY`, then the search), and
//! fail where it is unavailable.

/// The backend of the suite: on the stand-in, or on the CANN runtime in
/// driver mode.
fn backend() -> hal_ascend::AscendBackend {
    if hal_tests::driver::driver_mode(hal_tests::driver::ASCEND_DRIVER_VAR) {
        hal_ascend::AscendBackend::new()
    } else {
        hal_ascend::AscendBackend::with_library(hal_mock_libascendcl::built_library())
    }
}

hal_tests::conformance_suite!(ascend_standin, crate::backend());

/// Pointed at a runtime that does not exist, the suite in driver mode fails
/// every case: a run whose runtime did not load cannot pass.
#[test]
fn driver_mode_without_a_runtime_fails_every_case() {
    hal_tests::driver::assert_suite_fails_without_driver(
        "ascend_standin",
        ascend_standin::CASES,
        &[
            (hal_tests::driver::ASCEND_DRIVER_VAR, "1"),
            (hal_ascend::LIBRARY_VAR, "/nonexistent/libascendcl.so"),
        ],
    );
}

#[test]
fn zz_after_suite_no_shm_entries_left() {
    hal_tests::assert_no_shm_left(ascend_standin::CASES);
}
