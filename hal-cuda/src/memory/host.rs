//! Host memory the device reaches, at the driver (the context current on
//! the calling thread): ranges registered and unregistered, the pages of
//! words this crate registers for stream writes, and copies between two
//! host ranges in stream order.
//!
//! **Registration.**
//!
//! - host memory is registered `PORTABLE | DEVICEMAP`
//!   (`cuMemHostRegister_v2`), and the device reaches it at the pointer
//!   `cuMemHostGetDevicePointer_v2` gives (the host address itself on the
//!   H200, measured);
//! - the driver refuses a range that overlaps a registration
//!   (`CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`);
//! - a registration ends with `cuMemHostUnregister`, before the range is
//!   unmapped.
//!
//! **Host-to-host copies.** `cuMemcpyAsync` from host memory to host memory
//! (registered or pinned, both sides) is fully synchronous with respect to
//! the host: it waits for the stream's earlier work and for the copy before
//! it returns (CUDA's API synchronization behaviour). On driver 580 (an
//! H200) such a copy queued behind a stream wait for a notify waited in the
//! driver, and held the process's registrations meanwhile, while its own
//! thread was the one to signal the notify next (measured: a conformance
//! case of `hal-cuda-uvm`, whose memory is registered host pages, hung
//! there).
//!
//! The contract queues a copy and returns, so a copy whose two sides are
//! host memory is a host function instead (`cuLaunchHostFunc`): the
//! driver calls it on a thread of its own once the stream's earlier work
//! has run, and later work waits for it. It copies with the CPU and makes
//! no driver call (the driver forbids them there).

use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use hal_core::kit::export::syncpage::{SyncPage, PAGE_LEN};
use hal_core::kit::os::HostRange;
use hal_core::Result;

use crate::ffi::result::{self, mem, stream};
use crate::ffi::{CUdeviceptr, Driver, Stream};

/// `CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP`.
const REGISTER_FLAGS: u32 = 0x1 | 0x2;

/// Register `range` with the current context's device: the device's
/// address of it. The caller unregisters it with [`unregister`], once,
/// before the range is unmapped.
pub(crate) fn register(driver: &Driver, range: &HostRange) -> Result<CUdeviceptr> {
    // Both asked before the registration, so that it can always be undone.
    result::has(driver.mem_host_get_device_pointer())?;
    result::has(driver.mem_host_unregister())?;
    mem::host_register(driver, range, REGISTER_FLAGS)?;
    match mem::host_device_pointer(driver, range.addr()) {
        Ok(dptr) => Ok(dptr),
        Err(e) => {
            // Undo the registration made above.
            let _ = mem::host_unregister(driver, range.addr());
            Err(e)
        }
    }
}

/// End the registration at the host address `at` made by [`register`]
/// (`cuMemHostUnregister`).
pub(crate) fn unregister(driver: &Driver, at: u64) -> Result<()> {
    mem::host_unregister(driver, at)
}

/// The range of a shared page and the share of the page that keeps it
/// mapped: whoever holds the range (a registration) keeps the share at
/// least as long.
pub(crate) fn page_range(page: &Arc<SyncPage>) -> Result<(HostRange, Arc<SyncPage>)> {
    // SAFETY: the page is mapped, readable and writable while a share of it
    // lives, and the share is handed out with the range for its holder to
    // drop last (`registration::register_kept` drops it after the
    // registration ended).
    let range = unsafe { HostRange::new(page.as_ptr(), PAGE_LEN) }?;
    Ok((range, Arc::clone(page)))
}

/// Words of a [`WordPage`] (64 KiB: a whole page where pages are 4 or
/// 64 KiB).
pub(crate) const WORDS: usize = 16 * 1024;

/// The words, aligned to the largest page size so that they can be
/// registered whole.
#[repr(C, align(65536))]
struct Words([AtomicU32; WORDS]);

const _: () = assert!(std::mem::size_of::<Words>() == 64 * 1024 && WORDS * 4 == 64 * 1024);

/// A page of 4-byte words registered with the device, which streams write
/// and the host reads. It is never freed while registered: one whose
/// unregistration failed (or never ran) is left allocated when dropped.
pub(crate) struct WordPage {
    /// Dropped only when not registered (`Drop`).
    words: ManuallyDrop<Box<Words>>,
    /// The device's address of the page (`cuMemHostGetDevicePointer`).
    device: CUdeviceptr,
    registered: AtomicBool,
}

