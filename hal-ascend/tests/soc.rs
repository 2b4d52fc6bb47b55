//! IPC events are claimed by SoC (`aclrtGetSocName`): on the SoCs the
//! runtime documents them for without asking, never on earlier ones, and
//! on an SoC the list does not name only if the runtime gives an IPC
//! event's handle. The optional queries (`aclrtGetSocName`,
//! `aclrtGetMemInfo`) may be missing: their fields are left empty, with
//! one warning each. Each case runs in a child of its own, where the
//! stand-in reads its switches and counts its calls afresh.

use hal_core::DeviceExt;
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::{calls, role, standin, ROLE};
use hal_ascend::AscendBackend;
use hal_core::{Backend, Capabilities, Device};
use hal_mock::older::LibraryCopy;
use hal_mock_libascendcl::switches::{DENY_VAR, SOC_VAR};

/// The variable that gives a child the library to load.
const LIBRARY: &str = "HAL_ASCEND_TEST_SOC_LIBRARY";

/// Run test `me` again in a child with `env`, or return `true` in that
/// child.
fn in_child(me: &str, env: &[(&str, &str)]) -> bool {
    if role().as_deref() == Some(me) {
        return true;
    }
    let mut all = vec![(ROLE, me)];
    all.extend_from_slice(env);
    let out = common::child(me, &all);
    common::assert_ok(&out, me);
    false
}

/// Whether device 0 of the backend on `lib` claims IPC events, and how
/// many times the runtime was asked for an IPC event handle.
fn ipc_events(lib: &std::path::Path) -> (bool, u64) {
    let d = AscendBackend::with_library(lib).open(0).unwrap();
    let claimed = d.capabilities().contains(Capabilities::IPC_EVENT);
    (claimed, calls("aclrtIpcGetEventHandle"))
}

#[test]
fn a_documented_soc_has_ipc_events_without_asking() {
    const ME: &str = "a_documented_soc_has_ipc_events_without_asking";
    // Atlas A3, whose runtime here would refuse: the name decides.
    if in_child(ME, &[(SOC_VAR, "Ascend910_9391"), (DENY_VAR, "ipc-event")]) {
        assert_eq!(ipc_events(&standin()), (true, 0));
    }
}

#[test]
fn an_earlier_soc_has_no_ipc_events_and_the_runtime_is_not_asked() {
    const ME: &str = "an_earlier_soc_has_no_ipc_events_and_the_runtime_is_not_asked";
    // The runtime here would give a handle: the name decides.
    if in_child(ME, &[(SOC_VAR, "Ascend310P3")]) {
        assert_eq!(ipc_events(&standin()), (false, 0));
        let d = AscendBackend::with_library(standin()).open(0).unwrap();
        let ipc = hal_core::EventFlags {
            interprocess: true,
            timing: false,
        };
        assert!(d.create_event(ipc).unwrap_err().is_unsupported());
    }
}

#[test]
fn an_unlisted_soc_is_asked_and_has_ipc_events_where_the_runtime_gives_them() {
    const ME: &str = "an_unlisted_soc_is_asked_and_has_ipc_events_where_the_runtime_gives_them";
    if in_child(ME, &[(SOC_VAR, "Ascend-standin-unlisted")]) {
        let (claimed, asked) = ipc_events(&standin());
        assert!(claimed && asked > 0, "claimed {claimed}, asked {asked}");
    }
}

#[test]
fn an_unlisted_soc_whose_runtime_refuses_has_no_ipc_events() {
    const ME: &str = "an_unlisted_soc_whose_runtime_refuses_has_no_ipc_events";
    if in_child(
        ME,
        &[
            (SOC_VAR, "Ascend-standin-unlisted"),
            (DENY_VAR, "ipc-event"),
        ],
    ) {
        let (claimed, asked) = ipc_events(&standin());
        assert!(!claimed && asked > 0, "claimed {claimed}, asked {asked}");
    }
}

/// Warnings logged in this process that name `aclrtGet`.
static WARNINGS: AtomicUsize = AtomicUsize::new(0);

struct Counter;

impl log::Log for Counter {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, r: &log::Record<'_>) {
        let text = r.args().to_string();
        if r.level() == log::Level::Warn && text.contains("aclrtGet") {
            eprintln!("warning: {text}");
            WARNINGS.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn flush(&self) {}
}

#[test]
fn a_runtime_without_the_optional_queries_leaves_their_fields_empty_with_one_warning_each() {
    const ME: &str =
        "a_runtime_without_the_optional_queries_leaves_their_fields_empty_with_one_warning_each";
    let Some(path) = std::env::var_os(LIBRARY).filter(|_| role().as_deref() == Some(ME)) else {
        let hidden = ["aclrtGetSocName", "aclrtGetMemInfo"];
        let copy = LibraryCopy::without(&standin(), &hidden, &std::env::temp_dir()).unwrap();
        let path = copy.path().to_string_lossy().into_owned();
        let out = common::child(ME, &[(ROLE, ME), (LIBRARY, &path)]);
        return common::assert_ok(&out, ME);
    };
    log::set_logger(&Counter).unwrap();
    log::set_max_level(log::LevelFilter::Warn);
    let b = AscendBackend::with_library(&path);
    for ordinal in [0, 1, 0] {
        let d = b.open(ordinal).unwrap();
        assert_eq!(d.info().name, "", "no SoC name");
        assert_eq!(d.info().total_memory, 0, "no memory size");
        // An SoC without a name is asked whether it has IPC events.
        assert!(d.capabilities().contains(Capabilities::IPC_EVENT));
        assert!(d.capabilities().contains(Capabilities::IPC_MEMORY));
    }
    assert!(calls_in(std::path::Path::new(&path), "aclrtIpcGetEventHandle") > 0);
    assert_eq!(
        WARNINGS.load(Ordering::SeqCst),
        2,
        "one warning per missing query"
    );
}

#[test]
fn a_full_runtime_names_the_soc_and_the_memory() {
    let d = common::backend().open(0).unwrap();
    assert_eq!(d.info().name, hal_mock_libascendcl::switches::DEFAULT_SOC);
    assert!(d.info().total_memory > 0);
    assert_ne!(d.info().uuid, [0; 16], "aclrtDeviceGetUuid");
}

/// How many times the stand-in at `lib` (loaded by a backend) ran `symbol`.
fn calls_in(lib: &std::path::Path, symbol: &str) -> u64 {
    let name = std::ffi::CString::new(symbol).unwrap();
    // SAFETY: the library is loaded (by the backend); halStandinCalls is
    // its counter, (const char*) -> uint64_t.
    unsafe {
        let lib = libloading::Library::new(lib).unwrap();
        let f = lib
            .get::<unsafe extern "C" fn(*const std::ffi::c_char) -> u64>(b"halStandinCalls")
            .unwrap();
        f(name.as_ptr())
    }
}
