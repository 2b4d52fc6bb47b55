//! Waiting for a UCX request: a [`Completion`] is what a request's callback
//! finishes, on the progress thread, and what the caller waits on, on its
//! own thread (blocking, or as a future). Whatever the request reads or
//! writes that the caller gave up (an async call's buffer, a message
//! sent from the progress thread) is kept in the completion until the
//! request is done, so that UCX never touches freed memory.

use std::ffi::c_void;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use crate::ffi::bindings::{
    ucp_request_param_t, ucs_status_ptr_t, ucs_status_t, UCP_OP_ATTR_FIELD_CALLBACK,
    UCP_OP_ATTR_FIELD_USER_DATA, UCS_ERR_REJECTED,
};
use crate::ffi::status::{issued, Issued};
use crate::ffi::sys;

/// What a request's waiter sees.
#[derive(Default)]
struct State {
    /// The request's status, once it is done.
    done: Option<ucs_status_t>,
    /// The async waiter to wake.
    waker: Option<Waker>,
    /// Bytes the request uses that nobody else keeps alive.
    kept: Option<Vec<u8>>,
    /// Why the exporter refused the operation, where it did.
    refused: Option<crate::protocol::Denial>,
    /// Threads asleep on the condition variable: a finish wakes it only
    /// when there is one (a system call saved per request that ends while
    /// nobody sleeps on it: most, with a caller that drives the worker).
    sleepers: usize,
}

/// One request's completion.
#[derive(Default)]
pub(crate) struct Completion {
    state: Mutex<State>,
    cv: Condvar,
}

/// The lock, whatever a panicking holder left (the state is always whole).
fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Completion {
    /// Record `status` and wake every waiter.
    pub(crate) fn finish(&self, status: ucs_status_t) {
        let (waker, sleepers) = {
            let mut s = lock(&self.state);
            s.done = Some(status);
            (s.waker.take(), s.sleepers)
        };
        if sleepers > 0 {
            self.cv.notify_all();
        }
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Finish as refused by the exporter for `why`.
    pub(crate) fn refuse(&self, why: crate::protocol::Denial) {
        lock(&self.state).refused = Some(why);
        self.finish(UCS_ERR_REJECTED);
    }

    /// Why the exporter refused the operation, if it did.
    pub(crate) fn refused(&self) -> Option<crate::protocol::Denial> {
        lock(&self.state).refused
    }

    /// The status, when done.
    pub(crate) fn status(&self) -> Option<ucs_status_t> {
        lock(&self.state).done
    }

    /// Wait until done or `deadline`; the status, or `None` at the deadline.
    pub(crate) fn wait_until(&self, deadline: Option<Instant>) -> Option<ucs_status_t> {
        let mut s = lock(&self.state);
        loop {
            if let Some(st) = s.done {
                return Some(st);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return None;
            }
            s.sleepers += 1;
            s = match deadline {
                None => self.cv.wait(s).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    self.cv
                        .wait_timeout(s, d - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
            s.sleepers -= 1;
        }
    }

    /// A completion that keeps `kept` until it is done.
    pub(crate) fn keeping(kept: Vec<u8>) -> Arc<Completion> {
        let c = Arc::new(Completion::default());
        lock(&c.state).kept = Some(kept);
        c
    }

    /// The bytes kept for the request, once it is done.
    pub(crate) fn take_kept(&self) -> Option<Vec<u8>> {
        lock(&self.state).kept.take()
    }
}

/// Finish the completion `user_data` holds a reference to (given up by
/// [`issue`]) and free the request.
///
/// # Safety
///
/// `user_data` is the pointer `Arc::into_raw` gave in `issue`, and this is
/// the one callback of its request.
unsafe fn done(request: *mut c_void, status: ucs_status_t, user_data: *mut c_void) {
    // SAFETY: the caller's promise: the reference given up in `issue` is
    // taken back here, once.
    let c = unsafe { Arc::from_raw(user_data as *const Completion) };
    c.finish(status);
    if let Ok(ucx) = sys::ucx() {
        if let Ok(free) = ucx.ucp_request_free() {
            // SAFETY: `request` is the request this callback completes; it is
            // freed once, here, and never used after.
            unsafe { free(request) };
        }
    }
}

/// The callback of sends, flushes and closes.
unsafe extern "C" fn on_sent(request: *mut c_void, status: ucs_status_t, user_data: *mut c_void) {
    // SAFETY: UCX calls it once per pending request of `issue`'s, with the
    // user data `issue` gave.
    unsafe { done(request, status, user_data) }
}

/// The callback of receptions of a message's data.
unsafe extern "C" fn on_received(
    request: *mut c_void,
    status: ucs_status_t,
    _length: usize,
    user_data: *mut c_void,
) {
    // SAFETY: as `on_sent`'s.
    unsafe { done(request, status, user_data) }
}

/// What a request's callback is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A send, flush or close (`cb.send`).
    Send,
    /// The reception of a message's data (`cb.recv_am`).
    Receive,
}

/// Issue a request with `call`, which gets the parameters to pass (the
/// callback and its user data; `extra` adds fields and flags), keeping
/// `kept` alive until it is done. The completion is finished already when
/// the call completed at once.
pub(crate) fn issue(
    kind: Kind,
    kept: Option<Vec<u8>>,
    extra: impl FnOnce(&mut ucp_request_param_t),
    call: impl FnOnce(&ucp_request_param_t) -> ucs_status_ptr_t,
) -> Arc<Completion> {
    let c = Arc::new(Completion::default());
    lock(&c.state).kept = kept;
    issue_into(Arc::clone(&c), kind, extra, call);
    c
}

/// As [`issue`], finishing the completion `c` (which keeps what it keeps).
pub(crate) fn issue_into(
    c: Arc<Completion>,
    kind: Kind,
    extra: impl FnOnce(&mut ucp_request_param_t),
    call: impl FnOnce(&ucp_request_param_t) -> ucs_status_ptr_t,
) {
    let raw = Arc::into_raw(Arc::clone(&c));
    // SAFETY: an all-zero `ucp_request_param_t` is a valid value (no
    // field set in its mask); the fields used are set below.
    let mut param: ucp_request_param_t = unsafe { std::mem::zeroed() };
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    match kind {
        Kind::Send => param.cb.send = Some(on_sent),
        Kind::Receive => param.cb.recv_am = Some(on_received),
    }
    param.user_data = raw as *mut c_void;
    extra(&mut param);
    match issued(call(&param)) {
        Issued::Done(st) => {
            // SAFETY: the request completed at once, so UCX never calls the
            // callback: the reference given to it is taken back here, once.
            drop(unsafe { Arc::from_raw(raw) });
            c.finish(st);
        }
        Issued::Pending(_) => {}
    }
}

/// A future of a completion.
pub(crate) struct Done(pub(crate) Arc<Completion>);

impl Future for Done {
    type Output = ucs_status_t;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ucs_status_t> {
        let mut s = lock(&self.0.state);
        match s.done {
            Some(st) => Poll::Ready(st),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
