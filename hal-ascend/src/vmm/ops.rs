//! VMM of an [`AscendDevice`](crate::AscendDevice): physical allocations
//! (`aclrtMallocPhysical`), reservations (`aclrtReserveMemAddress`),
//! mappings (`aclrtMapMem`, `aclrtUnmapMem`), access (`aclrtMemSetAccess`)
//! and sharing by the runtime's 64-bit shareable handle
//! (`aclrtMemExportToShareableHandle`, `aclrtMemSetPidToShareableHandle`,
//! `aclrtMemImportFromShareableHandle`), as `vendor/ascend.md`
//! ("Semantics", VMM) describes them.
//!
//! **Handle types.** Every allocation is made with
//! `ACL_MEM_HANDLE_TYPE_NONE`, whose export is the 64-bit handle; the
//! allocation reports the [`ShareableHandle`] it was asked for (a fabric
//! request is refused and falls back to [`ShareableHandle::PosixFd`],
//! through [`fabric_or_posix`]). Only device memory exists
//! (`Capabilities::HOST_NUMA_VMM` is absent).
//!
//! **Export.** `aclrtMemExportToShareableHandle` gives the `u64`, carried
//! in the handle's payload ([`Payload`]). The runtime's pid allow-list is
//! on by default: importers' bare tgids (`aclrtDeviceGetBareTgid`, through
//! [`Device::process_id`](hal_core::Device::process_id)) are added with
//! `aclrtMemSetPidToShareableHandle`, now or later with
//! [`Device::allow_importers`](hal_core::Device::allow_importers); an
//! export to anyone passes `ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION`.
//! The handle's allow-list says [`PidKind::Vendor`]: the runtime checks
//! it, and the exporter's broker serves the lease to anyone, so importers
//! are counted ([`AscendPhysical::importers`]).
//!
//! **Import.** Physical memory of another device is imported only with
//! `Capabilities::PEER_ACCESS`, after this device enabled peer access to
//! that one (`aclrtDeviceEnablePeerAccess`, `peer.rs`), which
//! `vendor/ascend.md` asks for when the two processes use different
//! devices. The lease is taken from the exporter's broker first, then
//! `aclrtMemImportFromShareableHandle` opens the `u64` on this device; a
//! process not listed is refused by the runtime
//! (`ACL_ERROR_RT_NO_PERMISSION`, answered as
//! [`Error::PermissionDenied`]). The imported allocation is freed
//! (`aclrtFreePhysical`) and its lease given back when it drops.

use std::sync::Arc;

use hal_core::exchange::take_fds_leased;
use hal_core::kit::export::{new_handle, HandleSpec};
use hal_core::kit::vendor::acl::entry;
use hal_core::kit::vmm::checks as vmm_checks;
use hal_core::kit::vmm::forward::VmmCalls;
use hal_core::kit::vmm::physical::PhysicalRecord;
use hal_core::lease::LazyLeases;
use hal_core::vmm::fabric_or_posix;
use hal_core::{
    Access, AccessGrant, AccessTarget, BackendId, DeviceInfo, Error, ExportOptions, Exported,
    HandleKind, Importers, Location, PhysicalDesc, PhysicalLocation, PidKind, Result,
    ShareableHandle, SharedHandle,
};

use crate::context::{Ctx, DeviceRef};
use crate::ffi::bindings::{aclrtMemAccessDesc, aclrtMemLocation};
use crate::ffi::bindings::{
    ACL_MEM_LOCATION_TYPE_DEVICE, ACL_RT_MEM_ACCESS_FLAGS_NONE, ACL_RT_MEM_ACCESS_FLAGS_READ,
    ACL_RT_MEM_ACCESS_FLAGS_READWRITE, ACL_RT_VMM_EXPORT_FLAG_DEFAULT,
    ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION,
};
use crate::ffi::result::{self, vmm};
use crate::ffi::sys::Runtime;
use crate::vmm::physical::{AscendPhysical, PhysInner};
use crate::vmm::reservation::{foreign, AscendReservation};

/// The payload layout's version.
const PAYLOAD_VERSION: u8 = 1;

