//! Events, where the backend shares them across processes: one process
//! records, another waits until the work before the record has run.

use std::ffi::c_char;

use hal_facade::dynamic::DynEvent;
use hal_facade::{EventFlags, HandleKind, ImportOptions, WaitOptions};

use crate::device::{hal_device, need, put, DEVICES};
use crate::last_error::call;
use crate::memory::timeout;
use crate::options::{export_options, hal_export_options, hal_import_options};
use crate::status::hal_status;
use crate::sync_obj::{import_text, SyncObj};
use crate::table::{Kind, Table};
use crate::text::give_text;

/// An event (opaque): created here (`hal_event_create`) or imported
/// (`hal_event_import`). Release it with `hal_event_release`.
#[allow(non_camel_case_types)]
pub struct hal_event {
    _private: [u8; 0],
}

static EVENTS: Table<SyncObj<dyn DynEvent>> = Table::new(Kind::Event);

/// Create an interprocess event on `device` (CUDA `CU_EVENT_INTERPROCESS`,
/// Ascend `ACL_EVENT_IPC`, a futex word on CPU shared memory), to export
/// with `hal_event_export`. `HAL_ERR_UNSUPPORTED` where the backend does
/// not share events.
///
/// # Safety
///
/// `out` is NULL or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_event_create(
    device: *mut hal_device,
    out: *mut *mut hal_event,
) -> hal_status {
    call("hal_event_create", || {
        need(out, "out")?;
        let device = DEVICES.get(device as usize, "device")?;
        let event = device.device.create_event(EventFlags {
            interprocess: true,
            timing: false,
        })?;
        let token = EVENTS.insert(SyncObj::new(device, event));
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_event, "out") }
    })
}

/// Export an event; `out_text` is its handle text for `hal_event_import`
/// (free it with `hal_string_free`). The export lasts until the event is
/// released.
///
/// # Safety
///
/// `options` is NULL or a valid `hal_export_options`; `out_text` is NULL or
/// valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_event_export(
    event: *mut hal_event,
    options: *const hal_export_options,
    out_text: *mut *mut c_char,
) -> hal_status {
    call("hal_event_export", || {
        need(out_text, "out_text")?;
        let event = EVENTS.get(event as usize, "event")?;
        // SAFETY: per the contract.
        let opts = unsafe { export_options(options) }?;
        let text = event.keep(event.device.device.export_event(&*event.obj, &opts)?);
        // SAFETY: checked not NULL above.
        unsafe { give_text(out_text, text) };
        Ok(())
    })
}

/// Import an event another process exported, from its handle text.
///
/// # Safety
///
/// `text` is NULL or a NUL-terminated string; `options` is NULL or a valid
/// `hal_import_options`; `out` is NULL or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_event_import(
    text: *const c_char,
    options: *const hal_import_options,
    out: *mut *mut hal_event,
) -> hal_status {
    call("hal_event_import", || {
        need(out, "out")?;
        let import = |d: &hal_facade::objects::DeviceObj, shared| {
            d.device.import_event(shared, &ImportOptions::default())
        };
        // SAFETY: per the contract.
        let event = unsafe { import_text(text, options, HandleKind::Event, import) }?;
        let token = EVENTS.insert(event);
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_event, "out") }
    })
}

/// Record the event on the device's own stream (created on first use):
/// it completes when the work queued there before it has run.
#[no_mangle]
pub extern "C" fn hal_event_record(event: *mut hal_event) -> hal_status {
    call("hal_event_record", || {
        let event = EVENTS.get(event as usize, "event")?;
        let stream = event.device.stream()?;
        Ok(event.device.device.record_event(stream, &*event.obj)?)
    })
}

/// Whether the event has completed: `*out_done` is true or false.
///
/// # Safety
///
/// `out_done` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_event_query(event: *mut hal_event, out_done: *mut bool) -> hal_status {
    call("hal_event_query", || {
        need(out_done, "out_done")?;
        let event = EVENTS.get(event as usize, "event")?;
        let done = event.obj.query()?;
        // SAFETY: checked not NULL above.
        unsafe { put(out_done, done, "out_done") }
    })
}

/// Wait until the event has completed; give up after
/// `timeout_ns` nanoseconds with `HAL_ERR_TIMEOUT` (negative: wait
/// forever; zero: look once).
#[no_mangle]
pub extern "C" fn hal_event_wait(event: *mut hal_event, timeout_ns: i64) -> hal_status {
    call("hal_event_wait", || {
        let event = EVENTS.get(event as usize, "event")?;
        let opts = WaitOptions {
            timeout: timeout(timeout_ns),
            ..Default::default()
        };
        Ok(event.obj.wait(opts)?)
    })
}

/// Release an event (and stop exporting it). A second release is
/// `HAL_ERR_DOUBLE_RELEASE`.
#[no_mangle]
pub extern "C" fn hal_event_release(event: *mut hal_event) -> hal_status {
    call("hal_event_release", || {
        EVENTS.remove(event as usize, "event").map(drop)
    })
}
