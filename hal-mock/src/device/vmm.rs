//! VMM of a [`MockDevice`]: granularity, physical allocations,
//! reservations, mappings, access and shareable physical handles.

use std::os::fd::{AsFd, OwnedFd};

use hal_core::kit::os;
use hal_core::vmm::{check_grants, fabric_or_posix};
use hal_core::{
    Access, AccessGrant, AccessTarget, Capabilities, Error, ExportOptions, Exported, Granularity,
    HandleError, HandleKind, ImportOptions, Location, PhysicalDesc, PhysicalLocation, Result,
    ShareableHandle, SharedHandle,
};

use crate::device::{check_data_access, ListKind, MockDevice};
use crate::fault::FaultOp;
use crate::memory::Payload;
use crate::rules;
use crate::vendor::Api;
use crate::vmm::{check_granular, location_of_fd, MockPhysical, MockReservation};

impl MockDevice {
    pub(super) fn sim_granularity(&self, which: Granularity) -> Result<u64> {
        self.dev.require(Capabilities::VMM, "granularity")?;
        self.dev.enter(Api::Granularity, None)?;
        Ok(self.info.granularity(which))
    }

    pub(super) fn sim_allocate_physical(&self, desc: &PhysicalDesc) -> Result<MockPhysical> {
        self.dev.require(Capabilities::VMM, "allocate_physical")?;
        fabric_or_posix(self.dev.backend(), desc, |desc| {
            self.dev.enter(Api::MemCreate, Some(FaultOp::Allocate))?;
            check_granular(&self.dev, "physical allocation size", desc.size, false)?;
            let location = desc
                .location
                .unwrap_or(PhysicalLocation::Device(self.dev.ordinal));
            let charged = match location {
                PhysicalLocation::Device(d) => {
                    self.known_device(d)?;
                    Some(self.on(d))
                }
                PhysicalLocation::HostNuma(node) => {
                    self.dev
                        .require(Capabilities::HOST_NUMA_VMM, "host NUMA physical memory")?;
                    let nodes = os::numa_nodes();
                    if !nodes.contains(&node) {
                        return Err(self.dev.err(
                            self.dev.vendor().invalid_value(),
                            format!("host NUMA node {node} does not exist (nodes: {nodes:?})"),
                        ));
                    }
                    None
                }
            };
            if desc.handle == ShareableHandle::Fabric {
                return Err(self.dev.err(
                    rules::fabric_refusal(self.dev.vendor()),
                    "a fabric handle type was requested and no fabric manager (IMEX) serves it",
                ));
            }
            MockPhysical::create(&self.dev, desc.size, location, charged, desc.handle)
        })
    }

    pub(super) fn sim_reserve(&self, size: u64, align: u64) -> Result<MockReservation> {
        self.dev.require(Capabilities::VMM, "reserve")?;
        self.dev.enter(Api::AddressReserve, None)?;
        check_granular(&self.dev, "reservation size", size, false)?;
        check_granular(&self.dev, "reservation alignment", align, true)?;
        MockReservation::create(&self.dev, size, align.max(self.info.granularity_min))
    }

    pub(super) fn sim_map(
        &self,
        reservation: &MockReservation,
        offset: u64,
        physical: &MockPhysical,
        physical_offset: u64,
        len: u64,
    ) -> Result<()> {
        self.dev
            .check_owner(&reservation.dev, "reservation", true)?;
        self.dev
            .check_owner(&physical.dev, "physical allocation", false)?;
        self.dev.require(Capabilities::VMM, "map")?;
        self.dev.enter(Api::MemMap, None)?;
        check_granular(&self.dev, "mapping offset", offset, true)?;
        check_granular(
            &self.dev,
            "offset in the physical allocation",
            physical_offset,
            true,
        )?;
        check_granular(&self.dev, "mapping length", len, false)?;
        let size = physical.mem.size;
        if physical_offset
            .checked_add(len)
            .is_none_or(|end| end > size)
        {
            return Err(self.dev.err(
                self.dev.vendor().invalid_value(),
                format!(
                    "mapping {len:#x} bytes from {physical_offset:#x} runs past the {size:#x}-byte \
                     physical allocation"
                ),
            ));
        }
        if offset
            .checked_add(len)
            .is_none_or(|end| end > reservation.len)
        {
            return Err(self.dev.err(
                self.dev.vendor().invalid_value(),
                format!(
                    "mapping {len:#x} bytes at {offset:#x} runs past the {:#x}-byte reservation",
                    reservation.len
                ),
            ));
        }
        reservation.map_mem(offset, &physical.mem, physical_offset, len)
    }

    pub(super) fn sim_unmap(
        &self,
        reservation: &MockReservation,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        self.dev
            .check_owner(&reservation.dev, "reservation", true)?;
        self.dev.require(Capabilities::VMM, "unmap")?;
        self.dev.enter(Api::MemUnmap, None)?;
        check_granular(&self.dev, "unmap offset", offset, true)?;
        check_granular(&self.dev, "unmap length", len, false)?;
        hal_core::device::check_bounds(offset, len, reservation.len)?;
        reservation.unmap_range(offset, len)
    }

    pub(super) fn sim_set_access(
        &self,
        reservation: &MockReservation,
        offset: u64,
        len: u64,
        grants: &[AccessGrant],
    ) -> Result<()> {
        self.dev
            .check_owner(&reservation.dev, "reservation", true)?;
        self.dev.require(Capabilities::VMM, "set_access")?;
        self.dev.enter(Api::MemSetAccess, None)?;
        check_grants(grants, self.dev.shared.devices.len() as u32).map_err(|e| {
            self.dev
                .err(self.dev.vendor().invalid_value(), e.to_string())
        })?;
        check_granular(&self.dev, "access offset", offset, true)?;
        check_granular(&self.dev, "access length", len, false)?;
        hal_core::device::check_bounds(offset, len, reservation.len)?;
        reservation.set_range_access(offset, len, grants)
    }

