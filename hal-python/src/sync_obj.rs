//! What `Event` and `Notify` share: the object, the device it belongs to
//! and its exports, kept until the Python object goes ([`KeptObject`]),
//! their export, and a wait that answers `False` at its timeout.

use hal::kit::export::KeptObject;
use hal::{Error, ExportOptions, Exported, WaitOptions};
use pyo3::prelude::*;

use crate::errors::{to_py, OrRaise};
use crate::options::export_options;
use crate::registry::DeviceObj;
use crate::timeout::duration;

/// An event or a notify (`T`), its device and its exports.
pub(crate) type SyncObj<T> = KeptObject<T, DeviceObj>;

/// Export `obj` to `importers` (as for `Memory.export`) with `export`, the
/// device's call, and keep the export as long as the object: its handle
/// text.
pub(crate) fn export_kept<T: ?Sized>(
    obj: &SyncObj<T>,
    importers: Option<&Bound<'_, PyAny>>,
    export: impl FnOnce(&DeviceObj, &T, &ExportOptions) -> hal::Result<Exported>,
) -> PyResult<String> {
    let opts = export_options(importers, false)?;
    let exported = export(&obj.device, &obj.obj, &opts).or_raise()?;
    Ok(obj.keep(exported))
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
