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

/// The bases of this process's exported allocations, by buffer id: what a
/// same-process import reaches.
pub(crate) fn own() -> &'static Mutex<HashMap<u64, CUdeviceptr>> {
    static OWN: OnceLock<Mutex<HashMap<u64, CUdeviceptr>>> = OnceLock::new();
    OWN.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The buffer ids of this process's allocations exported in raw form, by
/// the driver's 64 bytes: a raw import of one of them in this process
/// reaches the original (the driver refuses to open its own handles).
pub(crate) fn own_raw() -> &'static Mutex<HashMap<[u8; 64], u64>> {
    static OWN_RAW: OnceLock<Mutex<HashMap<[u8; 64], u64>>> = OnceLock::new();
    OWN_RAW.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Forget an exported allocation that is being freed.
pub(crate) fn forget(buffer_id: u64) {
    lock(own()).remove(&buffer_id);
    lock(own_raw()).retain(|_, id| *id != buffer_id);
}

/// A new lease table for an allocation's first export.
pub(crate) fn new_exports(buffer_id: u64) -> Result<Exports> {
    Ok(Exports {
        leases: LeaseTable::new(DEFAULT_SLOTS)?,
        buffer_id,
    })
}
