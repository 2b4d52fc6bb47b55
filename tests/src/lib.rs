//! # hal-tests: one conformance suite for every backend
//!
//! The suite is written once, generic over [`hal_core::Backend`] (static
//! dispatch: every case is a generic function), and instantiated for a
//! backend with one macro call, [`conformance_suite!`]:
//!
//! ```
//! hal_tests::conformance_suite!(cpu_shm, hal_cpu_shm::CpuShm::new());
//! ```
//!
//! expands to a module `cpu_shm` of `#[test]` functions, one per case
//! (`cpu_shm::notify_wait_timeout`, `cpu_shm::vmm_growable_in_process`, ...),
//! so every test name says which backend and profile it ran on.
//!
//! ## Capability gating
//!
//! Every case is gated on [`Capabilities`]: where the device lacks a
//! capability, the case calls the operation anyway and requires the backend
//! to answer [`Error::Unsupported`](hal_core::Error) (`err.is_unsupported()`).
//! Nothing is skipped silently, and no case passes without checking
//! something. A backend that is unavailable on this machine (no driver, no
//! device) must say so: each case then requires
//! [`Error::Unavailable`](hal_core::Error) from `open(0)` and prints the
//! reason.
//!
//! Streams may be queued (device streams) or host-synchronous (work runs on
//! the calling thread); the suite finds out which
//! ([`cases::stream_model`]) and checks ordering in both.
//!
//! ## Real child processes
//!
//! Cross-process cases start real child processes: the parent re-executes
//! the current test binary with `--exact <module>::__child --nocapture
//! --test-threads=1` and an environment variable naming the child's role
//! (see [`process`]). The `__child` test that the macro generates does
//! nothing in a normal run; in the child it builds the backend **with the
//! same expression** as the parent and plays its role: it imports memory, an
//! event and a notify from the parent's handle *text* alone (the exporter's
//! descriptor broker serves the descriptors), writes, signals, and exits.
//!
//! ## Adding a backend
//!
//! 1. Add `hal-tests` as a dev-dependency of the backend crate:
//!    `hal-tests = { path = "../tests" }` under `[dev-dependencies]`.
//! 2. Write one line in a test file of the crate, e.g. `tests/conformance.rs`:
//!    `hal_tests::conformance_suite!(my_vendor, my_vendor::MyBackend::new());`
//!    The first argument names the generated module and so prefixes every
//!    test name; instantiate once per profile worth testing.
//! 3. The expression runs once per case **and again in every child
//!    process**, so it must build an equivalent backend from nothing: no
//!    state handed over from the parent (a temporary directory, a pid, a
//!    descriptor), the same devices in the same order with the same UUIDs,
//!    and quickly. It may read the environment, which children inherit, and
//!    must not print lines containing `@hal-tests@ ` on standard output.
//!    Children import from handle text alone, so exports must be importable
//!    that way (the descriptor broker of [`hal_core::Exported`] does it for
//!    backends that pass descriptors). The expression is evaluated inside the
//!    generated module, which has `use super::*`.
//! 4. Run `cargo test -p <crate> --test conformance`. A backend that creates
//!    `/dev/shm` objects adds a test outside the macro, named to sort after
//!    the suite modules, that calls [`assert_no_shm_left`] with the modules'
//!    `CASES`.
//!
//! The crate's `README.md` lists every case with the capabilities that gate
//! it.
#![deny(missing_docs)]

use std::time::Duration;

use hal_core::{
    Allocation, Backend, Capabilities, Device, Error, ExportOptions, Importers, Location, Memory,
    Result,
};

pub use hal_core;

pub mod cases;
pub mod probe;
pub mod process;

/// A wait that is expected to time out gives up after this long.
pub const SHORT: Duration = Duration::from_millis(30);
/// A wait that is expected to succeed may take this long before the case
/// fails (a guard against hangs, never a timing assertion).
pub const LONG: Duration = Duration::from_secs(30);

