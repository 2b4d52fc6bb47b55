//! IPC events: `aclrtIpcGetEventHandle` of an event created with
//! `ACL_EVENT_IPC` alone (others: `ACL_ERROR_RT_PARAM_INVALID`) and
//! `aclrtIpcOpenEventHandle` in another process. The handle's 64 bytes
//! are a key's characters (`key.rs`). An opened event can be waited on
//! (streams and the host), not recorded, queried or timed.

use std::ffi::c_void;
use std::sync::Arc;

use hal_core::kit::vendor::acl;
use hal_core::{Device, ExportOptions, ImportOptions, Importers, SharedHandle};

use crate::abi::{guard, non_null, put, AclError};
use crate::error::sim;
use crate::event::EVENT_IPC;
use crate::key::{self, Names, KEY_CHARS};
use crate::refusal::{refuse, Refusal};
use crate::state::{lock, runtime, EventEntry};

/// `aclrtIpcEventHandle`: 64 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IpcEventHandle {
    /// The handle's bytes.
    pub reserved: [u8; 64],
}

fn get(h: usize) -> Result<[u8; 64], Refusal> {
    let rt = runtime()?;
    let mut events = lock(&rt.events);
    let e = events
        .get_mut(&h)
        .ok_or_else(|| refuse(acl::RT_INVALID_HANDLE, "no such event"))?;
    if e.flags != EVENT_IPC {
        return Err(refuse(
            acl::RT_PARAM_INVALID,
            "only an event created with ACL_EVENT_IPC has an IPC handle",
        ));
    }
    if let Some((_, _, b)) = &e.ipc {
        return Ok(*b);
    }
    let opts = ExportOptions {
        importers: Importers::Anyone,
        ..ExportOptions::default()
    };
    let exported = sim(rt.device(e.ordinal).export_event(&e.event, &opts))?;
    let (envelope, k) = key::seal(&exported, Names::Event)?;
    let mut b = [0u8; 64];
    b.copy_from_slice(&k.as_bytes()[..KEY_CHARS]);
    e.ipc = Some((exported, envelope, b));
    Ok(b)
}

/// Gives the IPC handle of an event created with `ACL_EVENT_IPC`.
#[no_mangle]
pub unsafe extern "C" fn aclrtIpcGetEventHandle(
    event: *mut c_void,
    handle: *mut IpcEventHandle,
) -> AclError {
    guard("aclrtIpcGetEventHandle", || {
        crate::switches::ipc_event("aclrtIpcGetEventHandle")?;
        non_null(handle, "handle")?;
        let b = get(event.addr())?;
        // SAFETY: not null, valid for a write (the caller's contract).
        unsafe { put(handle, IpcEventHandle { reserved: b }) }
    })
}

/// Opens another process's IPC event on the current device.
#[no_mangle]
pub unsafe extern "C" fn aclrtIpcOpenEventHandle(
    handle: IpcEventHandle,
    event: *mut *mut c_void,
) -> AclError {
    guard("aclrtIpcOpenEventHandle", || {
        crate::switches::ipc_event("aclrtIpcOpenEventHandle")?;
        let rt = runtime()?;
        let o = rt.current()?;
        non_null(event, "event")?;
        let k = std::str::from_utf8(&handle.reserved)
            .map_err(|_| refuse(acl::RT_PARAM_INVALID, "not an IPC event handle"))?;
        let inner = key::open(k, Names::Event)?;
        let e = sim(rt
            .device(o)
            .import_event(SharedHandle::from(inner), &ImportOptions::default()))?;
        let h = rt.new_handle();
        lock(&rt.events).insert(
            h,
            EventEntry {
                event: Arc::new(e),
                ordinal: o,
                flags: EVENT_IPC,
                ipc: None,
            },
        );
        // SAFETY: not null, valid for a write (the caller's contract).
        unsafe { put(event, std::ptr::without_provenance_mut(h)) }
    })
}
