//! `hal.remote.RemoteExport`: memory or a notify exported to other hosts,
//! its handle text, its importers, the signals they send.

use std::sync::Arc;

use hal::objects::RemoteExportObj;
use hal::remote::RemoteExported;
use pyo3::prelude::*;

use crate::memory_obj::{GivenTexts, MemoryObj};
use crate::remote_wait::wait_released;

/// An export to other hosts (`Node.export`, `Node.export_notify`): `text`
/// is what another host's `Node.connect` takes. The export ends when this
/// object goes (or `close()`): the memory is unregistered, its importers'
/// operations fail with `hal.ClosedError`, and later connections are
/// refused with `hal.NotFoundError`.
#[pyclass(module = "hal.remote", frozen)]
pub struct RemoteExport {
    /// None once closed.
    inner: std::sync::Mutex<Option<Arc<Held>>>,
}

/// An export and the memory it keeps alive.
type Held = RemoteExportObj<GivenTexts>;

impl RemoteExport {
    pub(crate) fn new(exported: RemoteExported, memory: Option<Arc<MemoryObj>>) -> RemoteExport {
        RemoteExport {
            inner: std::sync::Mutex::new(Some(Arc::new(Held::new(exported, memory)))),
        }
    }

    /// The live export, or `hal.ClosedError` once closed.
    fn exported(&self) -> PyResult<Arc<Held>> {
        let held = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match &*held {
            Some(h) => Ok(Arc::clone(h)),
            None => Err(crate::errors::to_py(hal::Error::Closed {
                what: "this RemoteExport was closed".into(),
            })),
        }
    }
}

impl Drop for RemoteExport {
    fn drop(&mut self) {
        // Ending the export waits for its importers' connections to close.
        let held = self
            .inner
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        crate::remote_wait::drop_released(held);
    }
}

#[pymethods]
impl RemoteExport {
    /// The handle's text (`hal1r.` ...) for the other host. It holds the
    /// export's secret: give it only to the processes meant to use it.
    #[getter]
    fn text(&self) -> PyResult<String> {
        Ok(self.exported()?.text())
    }

    /// How many importers proved the secret and are still connected.
    #[getter]
    fn importers(&self) -> PyResult<usize> {
        Ok(self.exported()?.importers())
    }

    /// Wait (the GIL released) until at least `n` importers are connected:
    /// True, or False when `timeout` seconds passed first (None: forever).
    #[pyo3(signature = (n, timeout=None))]
    fn wait_importers(&self, py: Python<'_>, n: usize, timeout: Option<f64>) -> PyResult<bool> {
        let e = self.exported()?;
        wait_released(py, timeout, |t| e.wait_importers(n, t))
    }

    /// Wait (the GIL released) until no importer is connected (each let
    /// go, or died): True, or False when `timeout` seconds passed first.
    #[pyo3(signature = (timeout=None))]
    fn wait_unused(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let e = self.exported()?;
        wait_released(py, timeout, |t| e.wait_unused(t))
    }

    /// Wait (the GIL released) for an importer's next signal
    /// (`RemoteMemory.write_signal`: its bytes are in the memory then;
    /// `RemoteNotify.signal`) and take it: True, or False when `timeout`
    /// seconds passed first. Each signal is taken once.
    #[pyo3(signature = (timeout=None))]
    fn wait_signal(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let e = self.exported()?;
        wait_released(py, timeout, |t| e.wait_signal(t))
    }

    /// End the export now (as when this object goes; a wait in progress
    /// on another thread ends it when it returns).
    fn close(&self, py: Python<'_>) {
        let held = self.inner.lock().unwrap_or_else(|e| e.into_inner()).take();
        py.allow_threads(|| drop(held));
    }

    fn __repr__(&self) -> String {
        match self.exported() {
            Ok(e) => format!(
                "<hal.remote.RemoteExport at {}, {} importer(s)>",
                e.handle().listener,
                e.importers()
            ),
            Err(_) => "<hal.remote.RemoteExport (closed)>".into(),
        }
    }
}