/// What a physical handle of this backend carries beyond hal's fields.
///
/// | bytes | field |
/// | ---: | --- |
/// | 0 | version, 1 |
/// | 1..9 | the runtime's shareable handle (`u64`, little-endian) |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Payload {
    pub(crate) shareable: u64,
}

impl Payload {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = vec![PAYLOAD_VERSION];
        b.extend_from_slice(&self.shareable.to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Payload> {
        if b.len() != 9 || b[0] != PAYLOAD_VERSION {
            return Err(Error::malformed_payload(format!(
                "an Ascend physical payload is 9 bytes of version {PAYLOAD_VERSION}; this one \
                     is {} bytes",
                b.len()
            )));
        }
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[1..9]);
        Ok(Payload {
            shareable: u64::from_le_bytes(v),
        })
    }
}

/// The minimum granularity of device memory on device `ordinal`
/// (`aclrtMemGetAllocationGranularity`), checked to be a power of two.
pub(crate) fn device_granularity(rt: &Runtime, ordinal: u32) -> Result<u64> {
    let g = vmm::granularity(rt, ordinal)?;
    hal_core::vmm::check_granularity(entry::RT_MEM_GET_ALLOCATION_GRANULARITY, g as u64)
}

/// The runtime's descriptor of one grant; host access does not exist.
fn access_desc(g: &AccessGrant) -> Result<aclrtMemAccessDesc> {
    let AccessTarget::Device(d) = g.target else {
        return Err(Error::unsupported(
            "ascend",
            "host access to VMM memory",
            "Ascend physical memory is device memory only (Capabilities::HOST_NUMA_VMM is \
             absent)",
        ));
    };
    let flags = match g.access {
        Access::None => ACL_RT_MEM_ACCESS_FLAGS_NONE,
        Access::Read => ACL_RT_MEM_ACCESS_FLAGS_READ,
        Access::ReadWrite => ACL_RT_MEM_ACCESS_FLAGS_READWRITE,
    };
    Ok(aclrtMemAccessDesc {
        flags,
        location: aclrtMemLocation {
            id: d,
            type_: ACL_MEM_LOCATION_TYPE_DEVICE,
        },
        rsv: [0; 12],
    })
}

/// True for the runtime's refusal for lack of device memory.
fn out_of_memory(e: &Error) -> bool {
    matches!(e, Error::Vendor(v) if v.code == hal_core::kit::vendor::acl::RT_MEMORY_ALLOCATION.code)
}

impl DeviceRef<'_> {
    fn gran(&self) -> u64 {
        self.info.granularity_min
    }

    fn rt(&self) -> &Runtime {
        &self.ctx.rt
    }

    /// `aclrtMallocPhysical` of `desc` (device memory, `HANDLE_TYPE_NONE`).
    fn create(&self, desc: &PhysicalDesc) -> Result<AscendPhysical> {
        if desc.handle == ShareableHandle::Fabric {
            return Err(Error::unsupported(
                "ascend",
                "a fabric handle",
                "the Ascend runtime shares physical memory by its 64-bit handle on this host only",
            ));
        }
        let rt = self.rt();
        let ordinal = self.info.ordinal;
        // A dropped reservation's physical memory may still be on its way
        // back (`reservation.rs`): a refusal for lack of it waits for that.
        let handle = hal_core::kit::stream::teardown::when_freed(
            hal_core::kit::stream::teardown::PATIENCE,
            out_of_memory,
            || {
                self.ctx
                    .call(|| vmm::malloc_physical(rt, desc.size as usize, ordinal))
            },
        )?;
        Ok(AscendPhysical {
            inner: Arc::new(PhysInner {
                ctx: Arc::clone(self.ctx),
                handle,
                leases: LazyLeases::default(),
                record: PhysicalRecord::made(
                    desc.size,
                    PhysicalLocation::Device(self.info.ordinal),
                    desc.handle,
                ),
            }),
        })
    }
}

