//! The primary context of each device, retained once when the device is
//! opened and released when it drops; every call pushes it on the calling
//! thread and pops it after, so the caller's current context (a
//! framework's) is the same after any call, on any thread.

use std::marker::PhantomData;
use std::sync::Arc;

use hal_core::Result;

use crate::ffi::result::{self, ctx};
use crate::ffi::{CUdevice, Context, Driver};
use crate::sync::quiet::Quiet;

/// A device's retained primary context.
pub(crate) struct Primary {
    pub(crate) driver: Arc<Driver>,
    pub(crate) device: CUdevice,
    ctx: Context,
    /// The stream waits for notifies queued in this context, and the quiet
    /// a call that waits for the device holds (`sync/quiet.rs`).
    pub(crate) quiet: Arc<Quiet>,
}

impl Primary {
    /// Retain the primary context of `device` (`cuDevicePrimaryCtxRetain`).
    pub(crate) fn retain(driver: Arc<Driver>, device: CUdevice) -> Result<Primary> {
        let library = ctx::library_key(&driver)?;
        let ctx = ctx::retain_primary(&driver, device)?;
        // One per primary context: the library's entry point and the handle.
        let quiet = Quiet::of((library, ctx.0 as usize));
        Ok(Primary {
            quiet,
            driver,
            device,
            ctx,
        })
    }

    /// The context's handle, for calls that name a context
    /// (`cuCtxEnablePeerAccess`).
    pub(crate) fn raw(&self) -> Context {
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
            .check(format_args!("CUDA device {}", self.device))
    }

    /// Push the context on the calling thread until the guard drops; in a
    /// child forked after the driver was initialised,
    /// [`Error::Forked`](hal_core::Error::Forked) before any call.
    pub(crate) fn enter(&self) -> Result<Entered<'_>> {
        self.check_origin()?;
        // The pop is resolved before the push: the guard cannot fail to pop.
        ctx::push(&self.driver, self.ctx)?;
        Ok(Entered {
            primary: self,
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
            Ok(_ctx) => Quiet::release(share, |page| page.unregister(&self.driver)),
            Err(e) => {
                log::warn!(
                    "the stream-wait slots of CUDA device {} stay registered: {e}",
                    self.device
                );
                // Never free pages the device may still write.
                std::mem::forget(share);
            }
        }
        // The context was retained by `retain` for this device, once; this
        // is its one release. (A driver without the entry point: nothing
        // to say.)
        if result::has(self.driver.primary_ctx_release()).is_ok() {
            if let Err(e) = ctx::release_primary(&self.driver, self.device) {
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
    /// Not `Send`: the pop must run on the thread that pushed.
    _on_this_thread: PhantomData<*const ()>,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        // This guard pushed exactly one context on this thread (guards are
        // not Send, so the pop runs on the pushing thread).
        if let Err(e) = ctx::pop(&self.primary.driver) {
            log::warn!("popping the CUDA context: {e}");
        }
    }
}
