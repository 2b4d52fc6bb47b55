//! Device memory (`aclrtMalloc`), read and written with `aclrtMemcpy`,
//! never dereferenced. An exported allocation keeps its keys and its
//! importers' leases: its release waits for the importers, then closes its
//! keys (`aclrtIpcMemClose`), then frees (`aclrtFree`): the documented
//! close order.

use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex, OnceLock};

use hal_core::device::check_bounds;
use hal_core::lease::{LeaseTable, DEFAULT_SLOTS};
use hal_core::{Allocation, Location, Memory, Result};

use crate::bindings::{aclrtMemMallocPolicy, ACL_MEMCPY_DEVICE_TO_HOST, ACL_MEMCPY_HOST_TO_DEVICE};
use crate::context::Ctx;

/// Memory this process allocated on an Ascend device.
#[must_use = "the memory is freed when this value drops"]
pub struct AscendAllocation {
    pub(crate) ctx: Arc<Ctx>,
    /// What `aclrtMalloc` gave (freed with `aclrtFree`).
    pub(crate) base: u64,
    /// The first byte of the allocation: `base` rounded up to the
    /// alignment asked for.
    pub(crate) ptr: u64,
    pub(crate) len: u64,
    /// The page the memory sits on (`pages.rs`): an export is whole pages
    /// of this size.
    pub(crate) page: u64,
    /// Its importers' leases, made at the first export.
    pub(crate) leases: OnceLock<Arc<LeaseTable>>,
    /// The keys its exports took, closed before the memory is freed.
    pub(crate) keys: Mutex<Vec<CString>>,
}

impl std::fmt::Debug for AscendAllocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AscendAllocation")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("device", &self.ctx.ordinal)
            .finish()
    }
}

/// `aclrtMalloc` of `size` bytes on `ctx`'s device with `policy`.
fn malloc(ctx: &Ctx, size: u64, policy: aclrtMemMallocPolicy) -> Result<u64> {
    let size = usize::try_from(size).map_err(|_| hal_core::Error::invalid("size too large"))?;
    let rt = &ctx.rt;
    ctx.call(|| {
        let f = rt.malloc()?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid place; the size is non-zero.
        let status = unsafe { f(&mut p, size, policy) };
        rt.check("aclrtMalloc", status)?;
        Ok(p as u64)
    })
}

impl AscendAllocation {
    /// `size` bytes at an address aligned to `align` (0 or 1: whatever the
    /// runtime gives). `aclrtMalloc` takes no alignment and sub-allocates
    /// small buffers from pools, so an allocation that comes back
    /// misaligned is given back and `align - 1` more bytes are allocated,
    /// the allocation starting at the first aligned byte inside. The
    /// policy, and so the pages, follow `huge` and the size (`pages.rs`).
    pub(crate) fn allocate(
        ctx: &Arc<Ctx>,
        size: u64,
        align: u64,
        huge: hal_core::HugePages,
    ) -> Result<AscendAllocation> {
        let (policy, page) = crate::pages::policy(size, huge)?;
        let made = |base: u64, ptr: u64| AscendAllocation {
            ctx: Arc::clone(ctx),
            base,
            ptr,
            len: size,
            page,
            leases: OnceLock::new(),
            keys: Mutex::new(Vec::new()),
        };
        let base = malloc(ctx, size, policy)?;
        if align <= 1 || base % align == 0 {
            return Ok(made(base, base));
        }
        release(ctx, base, &[]);
        let padded = size
            .checked_add(align - 1)
            .ok_or_else(|| hal_core::Error::invalid("size too large"))?;
        let base = malloc(ctx, padded, policy)?;
        Ok(made(base, base.next_multiple_of(align)))
    }

    /// The lease table, made at the first export.
    pub(crate) fn leases(&self) -> Result<Arc<LeaseTable>> {
        if let Some(l) = self.leases.get() {
            return Ok(Arc::clone(l));
        }
        let made = LeaseTable::new(DEFAULT_SLOTS)?;
        let _ = self.leases.set(made);
        self.leases
            .get()
            .cloned()
            .ok_or_else(|| hal_core::Error::invalid("lease table vanished"))
    }

    fn holders(&self) -> usize {
        self.leases.get().map_or(0, |l| l.count())
    }
}

