//! What every case uses: the suite handle, the time bounds, assertions
//! with messages, allocation helpers.

use hal_core::DeviceExt;
use std::time::Duration;

use hal_core::{
    Allocation, Backend, Capabilities, Device, Error, ExportOptions, Importers, Location, Memory,
    Result,
};

use crate::{probe, process};

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
        Err(e) if e.is_unsupported() => crate::report::unsupported(cap),
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
    if dev.capabilities().contains(Capabilities::MEMORY_IS_HOST) {
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
