//! Device memory as a host program sees it through the stand-in: an
//! address range with no access at all.
//!
//! The simulator keeps device memory in host pages, so the address it
//! gives could be read by the host. A real device pointer cannot: a
//! backend that dereferences one has a bug that only a GPU machine would
//! show. The stand-in hands out, for device memory and for imported
//! device memory, the address of a reservation mapped `PROT_NONE` of the
//! same length, and finds the simulator's memory by that address; any
//! host access through it faults, in CI as on a GPU.

use hal_core::kit::os::SharedMap;
use hal_core::kit::vendor::{cuda, Code};

/// A `PROT_NONE` address range standing for device memory; unmapped on drop.
pub(crate) struct NoAccess(SharedMap);

impl NoAccess {
    /// Reserve `len` bytes (at least one page) with no access.
    pub(crate) fn reserve(len: u64) -> Result<NoAccess, Code> {
        SharedMap::reserve(len.max(1), None)
            .map(NoAccess)
            .map_err(|_| cuda::OUT_OF_MEMORY)
    }

    /// The address handed out as the device pointer.
    pub(crate) fn addr(&self) -> u64 {
        self.0.as_ptr() as u64
    }
}
