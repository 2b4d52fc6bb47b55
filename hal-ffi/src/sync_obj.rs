//! Events and notifies imported from handle text: the shared objects
//! ([`SyncObj`]) of a handle decoded and checked here. Both kinds are
//! imported the same way; what differs is the device's call, which the
//! caller gives.

use std::ffi::c_char;
use std::sync::Arc;

use hal_facade::objects::{import_sync, DeviceObj};
use hal_facade::{HandleKind, SharedHandle};

use crate::decode::decode;
use crate::options::{hal_import_options, import_read_only};
use crate::status::Failure;
use crate::text::str_arg;

pub(crate) use hal_facade::objects::SyncObj;

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
    Ok(import_sync(handle, import)?)
}
