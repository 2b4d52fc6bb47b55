//! Streams of the driver. Host waits poll `cuStreamQuery` (and, for
//! events, `cuEventQuery`) with the library's spin-then-sleep policy, so
//! that every wait honours its timeout and a dropped `wait_async` stops.

use std::sync::Arc;
use std::time::Duration;

use hal_core::kit::stream::methods::VendorStream;
use hal_core::kit::stream::queued::{Holding, QueuedUse};
use hal_core::wait;
use hal_core::Result;

use crate::context::Primary;
use crate::ffi::result::stream;
use crate::ffi::Stream;

/// The longest a host wait sleeps between two looks at the device.
const POLL: Duration = Duration::from_micros(200);

/// Poll `query` (a `cuStreamQuery` or `cuEventQuery`) with the library's
/// spin-then-sleep policy, sleeping at most [`POLL`] at a time, until it
/// answers true, fails, or `timeout` passes.
pub(crate) fn poll_until(
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
    pub(crate) raw: Stream,
    /// False for a stream the caller owns (`wrap_stream`): never destroyed here.
    pub(crate) owned: bool,
    /// What queued work reads or writes from the host (the bytes of a
    /// queued write, the page of a notify recorded or waited on), held
    /// until the stream ran it.
    pub(crate) held: QueuedUse,
}

impl std::fmt::Debug for CudaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaStream")
            .field("raw", &self.raw)
            .field("owned", &self.owned)
            .finish()
    }
}

impl VendorStream for CudaStream {
    /// True when everything queued so far has run (`cuStreamQuery`); what
    /// the stream held for that work is let go then.
    fn query(&self) -> Result<bool> {
        self.held.query(|| {
            let _ctx = self.primary.enter()?;
            stream::query(&self.primary.driver, self.raw)
        })
    }

    /// Polls `cuStreamQuery`.
    fn wait(&self, timeout: Option<Duration>) -> Result<()> {
        poll_until(
            "the CUDA stream to finish",
            Duration::from_micros(50),
            timeout,
            || self.query(),
        )
    }

    /// When many values are held, an idle stream lets go of them first.
    fn holding(&self) -> Holding<'_> {
        self.held.holding(|| self.query())
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
                hal_core::kit::stream::reaper::defer_unless_idle(idle, "a CUDA stream", || {
                    CudaStream {
                        primary: Arc::clone(&self.primary),
                        raw: self.raw,
                        owned: self.owned,
                        held: std::mem::take(&mut self.held),
                    }
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
        // This value created the stream and destroys it once (a stream
        // given to the reaper is no longer owned here).
        let destroyed = self
            .primary
            .enter()
            .and_then(|_ctx| stream::destroy(&self.primary.driver, self.raw));
        if let Err(e) = destroyed {
            log::warn!("destroying a CUDA stream: {e}");
        }
    }
}

impl hal_core::kit::stream::reaper::Drained for CudaStream {
    fn drained(&mut self) -> Result<bool> {
        self.query()
    }
}
