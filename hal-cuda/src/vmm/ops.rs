//! VMM of a [`CudaDevice`](crate::CudaDevice): physical allocations
//! (`cuMemCreate`), reservations (`cuMemAddressReserve`), mappings
//! (`cuMemMap`, `cuMemUnmap`), access (`cuMemSetAccess`) and sharing by
//! POSIX descriptor (`cuMemExportToShareableHandle`,
//! `cuMemImportFromShareableHandle`).
//!
//! **Handle types.** An allocation made for [`ShareableHandle::PosixFd`]
//! requests `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`; one made for
//! [`ShareableHandle::Fabric`] requests `FABRIC | POSIX_FILE_DESCRIPTOR`
//! when the device says it supports fabric handles
//! (`CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED`), so that it is
//! still shared on this host by descriptor. Without an IMEX daemon the
//! driver answers `CUDA_ERROR_NOT_PERMITTED` (measured on an H200), and
//! [`fabric_or_posix`] makes it again for a POSIX descriptor with one
//! warning. [`ShareableHandle::None`] requests nothing, and its export is
//! refused by the driver (`CUDA_ERROR_INVALID_VALUE`, measured).
//!
//! **Export.** The descriptor is exported once per allocation and kept
//! (the export of 64 MiB took 762 µs on an H200 with plain driver calls:
//! the vendor notes, `shared/vendor/cuda.md`); every export registers a duplicate
//! with this process's descriptor broker, with the allocation's lease
//! table, so importers are counted. The handle's payload says where the
//! pages live ([`Payload`]).
//!
//! **Import.** The descriptor comes from the exporter's broker over
//! SCM_RIGHTS with a lease, is imported with
//! `cuMemImportFromShareableHandle` and closed at once (the driver holds
//! the memory); the lease lives as long as the imported allocation. Device
//! memory is imported through the device with the exporter's UUID; host
//! NUMA memory through any device. An imported allocation holds the memory
//! on its own, so the exporter may release its own at any time.

use std::ffi::c_uint;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, OnceLock};

use hal_core::exchange::take_fds_leased;
use hal_core::kit::export::{check_fd_count, new_handle, HandleSpec};
use hal_core::kit::vendor::cuda::entry;
use hal_core::kit::vendor::needs::Offered;
use hal_core::kit::vmm::checks as vmm_checks;
use hal_core::kit::vmm::forward::VmmCalls;
use hal_core::kit::vmm::physical::PhysicalRecord;
use hal_core::lease::LazyLeases;
use hal_core::vmm::fabric_or_posix;
use hal_core::{
    Access, AccessGrant, AccessTarget, BackendId, Capabilities, DeviceInfo, Error, ExportOptions,
    Exported, HandleKind, Importers, Location, PhysicalDesc, PhysicalLocation, Result,
    ShareableHandle, SharedHandle,
};

use crate::context::Primary;
use crate::ffi::result::vmm::{self, HANDLE_FABRIC, HANDLE_POSIX_FD};
use crate::ffi::{CUmemAccessDesc, CUmemAllocationProp, CUmemLocation, Driver};
use crate::memory::alloc::out_of_memory;
use crate::vmm::physical::{CudaPhysical, PhysInner};
use crate::vmm::reservation::CudaReservation;

/// The payload layout's version.
const PAYLOAD_VERSION: u8 = 1;

/// What a physical handle of this backend carries beyond hal's fields.
///
/// | bytes | field |
/// | ---: | --- |
/// | 0 | version, 1 |
/// | 1 | where the pages live: 0 the device, 1 host NUMA memory |
/// | 2..6 | the NUMA node (`u32`, little-endian; 0 for device memory) |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Payload {
    pub(crate) host_numa: Option<u32>,
}

impl Payload {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = vec![PAYLOAD_VERSION, u8::from(self.host_numa.is_some())];
        b.extend_from_slice(&self.host_numa.unwrap_or(0).to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Payload> {
        if b.len() != 6 || b[0] != PAYLOAD_VERSION {
            return Err(Error::malformed_payload(format!(
                "a CUDA physical payload is 6 bytes of version {PAYLOAD_VERSION}; this one is {} \
                 bytes{}",
                b.len(),
                b.first()
                    .map(|v| format!(" of version {v}"))
                    .unwrap_or_default()
            )));
        }
        let node = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        match b[1] {
            0 => Ok(Payload { host_numa: None }),
            1 => Ok(Payload {
                host_numa: Some(node),
            }),
            k => Err(Error::malformed_payload(format!(
                "location kind {k} (0 device, 1 host NUMA)"
            ))),
        }
    }
}

/// The device's VMM context: what every call here needs (public only as
/// the calls of `CudaDevice`'s `VmmByCalls`; its module is private).
pub struct Vmm<'a> {
    pub(crate) primary: &'a Arc<Primary>,
    pub(crate) info: &'a DeviceInfo,
    /// `CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED`.
    pub(crate) fabric: bool,
    /// How many devices the driver sees (access lists name them).
    pub(crate) device_count: u32,
}

