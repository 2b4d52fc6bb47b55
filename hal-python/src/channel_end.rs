//! The ends of a channel as its Python objects share them: the
//! `Publisher` and the loans it gave, whose buffer views keep it from
//! closing under them, and how a subscriber takes its next sample.

use std::sync::atomic::AtomicUsize;
use std::sync::Mutex;

use std::time::Duration;

use hal::channel::{Publisher as InnerPublisher, Sample, Subscriber};
use hal::Error;
use pyo3::prelude::*;

use crate::errors::to_py;

/// The error of a call on a channel end that was closed.
pub(crate) fn closed(what: &str) -> Error {
    Error::Closed {
        what: format!("this {what}: it was closed"),
    }
}

/// The next sample of `sub`: if one is there (`now`), else waiting up to
/// `timeout`; None when there was none or the timeout passed.
pub(crate) fn next_sample(
    sub: &Subscriber,
    timeout: Option<Duration>,
    now: bool,
) -> hal::Result<Option<Sample<'_>>> {
    if now {
        return sub.try_receive();
    }
    match sub.receive_timeout(timeout) {
        Ok(s) => Ok(Some(s)),
        Err(Error::Timeout { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A publisher, until it is closed, and the buffer views of its loans.
pub(crate) struct PublisherEnd {
    pub(crate) inner: Mutex<Option<InnerPublisher>>,
    /// Buffer views of its loans now (changed with `inner` locked): the
    /// publisher is not closed under them.
    pub(crate) views: AtomicUsize,
}

impl PublisherEnd {
    pub(crate) fn new(publisher: InnerPublisher) -> PublisherEnd {
        PublisherEnd {
            inner: Mutex::new(Some(publisher)),
            views: AtomicUsize::new(0),
        }
    }

    /// Run `f` on the publisher with the GIL released; `ClosedError` once
    /// it was closed.
    pub(crate) fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut InnerPublisher) -> hal::Result<T> + Send,
    ) -> PyResult<T> {
        py.allow_threads(|| {
            let mut held = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            held.as_mut().map_or_else(|| Err(closed("Publisher")), f)
        })
        .map_err(to_py)
    }
}
