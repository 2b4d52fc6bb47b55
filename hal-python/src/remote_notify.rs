//! `hal.remote.RemoteNotify`: another host's notify, signalled from here.

use pyo3::prelude::*;

use crate::errors::OrRaise;

/// Another host's notify (`Node.connect_notify`): `signal()` wakes its
/// waiter there.
#[pyclass(module = "hal.remote", frozen)]
pub struct RemoteNotify {
    notify: hal::remote::RemoteNotify,
}

impl RemoteNotify {
    pub(crate) fn new(notify: hal::remote::RemoteNotify) -> RemoteNotify {
        RemoteNotify { notify }
    }
}

#[pymethods]
impl RemoteNotify {
    /// Signal the notify on its host; returns once the signal is sent.
    fn signal(&self, py: Python<'_>) -> PyResult<()> {
        py.allow_threads(|| self.notify.signal()).or_raise()
    }

    fn __repr__(&self) -> String {
        format!(
            "<hal.remote.RemoteNotify at {}>",
            self.notify.handle().listener
        )
    }
}