impl VmmCalls for DeviceRef<'_> {
    type Physical = AscendPhysical;
    type Reservation = AscendReservation;

    /// The reservation is this device's, of this runtime.
    fn check_reservation(&self, r: &AscendReservation) -> Result<()> {
        if r.ctx.ordinal != self.ctx.ordinal || !Arc::ptr_eq(&r.ctx.rt, &self.ctx.rt) {
            return Err(foreign());
        }
        Ok(())
    }

    /// Asked of the runtime each time (`aclrtGetDeviceCount`).
    fn device_count(&self) -> Result<u32> {
        result::device::count(self.rt())
    }

    fn info(&self) -> &DeviceInfo {
        self.info
    }

    /// [`Vmm::allocate_physical_with`](hal_core::Vmm::allocate_physical_with).
    fn allocate(&self, desc: &PhysicalDesc) -> Result<AscendPhysical> {
        let location = vmm_checks::physical(desc, self.info.ordinal, self.gran())?;
        if location != PhysicalLocation::Device(self.info.ordinal) {
            return Err(Error::unsupported(
                "ascend",
                "host NUMA physical memory",
                "the Ascend runtime allocates device physical memory only \
                 (Capabilities::HOST_NUMA_VMM is absent)",
            ));
        }
        fabric_or_posix("ascend", desc, |d| self.create(d))
    }

    /// [`Vmm::reserve`](hal_core::Vmm::reserve).
    fn reserve(&self, size: u64, align: u64) -> Result<AscendReservation> {
        vmm_checks::reservation(size, align, self.gran())?;
        let base = self.ctx.call(|| vmm::reserve(self.rt(), size, align))?;
        Ok(AscendReservation {
            ctx: Arc::clone(self.ctx),
            base,
            len: size,
            pieces: Default::default(),
        })
    }

    /// [`Vmm::map_range`](hal_core::Vmm::map_range).
    fn map(
        &self,
        r: &AscendReservation,
        offset: u64,
        p: &AscendPhysical,
        physical_offset: u64,
        len: u64,
    ) -> Result<()> {
        let mut pieces = r.pieces.lock();
        pieces.check_free(offset, len)?;
        // The range lies inside the reservation and maps nothing yet
        // (checked above); the handle is held by `p`.
        self.ctx.call(|| {
            vmm::map(
                self.rt(),
                r.base + offset,
                len,
                physical_offset,
                &p.inner.handle,
            )
        })?;
        pieces.insert(offset, len, Arc::clone(&p.inner));
        Ok(())
    }

    /// [`Vmm::unmap`](hal_core::Vmm::unmap): whole mappings only,
    /// after the device's queued work.
    fn unmap(&self, r: &AscendReservation, offset: u64, len: u64) -> Result<()> {
        let mut pieces = r.pieces.lock();
        let mappings = pieces.whole_mappings(offset, len)?;
        r.unmap_after_work(&mappings, true)?;
        pieces.remove(offset, len);
        Ok(())
    }

    /// [`Vmm::set_access_for`](hal_core::Vmm::set_access_for).
    fn set_access(
        &self,
        r: &AscendReservation,
        offset: u64,
        len: u64,
        grants: &[AccessGrant],
    ) -> Result<()> {
        let descs = grants.iter().map(access_desc).collect::<Result<Vec<_>>>()?;
        let mut pieces = r.pieces.lock();
        pieces.covering(offset, len)?;
        // The range is mapped (checked above).
        self.ctx
            .call(|| vmm::set_access(self.rt(), r.base + offset, len, descs))?;
        pieces.grant(offset, len, grants);
        Ok(())
    }

    /// [`Vmm::access`](hal_core::Vmm::access), as this process set it.
    fn access(&self, r: &AscendReservation, offset: u64, target: AccessTarget) -> Result<Access> {
        self.check_reservation(r)?;
        if matches!(target, AccessTarget::Device(_)) {
            let n = self.device_count()?;
            vmm_checks::device_exists(target, n, "Ascend", "the runtime")?;
        }
        hal_core::device::check_bounds(offset, 1, r.len)?;
        r.pieces.lock().access_at(offset, target)
    }

    /// [`Vmm::export_physical`](hal_core::Vmm::export_physical).
    fn export(&self, p: &AscendPhysical, opts: &ExportOptions) -> Result<Exported> {
        if p.inner.ctx.ordinal != self.ctx.ordinal {
            return Err(Error::invalid(
                "the physical allocation belongs to another Ascend device: export it through \
                 that device",
            ));
        }
        if p.inner.record.is_import() {
            return Err(Error::invalid(
                "an imported physical allocation is exported again by its creator",
            ));
        }
        vmm_checks::physical_export(opts, "ascend", "aclrtMemSetAccess")?;
        let (flags, pids) = match &opts.importers {
            Importers::Anyone => (ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION, Vec::new()),
            Importers::BackendDefault => (ACL_RT_VMM_EXPORT_FLAG_DEFAULT, Vec::new()),
            Importers::Pids(p) => (ACL_RT_VMM_EXPORT_FLAG_DEFAULT, p.clone()),
            Importers::SameUser => {
                return Err(hal_core::types::same_user_unsupported("ascend", "the Ascend runtime checks its own allow-list of process ids, not the importer's user"))
            }
        };
        let tgids = crate::memory::ipc::tgids(&pids)?;
        let shareable = self
            .ctx
            .call(|| vmm::export_shareable(self.rt(), &p.inner.handle, flags))?;
        if !tgids.is_empty() {
            set_pids(self.ctx, shareable, &tgids)?;
        }
        let leases = p.inner.leases.table()?;
        let spec = HandleSpec {
            kind: HandleKind::Physical,
            backend: BackendId::Ascend,
            device: self.info.ordinal,
            device_uuid: self.info.uuid,
            location: Location::Device(self.info.ordinal),
            default_allow_list: true,
        };
        let mut handle = new_handle(&spec, opts)?;
        handle.pid_kind = PidKind::Vendor;
        handle.size = p.inner.record.size;
        handle.payload = Payload { shareable }.encode();
        Exported::with_leases(handle, Vec::new(), leases)
    }

    /// [`Vmm::import_physical`](hal_core::Vmm::import_physical).
    fn import(&self, mut shared: SharedHandle) -> Result<AscendPhysical> {
        shared
            .handle
            .expect(HandleKind::Physical, BackendId::Ascend)?;
        let payload = Payload::decode(&shared.handle.payload)?;
        let size = vmm_checks::whole_physical(&shared.handle, self.gran())?;
        let rt = self.rt();
        let ordinal = self.info.ordinal;
        if shared.handle.device_uuid != self.info.uuid {
            // Physical memory of another device: this device reaches it
            // once peer access to that device is enabled.
            crate::peer::require(rt, self.info, "import_physical onto another device")?;
            let source = crate::peer::ordinal_of(rt, &shared.handle.device_uuid)?;
            crate::peer::enable(self.ctx, source)?;
        }
        let taken = take_fds_leased(&mut shared)?;
        let handle = self
            .ctx
            .call(|| vmm::import_shareable(rt, payload.shareable, ordinal as i32))?;
        Ok(AscendPhysical {
            inner: Arc::new(PhysInner {
                ctx: Arc::clone(self.ctx),
                handle,
                leases: LazyLeases::default(),
                record: PhysicalRecord::imported(
                    size,
                    PhysicalLocation::Device(ordinal),
                    taken.lease,
                ),
            }),
        })
    }
}

/// `aclrtMemSetPidToShareableHandle` of the handle in `payload` with `tgids`.
pub(crate) fn allow(ctx: &Ctx, payload: &[u8], tgids: &[i32]) -> Result<()> {
    set_pids(ctx, Payload::decode(payload)?.shareable, tgids)
}

fn set_pids(ctx: &Ctx, shareable: u64, tgids: &[i32]) -> Result<()> {
    ctx.call(|| vmm::set_pid_shareable(&ctx.rt, shareable, tgids))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_refuse_other_layouts() {
        let p = Payload {
            shareable: 0x1234_5678_9abc_def0,
        };
        assert_eq!(Payload::decode(&p.encode()).unwrap(), p);
        let b = p.encode();
        assert!(Payload::decode(&b[1..]).is_err());
        let mut v = b.clone();
        v[0] = 2;
        assert!(Payload::decode(&v).is_err());
    }

    #[test]
    fn access_descriptors() {
        assert!(access_desc(&AccessGrant::host(Access::Read)).is_err());
        let d = access_desc(&AccessGrant::device(1, Access::ReadWrite)).unwrap();
        assert_eq!((d.flags, d.location.id), (3, 1));
    }
}
