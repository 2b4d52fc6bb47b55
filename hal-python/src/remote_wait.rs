//! The waits of remote exports from Python: seconds as a float (None:
//! forever), True when the wait ended, False when the timeout passed.

use std::time::Duration;

use hal::Error;
use pyo3::prelude::*;

use crate::errors::to_py;
use crate::timeout::duration;

/// What "forever" waits: long enough never to end, short enough that a
/// deadline of now plus it is a time the clock can hold.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Run `wait` with the GIL released, for `timeout` seconds (None:
/// forever): True when it ended, False at the timeout.
pub(crate) fn wait_released(
    py: Python<'_>,
    timeout: Option<f64>,
    wait: impl FnOnce(Duration) -> hal::Result<()> + Send,
) -> PyResult<bool> {
    let timeout = duration(timeout)?.unwrap_or(FOREVER);
    match py.allow_threads(|| wait(timeout)) {
        Ok(()) => Ok(true),
        Err(Error::Timeout { .. }) => Ok(false),
        Err(e) => Err(to_py(e)),
    }
}

/// Drop `held` with the GIL released: ending a remote object waits on the
/// network (a flush, connections closing, the progress thread joined).
pub(crate) fn drop_released<T: Send>(held: Option<T>) {
    if held.is_some() {
        Python::with_gil(|py| py.allow_threads(move || drop(held)));
    }
}
