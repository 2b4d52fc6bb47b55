//! The calling thread's current context, kept as the vendors keep it: one
//! per thread (CUDA's `cuCtxGetCurrent` / `cuCtxSetCurrent`, Ascend's
//! `aclrtGetCurrentContext` / `aclrtSetCurrentContext`).
//!
//! Every simulated vendor call runs with its device's context pushed on the
//! calling thread and pops it before it returns, so the thread's current
//! context after a call is the one it had before, whatever a framework in
//! the same process made current (the contract's rule, see
//! [`ContextProbe::current_context`](hal_core::testing::ContextProbe::current_context)). A
//! simulated call that finds no context of its backend current answers the
//! vendor's invalid-context code, as a driver would: the push is what makes
//! it work, so the rule is exercised, not assumed.
//!
//! ```
//! use hal_core::{AllocDesc, Backend, Device};
//! use hal_mock::context::{self, Context};
//! use hal_mock::MockBackend;
//!
//! let backend = MockBackend::cuda();
//! let dev = backend.open(0)?;
//! // A framework made its own context current on this thread.
//! let theirs = backend.open(1)?.context();
//! context::make_current(Some(theirs));
//! let _a = dev.allocate(&AllocDesc::device(0, 4096))?;
//! assert_eq!(context::current(), Some(theirs), "left as it was");
//! context::make_current(None);
//! # Ok::<(), hal_core::Error>(())
//! ```

use std::cell::Cell;

/// A context of the simulator: the primary context of one device of one
/// backend instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Context {
    /// Which backend instance (an id unique in this process).
    pub(crate) instance: u64,
    /// Which device of it.
    pub(crate) ordinal: u32,
}

impl Context {
    /// An opaque id, as [`ContextProbe::current_context`](hal_core::testing::ContextProbe::current_context) reports it.
    pub fn id(self) -> u64 {
        (self.instance << 16) | u64::from(self.ordinal)
    }

    /// The device ordinal the context belongs to.
    pub fn ordinal(self) -> u32 {
        self.ordinal
    }
}

thread_local! {
    static CURRENT: Cell<Option<Context>> = const { Cell::new(None) };
}

/// The calling thread's current context.
pub fn current() -> Option<Context> {
    CURRENT.with(Cell::get)
}

/// Make `ctx` the calling thread's current context (`cuCtxSetCurrent`), as
/// a framework sharing the process would.
pub fn make_current(ctx: Option<Context>) {
    CURRENT.with(|c| c.set(ctx));
}

/// A context pushed on the calling thread; dropping it restores what was
/// current before (`cuCtxPopCurrent`).
#[must_use = "the context is popped when this guard drops"]
pub(crate) struct Pushed {
    previous: Option<Context>,
}

impl Drop for Pushed {
    fn drop(&mut self) {
        make_current(self.previous);
    }
}

/// Push `ctx` on the calling thread (`cuCtxPushCurrent`).
pub(crate) fn push(ctx: Context) -> Pushed {
    let previous = CURRENT.with(|c| c.replace(Some(ctx)));
    Pushed { previous }
}
