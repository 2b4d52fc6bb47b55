//! Driver mode: a suite pointed at a vendor's real driver.
//!
//! The suites of hal-cuda and hal-cuda-uvm run on the NVIDIA driver with
//! `HAL_CUDA_CONFORMANCE_DRIVER=1` (what the GPU smoke run sets), and
//! hal-ascend's on the CANN runtime with `HAL_ASCEND_CONFORMANCE_DRIVER=1`.
//! Without the variable a backend that is unavailable here checks that it
//! says so and its case says it did not run (a failure with
//! `HAL_TESTS_STRICT=1`, whatever the vendor: [`strict_unavailable`]); in
//! driver mode the run is for the driver,
//! so a backend of that vendor that is unavailable fails every case, naming
//! the reason (no library at the path given, no device, an older driver).

use hal_core::BackendId;

/// The variable that points the CUDA suites (hal-cuda, hal-cuda-uvm) at
/// the NVIDIA driver.
pub const CUDA_DRIVER_VAR: &str = "HAL_CUDA_CONFORMANCE_DRIVER";

/// The variable that points hal-ascend's suite at the CANN runtime.
pub const ASCEND_DRIVER_VAR: &str = "HAL_ASCEND_CONFORMANCE_DRIVER";

/// The driver-mode variable of the vendor behind `id`; `None` for the
/// backends that need no driver (CPU shared memory, the simulator).
pub fn driver_var(id: BackendId) -> Option<&'static str> {
    match id {
        BackendId::Cuda | BackendId::CudaUvm => Some(CUDA_DRIVER_VAR),
        BackendId::Ascend => Some(ASCEND_DRIVER_VAR),
        _ => None,
    }
}

/// True when `var` is set to `1`.
pub fn driver_mode(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| v == "1")
}

/// The variable that makes a backend `id` that is unavailable here a
/// failure: its vendor's driver-mode variable, when it is set to `1`.
pub fn driver_required(id: BackendId) -> Option<&'static str> {
    driver_var(id).filter(|var| driver_mode(var))
}

/// The words with which a case of an unavailable backend fails under
/// `HAL_TESTS_STRICT=1` ([`strict_unavailable`]).
pub const STRICT_UNAVAILABLE: &str = "=1: every case must run, but backend";

/// The message of a case that fails because its backend `id` is
/// unavailable (`reason`) and `HAL_TESTS_STRICT=1` requires every case to
/// run: what keeps a suite instantiated for a backend whose hardware, or
/// stand-in, is missing from passing.
pub fn strict_unavailable(id: BackendId, reason: &str) -> String {
    format!(
        "{}{STRICT_UNAVAILABLE} `{id}` is unavailable here: {reason}; run the suite where \
         the backend is available (its device, its driver or a stand-in), or unset {}",
        hal_core::testing::STRICT_VAR,
        hal_core::testing::STRICT_VAR
    )
}

/// Run this test binary's suite module `module` (every case of it, as
/// `cargo test module::` would) in a child with `env` added, which points
/// it at a driver that cannot load; require that every one of its `cases`
/// failed, each naming driver mode, and none passed. What proves that a run
/// on a machine without the driver cannot look green.
#[track_caller]
pub fn assert_suite_fails_without_driver(module: &str, cases: usize, env: &[(&str, &str)]) {
    assert_suite_fails(module, cases, env, "=1: this run is for the driver");
}

/// Run this test binary's suite module `module`, a suite instantiated for
/// a backend that is unavailable here (with
/// [`conformance_suite!`](crate::conformance_suite)`(@on_demand ...)`, so
/// that a normal run leaves it out), in a child with `HAL_TESTS_STRICT=1`;
/// require that every one of its `cases` failed, each naming the backend
/// `id` and why it is unavailable (`reason`, or its beginning:
/// [`strict_unavailable`]), and none passed. What proves that an
/// integrator's suite cannot pass, in strict mode, without its hardware or
/// stand-in.
#[track_caller]
pub fn assert_suite_fails_in_strict_mode(module: &str, cases: usize, id: BackendId, reason: &str) {
    assert_suite_fails(
        module,
        cases,
        &[(hal_core::testing::STRICT_VAR, "1")],
        &format!("{STRICT_UNAVAILABLE} `{id}` is unavailable here: {reason}"),
    );
}

/// Run `module`'s cases (the ignored ones too, but not its `__child`) in a
/// child with `env`; require that all `cases` failed and that `naming`
/// occurs once per case.
#[track_caller]
fn assert_suite_fails(module: &str, cases: usize, env: &[(&str, &str)], naming: &str) {
    let exe = std::env::current_exe().expect("the test executable's path");
    let out = std::process::Command::new(exe)
        .arg(format!("{module}::"))
        .args([
            hal_core::testing::INCLUDE_IGNORED,
            "--skip",
            "__child",
            "--test-threads=4",
        ])
        .envs(env.iter().copied())
        .output()
        .expect("starting the suite in a child process");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success(),
        "the suite passed without its backend:\n{text}"
    );
    let result = text
        .lines()
        .find(|l| l.starts_with("test result:"))
        .unwrap_or_else(|| panic!("the child ran no suite:\n{text}"));
    assert!(
        result.contains(&format!(" 0 passed; {cases} failed;")),
        "every case must fail, none pass: `{result}`\n{text}"
    );
    let named = text.matches(naming).count();
    assert_eq!(named, cases, "each failure names `{naming}`:\n{text}");
}

/// The prefix of the line that names the driver a run loaded
/// (`driver-loaded: PATH version N`), which the GPU smoke run's summary
/// states.
pub const LOADED_LINE: &str = "driver-loaded: ";

/// The file mapped at `address` in this process (`/proc/self/maps`): the
/// library a symbol of a loaded driver came from, whatever name it was
/// loaded by.
pub fn mapped_file(address: usize) -> Option<std::path::PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let start = usize::from_str_radix(start, 16).ok()?;
        let end = usize::from_str_radix(end, 16).ok()?;
        let path = fields.nth(4)?;
        (start <= address && address < end && path.starts_with('/')).then(|| path.into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_vendor_has_its_variable_and_the_others_none() {
        assert_eq!(driver_var(BackendId::Cuda), Some(CUDA_DRIVER_VAR));
        assert_eq!(driver_var(BackendId::CudaUvm), Some(CUDA_DRIVER_VAR));
        assert_eq!(driver_var(BackendId::Ascend), Some(ASCEND_DRIVER_VAR));
        for id in [
            BackendId::CpuShm,
            BackendId::MockCuda,
            BackendId::MockAscend,
            BackendId::External(0x8000),
        ] {
            assert_eq!(driver_var(id), None, "{id:?}");
            assert_eq!(driver_required(id), None, "{id:?}");
        }
    }

    #[test]
    fn a_mapped_address_names_its_file() {
        let f: fn(usize) -> Option<std::path::PathBuf> = mapped_file;
        let exe = std::env::current_exe().unwrap().canonicalize().unwrap();
        assert_eq!(mapped_file(f as usize), Some(exe), "this function's code");
        let on_stack = 0u8;
        assert_eq!(
            mapped_file(&on_stack as *const u8 as usize),
            None,
            "the stack"
        );
    }
}
