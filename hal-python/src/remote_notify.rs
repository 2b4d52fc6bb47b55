//! `hal.remote.RemoteNotify`: another host's notify, signalled from here.

use pyo3::prelude::*;

use crate::errors::OrRaise;

/// Another host's notify (`Node.connect_notify`): `signal()` wakes its
/// waiter there.
#[pyclass(module = "hal.remote", frozen)]
pub struct RemoteNotify {
    /// Always Some but while dropped.
    notify: Option<hal::remote::RemoteNotify>,
}

impl RemoteNotify {
    pub(crate) fn new(notify: hal::remote::RemoteNotify) -> RemoteNotify {
        RemoteNotify {
            notify: Some(notify),
        }
    }

    fn notify(&self) -> PyResult<&hal::remote::RemoteNotify> {
        self.notify.as_ref().ok_or_else(|| {
            crate::errors::to_py(hal::Error::Closed {
                what: "this RemoteNotify was closed".into(),
            })
        })
    }
}

impl Drop for RemoteNotify {
    fn drop(&mut self) {
        // Letting go closes the connection.
        crate::remote_wait::drop_released(self.notify.take());
    }
}

#[pymethods]
impl RemoteNotify {
    /// Signal the notify on its host; returns once the signal is sent.
    fn signal(&self, py: Python<'_>) -> PyResult<()> {
        let notify = self.notify()?;
        py.allow_threads(|| notify.signal()).or_raise()
    }

    fn __repr__(&self) -> String {
        match self.notify() {
            Ok(n) => format!("<hal.remote.RemoteNotify at {}>", n.handle().listener),
            Err(_) => "<hal.remote.RemoteNotify (closed)>".into(),
        }
    }
}