impl WordPage {
    /// A new page of words, each `initial`, registered with the current
    /// context's device.
    pub(crate) fn register(driver: &Driver, initial: u32) -> Result<WordPage> {
        let words = Box::new(Words(std::array::from_fn(|_| AtomicU32::new(initial))));
        let len = std::mem::size_of::<Words>() as u64;
        // SAFETY: the words are heap memory that stays allocated (and never
        // moves) as long as the registration: a registered page is never
        // freed (`Drop`), and the range lives only for this call.
        let range = unsafe { HostRange::new(words.0.as_ptr().cast_mut().cast(), len) }?;
        let device = register(driver, &range)?;
        Ok(WordPage {
            words: ManuallyDrop::new(words),
            device,
            registered: AtomicBool::new(true),
        })
    }

    /// A page of words, each `initial`, that is not registered: the host
    /// logic of its users, without a device.
    #[cfg(test)]
    pub(crate) fn unregistered(initial: u32) -> WordPage {
        WordPage {
            words: ManuallyDrop::new(Box::new(Words(std::array::from_fn(|_| {
                AtomicU32::new(initial)
            })))),
            device: 0,
            registered: AtomicBool::new(false),
        }
    }

    /// Word `index`.
    pub(crate) fn word(&self, index: usize) -> &AtomicU32 {
        &self.words.0[index]
    }

    /// The host address of the page.
    pub(crate) fn host_addr(&self) -> u64 {
        self.words.0.as_ptr() as u64
    }

    /// Queue on `stream` a write of `value` to word `index`
    /// (`cuStreamWriteValue32_v2`).
    pub(crate) fn queue_write(
        &self,
        driver: &Driver,
        stream: Stream,
        index: usize,
        value: u32,
    ) -> Result<()> {
        if index >= WORDS {
            return Err(hal_core::Error::invalid(format!(
                "word {index} of a page of {WORDS}"
            )));
        }
        let at = self.device + (index * 4) as u64;
        // SAFETY: the word is in this page, registered with the device since
        // `register`; the page is never freed while registered (`Drop`), so
        // the word is there whenever the stream writes it.
        unsafe { stream::write_value32(driver, stream, at, value, 0) }
    }

    /// End the page's registration (the context current); after a failure
    /// the page stays registered, and is never freed.
    pub(crate) fn unregister(&self, driver: &Driver) -> Result<()> {
        if self.registered.load(Ordering::Acquire) {
            unregister(driver, self.host_addr())?;
            self.registered.store(false, Ordering::Release);
        }
        Ok(())
    }
}

impl Drop for WordPage {
    fn drop(&mut self) {
        if !*self.registered.get_mut() {
            // SAFETY: the words are dropped once, here, and not used after.
            unsafe { ManuallyDrop::drop(&mut self.words) };
        }
        // Else a stream may still write them: they are never freed.
    }
}

/// One copy, owned by the driver from its launch until it ran.
struct Copy {
    dst: usize,
    src: usize,
    len: usize,
}

/// The host function: do the copy and free it. Never unwinds into the
/// driver.
unsafe extern "C" fn run(data: *mut c_void) {
    // SAFETY: `data` is the `Box<Copy>` that `queue_copy` leaked for this
    // one call; the driver calls the function once.
    let copy = unsafe { Box::from_raw(data.cast::<Copy>()) };
    let done = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: both ranges are host memory that stays mapped until the
        // stream ran this function (`queue_copy`'s contract); `copy` allows
        // them to overlap.
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
pub(crate) unsafe fn queue_copy(
    driver: &Driver,
    on: Stream,
    dst: u64,
    src: u64,
    len: u64,
) -> Result<()> {
    let copy = Box::into_raw(Box::new(Copy {
        dst: dst as usize,
        src: src as usize,
        len: len as usize,
    }));
    // SAFETY: `run` takes back the box it is given, once; the ranges stay
    // mapped until it ran (this function's contract).
    let launched = unsafe { stream::launch_host_func(driver, on, Some(run), copy.cast()) };
    if let Err(e) = launched {
        // SAFETY: the driver refused the launch: the box is still ours.
        drop(unsafe { Box::from_raw(copy) });
        return Err(e);
    }
    Ok(())
}
