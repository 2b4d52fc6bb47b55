//! The cap on live IPC events this process created, as PyTorch keeps one
//! (1000): every driver IPC event holds driver resources for as long as
//! any process has it open. Past the cap an interprocess event is made
//! without a driver IPC handle and `record_event` synchronizes its stream
//! instead (`ipc_event.rs`); the first time, a warning is logged.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The cap PyTorch keeps on live IPC events.
pub const DEFAULT_IPC_EVENT_CAP: usize = 1000;

static CAP: AtomicUsize = AtomicUsize::new(DEFAULT_IPC_EVENT_CAP);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static WARNED: AtomicBool = AtomicBool::new(false);

/// One of the live driver IPC events, given back when it drops (after the
/// event was destroyed).
#[derive(Debug)]
pub(crate) struct Slot(());

impl Slot {
    /// A slot, or `None` (and a warning, the first time) past the cap.
    pub(crate) fn take() -> Option<Slot> {
        let cap = CAP.load(Ordering::Relaxed);
        let taken = LIVE.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < cap).then_some(n + 1)
        });
        if taken.is_ok() {
            return Some(Slot(()));
        }
        if !WARNED.swap(true, Ordering::Relaxed) {
            log::warn!(
                "{cap} CUDA IPC events are alive in this process: further interprocess events \
                 carry no driver IPC handle, and recording one synchronizes the stream instead"
            );
        }
        None
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Set the cap on live IPC events (tests only; the default is
/// [`DEFAULT_IPC_EVENT_CAP`]).
#[doc(hidden)]
pub fn set_ipc_event_cap(cap: usize) {
    CAP.store(cap, Ordering::Relaxed);
}

/// How many driver IPC events this process created are alive (tests).
#[doc(hidden)]
pub fn live_ipc_events() -> usize {
    LIVE.load(Ordering::Acquire)
}