/// One backend under test and where its suite module lives.
#[derive(Debug)]
pub struct Suite<B: Backend> {
    backend: B,
    test_module: String,
}

impl<B: Backend> Suite<B> {
    /// Wrap `backend`; `module_path` is the `module_path!()` of the generated
    /// suite module.
    pub fn new(backend: B, module_path: &str) -> Self {
        Suite {
            backend,
            test_module: test_module(module_path),
        }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The module's path as the test harness names it (without the crate).
    pub fn test_module(&self) -> &str {
        &self.test_module
    }

    /// Open device `ordinal`, failing the case with the error.
    #[track_caller]
    pub fn open(&self, ordinal: u32) -> B::Device {
        must(self.backend.open(ordinal), &format!("open({ordinal})"))
    }

    /// Open device 0.
    #[track_caller]
    pub fn device(&self) -> B::Device {
        self.open(0)
    }

    /// Start a child process playing `role` with `args`.
    pub fn spawn(&self, role: &str, args: &[(&str, String)]) -> process::ChildProc {
        process::ChildProc::spawn(&self.test_module, role, args)
    }
}

/// The harness's name of a module: its `module_path!()` without the crate.
pub fn test_module(module_path: &str) -> String {
    module_path
        .split_once("::")
        .map_or(module_path, |(_, rest)| rest)
        .to_string()
}

/// Run one case against a fresh backend (what each generated `#[test]` does).
///
/// An unavailable backend must say so with [`Error::Unavailable`] from
/// `open(0)`; the case then checks that and reports the reason.
pub fn run_case<B: Backend>(module_path: &str, make: fn() -> B, case: fn(&Suite<B>)) {
    let _running = probe::CaseGuard::enter();
    let suite = Suite::new(make(), module_path);
    if let hal_core::Availability::Unavailable { reason, .. } = suite.backend.availability() {
        match suite.backend.open(0) {
            Err(Error::Unavailable { .. }) => {
                eprintln!(
                    "backend `{}` is unavailable here ({reason}); checked that it answers \
                     Unavailable",
                    suite.backend.id()
                );
                return;
            }
            Err(e) => panic!("an unavailable backend must answer Unavailable, got {e:?}"),
            Ok(_) => panic!("the backend says it is unavailable ({reason}) but open(0) worked"),
        }
    }
    case(&suite);
}

/// The body of the generated `__child` test: nothing in a normal run; in a
/// child process started by a case, build the backend and play the role.
pub fn child_entry<B: Backend>(module_path: &str, make: fn() -> B) {
    let Ok(role) = std::env::var(process::ROLE_ENV) else {
        return;
    };
    let module = test_module(module_path);
    let for_module = std::env::var(process::MODULE_ENV).unwrap_or_default();
    assert_eq!(
        for_module, module,
        "child role `{role}` was meant for another suite module"
    );
    let suite = Suite::new(make(), module_path);
    cases::run_child_role(&suite, &role);
}

/// Fail the test if `/dev/shm` holds an entry of this run: a name that
/// mentions `hal` and the pid of this test process or of a child process
/// it started. Call it from a test outside the macro whose name sorts after
/// the suite modules: it first waits for the `expected` suite cases of this
/// binary to finish (see [`probe::wait_for_suite`]).
pub fn assert_no_shm_left(expected: usize) {
    let finished = probe::wait_for_suite(expected);
    let pids = probe::run_pids();
    let left: Vec<String> = probe::shm_entries()
        .into_iter()
        .filter(|n| n.contains("hal") && pids.iter().any(|p| probe::names_pid(n, *p)))
        .collect();
    assert!(
        left.is_empty(),
        "after {finished} suite case(s), /dev/shm still holds entries of this run: {left:?}"
    );
}

// --- assertions -------------------------------------------------------------

/// The value of `r`, or fail the case naming `what`.
#[track_caller]
pub fn must<T>(r: Result<T>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what} failed: {e} ({e:?})"),
    }
}

