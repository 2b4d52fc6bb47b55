//! Streams of the runtime, and the polling wait every host wait of this
//! crate uses (so that timeouts hold and dropped `wait_async` futures end
//! their threads).

use std::sync::Arc;
use std::time::Duration;

use hal_core::kit::stream::methods::VendorStream;
use hal_core::kit::stream::queued::{Holding, QueuedUse};
use hal_core::Result;

use crate::context::Ctx;
use crate::ffi::result::stream;
use crate::ffi::sys::StreamHandle;

/// How long one slice of a polling wait lasts.
pub(crate) const SLICE: Duration = Duration::from_millis(1);

/// The pause between two slices of a polling wait
/// ([`hal_core::wait::poll_until`]'s `sleep`): none, since each slice
/// itself waits up to a [`SLICE`].
pub(crate) fn between_slices(_left: Option<Duration>) {}

/// A runtime timeout of `t`: milliseconds, rounded up, at least 1 (a
/// shorter one would mean "forever" or be refused), at most `i32::MAX`.
pub(crate) fn millis(t: Duration) -> u64 {
    let ms = t.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms)
        .unwrap_or(u64::MAX)
        .clamp(1, i32::MAX as u64)
}

/// An ordered queue of work on an Ascend device.
pub struct AscendStream {
    pub(crate) ctx: Arc<Ctx>,
    /// The runtime's stream; a caller's (`wrap_stream`) is never destroyed
    /// here.
    pub(crate) raw: StreamHandle,
    /// What queued work reaches (the bytes of a queued write, a notify
    /// recorded or waited on), held until the stream ran it.
    pub(crate) held: QueuedUse,
}

impl std::fmt::Debug for AscendStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AscendStream")
            .field("device", &self.ctx.ordinal)
            .field("raw", &self.raw)
            .field("owned", &self.raw.owned())
            .finish()
    }
}

impl AscendStream {
    /// Create a stream on `ctx`'s device.
    pub(crate) fn create(ctx: &Arc<Ctx>) -> Result<AscendStream> {
        ctx.call(|| {
            Ok(AscendStream {
                ctx: Arc::clone(ctx),
                raw: stream::create(&ctx.rt)?,
                held: QueuedUse::default(),
            })
        })
    }
}

impl VendorStream for AscendStream {
    /// True when everything queued so far has run (`aclrtStreamQuery`);
    /// what the stream held for that work is let go then.
    fn query(&self) -> Result<bool> {
        self.held
            .query(|| self.ctx.call(|| stream::query(&self.ctx.rt, &self.raw)))
    }

    /// Wait until the stream ran its work, at most `timeout`
    /// (`aclrtSynchronizeStreamWithTimeout`; its own timeout code is
    /// [`Error::Timeout`](hal_core::Error::Timeout)).
    fn wait(&self, timeout: Option<Duration>) -> Result<()> {
        let ms = timeout.map_or(-1, |t| millis(t) as i32);
        let ran = self
            .ctx
            .call(|| stream::synchronize(&self.ctx.rt, &self.raw, ms))?;
        if !ran {
            return Err(hal_core::Error::Timeout {
                what: "the Ascend stream to run its work".into(),
                after: timeout.unwrap_or_default(),
            });
        }
        // Idle, as far as work queued before the wait goes; the query lets
        // go of what the stream held under the lock that covers queuing.
        self.query().map(drop)
    }

    /// The stream's held values locked for queuing (see
    /// [`hal_core::kit::stream::queued`]); past many of them, an idle stream lets
    /// go of them first.
    fn holding(&self) -> Holding<'_> {
        self.held.holding(|| self.query())
    }
}

impl Drop for AscendStream {
    fn drop(&mut self) {
        // Queued work may still use what the stream holds. Work that has
        // not run, which may wait for a notify nobody records yet, is not
        // waited for here: the stream goes to hal-core's reaper, which
        // drops it once the work ran, and the drop returns.
        if !self.held.is_empty() {
            let idle = self.query();
            let deferred =
                hal_core::kit::stream::reaper::defer_unless_idle(idle, "an Ascend stream", || {
                    AscendStream {
                        ctx: Arc::clone(&self.ctx),
                        raw: self.raw.take(),
                        held: std::mem::take(&mut self.held),
                    }
                });
            if deferred {
                // The reaper's value destroys the stream.
                return;
            }
        }
        if !self.raw.owned() {
            return;
        }
        // Destroyed once: the handle is taken out (a stream given to the
        // reaper was taken out before).
        let raw = self.raw.take();
        let destroyed = self.ctx.call(|| stream::destroy(&self.ctx.rt, raw));
        if let Err(e) = destroyed {
            log::warn!("destroying an Ascend stream: {e}");
        }
    }
}

impl hal_core::kit::stream::reaper::Drained for AscendStream {
    fn drained(&mut self) -> Result<bool> {
        self.query()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_round_up_to_whole_milliseconds_never_zero() {
        assert_eq!(millis(Duration::ZERO), 1);
        assert_eq!(millis(Duration::from_micros(1)), 1);
        assert_eq!(millis(Duration::from_micros(1500)), 2);
        assert_eq!(millis(Duration::from_secs(1)), 1000);
        assert_eq!(millis(Duration::MAX), i32::MAX as u64);
    }
}