impl Offered for Vmm<'_> {
    fn offered(&self) -> Capabilities {
        self.info.capabilities
    }

    fn refusal(&self, operation: &str, capability: Capabilities) -> Error {
        let primary = self.primary;
        primary.driver.absent(operation, capability, primary.device)
    }
}

fn driver_location(location: PhysicalLocation) -> CUmemLocation {
    use cudarc::driver::sys::CUmemLocationType as T;
    let (type_, id) = match location {
        PhysicalLocation::Device(d) => (T::CU_MEM_LOCATION_TYPE_DEVICE, d),
        PhysicalLocation::HostNuma(n) => (T::CU_MEM_LOCATION_TYPE_HOST_NUMA, n),
    };
    CUmemLocation {
        type_,
        id: id as i32,
    }
}

/// The properties of pinned memory at `location`, shareable as
/// `handle_types` says (the rest zero, the structure's default).
fn prop(location: PhysicalLocation, handle_types: c_uint) -> CUmemAllocationProp {
    use cudarc::driver::sys::{
        CUmemAllocationHandleType, CUmemAllocationProp_st__bindgen_ty_1 as AllocFlags,
        CUmemAllocationType,
    };
    CUmemAllocationProp {
        type_: CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: CUmemAllocationHandleType(handle_types),
        location: driver_location(location),
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: AllocFlags {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// The minimum (or, with `recommended`, the recommended) granularity of
/// device memory on device `ordinal` made for a POSIX descriptor
/// (`cuMemGetAllocationGranularity`; 2 MiB both on an H200, measured).
pub(crate) fn device_granularity(driver: &Driver, ordinal: u32, recommended: bool) -> Result<u64> {
    let p = prop(PhysicalLocation::Device(ordinal), HANDLE_POSIX_FD);
    let g = vmm::granularity(driver, &p, recommended)?;
    hal_core::vmm::check_granularity(entry::MEM_GET_ALLOCATION_GRANULARITY, g as u64)
}

impl Vmm<'_> {
    fn driver(&self) -> &Driver {
        &self.primary.driver
    }

    fn gran(&self) -> u64 {
        self.info.granularity_min
    }

    /// `cuMemCreate` of `desc`, exactly as asked (no fallback).
    fn create(&self, desc: &PhysicalDesc, location: PhysicalLocation) -> Result<CudaPhysical> {
        let handle_types = match desc.handle {
            ShareableHandle::None => 0,
            ShareableHandle::PosixFd => HANDLE_POSIX_FD,
            ShareableHandle::Fabric if self.fabric => HANDLE_FABRIC | HANDLE_POSIX_FD,
            ShareableHandle::Fabric => {
                return Err(Error::unsupported(
                    "cuda",
                    "a fabric handle",
                    "the device does not support fabric handles \
                     (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED is 0)",
                ))
            }
        };
        let p = prop(location, handle_types);
        let driver = self.driver();
        let _ctx = self.primary.enter()?;
        // A dropped reservation's physical memory may still be on its way
        // back (`reservation.rs`): a refusal for lack of it waits for that.
        let handle = hal_core::kit::stream::teardown::when_freed(
            hal_core::kit::stream::teardown::PATIENCE,
            out_of_memory,
            || vmm::create(driver, desc.size as usize, &p),
        )?;
        Ok(CudaPhysical {
            inner: Arc::new(PhysInner {
                primary: Arc::clone(self.primary),
                handle,
                fd: OnceLock::new(),
                leases: LazyLeases::default(),
                record: PhysicalRecord::made(desc.size, location, desc.handle),
            }),
        })
    }

    /// The allocation's POSIX descriptor, exported on first use.
    fn descriptor<'p>(&self, p: &'p PhysInner) -> Result<&'p OwnedFd> {
        if let Some(fd) = p.fd.get() {
            return Ok(fd);
        }
        let _ctx = self.primary.enter()?;
        let fd = vmm::export_fd(self.driver(), p.handle)?;
        // A concurrent first export may have won; its descriptor is kept.
        let _ = p.fd.set(fd);
        p.fd.get()
            .ok_or_else(|| Error::invalid("the exported descriptor vanished"))
    }
}

