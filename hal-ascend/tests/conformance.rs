//! The conformance suite on hal-ascend over the stand-in `libascendcl.so`
//! (`hal-mock-libascendcl`): every case runs against the backend's real
//! code paths, VMM and the growable buffer included, answering
//! `Unsupported` where a capability is not claimed (pinned host memory,
//! managed memory, host NUMA VMM, IPC event queries).

/// The stand-in runtime cargo built for this test.
fn standin() -> std::path::PathBuf {
    hal_mock_libascendcl::built_library()
}

hal_tests::conformance_suite!(
    ascend_standin,
    hal_ascend::AscendBackend::with_library(crate::standin())
);

#[test]
fn zz_after_suite_no_shm_entries_left() {
    hal_tests::assert_no_shm_left(ascend_standin::CASES);
}
