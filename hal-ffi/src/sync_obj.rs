//! An event or a notify as the C library keeps it ([`KeptObject`]: the
//! object, the device it belongs to, and its exports, kept until the object
//! is released), and its import from handle text. Both kinds are imported
//! the same way; what differs is the device's call, which the caller gives.

use std::ffi::c_char;
use std::sync::Arc;

use hal_facade::kit::export::KeptObject;
use hal_facade::{HandleKind, SharedHandle};

use crate::decode::decode;
use crate::device::{device_for, DeviceObj};
use crate::options::{hal_import_options, import_read_only};
use crate::status::Failure;
use crate::text::str_arg;

/// An event or a notify (`T`), its device and its exports.
pub(crate) type SyncObj<T> = KeptObject<T, DeviceObj>;

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
    Ok(SyncObj::new(device, obj))
}
