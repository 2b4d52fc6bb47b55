//! `Device.publisher` and `Device.subscribe`: a channel of samples from one
//! process to others (`hal::channel`), its bytes copied in and out
//! (`publish`, `receive`), or loaned and received in place (`loan`,
//! `receive_view`: `channel_view.rs`).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hal::channel::{
    ChannelOptions, Mode, Publisher as InnerPublisher, SubscribeOptions,
    Subscriber as InnerSubscriber,
};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::channel_end::{closed, next_sample, PublisherEnd};
use crate::channel_view::{Loan, Sample};
use crate::errors::{invalid, to_py, OrRaise};
use crate::timeout::duration;
use hal::objects::DeviceObj;

/// The publishing end of a channel; `close()` (or the object's end)
/// closes the channel.
#[pyclass(module = "hal", frozen)]
pub struct Publisher {
    /// Shared with its loans.
    end: Arc<PublisherEnd>,
    _device: Arc<DeviceObj>,
}

impl Publisher {
    pub(crate) fn create(
        py: Python<'_>,
        device: Arc<DeviceObj>,
        name: &str,
        slots: usize,
        slot_size: u64,
        mode: &str,
        timeout: Option<f64>,
    ) -> PyResult<Publisher> {
        let mode = match mode {
            "broadcast" => Mode::Broadcast,
            "queue" => Mode::Queue,
            other => {
                return Err(invalid(format!(
                    "mode={other:?}: \"broadcast\" (every subscriber gets every sample) or \
                     \"queue\" (each sample goes to one)"
                )))
            }
        };
        let options = ChannelOptions::default()
            .slots(slots)
            .slot_size(slot_size)
            .mode(mode)
            .timeout(duration(timeout)?.unwrap_or(Duration::from_secs(60 * 60 * 24 * 365)));
        let inner = py
            .allow_threads(|| InnerPublisher::create(&*device.device, name, &options))
            .or_raise()?;
        Ok(Publisher {
            end: Arc::new(PublisherEnd::new(inner)),
            _device: device,
        })
    }

    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut InnerPublisher) -> hal::Result<T> + Send,
    ) -> PyResult<T> {
        self.end.with(py, f)
    }
}

#[pymethods]
impl Publisher {
    /// Publish `data` as the next sample, waiting (up to the channel's
    /// timeout) while the subscribers still hold the next slot; its
    /// sequence number.
    fn publish(&self, py: Python<'_>, data: &[u8]) -> PyResult<u64> {
        let data = data.to_vec();
        self.with(py, move |p| {
            let loan = p.loan()?;
            loan.write(0, &data)?;
            loan.publish(data.len() as u64)
        })
    }

    /// `publish` if the next slot is free now; `BusyError` otherwise.
    fn try_publish(&self, py: Python<'_>, data: &[u8]) -> PyResult<u64> {
        let data = data.to_vec();
        self.with(py, move |p| {
            let loan = p.try_loan()?;
            loan.write(0, &data)?;
            loan.publish(data.len() as u64)
        })
    }

    /// Loan the next slot to fill in place (`memoryview(loan)`,
    /// `numpy.frombuffer(loan, ...)` where the channel's memory is
    /// host-visible; `loan.write` anywhere), waiting (up to the channel's
    /// timeout) while the subscribers still hold it; then `loan.publish(n)`.
    fn loan(&self, py: Python<'_>) -> PyResult<Loan> {
        Loan::take(py, &self.end, false)
    }

    /// `loan` if the next slot is free now; `BusyError` otherwise.
    fn try_loan(&self, py: Python<'_>) -> PyResult<Loan> {
        Loan::take(py, &self.end, true)
    }

    /// How many subscribers are subscribed now.
    fn subscribers(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |p| p.subscribers())
    }

    /// Close the channel: the subscribers receive what was published, then
    /// `ClosedError`. `BufferError` while a view of a loan is alive (the
    /// slots' memory goes with the channel): release it first.
    fn close(&self) -> PyResult<()> {
        let mut held = self.end.inner.lock().unwrap_or_else(|e| e.into_inner());
        let views = self.end.views.load(Ordering::Acquire);
        if views > 0 {
            return Err(PyBufferError::new_err(format!(
                "{views} view(s) of this publisher's loans are alive: release them \
                 (memoryview.release(), del the arrays) before closing"
            )));
        }
        drop(held.take());
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.close()
    }
}

/// The receiving end of a channel; `close()` (or the object's end)
/// unsubscribes.
#[pyclass(module = "hal", frozen)]
pub struct Subscriber {
    /// Shared with the samples received in place, which keep it (and the
    /// slots' mapping) until they are released.
    inner: Mutex<Option<Arc<InnerSubscriber>>>,
    _device: Arc<DeviceObj>,
}

impl Subscriber {
    pub(crate) fn open(py: Python<'_>, device: Arc<DeviceObj>, name: &str) -> PyResult<Subscriber> {
        let inner = py
            .allow_threads(|| {
                InnerSubscriber::open(&*device.device, name, &SubscribeOptions::default())
            })
            .or_raise()?;
        Ok(Subscriber {
            inner: Mutex::new(Some(Arc::new(inner))),
            _device: device,
        })
    }

    /// The subscriber, while it is open.
    fn open_inner(&self) -> hal::Result<Arc<InnerSubscriber>> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| closed("Subscriber"))
    }

    /// The next sample's bytes, or None when `timeout` passed first.
    fn take(
        &self,
        py: Python<'_>,
        timeout: Option<Duration>,
        once: bool,
    ) -> PyResult<Option<Vec<u8>>> {
        let sub = self.open_inner().map_err(to_py)?;
        py.allow_threads(|| {
            next_sample(&sub, timeout, once)?
                .map(|s| s.to_vec())
                .transpose()
        })
        .map_err(to_py)
    }
}

#[pymethods]
impl Subscriber {
    /// The next sample's bytes, waiting up to `timeout` seconds (None:
    /// until one comes or the publisher is gone); None when the timeout
    /// passed. `ClosedError` once the publisher closed or died and every
    /// sample was received.
    #[pyo3(signature = (timeout=None))]
    fn receive<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let got = self.take(py, duration(timeout)?, false)?;
        Ok(got.map(|b| PyBytes::new(py, &b)))
    }

    /// The next sample's bytes if one is there now, else None.
    fn try_receive<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let got = self.take(py, None, true)?;
        Ok(got.map(|b| PyBytes::new(py, &b)))
    }

    /// The next sample in place, waiting up to `timeout` seconds (None:
    /// until one comes or the publisher is gone); None when the timeout
    /// passed. Read it with `memoryview(sample)` (host-visible memory) or
    /// `sample.read()`; it holds its slot until `sample.release()` (or a
    /// `with` block's end, or the object's end).
    #[pyo3(signature = (timeout=None))]
    fn receive_view(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Sample>> {
        let sub = self.open_inner().map_err(to_py)?;
        Sample::take(py, sub, duration(timeout)?, false)
    }

    /// `receive_view` if a sample is there now, else None.
    fn try_receive_view(&self, py: Python<'_>) -> PyResult<Option<Sample>> {
        let sub = self.open_inner().map_err(to_py)?;
        Sample::take(py, sub, None, true)
    }

    /// Unsubscribe: now, or once the samples received in place that are
    /// still held are released.
    fn close(&self) {
        drop(self.inner.lock().unwrap_or_else(|e| e.into_inner()).take());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) {
        self.close();
    }
}
