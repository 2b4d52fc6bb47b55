//! An event or a notify as the C library keeps it: the object, the device
//! it belongs to, and its exports, kept until the object is released.
//! Both kinds are created, exported and imported the same way; what
//! differs is the device's call, which the caller gives.

use std::ffi::c_char;
use std::sync::Arc;

use hal_facade::kit::export::KeptExports;
use hal_facade::{Exported, HandleKind, SharedHandle};

use crate::decode::decode;
use crate::device::{device_for, DeviceObj};
use crate::options::{hal_import_options, import_read_only};
use crate::status::Failure;
use crate::text::str_arg;

/// An event or a notify (`T`) and what keeps it usable. Exports drop
/// first.
pub(crate) struct SyncObj<T: ?Sized> {
    exports: KeptExports,
    pub(crate) obj: Box<T>,
    pub(crate) device: Arc<DeviceObj>,
}

impl<T: ?Sized> SyncObj<T> {
    /// `obj` of `device`, not exported yet.
    pub(crate) fn new(obj: Box<T>, device: Arc<DeviceObj>) -> Arc<SyncObj<T>> {
        Arc::new(SyncObj {
            exports: KeptExports::default(),
            obj,
            device,
        })
    }

    /// Export the object with `export` (the device's call) and keep the
    /// export until the object is released; its handle text.
    pub(crate) fn export(
        &self,
        export: impl FnOnce(&DeviceObj, &T) -> hal_facade::Result<Exported>,
    ) -> Result<String, Failure> {
        let exported = export(&self.device, &self.obj)?;
        Ok(self.exports.keep(exported).to_text())
    }
}

/// Import the object of kind `kind` whose handle text is `text`, with
/// `import` (the device's call), on the device the handle names.
///
/// # Safety
///
/// `text` is NULL or a NUL-terminated string; `options` is NULL or a valid
/// `hal_import_options`.
pub(crate) unsafe fn import_text<T: ?Sized>(
    text: *const c_char,
    options: *const hal_import_options,
    kind: HandleKind,
    import: impl FnOnce(&DeviceObj, SharedHandle) -> hal_facade::Result<Box<T>>,
) -> Result<Arc<SyncObj<T>>, Failure> {
    // SAFETY: per this function's contract.
    let text = unsafe { str_arg(text, "text") }?;
    // SAFETY: per this function's contract (read-only means nothing for
    // an event or a notify).
    unsafe { import_read_only(options) }?;
    let handle = decode(text, kind)?;
    let device = Arc::new(device_for(&handle)?);
    let obj = import(&device, SharedHandle::from(handle))?;
    Ok(SyncObj::new(obj, device))
}
