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
/// the GPU's own; work a host step does is ordered on it too (see the
/// crate documentation, *Stream order*).
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
