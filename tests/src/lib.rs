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
//! Every case is gated on [`Capabilities`](hal_core::Capabilities): where the device lacks a
//! capability, the case calls the operation anyway and requires the backend
//! to answer [`Error::Unsupported`](hal_core::Error) (`err.is_unsupported()`).
//! Nothing is skipped silently, and no case passes without checking
//! something. A backend that is unavailable on this machine (no driver, no
//! device) must say so: each case then requires
//! [`Error::Unavailable`](hal_core::Error) from `open(0)` and says that it
//! did not run, and why ([`hal_core::testing::not_run`]); with
//! `HAL_TESTS_STRICT=1` every case of an unavailable backend fails instead,
//! naming the backend and the reason. A suite pointed at a real driver ([`driver`]:
//! `HAL_CUDA_CONFORMANCE_DRIVER=1`, `HAL_ASCEND_CONFORMANCE_DRIVER=1`)
//! fails every case instead where that driver is unavailable.
//!
//! Streams may be queued (device streams) or host-synchronous (work runs on
//! the calling thread); the suite finds out which
//! ([`cases::stream_model`]) and checks ordering in both. A device without
//! stream-ordered notifies has no gate to hold queued work back with
//! ([`cases::StreamModel::Ungated`]): the cases check what needs none.
//!
//! ## Real child processes
//!
//! Cross-process cases start real child processes: the parent re-executes
//! the current test binary with `--exact <module>::__child --include-ignored
//! --nocapture --test-threads=1` and an environment variable naming the
//! child's role (see [`process`]). The `__child` test that the macro
//! generates is ignored in a normal run (it is no test of its own, and is
//! not counted as one); in the child it builds the backend **with the
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
// `unsafe` only in the modules that say so (`#[allow(unsafe_code)]`).
#![deny(unsafe_code)]

use hal_core::{Backend, Error};

pub use hal_core;

pub mod cases;
pub mod driver;
#[allow(unsafe_code)]
pub mod fork;
#[allow(unsafe_code)]
pub mod fuse;
#[allow(unsafe_code)]
pub mod hosts;
pub mod probe;
pub mod process;
pub mod report;
#[allow(unsafe_code)]
mod report_exit;
pub mod reuse;
mod support;
pub mod warnings;

pub use support::*;

/// Run one case against a fresh backend (what each generated `#[test]` does).
///
/// An unavailable backend must say so with [`Error::Unavailable`] from
/// `open(0)`; the case then checks that and reports that it did not run
/// ([`hal_core::testing::NOT_RUN`], and why). In driver mode ([`driver`]:
/// `HAL_CUDA_CONFORMANCE_DRIVER=1` for a CUDA backend) an unavailable
/// backend fails the case: the run is for the driver. With
/// `HAL_TESTS_STRICT=1` ([`hal_core::testing::strict`]) an unavailable
/// backend fails the case too, whatever its vendor: a suite cannot pass
/// without the hardware, or the stand-in, it was instantiated for.
pub fn run_case<B: Backend>(module_path: &str, make: fn() -> B, case: fn(&Suite<B>)) {
    run_named_case(module_path, "case", make, case)
}

/// [`run_case`] of the case called `name`, which [`report`] names in the
/// line it prints when the case ends (what the case exercised).
pub fn run_named_case<B: Backend>(
    module_path: &str,
    name: &str,
    make: fn() -> B,
    case: fn(&Suite<B>),
) {
    let _running = probe::CaseGuard::enter();
    let _record = report::CaseRecord::begin(&test_module(module_path), name);
    let suite = Suite::new(make(), module_path);
    if let hal_core::Availability::Unavailable { reason, .. } = suite.backend().availability() {
        let id = suite.backend().id();
        if let Some(var) = driver::driver_required(id) {
            panic!(
                "{var}=1: this run is for the driver, but backend `{id}` is unavailable here: \
                 {reason}"
            );
        }
        if hal_core::testing::strict() {
            panic!("{}", driver::strict_unavailable(id, &reason));
        }
        match suite.backend().open(0) {
            Err(Error::Unavailable { .. }) => {
                let why = format!(
                    "backend `{id}` is unavailable here ({reason}); checked only that it \
                     answers Unavailable"
                );
                report::not_exercised(&why);
                hal_core::testing::not_run(&why);
                return;
            }
            Err(e) => panic!("an unavailable backend must answer Unavailable, got {e:?}"),
            Ok(_) => panic!("the backend says it is unavailable ({reason}) but open(0) worked"),
        }
    }
    case(&suite);
}

/// The body of the generated `__child` test (ignored in a normal run): in
/// a child process started by a case, build the backend and play the role.
///
/// # Panics
///
/// Run without a role (`--include-ignored` by hand): there is nothing to
/// play, and it fails rather than pass without checking anything.
pub fn child_entry<B: Backend>(module_path: &str, make: fn() -> B) {
    let role = std::env::var(process::ROLE_ENV).unwrap_or_else(|_| {
        panic!(
            "a child entry point, run by the suite's cross-process cases with {} set",
            process::ROLE_ENV
        )
    });
    let module = test_module(module_path);
    let for_module = std::env::var(process::MODULE_ENV).unwrap_or_default();
    assert_eq!(
        for_module, module,
        "child role `{role}` was meant for another suite module"
    );
    let suite = Suite::new(make(), module_path);
    cases::run_child_role(&suite, &role);
}

