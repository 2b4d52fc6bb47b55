//! [`UvmStream`]: a stream of this backend, the GPU's stream with an
//! identity of its own.
//!
//! A host step that fails reports at its stream's next `synchronize` or
//! `query_stream` (`step.rs`). Its error is kept under the stream's id,
//! unique in the process, which moves with the stream: a stream moved
//! between the call that queued the step and its synchronization still
//! gets the error, and a stream made later (at the same address, say)
//! never gets another's. A stream dropped with an error nobody took logs
//! it and lets it go.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::step_errors::StepErrors;

/// A stream of [`UvmDevice`](crate::UvmDevice): the GPU's stream `S`.
/// Work on the GPU's memory and on registered home pages runs on it as
/// the GPU's own; work a host step does is ordered on it too.
///
/// # Stream order
///
/// Streams, events and notifies are the GPU's. A copy, write or memset between
/// memory the GPU reaches runs on its stream as the GPU's own work: its own
/// memory, and home pages through their registration (`MemRef::Registered` of
/// the inner backend), at pinned-memory speed and with no thread; the stream
/// holds the home pages until it ran the work (`Device::hold_until_done`), so
/// dropping the buffer right after the call is safe. Home pages that the GPU
/// does not reach here (a read-only view, which is never registered, and every
/// home under [`Strategy::Pageable`](crate::Strategy::Pageable)) are worked on
/// by a host step: the stream records an event and waits on a notify; a thread
/// waits for the event, copies between the home pages and a staging buffer of
/// the GPU's pinned host memory (or between home pages, or fills them), and
/// signals the notify, so later work on the stream runs after it. The GPU's
/// side of such a copy is a GPU copy to or from the staging buffer, queued in
/// stream order at the call, so the step never reaches memory the caller may
/// free: what it works on, it holds. The call returns at once; an error of the
/// queued work comes back from the next `synchronize`. A host step costs an
/// event, a notify, a thread and, for a copy with the GPU's memory, a staging
/// buffer.
///
/// A stream of this backend ([`UvmStream`](crate::UvmStream)) is the GPU's
/// stream ([`UvmStream::inner`](crate::UvmStream::inner), for the GPU backend's
/// own calls such as a kernel launch) with an id of its own: a host step's
/// error is kept under it, so it reaches that stream's next `synchronize` or
/// `query_stream` however the stream was moved in between, and never another
/// stream's; a stream dropped with an error unreported logs it.
pub struct UvmStream<S> {
    inner: S,
    id: u64,
    errors: Arc<StepErrors>,
}

impl<S> UvmStream<S> {
    /// `inner` as a stream whose host steps keep their errors in `errors`.
    pub(crate) fn new(inner: S, errors: Arc<StepErrors>) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        UvmStream {
            inner,
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            errors,
        }
    }

    /// The GPU's stream underneath, for the GPU backend's own calls (its
    /// raw handle, to launch a kernel on it). Work queued there directly is
    /// ordered with this backend's work on the stream, but what it reaches
    /// is the caller's to keep alive.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The key of the stream's errors in [`StepErrors`].
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Where the errors of the stream's host steps wait.
    pub(crate) fn errors(&self) -> &Arc<StepErrors> {
        &self.errors
    }
}

impl<S> Drop for UvmStream<S> {
    fn drop(&mut self) {
        if let Err(e) = self.errors.take(self.id) {
            log::warn!("a host step failed on a stream dropped before it reported: {e}");
        }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for UvmStream<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UvmStream")
            .field("id", &self.id)
            .field("inner", &self.inner)
            .finish()
    }
}
