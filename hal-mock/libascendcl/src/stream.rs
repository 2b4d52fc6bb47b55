//! Streams: create, destroy (after the queued work ran), synchronize with a
//! timeout, query.

use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::time::Duration;

use hal_core::kit::vendor::acl;
use hal_core::{Device, Error};

use crate::abi::{guard, non_null, put, AclError};
use crate::error::sim;
use crate::refusal::{refuse, Refusal};
use crate::state::{lock, runtime, StreamEntry};

/// `ACL_STREAM_STATUS_COMPLETE` / `ACL_STREAM_STATUS_NOT_READY`.
const STATUS_COMPLETE: c_int = 0;
const STATUS_NOT_READY: c_int = 1;

/// A runtime timeout in milliseconds: -1 is forever, a positive number
/// that many milliseconds; anything else `ACL_ERROR_INVALID_PARAM`.
pub(crate) fn timeout_ms(t: i32) -> Result<Option<Duration>, Refusal> {
    match t {
        -1 => Ok(None),
        t if t > 0 => Ok(Some(Duration::from_millis(t as u64))),
        t => Err(refuse(
            acl::INVALID_PARAM,
            format!("timeout {t}: -1 (forever) or a positive number of milliseconds"),
        )),
    }
}

/// Creates a stream on the current device.
#[no_mangle]
pub unsafe extern "C" fn aclrtCreateStream(stream: *mut *mut c_void) -> AclError {
    guard("aclrtCreateStream", || {
        let rt = runtime()?;
        let o = rt.current()?;
        non_null(stream, "stream")?;
        let s = sim(rt.device(o).create_stream())?;
        let h = rt.new_handle();
        lock(&rt.streams).insert(
            h,
            StreamEntry {
                stream: Arc::new(s),
                ordinal: o,
            },
        );
        // SAFETY: not null, valid for a write (the caller's contract).
        unsafe { put(stream, std::ptr::without_provenance_mut(h)) }
    })
}

/// Destroys a stream once its queued work has run.
#[no_mangle]
pub unsafe extern "C" fn aclrtDestroyStream(stream: *mut c_void) -> AclError {
    guard("aclrtDestroyStream", || {
        let rt = runtime()?;
        let gone = lock(&rt.streams).remove(&stream.addr());
        // Dropped outside the lock: the stream drains its queue first.
        gone.map(drop)
            .ok_or_else(|| refuse(acl::RT_INVALID_HANDLE, "no such stream"))
    })
}

/// Waits until the stream ran its work, at most `timeout` ms (-1: forever):
/// `ACL_ERROR_RT_STREAM_SYNC_TIMEOUT` past it; an error of queued work
/// (a notify wait that timed out: `ACL_ERROR_RT_WAIT_TIMEOUT`) is answered
/// here.
#[no_mangle]
pub unsafe extern "C" fn aclrtSynchronizeStreamWithTimeout(
    stream: *mut c_void,
    timeout: i32,
) -> AclError {
    guard("aclrtSynchronizeStreamWithTimeout", || {
        let rt = runtime()?;
        let (s, o) = rt.stream(stream.addr())?;
        let t = timeout_ms(timeout)?;
        let dev = rt.device(o);
        match dev.synchronize(&s, t) {
            // Work still queued: the synchronize itself timed out.
            Err(Error::Timeout { .. }) if !dev.query_stream(&s).unwrap_or(true) => Err(refuse(
                acl::RT_STREAM_SYNC_TIMEOUT,
                format!("the stream did not finish within {timeout} ms"),
            )),
            // The queue ran: a queued notify wait timed out.
            Err(Error::Timeout { what, .. }) => Err(refuse(acl::RT_WAIT_TIMEOUT, what)),
            r => sim(r),
        }
    })
}

/// Whether the stream ran its work (`ACL_STREAM_STATUS_COMPLETE`) or not yet.
#[no_mangle]
pub unsafe extern "C" fn aclrtStreamQuery(stream: *mut c_void, status: *mut c_int) -> AclError {
    guard("aclrtStreamQuery", || {
        let rt = runtime()?;
        let (s, o) = rt.stream(stream.addr())?;
        let done = sim(rt.device(o).query_stream(&s))?;
        let v = if done {
            STATUS_COMPLETE
        } else {
            STATUS_NOT_READY
        };
        // SAFETY: valid for a write or null (the caller's contract).
        unsafe { put(status, v) }
    })
}