/// The generated module of [`conformance_suite!`]; not for direct use.
/// `$attrs` is `{ ... }`: the attributes every case gets besides `#[test]`.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_module {
    ($name:ident, $backend:expr, $attrs:tt, [$($case:ident),* $(,)?]) => {
        #[allow(unused_imports, non_snake_case)]
        mod $name {
            use super::*;

            fn __make() -> impl $crate::hal_core::Backend<Device: $crate::hal_core::testing::ContextProbe> {
                $backend
            }

            /// How many cases this module runs.
            #[allow(dead_code)]
            pub const CASES: usize = [$(stringify!($case)),*].len();

            $(
                $crate::__conformance_case!($attrs, $case);
            )*

            /// The child-process entry: run by a case that starts this
            /// process to play a role (by exact name, ignored otherwise).
            #[test]
            #[ignore = "child entry point: run by its parent"]
            fn __child() {
                $crate::child_entry(module_path!(), __make);
            }
        }
    };
}

/// One case of [`__conformance_module!`]; not for direct use.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_case {
    ({$($attr:tt)*}, $case:ident) => {
        #[test]
        $($attr)*
        fn $case() {
            $crate::run_named_case(
                module_path!(),
                stringify!($case),
                __make,
                $crate::cases::$case,
            );
        }
    };
}

/// Instantiate the conformance suite for one backend.
///
/// `conformance_suite!(name, expr)` expands to `mod name { ... }` holding one
/// `#[test]` per case and an ignored `__child` test that the cross-process
/// cases run as their child processes.
/// `expr` builds the backend (any type implementing [`hal_core::Backend`]);
/// it is evaluated once per case and once in every child process, inside the
/// generated module (which has `use super::*`). The module also defines
/// `name::CASES`, the number of cases, for [`assert_no_shm_left`].
///
/// ```
/// hal_tests::conformance_suite!(mock_cuda, hal_mock::MockBackend::cuda());
/// ```
///
/// `conformance_suite!(@on_demand name, expr)` instantiates it with every
/// case ignored: run only when asked for (`--include-ignored`), by a test
/// of how the suite itself behaves, e.g. that it fails every case of a
/// backend that is unavailable
/// ([`driver::assert_suite_fails_in_strict_mode`]).
#[macro_export]
macro_rules! conformance_suite {
    ($name:ident, $backend:expr $(,)?) => {
        $crate::conformance_suite!(@with {} $name, $backend);
    };
    (@on_demand $name:ident, $backend:expr $(,)?) => {
        $crate::conformance_suite!(
            @with { #[ignore = "run on demand, by a test of the suite itself"] } $name, $backend
        );
    };
    (@with $attrs:tt $name:ident, $backend:expr) => {
        $crate::__conformance_module!(
            $name,
            $backend,
            $attrs,
            [
                devices_info_consistent,
                capabilities_match_behaviour,
                memory_export_import_roundtrip,
                memory_import_by_text_via_broker,
                memory_export_subrange_at_offset,
                memory_import_twice,
                same_process_import,
                dlpack_device_memory,
                memory_read_only_export,
                memory_misaligned_export_refused,
                memory_out_of_range_export_refused,
                memory_fixed_address_import,
                foreign_memory_export,
                host_registration,
                lease_count_and_release,
                remote_memory_over_ucx,
                lease_wait_unleased_times_out_then_returns,
                lease_free_while_imported,
                lease_killed_importer_is_gone,
                exported_event_outlives_exporter_drop,
                event_wait_timeout_and_stream_order,
                event_stream_wait_event,
                event_wait_async,
                event_ipc_export_import,
                event_ipc_needs_interprocess_flag,
                stream_synchronize_timeout,
                async_copy_roundtrip,
                memset_on_stream,
                stream_of_another_device_refused,
                managed_advise_and_prefetch,
                notify_wait_timeout,
                notify_signal_then_wait_resets,
                notify_wait_async,
                notify_stream_record_and_wait,
                notify_ipc_export_import,
                notify_timeout_semantics,
                notify_device_only_flags,
                queued_notify_outlives_its_drop,
                dropped_stream_never_waits_for_its_work,
                dropped_reservation_never_waits_for_queued_work,
                dropped_allocation_never_waits_for_queued_work,
                registered_memory_in_stream_order,
                cancelled_wait_async_releases_thread,
                context_unchanged_across_threads,
                vmm_granularity,
                vmm_physical_size_refused,
                vmm_reserve_map_access_unmap,
                vmm_export_import_physical,
                vmm_access_several_devices,
                vmm_copies_need_access,
                vmm_physical_properties,
                vmm_growable_in_process,
                vmm_growable_child_follows,
                pid_allow_list_in_child,
                memory_import_batch,
                process_id_is_what_allow_lists_accept,
                peer_access_import,
                handle_corrupted_text_refused,
                handle_wrong_kind_refused,
                handle_wrong_backend_refused,
                handle_forged_refused,
                cross_process_memory_event_notify,
                hygiene_full_cycle_in_child,
                channel_broadcast_to_two_processes,
                channel_queue_shares_samples,
                channel_dead_subscriber_returns_its_slots,
                channel_dead_publisher_is_reported,
                channel_tickets,
                channel_samples_fill_their_slot_and_busy_names_the_holders,
                channel_stream_ordered,
                channel_drop_waits_for_stream_releases,
                channel_ticket_waits_for_the_stream,
            ]
        );
    };
}
