//! Events, where the backend shares them across processes: one process
//! records, another waits until the work before the record has run.

use std::sync::{Arc, Mutex};

use hal::dynamic::DynEvent;
use hal::{Error, Exported, WaitOptions};
use pyo3::prelude::*;

use crate::errors::{to_py, OrRaise};
use crate::options::export_options;
use crate::registry::DeviceObj;
use crate::timeout::duration;

/// An event and what keeps it usable. Exports drop first.
struct EventObj {
    exports: Mutex<Vec<Exported>>,
    event: Box<dyn DynEvent>,
    device: Arc<DeviceObj>,
}

/// An interprocess event: created here (`Device.event()`) or imported
/// (`hal.import_handle`). `record()` marks the work queued so far on the
/// device's stream; `wait()` waits until it has run.
#[pyclass(module = "hal", frozen)]
pub struct Event {
    inner: Arc<EventObj>,
}

impl Event {
    pub(crate) fn new(device: Arc<DeviceObj>, event: Box<dyn DynEvent>) -> Event {
        Event {
            inner: Arc::new(EventObj {
                exports: Mutex::new(Vec::new()),
                event,
                device,
            }),
        }
    }
}

#[pymethods]
impl Event {
    /// Export the event: the handle text for `hal.import_handle`.
    /// `importers` as for `Memory.export`.
    #[pyo3(signature = (importers=None))]
    fn export(&self, importers: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
        let opts = export_options(importers, false)?;
        let exported = self
            .inner
            .device
            .device
            .export_event(&*self.inner.event, &opts)
            .or_raise()?;
        let text = exported.to_text();
        self.inner
            .exports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(exported);
        Ok(text)
    }

    /// Record the event on the device's own stream (made on first use).
    fn record(&self) -> PyResult<()> {
        let stream = self.inner.device.stream().or_raise()?;
        self.inner
            .device
            .device
            .record_event(&*stream, &*self.inner.event)
            .or_raise()
    }

    /// Whether the event has completed.
    fn query(&self) -> PyResult<bool> {
        self.inner.event.query().or_raise()
    }

    /// Wait until the event has completed: True; False when `timeout`
    /// seconds passed first (None: forever). The GIL is released.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let opts = WaitOptions {
            timeout: duration(timeout)?,
            ..Default::default()
        };
        match py.allow_threads(|| self.inner.event.wait(opts)) {
            Ok(()) => Ok(true),
            Err(Error::Timeout { .. }) => Ok(false),
            Err(e) => Err(to_py(e)),
        }
    }

    fn __repr__(&self) -> String {
        format!("<hal.Event on {}>", self.inner.device.backend.name())
    }
}
