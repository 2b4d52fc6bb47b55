//! With `HAL_TESTS_STRICT=1` the suite of a backend that is unavailable
//! here fails every case, naming the backend and why: an integrator's
//! suite, instantiated for its own (`External`) backend, cannot pass on a
//! machine without that backend's hardware or stand-in.

use hal_core::{Availability, Backend, BackendId, DeviceInfo, Error, Result};

/// The id of the out-of-tree backend below.
const ID: BackendId = BackendId::External(0x8a1e);

/// Why it is unavailable.
const REASON: &str = "the vendor's runtime (libvendor.so.3) is not installed";

/// An integrator's backend on a machine without its runtime: it says so,
/// and every call answers `Unavailable`. Its devices would be the
/// simulator's, were it available.
struct Absent;

impl Absent {
    fn error(&self) -> Error {
        Error::Unavailable {
            backend: ID,
            reason: REASON.into(),
            searched: vec!["/opt/vendor/lib".into()],
        }
    }
}

impl Backend for Absent {
    type Device = <hal_mock::MockBackend as Backend>::Device;

    fn id(&self) -> BackendId {
        ID
    }

    fn availability(&self) -> Availability {
        Availability::Unavailable {
            reason: REASON.into(),
            searched: vec!["/opt/vendor/lib".into()],
        }
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        Err(self.error())
    }

    fn open(&self, _ordinal: u32) -> Result<Self::Device> {
        Err(self.error())
    }
}

hal_tests::conformance_suite!(@on_demand external_absent, crate::Absent);

#[test]
fn an_unavailable_external_backend_fails_every_case_in_strict_mode() {
    hal_tests::driver::assert_suite_fails_in_strict_mode(
        "external_absent",
        external_absent::CASES,
        ID,
        REASON,
    );
}

/// Outside strict mode the same cases pass, each saying that it did not
/// run and why.
#[test]
fn outside_strict_mode_each_case_says_it_did_not_run() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "external_absent::",
            hal_core::testing::INCLUDE_IGNORED,
            "--skip",
            "__child",
            "--nocapture",
            "--test-threads=4",
        ])
        .env(hal_core::testing::STRICT_VAR, "0")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    let cases = external_absent::CASES;
    assert!(
        text.contains(&format!(" {cases} passed; 0 failed;")),
        "{text}"
    );
    let note = format!(
        "{}: backend `{ID}` is unavailable here ({REASON})",
        hal_core::testing::NOT_RUN
    );
    assert_eq!(text.matches(&note).count(), cases, "{text}");
}
