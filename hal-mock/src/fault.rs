//! Fault injection, per backend instance.
//!
//! A test takes the [`Faults`] of one [`MockBackend`](crate::MockBackend)
//! (every device opened from it shares them; another backend instance in
//! the same process, such as a parallel test's, is untouched) and:
//!
//! - makes the next allocation, export, import or wait fail with a vendor
//!   error of its choice ([`Faults::fail_next`]);
//! - loses a device ([`Faults::lose_device`]): every later call on it,
//!   including reads, writes, waits and queued stream work, fails with the
//!   vendor's device-lost code ([`Vendor::device_lost`]);
//! - removes a vendor entry point ([`Faults::remove_entry_point`]): every
//!   operation that would call it answers [`Error::Unsupported`] naming the
//!   symbol, as a backend does when `dlsym` does not find it in an older
//!   runtime.
//!
//! ```
//! use hal_mock::codes::cuda;
//! use hal_mock::fault::FaultOp;
//! use hal_mock::{MockBackend, Profile};
//! use hal_core::{AllocDesc, Backend, Device};
//!
//! let backend = MockBackend::new(Profile::cuda());
//! let device = backend.open(0)?;
//! backend.faults().fail_next(FaultOp::Allocate, cuda::OUT_OF_MEMORY);
//! let err = device.allocate(&AllocDesc::device(0, 4096)).unwrap_err();
//! assert!(cuda::OUT_OF_MEMORY.matches(&err));
//! assert!(device.allocate(&AllocDesc::device(0, 4096)).is_ok());
//!
//! backend.faults().remove_entry_point("cuIpcGetMemHandle");
//! # Ok::<(), hal_core::Error>(())
//! ```
//!
//! # In short
//!
//! This module makes the next allocation, export, import or wait fail with a
//! chosen vendor error, loses a device (every later call answers the
//! vendor's device-lost code: `CUDA_ERROR_DEVICE_UNAVAILABLE` (46),
//! `ACL_ERROR_RT_LOST_HEARTBEAT` (507010)), or removes a vendor entry point
//! so that the operations calling it answer `Unsupported` naming the symbol.
//! Faults belong to one backend instance: parallel tests do not see each
//! other's.
//!
//! For the stand-in libraries,
//! [`older::LibraryCopy`](crate::older::LibraryCopy) makes a copy of a built
//! stand-in whose dynamic symbol table lacks chosen entry points: loaded in
//! place of the stand-in, it is a driver or runtime older than those calls
//! (`dlsym` finds nothing for them).
//!
//! [`Vendor::device_lost`]: crate::Vendor::device_lost

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::Mutex;

use hal_core::kit::os::lock::lock;
use hal_core::{Error, Result};

use crate::codes::Code;
use crate::vendor::{Api, Vendor};

/// The kinds of operation a fault can be injected into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultOp {
    /// `allocate` and `allocate_physical`.
    Allocate,
    /// `export_memory`, `export_event`, `export_notify`, `export_physical`.
    Export,
    /// `import_memory`, `import_event`, `import_notify`, `import_physical`.
    Import,
    /// Host waits on events and notifies (blocking and async), stream
    /// `synchronize`, and `wait_unleased`.
    Wait,
}

impl FaultOp {
    const ALL: [FaultOp; 4] = [
        FaultOp::Allocate,
        FaultOp::Export,
        FaultOp::Import,
        FaultOp::Wait,
    ];

    fn index(self) -> usize {
        match self {
            FaultOp::Allocate => 0,
            FaultOp::Export => 1,
            FaultOp::Import => 2,
            FaultOp::Wait => 3,
        }
    }
}

impl fmt::Display for FaultOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FaultOp::Allocate => "allocate",
            FaultOp::Export => "export",
            FaultOp::Import => "import",
            FaultOp::Wait => "wait",
        })
    }
}

#[derive(Debug, Default)]
struct State {
    next: [VecDeque<Code>; 4],
    lost: BTreeMap<u32, Option<Code>>,
    missing: BTreeSet<String>,
}

/// The faults of one backend instance. Get them with
/// [`MockBackend::faults`](crate::MockBackend::faults) or
/// [`MockDevice::faults`](crate::MockDevice::faults).
#[derive(Debug, Default)]
pub struct Faults {
    state: Mutex<State>,
    /// The process the backend was made in: in a child forked from it,
    /// every simulated vendor call of the backend answers
    /// [`hal_core::Error::Forked`], as a vendor context does not survive
    /// `fork` (the simulator's stream workers do not either).
    origin: hal_core::kit::os::Origin,
}

impl Faults {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Make the next operation of kind `op` (on any device of this backend)
    /// fail with `code`. Calls queue up: two calls fail the next two.
    pub fn fail_next(&self, op: FaultOp, code: Code) {
        self.lock().next[op.index()].push_back(code);
    }