/// The error of `r`, which must be an error other than
/// [`Error::Unsupported`] (the capability is claimed, the call is wrong).
#[track_caller]
pub fn must_fail<T>(r: Result<T>, what: &str) -> Error {
    match r {
        Ok(_) => panic!("{what} succeeded; it must be refused"),
        Err(e) if e.is_unsupported() => {
            panic!("{what} must be refused for its arguments, not as unsupported: {e}")
        }
        Err(e) => e,
    }
}

/// Require [`Error::Unsupported`]: the device lacks the capability `cap`.
#[track_caller]
pub fn must_be_unsupported<T>(r: Result<T>, cap: &str, what: &str) {
    match r {
        Err(e) if e.is_unsupported() => {}
        Err(e) => panic!("without {cap}, {what} must answer Unsupported, got {e} ({e:?})"),
        Ok(_) => panic!("without {cap}, {what} must answer Unsupported, but it succeeded"),
    }
}

/// Require [`Error::Timeout`].
#[track_caller]
pub fn must_time_out(r: Result<()>, what: &str) {
    match r {
        Err(e) if e.is_timeout() => {}
        Err(e) => panic!("{what} must time out, got {e} ({e:?})"),
        Ok(()) => panic!("{what} must time out, but it completed"),
    }
}

/// Require [`Error::PermissionDenied`].
#[track_caller]
pub fn must_be_denied<T>(r: Result<T>, what: &str) {
    match r {
        Err(Error::PermissionDenied { .. }) => {}
        Err(e) => panic!("{what} must be refused with PermissionDenied, got {e} ({e:?})"),
        Ok(_) => panic!("{what} must be refused with PermissionDenied, but it succeeded"),
    }
}

// --- fixtures -----------------------------------------------------------------

/// Where the suite allocates on `dev`: host memory on host-visible devices,
/// the device's own memory otherwise.
pub fn location<D: Device>(dev: &D) -> Location {
    if dev.capabilities().contains(Capabilities::HOST_VISIBLE) {
        Location::Host
    } else {
        Location::Device(dev.info().ordinal)
    }
}

/// Allocate `pages` of the device's smallest page, aligned to a page (so
/// that the whole allocation can be exported even where the vendor hands
/// out unaligned sub-allocations), and fill them with [`pattern`]`(seed)`.
#[track_caller]
pub fn alloc_filled<D: Device>(dev: &D, pages: u64, seed: u8) -> D::Allocation {
    let page = dev.info().page_size();
    let desc = hal_core::AllocDesc {
        location: location(dev),
        align: page,
        ..hal_core::AllocDesc::host(pages * page)
    };
    let a = must(dev.allocate(&desc), "allocate");
    assert!(
        a.len() >= pages * page,
        "allocate({}) gave only {} bytes",
        pages * page,
        a.len()
    );
    must(
        a.write(0, &pattern(seed, a.len())),
        "write to an allocation",
    );
    a
}

/// Importers that every case may use: anyone (explicitly, where the
/// backend keeps allow-lists; the backend's default otherwise).
pub fn open_importers(caps: Capabilities) -> Importers {
    if caps.contains(Capabilities::PID_ALLOW_LIST) {
        Importers::Anyone
    } else {
        Importers::BackendDefault
    }
}

/// Export options for the whole allocation, open to [`open_importers`].
pub fn open_export(caps: Capabilities) -> ExportOptions {
    ExportOptions {
        importers: open_importers(caps),
        ..ExportOptions::default()
    }
}

/// `len` bytes that depend on `seed` and on the position.
pub fn pattern(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8))
        .collect()
}

/// `len` bytes read at `offset` of `mem`.
#[track_caller]
pub fn read_vec(mem: &impl Memory, offset: u64, len: u64) -> Vec<u8> {
    let mut v = vec![0u8; len as usize];
    must(mem.read(offset, &mut v), "read");
    v
}

