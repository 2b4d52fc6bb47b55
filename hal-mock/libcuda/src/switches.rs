//! The stand-in's switches, read from the environment once per process:
//! an IMEX daemon that serves fabric handles, and injected failures.
//!
//! - `HAL_MOCK_LIBCUDA_IMEX=1`: an IMEX daemon is present, so `cuMemCreate`
//!   accepts `CU_MEM_HANDLE_TYPE_FABRIC`. Without it a fabric request is
//!   `CUDA_ERROR_NOT_PERMITTED` (800), as driver 580 answered on an H200
//!   with no IMEX daemon (measured).
//! - `HAL_MOCK_LIBCUDA_PAGEABLE_MEMORY_ACCESS=1`: the device reads
//!   pageable host memory (`CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS` is
//!   1, as on HMM or ATS machines; 0 otherwise, as on the measured H200).
//! - `HAL_MOCK_LIBCUDA_NO_PEER_ACCESS=1`: a machine whose devices cannot
//!   reach each other (`peer.rs`).
//! - `HAL_MOCK_LIBCUDA_FREE_SYNCS=0`: `cuMemFree_v2`, `cuMemFreeHost` and
//!   `cuMemHostUnregister` end at once (queued work keeps what it uses).
//!   By default they wait for all the work queued on the device before
//!   they end anything, as driver 580 did on an H200 (measured; the driver
//!   API says frees "may perform implicit synchronization"), and the
//!   process's registrations and event destruction wait behind them
//!   meanwhile, as they did there (`held.rs`).
//! - `HAL_MOCK_LIBCUDA_FAIL=cuMemCreate:2,cuMemMap:1`: each named entry
//!   point answers the `CUresult` given (a number of `hal_core`'s CUDA
//!   table) instead of doing its work, every time; code 0 is a driver that
//!   answers success and does nothing (writes no output). Entries that name
//!   an unknown code are ignored. Every entry point honours it (before any
//!   other check, `cuInit`'s included).
//! - `HAL_MOCK_LIBCUDA_ATTRIBUTES=128:0,141:0`: `cuDeviceGetAttribute`
//!   answers each numbered attribute with the value given, on every
//!   device. Only the answers change, never what the calls do: a test sees
//!   whether a backend asks the driver for what the device says it lacks.
//! - `HAL_MOCK_LIBCUDA_GRANULARITY=4096:65536`: `cuMemGetAllocationGranularity`
//!   answers the minimum and the recommended granularity given, for every
//!   allocation kind. As with the attributes, only the answers change: the
//!   simulator's own granularity still rules what `cuMemCreate` accepts.
//!
//! The variables are read at the first call that asks, so a test sets them
//! for a child process it starts, never in its own (parallel) process.

use std::sync::OnceLock;

use hal_core::kit::vendor::{cuda, Code};

/// The variable that says an IMEX daemon serves fabric handles.
pub const IMEX_VAR: &str = "HAL_MOCK_LIBCUDA_IMEX";
/// The variable of injected failures.
pub const FAIL_VAR: &str = "HAL_MOCK_LIBCUDA_FAIL";
/// The variable that takes peer access away: set to `1`, no two devices
/// can access each other.
pub const NO_PEER_VAR: &str = "HAL_MOCK_LIBCUDA_NO_PEER_ACCESS";

/// The variable that, set to 0, makes a free return without waiting for
/// the device's queued work.
pub const FREE_SYNCS_VAR: &str = "HAL_MOCK_LIBCUDA_FREE_SYNCS";

/// The variable of attributes answered otherwise.
pub const ATTRIBUTES_VAR: &str = "HAL_MOCK_LIBCUDA_ATTRIBUTES";

/// The variable that makes the device read pageable host memory.
pub const PAGEABLE_VAR: &str = "HAL_MOCK_LIBCUDA_PAGEABLE_MEMORY_ACCESS";

/// The variable of granularities answered otherwise (`minimum:recommended`).
pub const GRANULARITY_VAR: &str = "HAL_MOCK_LIBCUDA_GRANULARITY";

struct Switches {
    imex: bool,
    pageable: bool,
    no_peer: bool,
    free_syncs: bool,
    fail: Vec<(String, Code)>,
    attributes: Vec<(i32, i32)>,
    granularity: Option<(u64, u64)>,
}

