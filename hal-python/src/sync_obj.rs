//! What `Event` and `Notify` share: the shared object ([`SyncObj`]: the
//! object, its device and its exports, kept until the Python object goes),
//! their export, and a wait that answers `False` at its timeout.

use hal::objects::{export_sync, DeviceObj};
use hal::{Error, ExportOptions, Exported, WaitOptions};
use pyo3::prelude::*;

use crate::errors::{to_py, OrRaise};
use crate::options::export_options;
use crate::timeout::duration;

pub(crate) use hal::objects::SyncObj;

/// Export `obj` to `importers` (as for `Memory.export`) with `export`, the
/// device's call, and keep the export as long as the object: its handle
/// text.
pub(crate) fn export_kept<T: ?Sized>(
    obj: &SyncObj<T>,
    importers: Option<&Bound<'_, PyAny>>,
    export: impl FnOnce(&DeviceObj, &T, &ExportOptions) -> hal::Result<Exported>,
) -> PyResult<String> {
    let opts = export_options(importers, false)?;
    export_sync(obj, &opts, export).or_raise()
}

/// Run `wait` with the GIL released and `timeout` seconds (None: forever;
/// 0: look once): True when it ended, False when the timeout passed first.
pub(crate) fn wait_released(
    py: Python<'_>,
    timeout: Option<f64>,
    wait: impl FnOnce(WaitOptions) -> hal::Result<()> + Send,
) -> PyResult<bool> {
    let opts = WaitOptions {
        timeout: duration(timeout)?,
        ..Default::default()
    };
    match py.allow_threads(|| wait(opts)) {
        Ok(()) => Ok(true),
        Err(Error::Timeout { .. }) => Ok(false),
        Err(e) => Err(to_py(e)),
    }
}
