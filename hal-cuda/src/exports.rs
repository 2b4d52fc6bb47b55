//! The exporter's side of legacy IPC kept with an allocation: its
//! importers' leases, and the registry of this process's exported bases
//! that a same-process import reaches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use hal_core::lease::{LeaseTable, DEFAULT_SLOTS};
use hal_core::Result;

use crate::sys::CUdeviceptr;
use hal_core::lock::lock;

/// What an exported allocation keeps: its importers' leases and its id.
#[derive(Debug)]
pub(crate) struct Exports {
    pub(crate) leases: Arc<LeaseTable>,
    pub(crate) buffer_id: u64,
}

/// The bases of this process's exported allocations, by buffer id, each
/// with how many live [`CudaAllocation`](crate::CudaAllocation)s export
/// ranges of it (an allocation and ranges of it adopted apart share the
/// driver's buffer id): what a same-process import reaches.
fn own() -> &'static Mutex<HashMap<u64, (CUdeviceptr, usize)>> {
    static OWN: OnceLock<Mutex<HashMap<u64, (CUdeviceptr, usize)>>> = OnceLock::new();
    OWN.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The base of this process's exported allocation `buffer_id`, while one
/// of its exporters lives.
pub(crate) fn own_base(buffer_id: u64) -> Option<CUdeviceptr> {
    lock(own()).get(&buffer_id).map(|&(base, _)| base)
}

/// One more live exporter of the allocation at `base` (`buffer_id`).
fn remember(buffer_id: u64, base: CUdeviceptr) {
    lock(own()).entry(buffer_id).or_insert((base, 0)).1 += 1;
}

/// The buffer ids of this process's allocations exported in raw form, by
/// the driver's 64 bytes: a raw import of one of them in this process
/// reaches the original (the driver refuses to open its own handles).
pub(crate) fn own_raw() -> &'static Mutex<HashMap<[u8; 64], u64>> {
    static OWN_RAW: OnceLock<Mutex<HashMap<[u8; 64], u64>>> = OnceLock::new();
    OWN_RAW.get_or_init(|| Mutex::new(HashMap::new()))
}

/// One exporter of allocation `buffer_id` less (it is being dropped); the
/// last one forgets the allocation.
pub(crate) fn forget(buffer_id: u64) {
    let mut own = lock(own());
    let Some(entry) = own.get_mut(&buffer_id) else {
        return;
    };
    entry.1 = entry.1.saturating_sub(1);
    if entry.1 == 0 {
        own.remove(&buffer_id);
        drop(own);
        lock(own_raw()).retain(|_, id| *id != buffer_id);
    }
}

/// A new lease table for an allocation's first export, its base
/// remembered until [`forget`] (call it only for the table kept).
pub(crate) fn new_exports(buffer_id: u64) -> Result<Exports> {
    Ok(Exports {
        leases: LeaseTable::new(DEFAULT_SLOTS)?,
        buffer_id,
    })
}

/// Remember the base of the allocation whose first export made `kept`.
pub(crate) fn kept(kept: &Exports, base: CUdeviceptr) {
    remember(kept.buffer_id, base);
}