fn switches() -> &'static Switches {
    static SWITCHES: OnceLock<Switches> = OnceLock::new();
    SWITCHES.get_or_init(|| Switches {
        imex: std::env::var(IMEX_VAR).is_ok_and(|v| v == "1"),
        pageable: std::env::var(PAGEABLE_VAR).is_ok_and(|v| v == "1"),
        no_peer: std::env::var(NO_PEER_VAR).is_ok_and(|v| v == "1"),
        free_syncs: !std::env::var(FREE_SYNCS_VAR).is_ok_and(|v| v == "0"),
        fail: std::env::var(FAIL_VAR)
            .map(|v| parse_failures(&v))
            .unwrap_or_default(),
        attributes: std::env::var(ATTRIBUTES_VAR)
            .map(|v| parse_attributes(&v))
            .unwrap_or_default(),
        granularity: std::env::var(GRANULARITY_VAR)
            .ok()
            .and_then(|v| parse_granularity(&v)),
    })
}

/// `entry:code` pairs separated by commas; pairs whose code is not a
/// known `CUresult` are dropped.
fn parse_failures(text: &str) -> Vec<(String, Code)> {
    text.split(',')
        .filter_map(|pair| {
            let (entry, number) = pair.trim().split_once(':')?;
            let code = cuda::code(number.trim().parse().ok()?)?;
            Some((entry.trim().to_owned(), code))
        })
        .collect()
}

/// `number:value` pairs separated by commas; malformed pairs are dropped.
fn parse_attributes(text: &str) -> Vec<(i32, i32)> {
    text.split(',')
        .filter_map(|pair| {
            let (number, value) = pair.trim().split_once(':')?;
            Some((number.trim().parse().ok()?, value.trim().parse().ok()?))
        })
        .collect()
}

/// `minimum:recommended`; `None` when malformed.
fn parse_granularity(text: &str) -> Option<(u64, u64)> {
    let (min, rec) = text.trim().split_once(':')?;
    Some((min.trim().parse().ok()?, rec.trim().parse().ok()?))
}

/// The minimum (`recommended` false) or recommended granularity answered
/// instead, if any.
pub(crate) fn granularity(recommended: bool) -> Option<u64> {
    switches()
        .granularity
        .map(|(min, rec)| if recommended { rec } else { min })
}

/// The value the attribute numbered `number` is answered with instead, if any.
pub(crate) fn attribute(number: i32) -> Option<i32> {
    switches()
        .attributes
        .iter()
        .find(|(n, _)| *n == number)
        .map(|&(_, v)| v)
}

/// True when an IMEX daemon is said to be present.
pub(crate) fn imex() -> bool {
    switches().imex
}

/// True when the device reads pageable host memory.
pub(crate) fn pageable_memory_access() -> bool {
    switches().pageable
}

/// True when the devices can access each other's memory.
pub(crate) fn peer_access() -> bool {
    !switches().no_peer
}

/// True when a free waits for the device's queued work.
pub(crate) fn free_synchronizes() -> bool {
    switches().free_syncs
}

/// The failure injected into `entry`, if any.
pub(crate) fn injected(entry: &str) -> Result<(), Code> {
    match switches().fail.iter().find(|(e, _)| e == entry) {
        Some((_, code)) => Err(*code),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_parse_and_unknown_codes_are_dropped() {
        let f = parse_failures("cuMemCreate:2, cuMemMap : 1,cuMemUnmap:123456,junk");
        assert_eq!(
            f,
            vec![
                ("cuMemCreate".to_owned(), cuda::OUT_OF_MEMORY),
                ("cuMemMap".to_owned(), cuda::INVALID_VALUE),
            ]
        );
        assert!(parse_failures("").is_empty());
    }

    #[test]
    fn attributes_parse_and_malformed_pairs_are_dropped() {
        assert_eq!(
            parse_attributes("128:0, 10020 : 1,x:1,5:,junk"),
            vec![(128, 0), (10020, 1)]
        );
        assert!(parse_attributes("").is_empty());
    }

    #[test]
    fn granularities_parse_and_malformed_ones_are_none() {
        assert_eq!(parse_granularity(" 4096 : 65536"), Some((4096, 65536)));
        for junk in ["", "4096", "4096:", ":1", "a:b"] {
            assert_eq!(parse_granularity(junk), None, "{junk:?}");
        }
    }
}
