//! Remote notifies: another host's notify, connected to from a node and
//! signalled from here.

use std::ffi::c_char;
use std::sync::Arc;

use hal_facade::remote::RemoteNotify;

use crate::device::{need, put};
use crate::last_error::call;
use crate::remote_node::{hal_remote_node, NODES};
use crate::status::hal_status;
use crate::table::{Kind, Table};
use crate::text::str_arg;

/// Another host's notify (opaque), connected to with
/// `hal_remote_connect_notify`. Release it with
/// `hal_remote_notify_release`.
#[allow(non_camel_case_types)]
pub struct hal_remote_notify {
    _private: [u8; 0],
}

static REMOTE_NOTIFIES: Table<RemoteNotify> = Table::new(Kind::RemoteNotify);

/// Connect `node` to the notify export whose handle text is `text` (from
/// `hal_remote_export_text` of a `hal_remote_export_notify` on the other
/// host). A wrong secret is `HAL_ERR_PERMISSION_DENIED`; malformed text,
/// or a memory export's, `HAL_ERR_INVALID_HANDLE`.
///
/// # Safety
///
/// `text` is NULL or a NUL-terminated string; `out` is NULL or valid for a
/// write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_connect_notify(
    node: *const hal_remote_node,
    text: *const c_char,
    out: *mut *mut hal_remote_notify,
) -> hal_status {
    call("hal_remote_connect_notify", || {
        need(out, "out")?;
        let node = NODES.get(node as usize, "node")?;
        // SAFETY: per the contract.
        let text = unsafe { str_arg(text, "text") }?;
        let notify = node.connect_notify(text)?;
        let token = REMOTE_NOTIFIES.insert(Arc::new(notify));
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_remote_notify, "out") }
    })
}

/// Signal the notify on its host (its `hal_notify_wait` wakes). Returns
/// once the signal is sent.
#[no_mangle]
pub extern "C" fn hal_remote_notify_signal(notify: *const hal_remote_notify) -> hal_status {
    call("hal_remote_notify_signal", || {
        let notify = REMOTE_NOTIFIES.get(notify as usize, "notify")?;
        Ok(notify.signal()?)
    })
}

/// Release a remote notify (its connection closes). A second release is
/// `HAL_ERR_DOUBLE_RELEASE`.
#[no_mangle]
pub extern "C" fn hal_remote_notify_release(notify: *mut hal_remote_notify) -> hal_status {
    call("hal_remote_notify_release", || {
        REMOTE_NOTIFIES.remove(notify as usize, "notify").map(drop)
    })
}
