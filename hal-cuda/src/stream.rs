//! Streams and events of the driver. Host waits poll `cuStreamQuery` /
//! `cuEventQuery` with the library's spin-then-sleep policy, so that every
//! wait honours its timeout and a dropped `wait_async` stops.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hal_core::exchange::Lease;
use hal_core::lease::LeaseTable;
use hal_core::queued::{Held, Holding};
use hal_core::wait::{self, blocking_future};
use hal_core::{Event, EventFlags, Result, WaitFuture, WaitOptions};

use crate::context::Primary;
use crate::event_cap::Slot;
use crate::result::{NOT_READY, SUCCESS};
use crate::sys::{CUevent, CUstream};

/// The longest a host wait sleeps between two looks at the device.
const POLL: Duration = Duration::from_micros(200);

/// Poll `query` (a `cuStreamQuery` or `cuEventQuery`) with the library's
/// spin-then-sleep policy, sleeping at most [`POLL`] at a time, until it
/// answers true, fails, or `timeout` passes.
fn poll_until(
    what: &str,
    spin: Duration,
    timeout: Option<Duration>,
    query: impl FnMut() -> Result<bool>,
) -> Result<()> {
    wait::poll_until(what, spin, timeout, query, |left| {
        std::thread::sleep(left.map_or(POLL, |l| l.min(POLL)))
    })
}

/// A stream of the driver.
pub struct CudaStream {
    pub(crate) primary: Arc<Primary>,
    pub(crate) raw: CUstream,
    /// False for a stream the caller owns (`wrap_stream`): never destroyed here.
    pub(crate) owned: bool,
    /// What queued work reads or writes from the host (the bytes of a
    /// queued write, the page of a notify recorded or waited on), held
    /// until the stream ran it.
    pub(crate) held: Held,
}

// SAFETY: a CUstream is a driver handle usable from any thread; the host
// bytes kept for it are behind a mutex.
unsafe impl Send for CudaStream {}
// SAFETY: see `Send`.
unsafe impl Sync for CudaStream {}

impl std::fmt::Debug for CudaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaStream")
            .field("raw", &self.raw)
            .field("owned", &self.owned)
            .finish()
    }
}

impl CudaStream {
    /// True when everything queued so far has run (`cuStreamQuery`); what
    /// the stream held for that work is let go then.
    pub(crate) fn query(&self) -> Result<bool> {
        let driver = &self.primary.driver;
        // Locked across the query: work is queued with the list locked
        // (see `holding`), so an idle answer covers everything it holds.
        let mut held = self.held.lock();
        let _ctx = self.primary.enter()?;
        let f = driver.stream_query()?;
        // SAFETY: `raw` is a live stream of this context.
        match unsafe { f(self.raw) } {
            SUCCESS => {
                held.release();
                Ok(true)
            }
            NOT_READY => Ok(false),
            other => Err(driver.error("cuStreamQuery", other)),
        }
    }

    /// What the stream holds, locked: queue work that needs something
    /// held with this guard alive, then hold that thing in it (see
    /// [`hal_core::queued`]). When many values are held, an idle stream lets
    /// go of them first.
    pub(crate) fn holding(&self) -> Holding<'_> {
        if self.held.wants_query() {
            // An error here is the stream's, returned by its next wait.
            let _ = self.query();
        }
        self.held.lock()
    }

    /// Wait until the stream ran everything queued, or `timeout` passes.
    pub(crate) fn wait(&self, timeout: Option<Duration>) -> Result<()> {
        poll_until(
            "the CUDA stream to finish",
            Duration::from_micros(50),
            timeout,
            || self.query(),
        )
    }
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        if self.primary.forked() {
            // A forked child: the context is the parent's; leave it be.
            return;
        }
        // Queued work may still use what the stream holds. Work that has
        // not run, which may wait for a notify nobody signals yet, is not
        // waited for here: the stream goes to hal-core's reaper, which
        // drops it once the work ran, and the drop returns. A stream that
        // holds nothing is destroyed at once: cuStreamDestroy returns and
        // the driver runs the queued work on.
        if !self.held.is_empty() {
            let idle = self.query();
            let deferred =
                hal_core::reaper::defer_unless_idle(idle, "a CUDA stream", || CudaStream {
                    primary: Arc::clone(&self.primary),
                    raw: self.raw,
                    owned: self.owned,
                    held: std::mem::take(&mut self.held),
                });
            if deferred {
                // The reaper's value destroys the stream.
                self.owned = false;
                return;
            }
        }
        if !self.owned {
            return;
        }
        let driver = &self.primary.driver;
        let destroyed = self.primary.enter().and_then(|_ctx| {
            let f = driver.stream_destroy()?;
            // SAFETY: this value created the stream and destroys it once
            // (a stream given to the reaper is no longer owned here).
            driver.check("cuStreamDestroy_v2", unsafe { f(self.raw) })
        });
        if let Err(e) = destroyed {
            log::warn!("destroying a CUDA stream: {e}");
        }
    }
}

