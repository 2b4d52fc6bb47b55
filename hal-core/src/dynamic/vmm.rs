//! The VMM half of the object-safe mirror: [`DynVmm`], reached from a
//! device with [`DynDevice::vmm`](super::DynDevice::vmm), and the VMM
//! resources as trait objects.

use std::any::Any;

use super::own::own;
use crate::device::Device;
use crate::error::Result;
use crate::handle::SharedHandle;
use crate::types::{Access, ExportOptions, Granularity, ImportOptions};
use crate::vmm::{AccessGrant, AccessTarget, Physical, PhysicalDesc, Reservation, Vmm, VmmExt};
use crate::Exported;

/// A VMM physical allocation of a run-time chosen backend.
pub trait DynPhysical: Physical {
    /// The backend's own type, for `Any::downcast_ref`.
    fn as_any(&self) -> &dyn Any;
}

impl<T: Physical + 'static> DynPhysical for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A VMM address reservation of a run-time chosen backend.
pub trait DynReservation: Reservation {
    /// The backend's own type, for `Any::downcast_ref`.
    fn as_any(&self) -> &dyn Any;
}

impl<T: Reservation + 'static> DynReservation for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The VMM operations of a run-time chosen device: the object-safe mirror
/// of [`Vmm`] and [`VmmExt`]. A physical allocation or reservation that
/// another backend made is refused with
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
pub trait DynVmm: Send + Sync {
    /// The VMM granularity.
    fn granularity(&self, which: Granularity) -> Result<u64>;

    /// Allocate physical memory; see [`VmmExt::allocate_physical`].
    fn allocate_physical(&self, size: u64) -> Result<Box<dyn DynPhysical>>;

    /// Allocate physical memory as `desc` says; see [`Vmm::allocate_physical_with`].
    fn allocate_physical_with(&self, desc: &PhysicalDesc) -> Result<Box<dyn DynPhysical>>;

    /// Reserve an address range; see [`Vmm::reserve`].
    fn reserve(&self, size: u64, align: u64) -> Result<Box<dyn DynReservation>>;

    /// Map the whole of `physical` at `offset` in `reservation`.
    fn map(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        physical: &dyn DynPhysical,
    ) -> Result<()>;

    /// Map part of `physical`; see [`Vmm::map_range`].
    fn map_range(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        physical: &dyn DynPhysical,
        physical_offset: u64,
        len: u64,
    ) -> Result<()>;

    /// Unmap `len` bytes at `offset` of `reservation`.
    fn unmap(&self, reservation: &dyn DynReservation, offset: u64, len: u64) -> Result<()>;

    /// Set this device's access rights to a mapped part of `reservation`.
    fn set_access(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<()>;

    /// Set several targets' access at once; see [`Vmm::set_access_for`].
    fn set_access_for(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        len: u64,
        grants: &[AccessGrant],
    ) -> Result<()>;

    /// The access `target` has; see [`Vmm::access`].
    fn access(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        target: AccessTarget,
    ) -> Result<Access>;

    /// Export a physical allocation.
    fn export_physical(&self, physical: &dyn DynPhysical, opts: &ExportOptions)
        -> Result<Exported>;

    /// Import a physical allocation.
    fn import_physical(
        &self,
        shared: SharedHandle,
        opts: &ImportOptions,
    ) -> Result<Box<dyn DynPhysical>>;
}

impl<D> DynVmm for D
where
    D: Vmm,
    D::Physical: 'static,
    D::Reservation: 'static,
{
    fn granularity(&self, which: Granularity) -> Result<u64> {
        Vmm::granularity(self, which)
    }

    fn allocate_physical(&self, size: u64) -> Result<Box<dyn DynPhysical>> {
        Ok(Box::new(VmmExt::allocate_physical(self, size)?))
    }

    fn allocate_physical_with(&self, desc: &PhysicalDesc) -> Result<Box<dyn DynPhysical>> {
        Ok(Box::new(Vmm::allocate_physical_with(self, desc)?))
    }

    fn reserve(&self, size: u64, align: u64) -> Result<Box<dyn DynReservation>> {
        Ok(Box::new(Vmm::reserve(self, size, align)?))
    }

    fn map(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        physical: &dyn DynPhysical,
    ) -> Result<()> {
        let info = Device::info(self);
        let reservation = own::<D::Reservation>(reservation.as_any(), info, "reservation")?;
        let physical = own::<D::Physical>(physical.as_any(), info, "physical allocation")?;
        VmmExt::map(self, reservation, offset, physical)
    }

    fn map_range(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        physical: &dyn DynPhysical,
        physical_offset: u64,
        len: u64,
    ) -> Result<()> {
        let info = Device::info(self);
        let reservation = own::<D::Reservation>(reservation.as_any(), info, "reservation")?;
        let physical = own::<D::Physical>(physical.as_any(), info, "physical allocation")?;
        Vmm::map_range(self, reservation, offset, physical, physical_offset, len)
    }

    fn unmap(&self, reservation: &dyn DynReservation, offset: u64, len: u64) -> Result<()> {
        let reservation =
            own::<D::Reservation>(reservation.as_any(), Device::info(self), "reservation")?;
        Vmm::unmap(self, reservation, offset, len)
    }

    fn set_access(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<()> {
        let reservation =
            own::<D::Reservation>(reservation.as_any(), Device::info(self), "reservation")?;
        VmmExt::set_access(self, reservation, offset, len, access)
    }

    fn set_access_for(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        len: u64,
        grants: &[AccessGrant],
    ) -> Result<()> {
        let reservation =
            own::<D::Reservation>(reservation.as_any(), Device::info(self), "reservation")?;
        Vmm::set_access_for(self, reservation, offset, len, grants)
    }

    fn access(
        &self,
        reservation: &dyn DynReservation,
        offset: u64,
        target: AccessTarget,
    ) -> Result<Access> {
        let reservation =
            own::<D::Reservation>(reservation.as_any(), Device::info(self), "reservation")?;
        Vmm::access(self, reservation, offset, target)
    }

    fn export_physical(
        &self,
        physical: &dyn DynPhysical,
        opts: &ExportOptions,
    ) -> Result<Exported> {
        let physical =
            own::<D::Physical>(physical.as_any(), Device::info(self), "physical allocation")?;
        Vmm::export_physical(self, physical, opts)
    }

    fn import_physical(
        &self,
        shared: SharedHandle,
        opts: &ImportOptions,
    ) -> Result<Box<dyn DynPhysical>> {
        Ok(Box::new(Vmm::import_physical(self, shared, opts)?))
    }
}
