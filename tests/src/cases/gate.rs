//! The gate of a stream: a notify a case makes a stream wait for, so that
//! the work queued behind it is "still running" until the case opens it.

use hal_core::DeviceExt;
use std::ops::Deref;

use hal_core::{Device, Notify};

use crate::support::must;

/// A gate, signalled when its case panics before it opened it: a failed
/// case must not leave a stream waiting for ever. A device may not bound a
/// stream's wait (CUDA's `cuStreamWaitValue32` has no timeout, so the
/// timeout of `stream_wait_notify` is a hint), and every later synchronize
/// of the process's device context (a strict unmap, a free that
/// synchronizes) would wait behind it: the other cases of the run would
/// hang instead of the failed one failing.
pub(crate) struct Gate<N: Notify>(N);

impl<N: Notify> Deref for Gate<N> {
    type Target = N;

    fn deref(&self) -> &N {
        &self.0
    }
}

impl<N: Notify> Drop for Gate<N> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The case has failed already; a failed signal adds nothing.
            let _ = self.0.signal();
        }
    }
}

/// A new gate on `dev`, closed.
#[track_caller]
pub(crate) fn gate<D: Device>(dev: &D) -> Gate<D::Notify> {
    Gate(must(dev.create_notify(), "create_notify (gate)"))
}
