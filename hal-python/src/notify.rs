//! Notifies: a wake-up signal one process raises and another waits for.

use std::sync::Arc;

use hal::dynamic::DynNotify;
use pyo3::prelude::*;

use crate::errors::OrRaise;
use crate::sync_obj::{export_kept, wait_released, SyncObj};
use crate::timeout::duration;

/// A notify: created here (`Device.notify()`) or imported
/// (`hal.import_handle`). `signal()` raises it; `wait()` waits until it is
/// raised and resets it. Some backends (Ascend) let only the creator wait.
#[pyclass(module = "hal", frozen)]
pub struct Notify {
    pub(crate) inner: Arc<SyncObj<dyn DynNotify>>,
}

impl Notify {
    pub(crate) fn new(inner: Arc<SyncObj<dyn DynNotify>>) -> Notify {
        Notify { inner }
    }
}

#[pymethods]
impl Notify {
    /// Export the notify: the handle text for `hal.import_handle` in the
    /// process that signals (or waits on) it. `importers` as for
    /// `Memory.export`. The export lasts as long as this object.
    #[pyo3(signature = (importers=None))]
    fn export(&self, importers: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
        export_kept(&self.inner, importers, |d, n, opts| {
            d.device.export_notify(n, opts)
        })
    }

    /// Raise the notify from the host.
    fn signal(&self, py: Python<'_>) -> PyResult<()> {
        py.allow_threads(|| self.inner.obj.signal()).or_raise()
    }

    /// Wait until the notify is raised, and reset it: True; False when
    /// `timeout` seconds passed first (None: wait forever; 0: look once).
    /// Other threads run meanwhile (the GIL is released).
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        wait_released(py, timeout, |opts| self.inner.obj.wait(opts))
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
