//! `hal.remote.Subscriber` and `hal.remote.Sample`: a subscriber on
//! another host than its channel's publisher (`Node.subscribe`), each
//! sample received into a slot of its own and read there, in place,
//! through a read-only buffer view (or `read`), held until it is
//! released. A sample keeps its subscriber (and so the slots' memory)
//! until it is released.

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use hal::remote::{RemoteSampleTicket, RemoteSubscriber as InnerSubscriber};
use hal::Error;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{invalid, to_py};
use crate::remote_wait::drop_released;
use crate::timeout::duration;
use hal::objects::DeviceObj;

/// A subscriber and the device its slots were allocated on, declared in
/// drop order: the subscription ends (its slots are freed) before the
/// device can go.
pub(crate) struct Held {
    subscriber: InnerSubscriber,
    _device: Arc<DeviceObj>,
}

impl Held {
    pub(crate) fn new(subscriber: InnerSubscriber, device: Arc<DeviceObj>) -> Held {
        Held {
            subscriber,
            _device: device,
        }
    }
}

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
        let host = held
            .subscriber
            .memory()
            .host_ptr()
            .map(|base| base as usize + ticket.offset() as usize);
        Ok(Some(Sample {
            host,
            offset: ticket.offset(),
            len: ticket.len(),
            sequence: ticket.sequence(),
            ticket: Mutex::new(Some(ticket)),
            views: AtomicUsize::new(0),
            subscriber: Mutex::new(Some(held)),
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
    subscriber: Mutex<Option<Arc<Held>>>,
    ticket: Mutex<Option<RemoteSampleTicket>>,
    host: Option<usize>,
    offset: u64,
    len: u64,
    sequence: u64,
    views: AtomicUsize,
}

impl Sample {
    fn held(&self) -> PyResult<Arc<Held>> {
        let released = || invalid("this sample was released");
        if self
            .ticket
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
        {
            return Err(released());
        }
        self.subscriber
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(released)
    }

    /// Release the slot with `ticket`, if it is still held.
    fn give_back(&self, ticket: Option<RemoteSampleTicket>) -> PyResult<()> {
        let Some(t) = ticket else {
            return Ok(());
        };
        let held = self
            .subscriber
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match held {
            Some(h) => h.subscriber.release_ticket(t).map_err(to_py),
            None => Ok(()),
        }
    }
}

impl Drop for Sample {
    /// No view is alive (each holds the object), so the slot goes back;
    /// the subscriber may end with it (not under the GIL).
    fn drop(&mut self) {
        let ticket = self
            .ticket
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let _ = self.give_back(ticket);
        drop_released(
            self.subscriber
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
    }
}

#[pymethods]
impl Sample {
    /// Its length in bytes.
    fn __len__(&self) -> usize {
        self.len as usize
    }

    /// Its sequence number (the publisher's count, from 0).
    #[getter]
    fn sequence(&self) -> u64 {
        self.sequence
    }

    /// `n` bytes from `offset` (all that follow by default), copied.
    #[pyo3(signature = (offset=0, n=None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        n: Option<u64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let held = self.held()?;
        let n = n.unwrap_or(self.len.saturating_sub(offset));
        let end = offset.checked_add(n);
        if end.is_none_or(|e| e > self.len) {
            return Err(invalid(format!(
                "{n} bytes at {offset} of a sample of {}",
                self.len
            )));
        }
        let mut out = vec![0u8; n as usize];
        let at = self.offset + offset;
        py.allow_threads(|| held.subscriber.memory().read(at, &mut out))
            .map_err(to_py)?;
        Ok(PyBytes::new(py, &out))
    }

    /// Release the sample: its slot, and the publisher's, are free again.
    /// `BufferError` while a view of it is alive; a second call does
    /// nothing.
    fn release(&self) -> PyResult<()> {
        // Views are counted with the ticket locked (`__getbuffer__`).
        let ticket = {
            let mut held = self.ticket.lock().unwrap_or_else(|e| e.into_inner());
            let views = self.views.load(Ordering::Acquire);
            if views > 0 {
                return Err(PyBufferError::new_err(format!(
                    "{views} view(s) of this sample are alive: release them \
                     (memoryview.release(), del the arrays) before releasing it"
                )));
            }
            held.take()
        };
        self.give_back(ticket)
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
        let sample = slf.get();
        let Some(host) = sample.host else {
            return Err(PyBufferError::new_err(
                "the subscriber's slots are not host-visible: use sample.read()",
            ));
        };
        {
            let ticket = sample.ticket.lock().unwrap_or_else(|e| e.into_inner());
            if ticket.is_none() {
                return Err(invalid("this sample was released"));
            }
            sample.views.fetch_add(1, Ordering::AcqRel);
        }
        let owner = slf.clone().into_any();
        // SAFETY: Python passes a valid `view`; the sample's `len` bytes at
        // `host` are host memory of the subscriber's slots, which this
        // sample keeps (`Arc`) as long as the view's owner (this sample)
        // lives; nothing writes the slot until the sample is released,
        // which `release` refuses while a view is counted.
        let filled = unsafe {
            crate::buffer::fill_bytes(view, flags, owner, host as *mut u8, sample.len, true)
        };
        if filled.is_err() {
            sample.views.fetch_sub(1, Ordering::AcqRel);
        }
        filled
    }

    /// Buffer protocol: one view fewer.
    ///
    /// # Safety
    ///
    /// Called by Python with the view `__getbuffer__` filled.
    unsafe fn __releasebuffer__(&self, view: *mut pyo3::ffi::Py_buffer) {
        let _ = view;
        self.views.fetch_sub(1, Ordering::AcqRel);
    }

    fn __repr__(&self) -> String {
        format!(
            "<hal.remote.Sample {} of {} bytes>",
            self.sequence, self.len
        )
    }
}