impl VmmCalls for Vmm<'_> {
    type Physical = CudaPhysical;
    type Reservation = CudaReservation;

    fn info(&self) -> &DeviceInfo {
        self.info
    }

    fn device_count(&self) -> Result<u32> {
        Ok(self.device_count)
    }

    fn check_reservation(&self, r: &CudaReservation) -> Result<()> {
        if !Arc::ptr_eq(&r.primary, self.primary) {
            return Err(Error::invalid(
                "the reservation belongs to another CUDA device: use it through that device",
            ));
        }
        Ok(())
    }

    /// [`Vmm::allocate_physical_with`](hal_core::Vmm::allocate_physical_with).
    fn allocate(&self, desc: &PhysicalDesc) -> Result<CudaPhysical> {
        let location = vmm_checks::physical(desc, self.info.ordinal, self.gran())?;
        if let PhysicalLocation::HostNuma(_) = location {
            self.require(Capabilities::HOST_NUMA_VMM, "host NUMA physical memory")?;
        }
        fabric_or_posix("cuda", desc, |d| self.create(d, location))
    }

    /// [`Vmm::reserve`](hal_core::Vmm::reserve).
    fn reserve(&self, size: u64, align: u64) -> Result<CudaReservation> {
        vmm_checks::reservation(size, align, self.gran())?;
        let _ctx = self.primary.enter()?;
        let base = vmm::reserve(self.driver(), size as usize, align as usize)?;
        Ok(CudaReservation {
            primary: Arc::clone(self.primary),
            ordinal: self.info.ordinal,
            base,
            len: size,
            pieces: Default::default(),
        })
    }

    /// [`Vmm::map_range`](hal_core::Vmm::map_range), of a physical
    /// allocation from its start ([`maps_from_start`]).
    fn map(
        &self,
        r: &CudaReservation,
        offset: u64,
        p: &CudaPhysical,
        physical_offset: u64,
        len: u64,
    ) -> Result<()> {
        maps_from_start(physical_offset)?;
        let mut pieces = r.pieces.lock();
        pieces.check_free(offset, len)?;
        let _ctx = self.primary.enter()?;
        // The range lies inside the reservation and maps nothing yet
        // (checked above); the handle is live (held by `p`).
        vmm::map(
            self.driver(),
            r.base + offset,
            len as usize,
            physical_offset as usize,
            p.inner.handle,
        )?;
        pieces.insert(offset, len, Arc::clone(&p.inner));
        Ok(())
    }

    /// [`Vmm::unmap`](hal_core::Vmm::unmap): whole mappings only,
    /// after the context's queued work.
    fn unmap(&self, r: &CudaReservation, offset: u64, len: u64) -> Result<()> {
        let mut pieces = r.pieces.lock();
        // Whole mappings only; CUDA unmaps the range in one call.
        pieces.whole_mappings(offset, len)?;
        r.unmap_after_work(offset, len, true)?;
        pieces.remove(offset, len);
        Ok(())
    }

    /// [`Vmm::set_access_for`](hal_core::Vmm::set_access_for).
    fn set_access(
        &self,
        r: &CudaReservation,
        offset: u64,
        len: u64,
        grants: &[AccessGrant],
    ) -> Result<()> {
        let mut pieces = r.pieces.lock();
        let range = pieces.covering(offset, len)?;
        let host = grants.iter().any(|g| g.target == AccessTarget::Host);
        if let Some(p) = pieces.list[range]
            .iter()
            .find(|p| host && !matches!(p.held.record.location, PhysicalLocation::HostNuma(_)))
        {
            return Err(Error::invalid(format!(
                "host access to the mapping at offset {:#x}: its pages live in {:?}; only host \
                 NUMA memory (PhysicalLocation::HostNuma) can be made host-accessible",
                p.offset, p.held.record.location
            )));
        }
        let descs: Vec<CUmemAccessDesc> = grants.iter().map(access_desc).collect();
        let _ctx = self.primary.enter()?;
        vmm::set_access(self.driver(), r.base + offset, len as usize, &descs)?;
        pieces.grant(offset, len, grants);
        Ok(())
    }

    /// [`Vmm::access`](hal_core::Vmm::access).
    fn access(&self, r: &CudaReservation, offset: u64, target: AccessTarget) -> Result<Access> {
        self.check_reservation(r)?;
        vmm_checks::device_exists(target, self.device_count, "CUDA", "the driver")?;
        hal_core::device::check_bounds(offset, 1, r.len)?;
        r.pieces.lock().access_at(offset, target)
    }

    /// [`Vmm::export_physical`](hal_core::Vmm::export_physical).
    fn export(&self, p: &CudaPhysical, opts: &ExportOptions) -> Result<Exported> {
        self.require(Capabilities::IPC_MEMORY, "export_physical")?;
        vmm_checks::physical_export(opts, "cuda", "cuMemSetAccess")?;
        opts.importers.refuse_same_user("cuda", "a CUDA IPC handle is opened by whoever holds its bytes: no broker checks the importer's user")?;
        if matches!(opts.importers, Importers::Pids(_)) {
            return Err(Error::unsupported(
                "cuda",
                "an export to a pid list",
                "CUDA keeps no allow-list of importers: export to anyone \
                 (Capabilities::PID_ALLOW_LIST is absent)",
            ));
        }
        let fd = hal_core::kit::os::dup(self.descriptor(&p.inner)?.as_fd())?;
        let leases = p.inner.leases.table()?;
        let (location, host_numa) = match p.inner.record.location {
            PhysicalLocation::Device(_) => (Location::Device(self.info.ordinal), None),
            PhysicalLocation::HostNuma(n) => (Location::Host, Some(n)),
        };
        let spec = HandleSpec {
            kind: HandleKind::Physical,
            backend: BackendId::Cuda,
            device: self.info.ordinal,
            device_uuid: self.info.uuid,
            location,
            default_allow_list: false,
        };
        let mut handle = new_handle(&spec, opts)?;
        handle.size = p.inner.record.size;
        handle.payload = Payload { host_numa }.encode();
        Exported::with_leases(handle, vec![fd], leases)
    }

    /// [`Vmm::import_physical`](hal_core::Vmm::import_physical).
    fn import(&self, mut shared: SharedHandle) -> Result<CudaPhysical> {
        self.require(Capabilities::IPC_MEMORY, "import_physical")?;
        shared
            .handle
            .expect(HandleKind::Physical, BackendId::Cuda)?;
        let payload = Payload::decode(&shared.handle.payload)?;
        let size = vmm_checks::whole_physical(&shared.handle, self.gran())?;
        if payload.host_numa.is_none() && shared.handle.device_uuid != self.info.uuid {
            return Err(Error::invalid(format!(
                "the physical memory is on the device with UUID {}, not on device {}: import it \
                 through that device",
                hal_core::kit::os::hex(&shared.handle.device_uuid),
                self.info.ordinal
            )));
        }
        let taken = take_fds_leased(&mut shared)?;
        check_fd_count("a CUDA physical handle", 1, taken.fds.len())?;
        let _ctx = self.primary.enter()?;
        // The descriptor is closed when `taken` drops; the driver holds the
        // memory.
        let handle = vmm::import_fd(self.driver(), taken.fds[0].as_fd())?;
        let location = match payload.host_numa {
            Some(n) => PhysicalLocation::HostNuma(n),
            None => PhysicalLocation::Device(self.info.ordinal),
        };
        Ok(CudaPhysical {
            inner: Arc::new(PhysInner {
                primary: Arc::clone(self.primary),
                handle,
                fd: OnceLock::new(),
                leases: LazyLeases::default(),
                record: PhysicalRecord::imported(size, location, taken.lease),
            }),
        })
    }
}

