//! The per-process registration cache: host pages registered with a GPU
//! once per process and region, shared by every user in the process, and
//! unregistered when the last of them lets go.
//!
//! Registration is expensive (256 MiB: 40–102 ms, 1 GiB: 145–446 ms on an
//! H200, measured with plain driver calls outside this crate: the vendor
//! notes, `shared/vendor/cuda.md`), so a second open of a region in a process must cost a
//! lookup, not a registration. The key is the GPU (its UUID) and the host
//! range: `hal-cpu-shm`'s import cache maps one memfd range once per process
//! (every import of the same handle shares that mapping), so the range names
//! the memfd region for as long as a mapping of it lives, and the cache
//! holds only weak references, so an entry whose users are gone is never
//! found again, even when its addresses are reused.

use std::any::Any;
use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use hal_core::kit::os::lock::lock;
use hal_core::{Device, Memory, Result};

use crate::gpu::GpuDevice;

/// One registration of host pages with a GPU, shared by every user of the
/// region in this process.
///
/// Ending a registration waits for the GPU's queued work (driver 580's
/// `cuMemHostUnregister` waits for the device, measured), which a stream
/// waiting for a crashed peer never finishes: a registration that keeps its
/// pages mapped itself (`keep`) ends on a teardown worker
/// (`hal_core::kit::stream::teardown::after_work`), so that dropping the last buffer of
/// a region never waits; one whose caller keeps the pages ends where it
/// drops, before the caller unmaps them.
pub(crate) struct Registered<D: Device> {
    /// Taken once, by `drop`.
    reg: ManuallyDrop<D::HostRegistration>,
    /// What keeps the pages mapped while the registration lives (the
    /// buffer's allocation, an imported mapping), when the caller does not
    /// keep them itself.
    keep: Option<Box<dyn Any + Send + Sync>>,
}

impl<D: Device> Drop for Registered<D> {
    fn drop(&mut self) {
        // SAFETY: `reg` is taken here only, once, and never used after.
        let reg = unsafe { ManuallyDrop::take(&mut self.reg) };
        match self.keep.take() {
            Some(keep) => {
                hal_core::kit::stream::teardown::after_work("hal-uvm-unregister", move || {
                    // Unregistered while still mapped.
                    drop(reg);
                    drop(keep);
                })
            }
            None => drop(reg),
        }
    }
}

impl<D: Device> std::fmt::Debug for Registered<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("device_addr", &format_args!("{:#x}", self.reg.addr()))
            .field("len", &self.reg.len())
            .finish()
    }
}

impl<D: Device> Registered<D> {
    /// The address the GPU uses for the first byte (on the H200 measured,
    /// and on the stand-in, the host address itself).
    pub(crate) fn device_addr(&self) -> u64 {
        self.reg.addr()
    }

    /// The GPU's registration, for stream work on the pages.
    pub(crate) fn registration(&self) -> &D::HostRegistration {
        &self.reg
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    device: [u8; 16],
    addr: u64,
    len: u64,
}

type Cache = Mutex<HashMap<Key, Weak<dyn Any + Send + Sync>>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

static MADE: AtomicU64 = AtomicU64::new(0);

/// The registration of `ptr..ptr + len` with `gpu`: the one this process
/// already holds, or a new one (`Device::register_host`). `keep` is held
/// as long as the registration lives.
///
/// The cache stays locked while a registration is made, so two threads
/// opening the same region register it once.
///
/// # Safety
///
/// `ptr..ptr + len` must be mapped readable and writable in this process
/// as long as the returned registration lives (by `keep`, or by the
/// caller, who then drops the registration before unmapping).
pub(crate) unsafe fn register<D>(
    gpu: &D,
    ptr: *mut u8,
    len: u64,
    keep: Option<Box<dyn Any + Send + Sync>>,
) -> Result<Arc<Registered<D>>>
where
    D: GpuDevice,
{
    let key = Key {
        device: gpu.info().uuid,
        addr: ptr as u64,
        len,
    };
    let mut cache = lock(cache());
    if let Some(found) = cache.get(&key).and_then(Weak::upgrade) {
        if let Ok(found) = found.downcast::<Registered<D>>() {
            return Ok(found);
        }
    }
    cache.retain(|_, w| w.strong_count() > 0);
    // SAFETY: the caller's promise: the range stays mapped, readable and
    // writable, as long as the registration lives.
    let reg = unsafe { gpu.register_host(ptr, len) }?;
    MADE.fetch_add(1, Ordering::Relaxed);
    let entry = Arc::new(Registered::<D> {
        reg: ManuallyDrop::new(reg),
        keep,
    });
    let any: Arc<dyn Any + Send + Sync> = entry.clone();
    cache.insert(key, Arc::downgrade(&any));
    Ok(entry)
}

/// How many registrations this process holds now (over every GPU).
pub fn live_registrations() -> usize {
    lock(cache())
        .values()
        .filter(|w| w.strong_count() > 0)
        .count()
}

/// How many registrations this process has made since it started: a
/// second open of a registered region leaves it unchanged.
pub fn registrations_made() -> u64 {
    MADE.load(Ordering::Relaxed)
}

/// True when this process holds a registration of `addr..addr + len` with
/// the GPU whose UUID is `device`.
pub fn holds(device: [u8; 16], addr: u64, len: u64) -> bool {
    lock(cache())
        .get(&Key { device, addr, len })
        .is_some_and(|w| w.strong_count() > 0)
}
