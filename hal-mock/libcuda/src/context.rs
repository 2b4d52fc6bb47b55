//! Primary contexts and each thread's context stack.

use cudarc::driver::sys::{CUcontext, CUctx_st, CUdevice, CUresult};
use hal_core::kit::vendor::{cuda, Code};
use hal_core::Device;
use std::cell::RefCell;

use crate::abi::{guard, non_null, put};
use crate::error::sim;
use crate::state::{driver, lock, Driver};

thread_local! {
    /// The calling thread's context stack, by device ordinal; the last is
    /// the current context.
    static STACK: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

/// The calling thread's current context, if any.
fn top() -> Option<u32> {
    STACK.with(|s| s.borrow().last().copied())
}

/// The `CUcontext` of device `ordinal`'s primary context.
fn handle(d: &Driver, ordinal: u32) -> CUcontext {
    std::ptr::without_provenance_mut::<CUctx_st>(d.devices[ordinal as usize].context_addr())
}

/// The device ordinal of the calling thread's current context:
/// `CUDA_ERROR_INVALID_CONTEXT` when there is none, or when it is a
/// primary context that is not retained (never, or released).
pub(crate) fn current(d: &Driver) -> Result<u32, Code> {
    let ordinal = top().ok_or(cuda::INVALID_CONTEXT)?;
    if lock(&d.devices[ordinal as usize].primary).refs == 0 {
        return Err(cuda::INVALID_CONTEXT);
    }
    Ok(ordinal)
}

/// The ordinal of the context `ctx` names: `CUDA_ERROR_INVALID_CONTEXT`
/// for a value that is no context of this driver.
pub(crate) fn ordinal_of(d: &Driver, ctx: CUcontext) -> Result<u32, Code> {
    d.ordinal_of_context(ctx.addr())
        .ok_or(cuda::INVALID_CONTEXT)
}

/// Retains the device's primary context and gives its handle.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    guard("cuDevicePrimaryCtxRetain", || {
        let d = driver()?;
        let dv = d.dev(dev)?;
        non_null(pctx)?;
        let ordinal = u32::try_from(dev).map_err(|_| cuda::INVALID_DEVICE)?;
        {
            let mut primary = lock(&dv.primary);
            primary.refs = primary.refs.checked_add(1).ok_or(cuda::UNKNOWN)?;
        }
        // SAFETY: `pctx` is not null and valid for a write (the caller's contract).
        unsafe { put(pctx, handle(d, ordinal)) }
    })
}

/// Releases the device's primary context; the last release destroys what
/// it owns. `CUDA_ERROR_INVALID_CONTEXT` when it is not retained.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    guard("cuDevicePrimaryCtxRelease_v2", || {
        let d = driver()?;
        let dv = d.dev(dev)?;
        let ordinal = u32::try_from(dev).map_err(|_| cuda::INVALID_DEVICE)?;
        let last = {
            let mut primary = lock(&dv.primary);
            primary.refs = primary.refs.checked_sub(1).ok_or(cuda::INVALID_CONTEXT)?;
            primary.refs == 0
        };
        if last {
            d.destroy_context(ordinal);
        }
        Ok(())
    })
}

/// Pushes a context on the calling thread's stack.
#[no_mangle]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CUresult {
    guard("cuCtxPushCurrent_v2", || {
        let d = driver()?;
        if ctx.is_null() {
            return Err(cuda::INVALID_VALUE);
        }
        let ordinal = ordinal_of(d, ctx)?;
        STACK.with(|s| s.borrow_mut().push(ordinal));
        Ok(())
    })
}

/// Pops the calling thread's current context and gives it (`pctx` may be
/// null); `CUDA_ERROR_INVALID_CONTEXT` on an empty stack.
#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> CUresult {
    guard("cuCtxPopCurrent_v2", || {
        let d = driver()?;
        let ordinal = STACK
            .with(|s| s.borrow_mut().pop())
            .ok_or(cuda::INVALID_CONTEXT)?;
        if pctx.is_null() {
            return Ok(());
        }
        // SAFETY: `pctx` is not null and valid for a write (the caller's contract).
        unsafe { put(pctx, handle(d, ordinal)) }
    })
}

/// Gives the calling thread's current context, or null when it has none.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CUresult {
    guard("cuCtxGetCurrent", || {
        let d = driver()?;
        let ctx = top().map_or(std::ptr::null_mut(), |o| handle(d, o));
        // SAFETY: `pctx` is null or valid for a write (the caller's contract).
        unsafe { put(pctx, ctx) }
    })
}

/// Replaces the top of the calling thread's stack with `ctx`; a null `ctx`
/// pops it (nothing on an empty stack).
#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    guard("cuCtxSetCurrent", || {
        let d = driver()?;
        if ctx.is_null() {
            STACK.with(|s| s.borrow_mut().pop());
            return Ok(());
        }
        let ordinal = ordinal_of(d, ctx)?;
        STACK.with(|s| {
            let mut s = s.borrow_mut();
            s.pop();
            s.push(ordinal);
        });
        Ok(())
    })
}

/// Waits for all work of the current context's device.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    guard("cuCtxSynchronize", || {
        let d = driver()?;
        let ordinal = current(d)?;
        sim(d.devices[ordinal as usize].device.synchronize_device(None))
    })
}
