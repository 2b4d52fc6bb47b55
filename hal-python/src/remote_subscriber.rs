//! `hal.remote.Subscriber` and `hal.remote.Sample`: a subscriber on
//! another host than its channel's publisher (`Node.subscribe`), each
//! sample received into a slot of its own and read there, in place,
//! through a read-only buffer view (or `read`), held until it is
//! released. A sample keeps its subscriber (and so the slots' memory)
//! until it is released.
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::sync::{Arc, Mutex};

use hal::objects::{SampleObj, SubscriberObj};
use hal::remote::RemoteSubscriber as InnerSubscriber;
use hal::Error;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::to_py;
use crate::remote_wait::drop_released;
use crate::sample;
use crate::timeout::duration;

/// A subscriber and the device its slots were allocated on.
pub(crate) type Held = SubscriberObj<InnerSubscriber>;

/// A sample of a subscriber on another host, in place.
type InPlace = SampleObj<Held>;

/// A subscriber to a channel of another host (`Node.subscribe`):
/// `receive()` gives each sample in place. `close()` (or the object's end)
/// unsubscribes: now, or once the samples still held are released.
#[pyclass(module = "hal.remote", frozen)]
pub struct Subscriber {
    /// Shared with the samples, which keep it until they are released.
    inner: Mutex<Option<Arc<Held>>>,
    slots: usize,
    slot_size: u64,
}

impl Subscriber {
    pub(crate) fn new(held: Held) -> Subscriber {
        Subscriber {
            slots: held.subscriber.slots(),
            slot_size: held.subscriber.slot_size(),
            inner: Mutex::new(Some(Arc::new(held))),
        }
    }

    fn open_inner(&self) -> PyResult<Arc<Held>> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| {
                to_py(Error::Closed {
                    what: "this hal.remote.Subscriber: it was closed".into(),
                })
            })
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        // Unsubscribing closes the connection: not under the GIL.
        drop_released(
            self.inner
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
    }
}

#[pymethods]
impl Subscriber {
    /// The next sample in place, waiting up to `timeout` seconds (None:
    /// until one comes or the channel ends); None when the timeout passed.
    /// Read it with `memoryview(sample)` (or `numpy.frombuffer`, no copy)
    /// or `sample.read()`; it holds its slot, and the publisher's, until
    /// `sample.release()` (or a `with` block's end, or the object's end).
    /// `hal.ClosedError` once the channel ended (its publisher closed or
    /// died, its offer was withdrawn, or the connection failed) and every
    /// sample that reached this subscriber was received.
    #[pyo3(signature = (timeout=None))]
    fn receive(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Sample>> {
        let held = self.open_inner()?;
        let timeout = duration(timeout)?;
        let got = py.allow_threads(|| match held.subscriber.receive_timeout(timeout) {
            Ok(s) => Ok(Some(s.detach())),
            Err(Error::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        });
        let Some(ticket) = got.map_err(to_py)? else {
            return Ok(None);
        };
        let sample = InPlace::new(held, ticket).map_err(to_py)?;
        Ok(Some(Sample {
            sample: Some(sample),
        }))
    }

    /// How many slots of its own it has: the most samples it holds.
    #[getter]
    fn slots(&self) -> usize {
        self.slots
    }

    /// The size of a slot: the most bytes a sample has.
    #[getter]
    fn slot_size(&self) -> u64 {
        self.slot_size
    }

    /// Unsubscribe: now, or once the samples still held are released.
    fn close(&self) {
        drop_released(self.inner.lock().unwrap_or_else(|e| e.into_inner()).take());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) {
        self.close();
    }

    fn __repr__(&self) -> String {
        format!(
            "<hal.remote.Subscriber of {} slots of {} bytes>",
            self.slots, self.slot_size
        )
    }
}

/// A sample received from another host, in place: read it
/// (`memoryview(sample)`, `sample.read()`); it holds its slot until
/// `release()`, the end of a `with` block, or the object's end.
#[pyclass(module = "hal.remote", frozen)]
pub struct Sample {
    /// Always Some but while dropped.
    sample: Option<InPlace>,
}

impl Sample {
    /// The sample (None only while it drops).
    fn sample(&self) -> PyResult<&InPlace> {
        self.sample.as_ref().ok_or_else(|| {
            to_py(Error::Closed {
                what: "this hal.remote.Sample: it was dropped".into(),
            })
        })
    }
}

impl Drop for Sample {
    /// No view is alive (each holds the object), so the slot goes back;
    /// the subscriber may end with it (not under the GIL).
    fn drop(&mut self) {
        drop_released(self.sample.take());
    }
}

#[pymethods]
impl Sample {
    /// Its length in bytes.
    fn __len__(&self) -> PyResult<usize> {
        Ok(self.sample()?.len() as usize)
    }

    /// Its sequence number (the publisher's count, from 0).
    #[getter]
    fn sequence(&self) -> PyResult<u64> {
        Ok(self.sample()?.sequence())
    }

    /// `n` bytes from `offset` (all that follow by default), copied.
    #[pyo3(signature = (offset=0, n=None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        n: Option<u64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        sample::read(py, self.sample()?, offset, n)
    }

    /// Release the sample: its slot, and the publisher's, are free again.
    /// `BufferError` while a view of it is alive; a second call does
    /// nothing.
    fn release(&self) -> PyResult<()> {
        sample::release(self.sample()?)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.release()
    }

    /// Buffer protocol: the sample's bytes, read-only, where the
    /// subscriber's slots are host-visible.
    ///
    /// # Safety
    ///
    /// Called by Python with a valid `view` to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let owner = slf.clone().into_any();
        let not_host = "the subscriber's slots are not host-visible: use sample.read()";
        // SAFETY: Python passes a valid `view`; `owner` holds the sample.
        unsafe { sample::lend(owner, slf.get().sample()?, view, flags, not_host) }
    }

    /// Buffer protocol: one view fewer.
    ///
    /// # Safety
    ///
    /// Called by Python with the view `__getbuffer__` filled.
    unsafe fn __releasebuffer__(&self, view: *mut pyo3::ffi::Py_buffer) {
        let _ = view;
        if let Some(sample) = &self.sample {
            sample.drop_view();
        }
    }

    fn __repr__(&self) -> String {
        match &self.sample {
            Some(s) => format!("<hal.remote.Sample {} of {} bytes>", s.sequence(), s.len()),
            None => "<hal.remote.Sample>".into(),
        }
    }
}
