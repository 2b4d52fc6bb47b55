//! Notifies: a wake-up signal one process raises and another waits for.

use std::ffi::c_char;

use hal_facade::dynamic::DynNotify;
use hal_facade::{HandleKind, ImportOptions, WaitOptions};

use crate::device::{hal_device, need, put, DEVICES};
use crate::last_error::call;
use crate::memory::timeout;
use crate::options::{export_options, hal_export_options, hal_import_options};
use crate::status::hal_status;
use crate::sync_obj::{import_text, SyncObj};
use crate::table::{Kind, Table};
use crate::text::give_text;

/// A notify (opaque): created here (`hal_notify_create`) or imported
/// (`hal_notify_import`). Release it with `hal_notify_release`.
#[allow(non_camel_case_types)]
pub struct hal_notify {
    _private: [u8; 0],
}

pub(crate) static NOTIFIES: Table<SyncObj<dyn DynNotify>> = Table::new(Kind::Notify);

/// Create a notify on `device`. Some backends (Ascend) let only the
/// creator wait on a notify: each side then creates the notify it waits on
/// and exports it to the side that signals.
///
/// # Safety
///
/// `out` is NULL or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_notify_create(
    device: *mut hal_device,
    out: *mut *mut hal_notify,
) -> hal_status {
    call("hal_notify_create", || {
        need(out, "out")?;
        let device = DEVICES.get(device as usize, "device")?;
        let notify = device.device.create_notify()?;
        let token = NOTIFIES.insert(SyncObj::new(device, notify));
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_notify, "out") }
    })
}

/// Export a notify; `out_text` is its handle text for `hal_notify_import`
/// (free it with `hal_string_free`). The export lasts until the notify is
/// released.
///
/// # Safety
///
/// `options` is NULL or a valid `hal_export_options`; `out_text` is NULL or
/// valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_notify_export(
    notify: *mut hal_notify,
    options: *const hal_export_options,
    out_text: *mut *mut c_char,
) -> hal_status {
    call("hal_notify_export", || {
        need(out_text, "out_text")?;
        let notify = NOTIFIES.get(notify as usize, "notify")?;
        // SAFETY: per the contract.
        let opts = unsafe { export_options(options) }?;
        let text = notify.keep(notify.device.device.export_notify(&*notify.obj, &opts)?);
        // SAFETY: checked not NULL above.
        unsafe { give_text(out_text, text) };
        Ok(())
    })
}

/// Import a notify another process exported, from its handle text.
///
/// # Safety
///
/// `text` is NULL or a NUL-terminated string; `options` is NULL or a valid
/// `hal_import_options`; `out` is NULL or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_notify_import(
    text: *const c_char,
    options: *const hal_import_options,
    out: *mut *mut hal_notify,
) -> hal_status {
    call("hal_notify_import", || {
        need(out, "out")?;
        let import = |d: &hal_facade::objects::DeviceObj, shared| {
            d.device.import_notify(shared, &ImportOptions::default())
        };
        // SAFETY: per the contract.
        let notify = unsafe { import_text(text, options, HandleKind::Notify, import) }?;
        let token = NOTIFIES.insert(notify);
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_notify, "out") }
    })
}

/// Signal (raise) the notify from the host.
#[no_mangle]
pub extern "C" fn hal_notify_signal(notify: *mut hal_notify) -> hal_status {
    call("hal_notify_signal", || {
        let notify = NOTIFIES.get(notify as usize, "notify")?;
        Ok(notify.obj.signal()?)
    })
}

/// Wait until the notify is signalled, and reset it; give up after
/// `timeout_ns` nanoseconds with `HAL_ERR_TIMEOUT` (negative: wait
/// forever; zero: look once).
#[no_mangle]
pub extern "C" fn hal_notify_wait(notify: *mut hal_notify, timeout_ns: i64) -> hal_status {
    call("hal_notify_wait", || {
        let notify = NOTIFIES.get(notify as usize, "notify")?;
        let opts = WaitOptions {
            timeout: timeout(timeout_ns),
            ..Default::default()
        };
        Ok(notify.obj.wait(opts)?)
    })
}

/// Release a notify (and stop exporting it). A second release is
/// `HAL_ERR_DOUBLE_RELEASE`.
#[no_mangle]
pub extern "C" fn hal_notify_release(notify: *mut hal_notify) -> hal_status {
    call("hal_notify_release", || {
        NOTIFIES.remove(notify as usize, "notify").map(drop)
    })
}
