//! What `Event` and `Notify` share: the object, the device it belongs to
//! and its exports, kept until the Python object goes; and a wait that
//! answers `False` at its timeout.

use std::sync::Arc;

use hal::kit::export::KeptExports;
use hal::{Error, ExportOptions, Exported, WaitOptions};
use pyo3::prelude::*;

use crate::errors::{to_py, OrRaise};
use crate::options::export_options;
use crate::registry::DeviceObj;
use crate::timeout::duration;

/// An event or a notify (`T`) and what keeps it usable. Exports drop
/// first.
pub(crate) struct SyncObj<T: ?Sized> {
    exports: KeptExports,
    pub(crate) obj: Box<T>,
    pub(crate) device: Arc<DeviceObj>,
}

impl<T: ?Sized> SyncObj<T> {
    /// `obj` of `device`, not exported yet.
    pub(crate) fn new(device: Arc<DeviceObj>, obj: Box<T>) -> Arc<SyncObj<T>> {
        Arc::new(SyncObj {
            exports: KeptExports::default(),
            obj,
            device,
        })
    }

    /// Export the object to `importers` (as for `Memory.export`) with
    /// `export`, the device's call, and keep the export as long as the
    /// object: its handle text.
    pub(crate) fn export(
        &self,
        importers: Option<&Bound<'_, PyAny>>,
        export: impl FnOnce(&DeviceObj, &T, &ExportOptions) -> hal::Result<Exported>,
    ) -> PyResult<String> {
        let opts = export_options(importers, false)?;
        let exported = export(&self.device, &self.obj, &opts).or_raise()?;
        Ok(self.exports.keep(exported).to_text())
    }
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
