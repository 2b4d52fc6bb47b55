//! The primary context of each device, retained once when the device is
//! opened and released when it drops; every call pushes it on the calling
//! thread and pops it after, so the caller's current context (a
//! framework's) is the same after any call, on any thread.

use std::marker::PhantomData;
use std::sync::Arc;

use hal_core::Result;

use crate::quiet::Quiet;
use crate::sys::{CUcontext, CUdevice, Driver};

/// A device's retained primary context.
pub(crate) struct Primary {
    pub(crate) driver: Arc<Driver>,
    pub(crate) device: CUdevice,
    ctx: CUcontext,
    /// The stream waits for notifies queued in this context, and the quiet
    /// a call that waits for the device holds (`quiet.rs`).
    pub(crate) quiet: Arc<Quiet>,
}

// SAFETY: a CUcontext is an opaque handle the driver lets any thread push
// and use; this value only passes it to the driver.
unsafe impl Send for Primary {}
// SAFETY: see `Send`.
unsafe impl Sync for Primary {}

impl Primary {
    /// Retain the primary context of `device` (`cuDevicePrimaryCtxRetain`).
    pub(crate) fn retain(driver: Arc<Driver>, device: CUdevice) -> Result<Primary> {
        let retain = driver.primary_ctx_retain()?;
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: `ctx` is a valid place for the handle; `device` came from
        // `cuDeviceGet`.
        let status = unsafe { retain(&mut ctx, device) };
        driver.check("cuDevicePrimaryCtxRetain", status)?;
        // One per primary context: the library's entry point and the handle.
        let quiet = Quiet::of((retain as usize, ctx as usize));
        Ok(Primary {
            quiet,
            driver,
            device,
            ctx,
        })
    }

    /// The context's handle, for calls that name a context
    /// (`cuCtxEnablePeerAccess`).
    pub(crate) fn raw(&self) -> CUcontext {
        self.ctx
    }

    /// True in a child forked after the driver was initialised: the
    /// context is the parent's, and a drop must not call the driver.
    pub(crate) fn forked(&self) -> bool {
        self.driver.origin.forked()
    }

    /// [`Error::Forked`](hal_core::Error::Forked) in a child forked after
    /// the driver was initialised.
    pub(crate) fn check_origin(&self) -> Result<()> {
        self.driver
            .origin
            .check(&format!("CUDA device {}", self.device))
    }

    /// Push the context on the calling thread until the guard drops; in a
    /// child forked after the driver was initialised,
    /// [`Error::Forked`](hal_core::Error::Forked) before any call.
    pub(crate) fn enter(&self) -> Result<Entered<'_>> {
        self.check_origin()?;
        let push = self.driver.ctx_push_current()?;
        // Resolve the pop now, so that the guard cannot fail to pop.
        let pop = self.driver.ctx_pop_current()?;
        // SAFETY: `self.ctx` is a retained primary context.
        let status = unsafe { push(self.ctx) };
        self.driver.check("cuCtxPushCurrent_v2", status)?;
        Ok(Entered {
            primary: self,
            pop,
            _on_this_thread: PhantomData,
        })
    }
}

impl Drop for Primary {
    fn drop(&mut self) {
        // No stream of this value is left (each holds it).
        let share = std::mem::take(&mut self.quiet);
        if self.forked() {
            // The context is the parent's: nothing to release here, and
            // the driver must not be called.
            std::mem::forget(share);
            return;
        }
        match self.enter() {
            Ok(_ctx) => Quiet::release(share, |p| crate::hostreg::unregister(&self.driver, p)),
            Err(e) => {
                log::warn!(
                    "the stream-wait slots of CUDA device {} stay registered: {e}",
                    self.device
                );
                // Never free pages the device may still write.
                std::mem::forget(share);
            }
        }
        if let Ok(release) = self.driver.primary_ctx_release() {
            // SAFETY: the context was retained by `retain` for this device,
            // once; this is its one release.
            let status = unsafe { release(self.device) };
            if let Err(e) = self.driver.check("cuDevicePrimaryCtxRelease_v2", status) {
                log::warn!(
                    "releasing the primary context of CUDA device {}: {e}",
                    self.device
                );
            }
        }
    }
}

/// The context pushed on the calling thread; dropping pops it.
#[must_use = "the context is popped when this guard drops"]
pub(crate) struct Entered<'a> {
    primary: &'a Primary,
    pop: unsafe extern "C" fn(*mut CUcontext) -> crate::sys::Status,
    /// Not `Send`: the pop must run on the thread that pushed.
    _on_this_thread: PhantomData<*const ()>,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let mut popped: CUcontext = std::ptr::null_mut();
        // SAFETY: this guard pushed exactly one context on this thread
        // (guards are not Send, so the pop runs on the pushing thread).
        let status = unsafe { (self.pop)(&mut popped) };
        if let Err(e) = self.primary.driver.check("cuCtxPopCurrent_v2", status) {
            log::warn!("popping the CUDA context: {e}");
        }
    }
}
