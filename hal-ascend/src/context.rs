//! The device a call runs on. The ACL runtime keeps a current device per
//! thread (`aclrtSetDevice`); every call of this crate runs with its
//! device current and leaves the calling thread's current device as it
//! found it, so a framework's thread (torch_npu's) finds its device as it
//! left it, on any thread:
//!
//! - on a thread whose current device is this one, the call runs there;
//! - on a thread with another current device, the call sets this device,
//!   runs, and sets the other back;
//! - on a thread with no current device, the call runs on a short-lived
//!   thread of its own that sets the device: the runtime has no call that
//!   unsets a thread's device (and `aclrtResetDevice` would tear down a
//!   device a framework may be using).

use std::sync::Arc;

use hal_core::kit::vendor::acl;
use hal_core::{DeviceInfo, Error, Result};

use crate::ffi::result::{self, is_code};
use crate::ffi::sys::Runtime;

/// A device as its memory, VMM and event operations use it: its runtime
/// context and what the backend knows of it (public only as the calls of
/// `AscendDevice`'s `VmmByCalls`; its module is private).
#[derive(Clone, Copy)]
pub struct DeviceRef<'a> {
    pub(crate) ctx: &'a Arc<Ctx>,
    pub(crate) info: &'a DeviceInfo,
}

/// One device of the runtime.
pub(crate) struct Ctx {
    pub(crate) rt: Arc<Runtime>,
    pub(crate) ordinal: u32,
}

impl Ctx {
    /// The thread's current device, `None` before any `aclrtSetDevice`.
    pub(crate) fn current(rt: &Runtime) -> Result<Option<i32>> {
        match result::ctx::get_device(rt) {
            Ok(id) => Ok(Some(id)),
            Err(e) if is_code(&e, acl::RT_CONTEXT_NULL) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn set(&self, id: i32) -> Result<()> {
        result::ctx::set_device(&self.rt, id)
    }

    /// Run `body` with this device current, leaving the calling thread's
    /// current device as it was.
    /// In a child forked after the runtime was initialised,
    /// [`Error::Forked`] before any call: the device is the parent's.
    pub(crate) fn call<T: Send>(&self, body: impl FnOnce() -> Result<T> + Send) -> Result<T> {
        self.rt
            .origin
            .check(format_args!("Ascend device {}", self.ordinal))?;
        let me = self.ordinal as i32;
        match Ctx::current(&self.rt)? {
            Some(d) if d == me => body(),
            Some(prev) => {
                self.set(me)?;
                let out = body();
                if let Err(e) = self.set(prev) {
                    log::warn!("restoring Ascend device {prev} on this thread: {e}");
                }
                out
            }
            None => std::thread::scope(|s| {
                hal_core::kit::os::thread::spawn_scoped(s, "hal-ascend-call", move || {
                    self.set(me).and_then(|()| body())
                })
                .map_err(|e| Error::io("starting a thread for a call on the Ascend device", e))?
                .join()
                .map_err(|_| Error::invalid("a call on the Ascend device's thread panicked"))?
            }),
        }
    }
}