/// Require that `mem` holds `expect` at `offset` (compared without printing
/// megabytes).
#[track_caller]
pub fn assert_bytes(mem: &impl Memory, offset: u64, expect: &[u8], what: &str) {
    let got = read_vec(mem, offset, expect.len() as u64);
    if got != expect {
        let at = got
            .iter()
            .zip(expect)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        panic!(
            "{what}: bytes differ at offset {:#x}: got {:#04x}, expected {:#04x}",
            offset + at as u64,
            got[at],
            expect[at]
        );
    }
}

/// How many importers hold `alloc` (`Allocation::importers`); an error fails the case.
#[track_caller]
pub fn importers_of(alloc: &impl Allocation) -> usize {
    must(alloc.importers(), "importers()")
}

/// The generated module of [`conformance_suite!`]; not for direct use.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_module {
    ($name:ident, $backend:expr, [$($case:ident),* $(,)?]) => {
        #[allow(unused_imports, non_snake_case)]
        mod $name {
            use super::*;

            fn __make() -> impl $crate::hal_core::Backend {
                $backend
            }

            /// How many cases this module runs.
            #[allow(dead_code)]
            pub const CASES: usize = [$(stringify!($case)),*].len();

            $(
                #[test]
                fn $case() {
                    $crate::run_case(module_path!(), __make, $crate::cases::$case);
                }
            )*

            /// The child-process entry: does nothing unless a case started
            /// this process to play a role.
            #[test]
            fn __child() {
                $crate::child_entry(module_path!(), __make);
            }
        }
    };
}

/// Instantiate the conformance suite for one backend.
///
/// `conformance_suite!(name, expr)` expands to `mod name { ... }` holding one
/// `#[test]` per case and a `__child` test used by the cross-process cases.
/// `expr` builds the backend (any type implementing [`hal_core::Backend`]);
/// it is evaluated once per case and once in every child process, inside the
/// generated module (which has `use super::*`). The module also defines
/// `name::CASES`, the number of cases, for [`assert_no_shm_left`].
///
/// ```
/// hal_tests::conformance_suite!(mock_cuda, hal_mock::MockBackend::new(hal_mock::Profile::cuda()));
/// ```
#[macro_export]
macro_rules! conformance_suite {
    ($name:ident, $backend:expr $(,)?) => {
        $crate::__conformance_module!(
            $name,
            $backend,
            [
                devices_info_consistent,
                capabilities_match_behaviour,
                memory_export_import_roundtrip,
                memory_import_by_text_via_broker,
                memory_export_subrange_at_offset,
                memory_import_twice,
                memory_read_only_export,
                memory_misaligned_export_refused,
                memory_out_of_range_export_refused,
                memory_fixed_address_import,
                lease_count_and_release,
                lease_wait_unleased_times_out_then_returns,
                lease_free_while_imported,
                lease_killed_importer_is_gone,
                event_wait_timeout_and_stream_order,
                event_stream_wait_event,
                event_wait_async,
                event_ipc_export_import,
                event_ipc_needs_interprocess_flag,
                stream_synchronize_timeout,
                notify_wait_timeout,
                notify_signal_then_wait_resets,
                notify_wait_async,
                notify_stream_record_and_wait,
                notify_ipc_export_import,
                notify_timeout_semantics,
                cancelled_wait_async_releases_thread,
                vmm_granularity,
                vmm_physical_size_refused,
                vmm_reserve_map_access_unmap,
                vmm_export_import_physical,
                vmm_growable_in_process,
                vmm_growable_child_follows,
                pid_allow_list_in_child,
                process_id_is_what_allow_lists_accept,
                peer_access_import,
                handle_corrupted_text_refused,
                handle_wrong_kind_refused,
                handle_wrong_backend_refused,
                handle_forged_refused,
                cross_process_memory_event_notify,
                hygiene_full_cycle_in_child,
            ]
        );
    };
}
