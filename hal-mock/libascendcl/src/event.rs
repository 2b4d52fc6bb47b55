//! Events: created with flags (`ACL_EVENT_IPC` alone, or `SYNC` /
//! `TIME_LINE`), recorded, waited on by streams and the host, queried,
//! destroyed.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use hal_core::kit::vendor::acl;
use hal_core::{Device, Error, Event, EventFlags, WaitOptions};

use crate::abi::{guard, non_null, put, AclError};
use crate::error::sim;
use crate::refusal::refuse;
use crate::state::{lock, runtime, EventEntry};
use crate::stream::timeout_ms;

/// `ACL_EVENT_SYNC`, `ACL_EVENT_TIME_LINE`, `ACL_EVENT_IPC`.
pub const EVENT_SYNC: u32 = 0x1;
/// `ACL_EVENT_TIME_LINE`.
pub const EVENT_TIME_LINE: u32 = 0x8;
/// `ACL_EVENT_IPC`.
pub const EVENT_IPC: u32 = 0x40;
/// `ACL_EVENT_RECORDED_STATUS_NOT_READY` / `_COMPLETE`.
const RECORDED_NOT_READY: c_int = 0;
const RECORDED_COMPLETE: c_int = 1;

/// Creates an event on the current device. `ACL_EVENT_IPC` must come
/// alone (OR-ed with another flag: `ACL_ERROR_RT_PARAM_INVALID`).
#[no_mangle]
pub unsafe extern "C" fn aclrtCreateEventExWithFlag(
    event: *mut *mut c_void,
    flag: u32,
) -> AclError {
    guard("aclrtCreateEventExWithFlag", || {
        let rt = runtime()?;
        let o = rt.current()?;
        non_null(event, "event")?;
        if flag & !(EVENT_SYNC | EVENT_TIME_LINE | EVENT_IPC) != 0 || flag == 0 {
            return Err(refuse(acl::INVALID_PARAM, format!("event flag {flag:#x}")));
        }
        if flag & EVENT_IPC != 0 && flag != EVENT_IPC {
            return Err(refuse(
                acl::RT_PARAM_INVALID,
                "ACL_EVENT_IPC cannot be combined with other flags",
            ));
        }
        let flags = EventFlags {
            interprocess: flag == EVENT_IPC,
            timing: flag & EVENT_TIME_LINE != 0,
        };
        let e = sim(rt.device(o).create_event(flags))?;
        let h = rt.new_handle();
        lock(&rt.events).insert(
            h,
            EventEntry {
                event: Arc::new(e),
                ordinal: o,
                flags: flag,
                ipc: None,
            },
        );
        // SAFETY: not null, valid for a write (the caller's contract).
        unsafe { put(event, std::ptr::without_provenance_mut(h)) }
    })
}

/// Destroys an event.
#[no_mangle]
pub unsafe extern "C" fn aclrtDestroyEvent(event: *mut c_void) -> AclError {
    guard("aclrtDestroyEvent", || {
        let rt = runtime()?;
        let gone = lock(&rt.events).remove(&event.addr());
        gone.map(drop)
            .ok_or_else(|| refuse(acl::RT_INVALID_HANDLE, "no such event"))
    })
}

/// Records the event on the stream.
#[no_mangle]
pub unsafe extern "C" fn aclrtRecordEvent(event: *mut c_void, stream: *mut c_void) -> AclError {
    guard("aclrtRecordEvent", || {
        let rt = runtime()?;
        let (e, _, _) = rt.event(event.addr())?;
        let (s, o) = rt.stream(stream.addr())?;
        sim(rt.device(o).record_event(&s, &e))
    })
}

/// Makes the stream wait for the event.
#[no_mangle]
pub unsafe extern "C" fn aclrtStreamWaitEvent(stream: *mut c_void, event: *mut c_void) -> AclError {
    guard("aclrtStreamWaitEvent", || {
        let rt = runtime()?;
        let (e, _, _) = rt.event(event.addr())?;
        let (s, o) = rt.stream(stream.addr())?;
        sim(rt.device(o).stream_wait_event(&s, &e))
    })
}

/// Whether the event's latest record completed. An IPC event cannot be
/// queried: `ACL_ERROR_RT_FEATURE_NOT_SUPPORT`.
#[no_mangle]
pub unsafe extern "C" fn aclrtQueryEventStatus(event: *mut c_void, status: *mut c_int) -> AclError {
    guard("aclrtQueryEventStatus", || {
        let rt = runtime()?;
        let (e, _, flags) = rt.event(event.addr())?;
        if flags == EVENT_IPC {
            return Err(refuse(
                acl::RT_FEATURE_NOT_SUPPORT,
                "an event created with ACL_EVENT_IPC cannot be queried",
            ));
        }
        let v = if sim(e.query())? {
            RECORDED_COMPLETE
        } else {
            RECORDED_NOT_READY
        };
        // SAFETY: valid for a write or null (the caller's contract).
        unsafe { put(status, v) }
    })
}

/// Waits for the event's latest record, at most `timeout` ms (-1:
/// forever): `ACL_ERROR_RT_EVENT_SYNC_TIMEOUT` past it.
#[no_mangle]
pub unsafe extern "C" fn aclrtSynchronizeEventWithTimeout(
    event: *mut c_void,
    timeout: i32,
) -> AclError {
    guard("aclrtSynchronizeEventWithTimeout", || {
        let rt = runtime()?;
        let (e, _, _) = rt.event(event.addr())?;
        let t = timeout_ms(timeout)?;
        let opts = WaitOptions {
            timeout: t,
            spin: std::time::Duration::ZERO,
        };
        match e.wait(opts) {
            Err(Error::Timeout { .. }) => Err(refuse(
                acl::RT_EVENT_SYNC_TIMEOUT,
                format!("the event did not complete within {timeout} ms"),
            )),
            r => sim(r),
        }
    })
}
