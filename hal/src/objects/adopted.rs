//! Memory another library of this process allocated, adopted by address,
//! with what keeps it allocated.

use std::any::Any;
use std::sync::Arc;

use hal_core::dynamic::DynAllocation;
use hal_core::Memory;

/// What keeps adopted memory allocated: a door's reference to the object
/// that owns it (a Python tensor), released only once no importer maps the
/// memory.
pub type Owner = Box<dyn Any + Send + Sync>;

/// Memory another library of this process allocated (a C++ producer's
/// `cudaMalloc` buffer, a PyTorch or CuPy tensor), adopted by address
/// ([`Device::adopt_memory`](crate::Device::adopt_memory)), with the owner
/// that keeps it allocated, if the door was given one. When it drops while
/// importers still map the memory and it has an owner, a thread of its own
/// waits for them before the owner is let go: the library would otherwise
/// reuse or free memory another process reads. Without an owner the caller
/// keeps the memory allocated until no importer maps it, as it promised
/// when it adopted it.
pub struct Adopted(Arc<AdoptedInner>);

/// Declared in drop order: the adopted allocation, then its owner.
struct AdoptedInner {
    alloc: Box<dyn DynAllocation>,
    owner: Option<Owner>,
}

impl Adopted {
    /// `alloc`, adopted memory, kept allocated by `owner` (if any).
    pub fn new(alloc: Box<dyn DynAllocation>, owner: Option<Owner>) -> Adopted {
        Adopted(Arc::new(AdoptedInner { alloc, owner }))
    }

    /// The adopted allocation.
    pub fn allocation(&self) -> &dyn DynAllocation {
        &*self.0.alloc
    }
}

impl Drop for Adopted {
    fn drop(&mut self) {
        // The exports were dropped first (`MemoryObj`'s field order), so no
        // importer is added now; only those that hold it are waited for.
        if self.0.owner.is_none() || self.0.alloc.importers().unwrap_or(0) == 0 {
            return;
        }
        let inner = Arc::clone(&self.0);
        let spawned = hal_core::kit::os::thread::spawn("hal-adopted", move || {
            // No deadline: releasing the owner earlier would let the
            // library reuse memory another process maps.
            let _ = inner.alloc.wait_unleased(None);
            drop(inner);
        });
        if spawned.is_err() {
            // No thread to wait with: keep the owner for the process's life
            // rather than let it go under an importer.
            std::mem::forget(Arc::clone(&self.0));
        }
    }
}

impl std::fmt::Debug for Adopted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adopted")
            .field("addr", &self.0.alloc.addr())
            .field("len", &self.0.alloc.len())
            .field("owned", &self.0.owner.is_some())
            .finish()
    }
}
