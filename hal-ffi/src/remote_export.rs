//! Exports to other hosts: memory or a notify of this process, its handle
//! text (`hal1r.`), its count of importers, the signals importers send.

use std::ffi::c_char;
use std::sync::Arc;

use hal_facade::objects::RemoteExportObj;
use hal_facade::remote::RemoteOptions;

use crate::device::{need, put};
use crate::last_error::call;
use crate::memory::{hal_memory, MEMORIES};
use crate::notify::{hal_notify, NOTIFIES};
use crate::remote_node::{hal_remote_node, NODES};
use crate::remote_wait::wait_timeout;
use crate::status::hal_status;
use crate::table::{Kind, Table};
use crate::text::give_text;

/// An export to other hosts (opaque): of memory (`hal_remote_export`) or of
/// a notify (`hal_remote_export_notify`). Its text is what another host
/// connects to. Release it with `hal_remote_export_release`, which ends the
/// export.
#[allow(non_camel_case_types)]
pub struct hal_remote_exported {
    _private: [u8; 0],
}

static EXPORTS: Table<RemoteExportObj> = Table::new(Kind::RemoteExport);

/// Export `memory` to other hosts from `node`; `read_only` lets
/// importers only read (the exporter refuses every write).
/// Host memory of any backend is exported; device memory only where the
/// loaded UCX was built with CUDA (`HAL_ERR_UNSUPPORTED` saying so
/// otherwise). The memory stays allocated while the export lives, even if
/// it is released first.
///
/// # Safety
///
/// `out` is NULL or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_export(
    node: *const hal_remote_node,
    memory: *const hal_memory,
    read_only: bool,
    out: *mut *mut hal_remote_exported,
) -> hal_status {
    call("hal_remote_export", || {
        need(out, "out")?;
        let node = NODES.get(node as usize, "node")?;
        let memory = MEMORIES.get(memory as usize, "memory")?;
        let opts = RemoteOptions { read_only };
        let exported = node.export(&*memory, opts)?;
        let export = RemoteExportObj::new(exported, Some(memory));
        let token = EXPORTS.insert(Arc::new(export));
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_remote_exported, "out") }
    })
}

/// Export `notify` to other hosts from `node`: an importer's
/// `hal_remote_notify_signal` signals it here (`hal_notify_wait` wakes).
/// The notify stays alive while the export lives.
///
/// # Safety
///
/// `out` is NULL or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_export_notify(
    node: *const hal_remote_node,
    notify: *const hal_notify,
    out: *mut *mut hal_remote_exported,
) -> hal_status {
    call("hal_remote_export_notify", || {
        need(out, "out")?;
        let node = NODES.get(node as usize, "node")?;
        let notify = NOTIFIES.get(notify as usize, "notify")?;
        let export = RemoteExportObj::new(node.export_notify(notify)?, None);
        let token = EXPORTS.insert(Arc::new(export));
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_remote_exported, "out") }
    })
}

/// The export's handle text (`hal1r.` ...), for the other host's
/// `hal_remote_connect` (or `hal_remote_connect_notify`). It holds the
/// export's secret: give it only to the processes meant to use it. Free it
/// with `hal_string_free`.
///
/// # Safety
///
/// `out_text` is NULL or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_export_text(
    export: *const hal_remote_exported,
    out_text: *mut *mut c_char,
) -> hal_status {
    call("hal_remote_export_text", || {
        need(out_text, "out_text")?;
        let export = EXPORTS.get(export as usize, "export")?;
        // SAFETY: checked not NULL above.
        unsafe { give_text(out_text, export.text()) };
        Ok(())
    })
}

/// How many importers proved the export's secret and are still connected.
///
/// # Safety
///
/// `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_export_importers(
    export: *const hal_remote_exported,
    out: *mut usize,
) -> hal_status {
    call("hal_remote_export_importers", || {
        need(out, "out")?;
        let export = EXPORTS.get(export as usize, "export")?;
        // SAFETY: checked not NULL above.
        unsafe { put(out, export.importers(), "out") }
    })
}

/// Block until at least `count` importers are connected, or `timeout_ns`
/// nanoseconds pass (`HAL_ERR_TIMEOUT`); a negative timeout waits
/// forever, zero looks once.
#[no_mangle]
pub extern "C" fn hal_remote_export_wait_importers(
    export: *const hal_remote_exported,
    count: usize,
    timeout_ns: i64,
) -> hal_status {
    call("hal_remote_export_wait_importers", || {
        let export = EXPORTS.get(export as usize, "export")?;
        Ok(export.wait_importers(count, wait_timeout(timeout_ns))?)
    })
}

/// Block until no importer is connected (each released its connection, or
/// died), or `timeout_ns` nanoseconds pass (`HAL_ERR_TIMEOUT`); a negative
/// timeout waits forever, zero looks once.
#[no_mangle]
pub extern "C" fn hal_remote_export_wait_unused(
    export: *const hal_remote_exported,
    timeout_ns: i64,
) -> hal_status {
    call("hal_remote_export_wait_unused", || {
        let export = EXPORTS.get(export as usize, "export")?;
        Ok(export.wait_unused(wait_timeout(timeout_ns))?)
    })
}

/// Block until an importer's next signal (`hal_remote_write_signal`: the
/// bytes are in the memory then; `hal_remote_notify_signal`) and take it,
/// or until `timeout_ns` nanoseconds pass (`HAL_ERR_TIMEOUT`); a negative
/// timeout waits forever, zero looks once. Each signal is taken once.
#[no_mangle]
pub extern "C" fn hal_remote_export_wait_signal(
    export: *const hal_remote_exported,
    timeout_ns: i64,
) -> hal_status {
    call("hal_remote_export_wait_signal", || {
        let export = EXPORTS.get(export as usize, "export")?;
        Ok(export.wait_signal(wait_timeout(timeout_ns))?)
    })
}

/// Release an export, which ends it: the memory is unregistered, the
/// importers' connections are closed (their calls answer
/// `HAL_ERR_CLOSED`), and later connections are refused
/// (`HAL_ERR_NOT_FOUND`). A second release is `HAL_ERR_DOUBLE_RELEASE`.
#[no_mangle]
pub extern "C" fn hal_remote_export_release(export: *mut hal_remote_exported) -> hal_status {
    call("hal_remote_export_release", || {
        EXPORTS.remove(export as usize, "export").map(drop)
    })
}
