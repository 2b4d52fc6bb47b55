//! [`AscendAllocation`]: device memory (`aclrtMalloc`), read and written
//! with `aclrtMemcpy` (`copy.rs`), never dereferenced. An exported
//! allocation keeps its keys and its importers' leases: its release waits
//! for the importers, then closes its keys (`aclrtIpcMemClose`), then
//! frees (`aclrtFree`): the documented close order.

use std::ffi::CString;
use std::sync::Arc;

use hal_core::lease::LazyLeases;
use hal_core::{Allocation, Location, Memory, Result};

use crate::context::Ctx;
use crate::ffi::bindings::aclrtMemMallocPolicy;
use crate::ffi::result::{ipc, mem};
use crate::memory::copy::{copy_in, copy_out};
use crate::memory::keys::ExportedKeys;

/// Memory this process allocated on an Ascend device.
#[must_use = "the memory is freed when this value drops"]
pub struct AscendAllocation {
    /// The first byte of the allocation: `base` rounded up to the
    /// alignment asked for.
    pub(crate) ptr: u64,
    pub(crate) len: u64,
    /// The page the memory sits on (`pages.rs`): an export is whole pages
    /// of this size.
    pub(crate) page: u64,
    /// What `aclrtMalloc` gave (freed with `aclrtFree`).
    pub(crate) base: u64,
    /// Its importers' leases, made at the first export.
    pub(crate) leases: LazyLeases,
    /// The keys its exports took, closed before the memory is freed.
    pub(crate) keys: ExportedKeys,
    /// The device the memory is on, and its runtime.
    pub(crate) ctx: Arc<Ctx>,
}

impl std::fmt::Debug for AscendAllocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (ptr, len, device) = (self.ptr, self.len, self.ctx.ordinal);
        write!(
            f,
            "AscendAllocation {{ ptr: {ptr:#x}, len: {len}, device: {device} }}"
        )
    }
}

/// `aclrtMalloc` of `size` bytes on `ctx`'s device with `policy`.
fn malloc(ctx: &Ctx, size: u64, policy: aclrtMemMallocPolicy) -> Result<u64> {
    let size = usize::try_from(size).map_err(|_| hal_core::Error::invalid("size too large"))?;
    ctx.call(|| mem::alloc(&ctx.rt, size, policy))
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
            leases: LazyLeases::default(),
            keys: ExportedKeys::default(),
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
}

impl Drop for AscendAllocation {
    fn drop(&mut self) {
        let keys = self.keys.take();
        let (ctx, base, ptr) = (Arc::clone(&self.ctx), self.base, self.ptr);
        // While importers hold it, the documented order has them close
        // first: the release waits for their leases.
        self.leases.release_when_unleased(
            "hal-ascend-deferred-free",
            || format!("Ascend memory at {ptr:#x}"),
            move || release(&ctx, base, &keys),
        );
    }
}

/// Close the exporter's keys, then free the memory: the documented order.
fn release(ctx: &Ctx, ptr: u64, keys: &[CString]) {
    let rt = &ctx.rt;
    let done = ctx.call(|| {
        for k in keys {
            // A key this allocation's export took, closed once.
            if let Err(e) = ipc::close(rt, k) {
                log::warn!("closing a key of Ascend memory at {ptr:#x}: {e}");
            }
        }
        // `ptr` came from aclrtMalloc and is freed once.
        mem::free(rt, ptr)
    });
    if let Err(e) = done {
        log::warn!("freeing Ascend memory at {ptr:#x}: {e}");
    }
}

impl Memory for AscendAllocation {
    /// Device memory only: the runtime allocates no host memory here.
    fn location(&self) -> Location {
        Location::Device(self.ctx.ordinal)
    }

    fn host_ptr(&self) -> Option<*mut u8> {
        None
    }

    fn addr(&self) -> u64 {
        self.ptr
    }

    fn len(&self) -> u64 {
        self.len
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
        Ok(self.leases.count())
    }

    /// Refused with [`Error::Busy`](hal_core::Error::Busy) while importers
    /// hold it: Ascend's documented order has importers close first.
    fn free(self) -> std::result::Result<(), hal_core::FreeError<Self>> {
        let holders = self.leases.count();
        hal_core::kit::memory::busy_free::unless_held(self, holders, |a| {
            format!(
                "Ascend memory at {:#x} ({} bytes): importers close it (aclrtIpcMemClose) before \
                 the exporter closes its key and frees it",
                a.ptr, a.len
            )
        })
    }

    fn wait_unleased(&self, timeout: Option<std::time::Duration>) -> Result<()> {
        self.leases.wait_empty(timeout)
    }
}
