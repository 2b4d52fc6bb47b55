//! Driver mode: a suite pointed at a vendor's real driver.
//!
//! The suites of hal-cuda and hal-cuda-uvm run on the NVIDIA driver with
//! `HAL_CUDA_CONFORMANCE_DRIVER=1` (what the GPU smoke run sets), and
//! hal-ascend's on the CANN runtime with `HAL_ASCEND_CONFORMANCE_DRIVER=1`.
//! Without the variable a backend that is unavailable here checks that it
//! says so and its case passes; in driver mode the run is for the driver,
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

/// Run this test binary's suite module `module` (every case of it, as
/// `cargo test module::` would) in a child with `env` added, which points
/// it at a driver that cannot load; require that every one of its `cases`
/// failed, each naming driver mode, and none passed. What proves that a run
/// on a machine without the driver cannot look green.
#[track_caller]
pub fn assert_suite_fails_without_driver(module: &str, cases: usize, env: &[(&str, &str)]) {
    let exe = std::env::current_exe().expect("the test executable's path");
    let out = std::process::Command::new(exe)
        .arg(format!("{module}::"))
        .arg("--test-threads=4")
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
        "the suite passed without a driver:\n{text}"
    );
    let result = text
        .lines()
        .find(|l| l.starts_with("test result:"))
        .unwrap_or_else(|| panic!("the child ran no suite:\n{text}"));
    assert!(
        result.contains(&format!(" 0 passed; {cases} failed;")),
        "every case must fail, none pass: `{result}`\n{text}"
    );
    let naming = text.matches("=1: this run is for the driver").count();
    assert_eq!(naming, cases, "each failure names driver mode:\n{text}");
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
