//! Notifies: a wake-up signal one process raises and another waits for.

use std::sync::{Arc, Mutex};

use hal::dynamic::DynNotify;
use hal::{Error, Exported, WaitOptions};
use pyo3::prelude::*;

use crate::errors::{to_py, OrRaise};
use crate::options::export_options;
use crate::registry::DeviceObj;
use crate::timeout::duration;

/// A notify and what keeps it usable. Exports drop first.
struct NotifyObj {
    exports: Mutex<Vec<Exported>>,
    notify: Box<dyn DynNotify>,
    device: Arc<DeviceObj>,
}

/// A notify: created here (`Device.notify()`) or imported
/// (`hal.import_handle`). `signal()` raises it; `wait()` waits until it is
/// raised and resets it. Some backends (Ascend) let only the creator wait.
#[pyclass(module = "hal", frozen)]
pub struct Notify {
    inner: Arc<NotifyObj>,
}

impl Notify {
    pub(crate) fn new(device: Arc<DeviceObj>, notify: Box<dyn DynNotify>) -> Notify {
        Notify {
            inner: Arc::new(NotifyObj {
                exports: Mutex::new(Vec::new()),
                notify,
                device,
            }),
        }
    }
}

#[pymethods]
impl Notify {
    /// Export the notify: the handle text for `hal.import_handle` in the
    /// process that signals (or waits on) it. `importers` as for
    /// `Memory.export`. The export lasts as long as this object.
    #[pyo3(signature = (importers=None))]
    fn export(&self, importers: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
        let opts = export_options(importers, false)?;
        let exported = self
            .inner
            .device
            .device
            .export_notify(&*self.inner.notify, &opts)
            .or_raise()?;
        let text = exported.to_text();
        self.inner
            .exports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(exported);
        Ok(text)
    }

    /// Raise the notify from the host.
    fn signal(&self, py: Python<'_>) -> PyResult<()> {
        py.allow_threads(|| self.inner.notify.signal()).or_raise()
    }

    /// Wait until the notify is raised, and reset it: True; False when
    /// `timeout` seconds passed first (None: wait forever; 0: look once).
    /// Other threads run meanwhile (the GIL is released).
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let opts = WaitOptions {
            timeout: duration(timeout)?,
            ..Default::default()
        };
        match py.allow_threads(|| self.inner.notify.wait(opts)) {
            Ok(()) => Ok(true),
            Err(Error::Timeout { .. }) => Ok(false),
            Err(e) => Err(to_py(e)),
        }
    }

    /// `await n.wait_async(timeout)`: `wait` without blocking the asyncio
    /// event loop (it runs in the loop's default thread pool). Pass a
    /// timeout when the task may be cancelled: a cancelled await leaves
    /// the pool's thread waiting until the notify is raised or the timeout
    /// passes.
    #[pyo3(signature = (timeout=None))]
    fn wait_async<'py>(
        slf: &Bound<'py, Self>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        duration(timeout)?;
        let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
        let wait = slf.getattr("wait")?;
        event_loop.call_method1("run_in_executor", (py.None(), wait, timeout))
    }

    fn __repr__(&self) -> String {
        format!("<hal.Notify on {}>", self.inner.device.backend.name())
    }
}
