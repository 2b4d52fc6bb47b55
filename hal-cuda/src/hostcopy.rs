//! Copies between two host ranges in stream order.
//!
//! `cuMemcpyAsync` from host memory to host memory (registered or pinned,
//! both sides) is fully synchronous with respect to the host: it waits for
//! the stream's earlier work and for the copy before it returns (CUDA's
//! API synchronization behaviour). On driver 580 (an H200) such a copy
//! queued behind a stream wait for a notify waited in the driver, and held
//! the process's registrations meanwhile, while its own thread was the one
//! to signal the notify next (measured: a conformance case of
//! `hal-cuda-uvm`, whose memory is registered host pages, hung there).
//!
//! The contract queues a copy and returns, so a copy whose two sides are
//! host memory is a host function instead (`cuLaunchHostFunc`): the
//! driver calls it on a thread of its own once the stream's earlier work
//! has run, and later work waits for it. It copies with the CPU and makes
//! no driver call (the driver forbids them there).

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use hal_core::Result;

use crate::sys::{CUstream, Driver};

/// One copy, owned by the driver from its launch until it ran.
struct Copy {
    dst: usize,
    src: usize,
    len: usize,
}

/// The host function: do the copy and free it. Never unwinds into the
/// driver.
unsafe extern "C" fn run(data: *mut c_void) {
    // SAFETY: `data` is the `Box<Copy>` that `queue` leaked for this one
    // call; the driver calls the function once.
    let copy = unsafe { Box::from_raw(data.cast::<Copy>()) };
    let done = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: both ranges are host memory that stays mapped until the
        // stream ran this function (`queue`'s contract); `copy` allows them
        // to overlap.
        unsafe { std::ptr::copy(copy.src as *const u8, copy.dst as *mut u8, copy.len) }
    }));
    if done.is_err() {
        log::error!("a host-to-host copy of {} bytes panicked", copy.len);
    }
}

/// Queue on `stream` a copy of `len` bytes from host address `src` to host
/// address `dst`; the context is current.
///
/// # Safety
///
/// `src..src + len` and `dst..dst + len` are host memory, readable and
/// writable, that stays mapped until the stream has run the copy.
pub(crate) unsafe fn queue(
    driver: &Driver,
    stream: CUstream,
    dst: u64,
    src: u64,
    len: u64,
) -> Result<()> {
    let f = driver.launch_host_func()?;
    let copy = Box::into_raw(Box::new(Copy {
        dst: dst as usize,
        src: src as usize,
        len: len as usize,
    }));
    // SAFETY: a live stream of the current context; `run` takes back the
    // box it is given, once.
    let status = unsafe { f(stream, Some(run), copy.cast()) };
    if let Err(e) = driver.check("cuLaunchHostFunc", status) {
        // SAFETY: the driver refused the launch: the box is still ours.
        drop(unsafe { Box::from_raw(copy) });
        return Err(e);
    }
    Ok(())
}