    pub(super) fn sim_access(
        &self,
        reservation: &MockReservation,
        offset: u64,
        target: AccessTarget,
    ) -> Result<Access> {
        self.dev
            .check_owner(&reservation.dev, "reservation", true)?;
        self.dev.require(Capabilities::VMM, "access")?;
        if let AccessTarget::Device(d) = target {
            self.known_device(d)?;
        }
        hal_core::device::check_bounds(offset, 1, reservation.len)?;
        reservation.access_at(offset, target)
    }

    pub(super) fn sim_export_physical(
        &self,
        physical: &MockPhysical,
        opts: &ExportOptions,
    ) -> Result<Exported> {
        self.dev
            .check_owner(&physical.dev, "physical allocation", false)?;
        self.dev.require(Capabilities::VMM, "export_physical")?;
        if physical.imported {
            return Err(Error::invalid(
                "an imported physical allocation is exported again by its creator",
            ));
        }
        self.check_export_opts(opts, "physical allocation")?;
        self.dev
            .enter(Api::MemExportShareable, Some(FaultOp::Export))?;
        if physical.handle == ShareableHandle::None
            && !rules::exports_unrequested_handle(self.dev.vendor())
        {
            return Err(self.dev.err(
                self.dev.vendor().invalid_value(),
                "the physical allocation was made without a shareable handle type; allocate it \
                 with PhysicalDesc::handle(ShareableHandle::PosixFd) to export it",
            ));
        }
        let size = physical.mem.size;
        // A physical handle maps the whole allocation; where its pages live
        // travels in the handle's location (device) or, for host NUMA
        // memory, as the node in the payload's allocation offset.
        let (location, node) = match physical.mem.location {
            PhysicalLocation::Device(d) => (Location::Device(d), 0),
            PhysicalLocation::HostNuma(n) => (Location::Host, u64::from(n)),
        };
        let payload = Payload {
            kind: HandleKind::Physical.to_wire(),
            fd_offset: 0,
            map_len: size,
            view: 0,
            buffer_id: os::random_id(),
            alloc_offset: node,
        };
        let handle = self.handle(
            HandleKind::Physical,
            location,
            size,
            0,
            opts,
            ListKind::Listed,
            payload,
        )?;
        Exported::new(handle, vec![os::dup(physical.mem.fd.as_fd())?])
    }

    /// Take the descriptor of a physical allocation, as a stand-in vendor
    /// library's import of a POSIX shareable handle does with the bare
    /// descriptor it is given (`cuMemImportFromShareableHandle`): it must
    /// be a sealed memfd of whole granules made by
    /// [`MockPhysical::dup_fd`] (in this or another process), whose name
    /// says where its pages live. Anything else is the vendor's invalid
    /// value.
    pub fn adopt_physical_fd(&self, fd: OwnedFd) -> Result<MockPhysical> {
        self.dev.require(Capabilities::VMM, "import_physical")?;
        self.dev
            .enter(Api::MemImportShareable, Some(FaultOp::Import))?;
        let refused = |detail: String| self.dev.err(self.dev.vendor().invalid_value(), detail);
        let size = os::verify_sealed_memfd(fd.as_fd(), 1)
            .map_err(|e| refused(format!("the descriptor is no physical allocation: {e}")))?;
        check_granular(&self.dev, "imported physical size", size, false)?;
        check_data_access(fd.as_fd(), false)?;
        let location = location_of_fd(fd.as_fd()).ok_or_else(|| {
            refused("the descriptor is not one a physical allocation exported".into())
        })?;
        Ok(MockPhysical::imported(
            &self.dev,
            fd,
            size,
            location,
            ShareableHandle::PosixFd,
        ))
    }

    pub(super) fn sim_import_physical(
        &self,
        mut shared: SharedHandle,
        opts: &ImportOptions,
    ) -> Result<MockPhysical> {
        shared
            .handle
            .expect(HandleKind::Physical, self.dev.backend())?;
        self.dev.require(Capabilities::VMM, "import_physical")?;
        let payload = Payload::decode(self.dev.vendor(), &shared.handle)?;
        let size = shared.handle.size;
        if payload.map_len != size || shared.handle.offset != 0 {
            return Err(HandleError::Malformed {
                field: "size",
                detail: "a physical handle names the whole allocation".into(),
            }
            .into());
        }
        let (_, target) = self.resolve(&shared.handle, opts, false)?;
        let on = self.on(target);
        on.enter(Api::MemImportShareable, Some(FaultOp::Import))?;
        check_granular(&on, "imported physical size", size, false)?;
        let fd = self.take_fds(&mut shared, 1)?.remove(0);
        os::verify_sealed_memfd(fd.as_fd(), size)?;
        // Physical handles are always read-write: a read-only descriptor is
        // refused here, not later at `map`.
        check_data_access(fd.as_fd(), false)?;
        let location =
            match shared.handle.location {
                Location::Device(d) => PhysicalLocation::Device(d),
                Location::Host => PhysicalLocation::HostNuma(
                    u32::try_from(payload.alloc_offset).map_err(|_| HandleError::Malformed {
                        field: "payload",
                        detail: "the host NUMA node does not fit 32 bits".into(),
                    })?,
                ),
                Location::Managed => {
                    return Err(HandleError::Malformed {
                        field: "location",
                        detail: "a physical allocation is device or host NUMA memory".into(),
                    }
                    .into())
                }
            };
        Ok(MockPhysical::imported(
            &on,
            fd,
            size,
            location,
            ShareableHandle::PosixFd,
        ))
    }
}
