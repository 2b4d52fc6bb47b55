//! The devices this process sees and the faults it starts with, from the
//! environment: `HAL_MOCK_DEVICES` / `HAL_MOCK_VISIBLE_DEVICES` (the
//! simulator's), then `ASCEND_RT_VISIBLE_DEVICES`, as the runtime reads
//! it; `HAL_ASCEND_STANDIN_FAIL` injects faults.

use hal_core::vendor::{acl, Code};
use hal_mock::fault::{FaultOp, Faults};
use hal_mock::Profile;

use crate::abi::{refuse, Refusal};

/// The variable of injected faults: `op=CODE[,op=CODE...]`, each making
/// the next operation of that kind (`allocate`, `export`, `import`,
/// `wait`) fail with the `aclError` numbered `CODE`.
pub const FAIL_VAR: &str = "HAL_ASCEND_STANDIN_FAIL";

/// The Ascend-like profile with the environment's device lists applied.
pub(crate) fn profile() -> Result<Profile, Refusal> {
    let bad = |e: hal_core::Error| refuse(acl::INVALID_PARAM, e.to_string());
    let profile = Profile::ascend().with_env_overrides().map_err(bad)?;
    match std::env::var("ASCEND_RT_VISIBLE_DEVICES") {
        Ok(spec) => {
            let list = parse(&profile, &spec);
            profile.with_visible_devices(&list).map_err(bad)
        }
        Err(_) => Ok(profile),
    }
}

/// `ASCEND_RT_VISIBLE_DEVICES` as the runtime reads it: physical indices
/// separated by commas; the list ends at the first entry that is not a
/// device or repeats one.
pub(crate) fn parse(profile: &Profile, spec: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in spec.split(',').map(str::trim) {
        match entry.parse::<u32>().ok().filter(|&i| i < profile.devices) {
            Some(p) if !out.contains(&p) => out.push(p),
            _ => break,
        }
    }
    out
}

/// The faults [`FAIL_VAR`] asks for, set on `faults`.
pub(crate) fn inject(faults: &Faults) -> Result<(), Refusal> {
    let Ok(spec) = std::env::var(FAIL_VAR) else {
        return Ok(());
    };
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (op, code) = item
            .split_once('=')
            .ok_or_else(|| refuse(acl::INVALID_PARAM, format!("{FAIL_VAR}: `{item}`")))?;
        let op = match op {
            "allocate" => FaultOp::Allocate,
            "export" => FaultOp::Export,
            "import" => FaultOp::Import,
            "wait" => FaultOp::Wait,
            _ => return Err(refuse(acl::INVALID_PARAM, format!("{FAIL_VAR}: op `{op}`"))),
        };
        let code: Code = code
            .parse::<i64>()
            .ok()
            .and_then(acl::code)
            .ok_or_else(|| refuse(acl::INVALID_PARAM, format!("{FAIL_VAR}: code `{code}`")))?;
        faults.fail_next(op, code);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_lists_as_the_runtime_does() {
        let p = Profile::ascend();
        assert_eq!(parse(&p, "1,0"), vec![1, 0]);
        assert_eq!(parse(&p, ""), Vec::<u32>::new());
        assert_eq!(parse(&p, "1,5,0"), vec![1]);
        assert_eq!(parse(&p, "0,0"), vec![0]);
    }
}
