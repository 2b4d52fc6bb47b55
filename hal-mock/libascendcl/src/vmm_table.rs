//! What the runtime keeps of VMM: physical allocations by their
//! `aclrtDrvMemHandle`, reservations by their first address (with the
//! mappings inside them, since `aclrtUnmapMem` names a mapping by its
//! address alone), and the shareable handles this process exported.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use hal_core::kit::vendor::acl;
use hal_core::Exported;
use hal_mock::{MockPhysical, MockReservation};

use crate::refusal::{refuse, Refusal};
use crate::state::lock;

/// A physical allocation of the table.
pub(crate) struct PhysEntry {
    /// The simulator's allocation.
    pub(crate) phys: Arc<MockPhysical>,
    /// The device whose simulator made or imported it.
    pub(crate) ordinal: u32,
}

/// A reservation of the table.
pub(crate) struct ResEntry {
    /// The simulator's reservation.
    pub(crate) res: Arc<MockReservation>,
    /// The device current when it was reserved.
    pub(crate) ordinal: u32,
    /// Its length.
    pub(crate) len: u64,
    /// Its mappings: offset to length.
    pub(crate) mapped: BTreeMap<u64, u64>,
}

/// A shareable handle this process exported, kept until the physical
/// allocation is freed.
pub(crate) struct SharedExport {
    /// The simulator's export (its allow-list holds OS pids).
    pub(crate) export: Exported,
    /// The envelope the number names.
    pub(crate) _envelope: Exported,
    /// The physical allocation's handle.
    pub(crate) physical: usize,
    /// The device that exported it.
    pub(crate) ordinal: u32,
}

/// The VMM tables of this process.
#[derive(Default)]
pub(crate) struct Vmm {
    pub(crate) physical: Mutex<HashMap<usize, PhysEntry>>,
    pub(crate) reservations: Mutex<BTreeMap<u64, ResEntry>>,
    pub(crate) shared: Mutex<HashMap<u64, SharedExport>>,
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
    /// Its first address.
    pub(crate) base: u64,
    /// The reserving device.
    pub(crate) ordinal: u32,
    /// The offset of the address looked up in it.
    pub(crate) offset: u64,
}

impl Vmm {
    /// The physical allocation `handle` names, and its device;
    /// `ACL_ERROR_RT_INVALID_HANDLE` for any other value.
    pub(crate) fn physical(&self, handle: usize) -> Result<(Arc<MockPhysical>, u32), Refusal> {
        lock(&self.physical)
            .get(&handle)
            .map(|p| (Arc::clone(&p.phys), p.ordinal))
            .ok_or_else(|| {
                refuse(
                    acl::RT_INVALID_HANDLE,
                    format!("{handle:#x} is no physical allocation of this process"),
                )
            })
    }

    /// The reservation holding `ptr..ptr + len`; `None` when none holds
    /// all of it.
    pub(crate) fn find(&self, ptr: u64, len: u64) -> Option<InReservation> {
        let table = lock(&self.reservations);
        let (&base, entry) = table.range(..=ptr).next_back()?;
        let offset = ptr - base;
        let end = offset.checked_add(len)?;
        (offset < entry.len && end <= entry.len).then(|| InReservation {
            res: Arc::clone(&entry.res),
            base,
            ordinal: entry.ordinal,
            offset,
        })
    }

    /// [`Vmm::find`], refusing with `ACL_ERROR_RT_PARAM_INVALID`.
    pub(crate) fn found(&self, ptr: u64, len: u64) -> Result<InReservation, Refusal> {
        self.find(ptr, len).ok_or_else(|| {
            refuse(
                acl::RT_PARAM_INVALID,
                format!("{ptr:#x}+{len:#x} is not inside an address reservation of this process"),
            )
        })
    }
}
