//! Events, where the backend shares them across processes: one process
//! records, another waits until the work before the record has run.

use std::sync::Arc;

use hal::dynamic::DynEvent;
use pyo3::prelude::*;

use crate::errors::OrRaise;
use crate::sync_obj::{export_kept, wait_released, SyncObj};

/// An interprocess event: created here (`Device.event()`) or imported
/// (`hal.import_handle`). `record()` marks the work queued so far on the
/// device's stream; `wait()` waits until it has run.
#[pyclass(module = "hal", frozen)]
pub struct Event {
    inner: Arc<SyncObj<dyn DynEvent>>,
}

impl Event {
    pub(crate) fn new(inner: Arc<SyncObj<dyn DynEvent>>) -> Event {
        Event { inner }
    }
}

#[pymethods]
impl Event {
    /// Export the event: the handle text for `hal.import_handle`.
    /// `importers` as for `Memory.export`.
    #[pyo3(signature = (importers=None))]
    fn export(&self, importers: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
        export_kept(&self.inner, importers, |d, e, opts| {
            d.device.export_event(e, opts)
        })
    }

    /// Record the event on the device's own stream (made on first use).
    fn record(&self) -> PyResult<()> {
        let stream = self.inner.device.stream().or_raise()?;
        self.inner
            .device
            .device
            .record_event(stream, &*self.inner.obj)
            .or_raise()
    }

    /// Whether the event has completed.
    fn query(&self) -> PyResult<bool> {
        self.inner.obj.query().or_raise()
    }

    /// Wait until the event has completed: True; False when `timeout`
    /// seconds passed first (None: forever). The GIL is released.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        wait_released(py, timeout, |opts| self.inner.obj.wait(opts))
    }

    fn __repr__(&self) -> String {
        format!("<hal.Event on {}>", self.inner.device.backend.name())
    }
}