impl Drop for AscendAllocation {
    fn drop(&mut self) {
        let keys = std::mem::take(&mut *hal_core::lock::lock(&self.keys));
        crate::exports::forget(&keys);
        let Some(leases) = self.leases.get().filter(|l| l.count() > 0).cloned() else {
            release(&self.ctx, self.base, &keys);
            return;
        };
        // Importers still hold it: the documented order has them close
        // first, so the release waits for their leases on a thread.
        let (ctx, ptr) = (Arc::clone(&self.ctx), self.base);
        let spawned = hal_core::os::thread::spawn("hal-ascend-deferred-free", move || {
            if let Err(e) = leases.wait_empty(None) {
                log::warn!("waiting for the importers of Ascend memory at {ptr:#x}: {e}");
            }
            release(&ctx, ptr, &keys);
        });
        if let Err(e) = spawned {
            log::warn!(
                "Ascend memory at {:#x} is still imported and no thread could wait for its \
                 importers ({e}); it is left allocated",
                self.ptr
            );
        }
    }
}

/// Close the exporter's keys, then free the memory: the documented order.
fn release(ctx: &Ctx, ptr: u64, keys: &[CString]) {
    let rt = &ctx.rt;
    let done = ctx.call(|| {
        for k in keys {
            let closed = rt.ipc_mem_close().and_then(|f| {
                // SAFETY: `k` is a key this allocation's export took, closed once.
                rt.check("aclrtIpcMemClose", unsafe { f(k.as_ptr()) })
            });
            if let Err(e) = closed {
                log::warn!("closing a key of Ascend memory at {ptr:#x}: {e}");
            }
        }
        let f = rt.free()?;
        // SAFETY: `ptr` came from aclrtMalloc and is freed once.
        rt.check("aclrtFree", unsafe { f(ptr as *mut c_void) })
    });
    if let Err(e) = done {
        log::warn!("freeing Ascend memory at {ptr:#x}: {e}");
    }
}

impl Memory for AscendAllocation {
    fn addr(&self) -> u64 {
        self.ptr
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn location(&self) -> Location {
        Location::Device(self.ctx.ordinal)
    }

    fn host_ptr(&self) -> Option<*mut u8> {
        None
    }

    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        copy_out(&self.ctx, self.ptr, self.len, offset, dst)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        copy_in(&self.ctx, self.ptr, self.len, offset, src)
    }
}

impl Allocation for AscendAllocation {
    fn importers(&self) -> Result<usize> {
        Ok(self.holders())
    }

    /// Refused with [`Error::Busy`](hal_core::Error::Busy) while importers
    /// hold it: Ascend's documented order has importers close first.
    fn free(self) -> std::result::Result<(), hal_core::FreeError<Self>> {
        let holders = self.holders();
        if holders > 0 {
            let what = format!(
                "Ascend memory at {:#x} ({} bytes): importers close it (aclrtIpcMemClose) before \
                 the exporter closes its key and frees it",
                self.ptr, self.len
            );
            return Err(hal_core::FreeError {
                resource: self,
                error: hal_core::Error::Busy { what, holders },
            });
        }
        drop(self);
        Ok(())
    }

    fn wait_unleased(&self, timeout: Option<std::time::Duration>) -> Result<()> {
        match self.leases.get() {
            Some(l) => l.wait_empty(timeout),
            None => Ok(()),
        }
    }
}

/// Copy out of the live device range `base..base + len` (`aclrtMemcpy`
/// device to host), with the device current.
pub(crate) fn copy_out(ctx: &Ctx, base: u64, len: u64, offset: u64, dst: &mut [u8]) -> Result<()> {
    check_bounds(offset, dst.len() as u64, len)?;
    if dst.is_empty() {
        return Ok(());
    }
    let rt = &ctx.rt;
    ctx.call(|| {
        let f = rt.memcpy()?;
        // SAFETY: the source lies inside the live device range (bounds
        // checked); `dst` is a distinct host buffer of that length.
        let status = unsafe {
            f(
                dst.as_mut_ptr().cast(),
                dst.len(),
                (base + offset) as *const c_void,
                dst.len(),
                ACL_MEMCPY_DEVICE_TO_HOST,
            )
        };
        rt.check("aclrtMemcpy", status)
    })
}

/// Copy into the live device range `base..base + len` (`aclrtMemcpy` host
/// to device), with the device current.
pub(crate) fn copy_in(ctx: &Ctx, base: u64, len: u64, offset: u64, src: &[u8]) -> Result<()> {
    check_bounds(offset, src.len() as u64, len)?;
    if src.is_empty() {
        return Ok(());
    }
    let rt = &ctx.rt;
    ctx.call(|| {
        let f = rt.memcpy()?;
        // SAFETY: the destination lies inside the live device range (bounds
        // checked); `src` is a distinct host buffer of that length.
        let status = unsafe {
            f(
                (base + offset) as *mut c_void,
                src.len(),
                src.as_ptr().cast(),
                src.len(),
                ACL_MEMCPY_HOST_TO_DEVICE,
            )
        };
        rt.check("aclrtMemcpy", status)
    })
}