impl hal_core::reaper::Drained for CudaStream {
    fn drained(&mut self) -> Result<bool> {
        self.query()
    }
}

/// What an event is to IPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IpcMode {
    /// Not an IPC event.
    None,
    /// A driver IPC event (`CU_EVENT_INTERPROCESS`, or opened by handle).
    Driver,
    /// An interprocess event past the cap on live IPC events: no driver
    /// handle; recording it synchronizes the stream, so that it is complete
    /// whenever anyone looks (`ipc_event.rs`).
    SyncOnRecord,
}

/// An event of the driver.
#[must_use = "the event is destroyed when this value drops"]
pub struct CudaEvent {
    pub(crate) inner: Arc<RawEvent>,
    pub(crate) flags: EventFlags,
    pub(crate) ipc: IpcMode,
    /// Imported from an export (never exported again).
    pub(crate) imported: bool,
    /// Its importers' leases, made at the first export; its drop waits
    /// for them before the driver's event is destroyed.
    pub(crate) leases: OnceLock<Arc<LeaseTable>>,
    /// An importer's lease on the exporter's event, let go after the
    /// opened event is destroyed.
    pub(crate) _lease: Option<Lease>,
}

/// The driver's event, destroyed when the last holder (the event, a
/// waiter thread of a dropped `wait_async`, or the wait for an exported
/// event's importers) lets go.
pub(crate) struct RawEvent {
    pub(crate) primary: Arc<Primary>,
    pub(crate) raw: CUevent,
    /// Its place among the live IPC events, given back after the destroy.
    pub(crate) _slot: Option<Slot>,
}

// SAFETY: a CUevent is a driver handle usable from any thread.
unsafe impl Send for RawEvent {}
// SAFETY: see `Send`.
unsafe impl Sync for RawEvent {}

impl std::fmt::Debug for CudaEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaEvent")
            .field("raw", &self.inner.raw)
            .field("flags", &self.flags)
            .field("ipc", &self.ipc)
            .field("imported", &self.imported)
            .finish()
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        let Some(leases) = self.leases.get().filter(|t| t.count() > 0) else {
            return;
        };
        // Importers still use it: CUDA makes using an IPC event after its
        // exporter destroyed it undefined, so the destroy waits for their
        // leases on a thread of its own (the thread holds the event).
        let (leases, inner) = (Arc::clone(leases), Arc::clone(&self.inner));
        let kept = Arc::clone(&self.inner);
        let spawned = hal_core::os::thread::spawn("hal-cuda-deferred-event", move || {
            if let Err(e) = leases.wait_empty(None) {
                log::warn!("waiting for the importers of a CUDA IPC event: {e}");
            }
            drop(inner);
        });
        match spawned {
            Ok(_) => drop(kept),
            Err(e) => {
                log::warn!(
                    "a CUDA IPC event is still imported and no thread could wait for its \
                     importers ({e}); it is left undestroyed"
                );
                std::mem::forget(kept);
            }
        }
    }
}

impl Drop for RawEvent {
    fn drop(&mut self) {
        if self.primary.forked() {
            // A forked child: the context is the parent's; leave it be.
            return;
        }
        let driver = &self.primary.driver;
        let destroyed = self.primary.enter().and_then(|_ctx| {
            let f = driver.event_destroy()?;
            // SAFETY: the event was created for this value, which destroys
            // it once, when no one holds it any more.
            driver.check("cuEventDestroy_v2", unsafe { f(self.raw) })
        });
        if let Err(e) = destroyed {
            log::warn!("destroying a CUDA event: {e}");
        }
    }
}

impl RawEvent {
    fn query(&self) -> Result<bool> {
        let driver = &self.primary.driver;
        let _ctx = self.primary.enter()?;
        let f = driver.event_query()?;
        // SAFETY: `raw` is a live event of this context.
        match unsafe { f(self.raw) } {
            SUCCESS => Ok(true),
            NOT_READY => Ok(false),
            other => Err(driver.error("cuEventQuery", other)),
        }
    }

    fn wait(&self, opts: WaitOptions) -> Result<()> {
        poll_until("the CUDA event", opts.spin, opts.timeout, || self.query())
    }
}

impl Event for CudaEvent {
    fn query(&self) -> Result<bool> {
        self.inner.query()
    }

    fn wait(&self, opts: WaitOptions) -> Result<()> {
        self.inner.wait(opts)
    }

    fn wait_async(&self, opts: WaitOptions) -> WaitFuture<'_> {
        let inner = Arc::clone(&self.inner);
        blocking_future(move || inner.wait(opts))
    }
}
