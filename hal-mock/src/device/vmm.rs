//! VMM of a [`MockDevice`]: granularity, physical allocations,
//! reservations, mappings, access and shareable physical handles.

use std::os::fd::AsFd;

use hal_core::os;
use hal_core::{
    Access, Capabilities, Error, ExportOptions, Exported, Granularity, HandleError, HandleKind,
    ImportOptions, Location, Result, SharedHandle,
};

use crate::device::{check_data_access, ListKind, MockDevice};
use crate::fault::FaultOp;
use crate::memory::Payload;
use crate::vendor::Api;
use crate::vmm::{check_granular, MockPhysical, MockReservation};

impl MockDevice {
    pub(super) fn sim_granularity(&self, which: Granularity) -> Result<u64> {
        self.dev.require(Capabilities::VMM, "granularity")?;
        self.dev.enter(Api::Granularity, None)?;
        Ok(self.info.granularity(which))
    }

    pub(super) fn sim_allocate_physical(&self, size: u64) -> Result<MockPhysical> {
        self.dev.require(Capabilities::VMM, "allocate_physical")?;
        self.dev.enter(Api::MemCreate, Some(FaultOp::Allocate))?;
        check_granular(&self.dev, "physical allocation size", size, false)?;
        MockPhysical::create(&self.dev, size)
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
    ) -> Result<()> {
        self.dev
            .check_owner(&reservation.dev, "reservation", true)?;
        self.dev
            .check_owner(&physical.dev, "physical allocation", false)?;
        self.dev.require(Capabilities::VMM, "map")?;
        self.dev.enter(Api::MemMap, None)?;
        check_granular(&self.dev, "mapping offset", offset, true)?;
        let size = physical.mem.size;
        if offset
            .checked_add(size)
            .is_none_or(|end| end > reservation.len)
        {
            return Err(self.dev.err(
                self.dev.vendor().invalid_value(),
                format!(
                    "mapping {size:#x} bytes at {offset:#x} runs past the {:#x}-byte reservation",
                    reservation.len
                ),
            ));
        }
        reservation.map_mem(offset, &physical.mem)
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
        access: Access,
    ) -> Result<()> {
        self.dev
            .check_owner(&reservation.dev, "reservation", true)?;
        self.dev.require(Capabilities::VMM, "set_access")?;
        self.dev.enter(Api::MemSetAccess, None)?;
        check_granular(&self.dev, "access offset", offset, true)?;
        check_granular(&self.dev, "access length", len, false)?;
        hal_core::device::check_bounds(offset, len, reservation.len)?;
        reservation.set_range_access(offset, len, access)
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
        let size = physical.mem.size;
        let payload = Payload {
            kind: HandleKind::Physical.to_wire(),
            fd_offset: 0,
            map_len: size,
            view: 0,
            buffer_id: os::random_id(),
            alloc_offset: 0,
        };
        let handle = self.handle(
            HandleKind::Physical,
            Location::Device(physical.dev.ordinal),
            size,
            0,
            opts,
            ListKind::Listed,
            payload,
        )?;
        Exported::new(handle, vec![os::dup(physical.mem.fd.as_fd())?])
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
        Ok(MockPhysical::imported(&on, fd, size))
    }
}
