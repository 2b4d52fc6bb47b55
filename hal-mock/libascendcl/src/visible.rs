//! The devices this process sees and the faults it starts with, from the
//! environment: `HAL_MOCK_DEVICES` / `HAL_MOCK_VISIBLE_DEVICES` (the
//! simulator's), then `ASCEND_RT_VISIBLE_DEVICES`, as the runtime reads
//! it; `HAL_ASCEND_STANDIN_FAIL` injects faults.

use std::sync::{Mutex, OnceLock};

use hal_core::kit::vendor::{acl, Code};
use hal_mock::fault::{FaultOp, Faults};
use hal_mock::Profile;

use crate::refusal::{refuse, Refusal};

/// The variable of injected faults: `op=CODE[,op=CODE...]`, each making
/// the next operation named `op` fail with the `aclError` numbered `CODE`.
/// `op` is a kind of the simulator's (`allocate`, `export`, `import`,
/// `wait`) or an entry point (`aclInit`, `aclrtGetDevice`, ... of
/// `hal_core::kit::vendor::acl::entry::ALL`): the next call of it answers
/// `CODE` without doing anything. Items repeat: two of one op fail its next two.
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

/// What an item of [`FAIL_VAR`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// A kind of operation of the simulator's.
    Kind(FaultOp),
    /// One of this library's entry points.
    Entry(&'static str),
}

/// The items of a [`FAIL_VAR`] value, in order.
fn parse_faults(spec: &str) -> Result<Vec<(Target, Code)>, Refusal> {
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (op, code) = item
            .split_once('=')
            .ok_or_else(|| refuse(acl::INVALID_PARAM, format!("{FAIL_VAR}: `{item}`")))?;
        let target = match op.trim() {
            "allocate" => Target::Kind(FaultOp::Allocate),
            "export" => Target::Kind(FaultOp::Export),
            "import" => Target::Kind(FaultOp::Import),
            "wait" => Target::Kind(FaultOp::Wait),
            name => acl::entry::ALL
                .iter()
                .find(|e| **e == name)
                .map(|e| Target::Entry(e))
                .ok_or_else(|| refuse(acl::INVALID_PARAM, format!("{FAIL_VAR}: op `{op}`")))?,
        };
        let code: Code = code
            .trim()
            .parse::<i64>()
            .ok()
            .and_then(acl::code)
            .ok_or_else(|| refuse(acl::INVALID_PARAM, format!("{FAIL_VAR}: code `{code}`")))?;
        out.push((target, code));
    }
    Ok(out)
}

/// The faults of [`FAIL_VAR`], read once per process: the kinds go to the
/// simulator when the runtime is made; the entry points' wait here.
struct Injected {
    kinds: Vec<(FaultOp, Code)>,
    entries: Mutex<Vec<(&'static str, Code)>>,
}

fn injected() -> &'static Result<Injected, Refusal> {
    static INJECTED: OnceLock<Result<Injected, Refusal>> = OnceLock::new();
    INJECTED.get_or_init(|| {
        let items = match std::env::var(FAIL_VAR) {
            Ok(spec) => parse_faults(&spec)?,
            Err(_) => Vec::new(),
        };
        let mut kinds = Vec::new();
        let mut entries = Vec::new();
        for (target, code) in items {
            match target {
                Target::Kind(op) => kinds.push((op, code)),
                Target::Entry(name) => entries.push((name, code)),
            }
        }
        Ok(Injected {
            kinds,
            entries: Mutex::new(entries),
        })
    })
}

/// The faults of kinds [`FAIL_VAR`] asks for, set on `faults`; a
/// malformed value is refused here, when the runtime is made.
pub(crate) fn inject(faults: &Faults) -> Result<(), Refusal> {
    let injected = injected().as_ref().map_err(Clone::clone)?;
    for &(op, code) in &injected.kinds {
        faults.fail_next(op, code);
    }
    Ok(())
}

/// The failure [`FAIL_VAR`] injects into this call of entry point
/// `symbol`, if one is waiting (taken, so that the next call runs).
pub(crate) fn entry_fault(symbol: &str) -> Result<(), Refusal> {
    let Ok(injected) = injected() else {
        return Ok(());
    };
    let mut entries = hal_core::kit::os::lock::lock(&injected.entries);
    match entries.iter().position(|(e, _)| *e == symbol) {
        Some(i) => {
            let (_, code) = entries.remove(i);
            Err(refuse(code, format!("injected by {FAIL_VAR}")))
        }
        None => Ok(()),
    }
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

    #[test]
    fn faults_name_kinds_or_entry_points_and_keep_their_order() {
        let f = parse_faults(" allocate=207001, aclInit = 507000,,aclInit=507899").unwrap();
        assert_eq!(
            f,
            vec![
                (Target::Kind(FaultOp::Allocate), acl::RT_MEMORY_ALLOCATION),
                (Target::Entry("aclInit"), acl::RT_INTERNAL_ERROR),
                (Target::Entry("aclInit"), acl::RT_DRV_INTERNAL_ERROR),
            ]
        );
        assert!(parse_faults("").unwrap().is_empty());
        for junk in ["allocate", "aclNoSuchCall=507000", "wait=1", "wait=x"] {
            let e = parse_faults(junk).unwrap_err();
            assert_eq!(e.code, acl::INVALID_PARAM, "{junk}");
            assert!(e.text.contains(FAIL_VAR), "{junk}: {}", e.text);
        }
    }
}
