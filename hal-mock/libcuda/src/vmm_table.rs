//! What the driver keeps of VMM: physical allocations by their generic
//! allocation handle and address reservations by their first address.
//! Reservations are found from any address inside them, as a driver finds
//! its mappings from a bare pointer (the synchronous copies use it).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use hal_core::kit::vendor::{cuda, Code};
use hal_mock::{MockPhysical, MockReservation};

use crate::state::lock;

/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
pub(crate) const HANDLE_POSIX_FD: u32 = 1;
/// `CU_MEM_HANDLE_TYPE_FABRIC`.
pub(crate) const HANDLE_FABRIC: u32 = 8;

/// A physical allocation of the table.
pub(crate) struct PhysEntry {
    /// The simulator's allocation.
    pub(crate) phys: Arc<MockPhysical>,
    /// The `requestedHandleTypes` it was made with (an import: POSIX fd).
    pub(crate) requested: u32,
}

/// A reservation of the table.
pub(crate) struct ResEntry {
    /// The simulator's reservation.
    pub(crate) res: Arc<MockReservation>,
    /// The device whose context reserved it (its calls map and set access).
    pub(crate) ordinal: u32,
    /// Its length.
    pub(crate) len: u64,
}

/// The VMM tables of this process.
#[derive(Default)]
pub(crate) struct Vmm {
    pub(crate) physical: Mutex<HashMap<u64, PhysEntry>>,
    pub(crate) reservations: Mutex<BTreeMap<u64, ResEntry>>,
    next: AtomicU64,
}

/// The tables, made on first use.
pub(crate) fn vmm() -> &'static Vmm {
    static VMM: OnceLock<Vmm> = OnceLock::new();
    VMM.get_or_init(Vmm::default)
}

/// What [`Vmm::find`] found: the reservation holding a range.
pub(crate) struct InReservation {
    /// The simulator's reservation.
    pub(crate) res: Arc<MockReservation>,
    /// The reserving device.
    pub(crate) ordinal: u32,
    /// The offset of the address looked up in it.
    pub(crate) offset: u64,
}

impl Vmm {
    /// A new generic allocation handle (never 0).
    pub(crate) fn new_handle(&self) -> u64 {
        0x7000_0000 + self.next.fetch_add(1, Ordering::Relaxed) * 8
    }

    /// The physical allocation `handle` names, or `CUDA_ERROR_INVALID_VALUE`.
    pub(crate) fn physical(&self, handle: u64) -> Result<(Arc<MockPhysical>, u32), Code> {
        lock(&self.physical)
            .get(&handle)
            .map(|p| (Arc::clone(&p.phys), p.requested))
            .ok_or(cuda::INVALID_VALUE)
    }

    /// The reservation holding `ptr..ptr + len`, or
    /// `CUDA_ERROR_INVALID_VALUE` when none holds the whole range.
    pub(crate) fn find(&self, ptr: u64, len: u64) -> Result<InReservation, Code> {
        let table = lock(&self.reservations);
        let (&base, entry) = table.range(..=ptr).next_back().ok_or(cuda::INVALID_VALUE)?;
        let offset = ptr - base;
        let end = offset.checked_add(len).ok_or(cuda::INVALID_VALUE)?;
        if offset >= entry.len || end > entry.len {
            return Err(cuda::INVALID_VALUE);
        }
        Ok(InReservation {
            res: Arc::clone(&entry.res),
            ordinal: entry.ordinal,
            offset,
        })
    }
}
