//! The conformance suite, instantiated once per backend and profile.
//!
//! Every test is named `<backend>::<case>`; `zz_after_suite_*` runs last (the
//! harness starts tests in name order) and checks that the run left nothing
//! in `/dev/shm`.

hal_tests::conformance_suite!(cpu_shm, hal_cpu_shm::CpuShm::new());
hal_tests::conformance_suite!(
    mock_cuda,
    hal_mock::MockBackend::new(hal_mock::Profile::cuda())
);
hal_tests::conformance_suite!(
    mock_ascend,
    hal_mock::MockBackend::new(hal_mock::Profile::ascend())
);

#[test]
fn zz_after_suite_no_shm_entries_left() {
    hal_tests::assert_no_shm_left(cpu_shm::CASES + mock_cuda::CASES + mock_ascend::CASES);
}