/// The driver's descriptor of one grant.
pub(crate) fn access_desc(g: &AccessGrant) -> CUmemAccessDesc {
    use cudarc::driver::sys::CUmemAccess_flags as F;
    let flags = match g.access {
        Access::None => F::CU_MEM_ACCESS_FLAGS_PROT_NONE,
        Access::Read => F::CU_MEM_ACCESS_FLAGS_PROT_READ,
        Access::ReadWrite => F::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    let location = match g.target {
        AccessTarget::Device(d) => driver_location(PhysicalLocation::Device(d)),
        // Measured: HOST_NUMA id 0 (or HOST) makes host NUMA memory
        // CPU-accessible.
        AccessTarget::Host => CUmemLocation {
            type_: cudarc::driver::sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
            id: 0,
        },
    };
    CUmemAccessDesc { location, flags }
}

/// `cuMemMap` maps a physical allocation from its start: its `offset`
/// "must be zero" (CUDA driver API), and driver 580 answered
/// `CUDA_ERROR_NOT_SUPPORTED` to an offset of one granule (measured on an
/// H200). Any other offset is refused before the driver is asked.
fn maps_from_start(physical_offset: u64) -> Result<()> {
    if physical_offset == 0 {
        return Ok(());
    }
    Err(Error::unsupported(
        "cuda",
        "map_range",
        format!(
            "cuMemMap maps a physical allocation from its start only (offset 0), not from \
             {physical_offset:#x}: make one physical allocation per piece that is mapped alone"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_refuse_other_layouts() {
        for p in [Payload { host_numa: None }, Payload { host_numa: Some(3) }] {
            assert_eq!(Payload::decode(&p.encode()).unwrap(), p);
        }
        let b = Payload { host_numa: Some(1) }.encode();
        assert!(Payload::decode(&b[1..]).is_err());
        let mut v = b.clone();
        v[0] = 2;
        assert!(Payload::decode(&v).is_err());
        v = b.clone();
        v[1] = 7;
        assert!(Payload::decode(&v).is_err());
    }
}