    /// How many injected failures of kind `op` are still waiting.
    pub fn pending(&self, op: FaultOp) -> usize {
        self.lock().next[op.index()].len()
    }

    /// Lose device `ordinal`: every later call on it fails with the
    /// vendor's device-lost code.
    pub fn lose_device(&self, ordinal: u32) {
        self.lose_device_with(ordinal, None);
    }

    /// Lose device `ordinal` with a chosen code instead of the vendor's
    /// device-lost code (`None`).
    pub fn lose_device_with(&self, ordinal: u32, code: Option<Code>) {
        self.lock().lost.insert(ordinal, code);
    }

    /// True when device `ordinal` was lost.
    pub fn is_lost(&self, ordinal: u32) -> bool {
        self.lock().lost.contains_key(&ordinal)
    }

    /// Make a vendor entry point "missing": every operation that calls it
    /// answers [`Error::Unsupported`] naming it. The names are those the
    /// loader resolves (`cuIpcGetMemHandle`, `aclrtIpcMemGetExportKey`, ...).
    pub fn remove_entry_point(&self, symbol: &str) {
        self.lock().missing.insert(symbol.to_string());
    }

    /// Bring back an entry point removed with [`Faults::remove_entry_point`].
    pub fn restore_entry_point(&self, symbol: &str) {
        self.lock().missing.remove(symbol);
    }

    /// Forget every injected failure, lost device and missing entry point.
    pub fn clear(&self) {
        *self.lock() = State::default();
    }

    /// [`hal_core::Error::Forked`] in a child forked after the backend was
    /// made.
    pub(crate) fn forked(&self, vendor: Vendor) -> Result<()> {
        self.origin
            .check(format_args!("the simulated {} backend", vendor.backend()))
    }

    /// True in a child forked after the backend was made: its drops leave
    /// the parent's simulated objects alone.
    pub(crate) fn is_forked(&self) -> bool {
        self.origin.forked()
    }

    /// The checks every simulated vendor call makes, in the order a real
    /// backend meets them: a missing symbol is found when the call is
    /// resolved, a lost device when it is made, then an injected failure.
    pub(crate) fn enter(
        &self,
        vendor: Vendor,
        ordinal: u32,
        api: Api,
        op: Option<FaultOp>,
    ) -> Result<()> {
        self.forked(vendor)?;
        let mut s = self.lock();
        let symbol = api.symbol(vendor);
        if s.missing.contains(symbol) {
            return Err(missing(vendor, symbol));
        }
        if let Some(code) = s.lost.get(&ordinal) {
            return Err(lost(vendor, ordinal, *code));
        }
        if let Some(op) = op {
            if let Some(code) = s.next[op.index()].pop_front() {
                return Err(code.error(
                    vendor.backend(),
                    format!("{symbol}: injected fault on the next {op}"),
                ));
            }
        }
        Ok(())
    }

    /// The device-lost check and an injected fault of kind `op`.
    pub(crate) fn inject(&self, vendor: Vendor, ordinal: u32, op: FaultOp) -> Result<()> {
        self.forked(vendor)?;
        let mut s = self.lock();
        if let Some(code) = s.lost.get(&ordinal) {
            return Err(lost(vendor, ordinal, *code));
        }
        match s.next[op.index()].pop_front() {
            Some(code) => {
                Err(code.error(vendor.backend(), format!("injected fault on the next {op}")))
            }
            None => Ok(()),
        }
    }

    /// The device-lost check alone, for work that calls no entry point of
    /// its own (queued stream work, reads of mapped memory).
    pub(crate) fn alive(&self, vendor: Vendor, ordinal: u32) -> Result<()> {
        self.forked(vendor)?;
        match self.lock().lost.get(&ordinal) {
            Some(code) => Err(lost(vendor, ordinal, *code)),
            None => Ok(()),
        }
    }

    /// Check that no injected failures are left; a helper for tests that
    /// want to be sure their fault was consumed.
    pub fn assert_consumed(&self) -> Result<()> {
        let s = self.lock();
        for op in FaultOp::ALL {
            let n = s.next[op.index()].len();
            if n > 0 {
                return Err(Error::invalid(format!(
                    "{n} injected {op} failure(s) were never consumed"
                )));
            }
        }
        Ok(())
    }
}

fn missing(vendor: Vendor, symbol: &str) -> Error {
    Error::unsupported(
        vendor.backend().name(),
        symbol,
        format!(
            "the vendor runtime does not export `{symbol}` (dlsym found no such symbol); \
             upgrade the runtime or avoid this operation"
        ),
    )
}

fn lost(vendor: Vendor, ordinal: u32, code: Option<Code>) -> Error {
    code.unwrap_or(vendor.device_lost()).error(
        vendor.backend(),
        format!(
            "device {ordinal} was lost: every call on it fails until the process restarts \
             the runtime"
        ),
    )
}
