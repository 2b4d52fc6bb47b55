//! A driver backend's [`Vmm`] as one set of calls: the device checks that
//! it offers VMM (and whatever else it checks first) once, in
//! [`VmmByCalls::vmm`], and the calls ([`VmmCalls`]) do the work. [`Vmm`]
//! is implemented once for every [`VmmByCalls`] device, going from one to
//! the other, so that every operation passes the same check under its own
//! name, and a map or an unmap the vendor-neutral checks of its arguments
//! ([`checks`]) before the backend's calls.

use crate::device::Device;
use crate::error::Result;
use crate::exported::Exported;
use crate::handle::SharedHandle;
use crate::kit::vmm::checks;
use crate::types::{Access, DeviceInfo, ExportOptions, Granularity, ImportOptions};
use crate::vmm::{
    check_grants, AccessGrant, AccessTarget, Physical, PhysicalDesc, Reservation, Vmm,
};

/// The VMM calls of a device that offers VMM, one per operation of
/// [`Vmm`] (whose documentation says what each does).
pub trait VmmCalls {
    /// The physical allocation.
    type Physical;
    /// The address reservation.
    type Reservation;

    /// The device's information (its granularities).
    fn info(&self) -> &DeviceInfo;

    /// Refuse a reservation of another device.
    fn check_reservation(&self, reservation: &Self::Reservation) -> Result<()>;

    /// How many devices the vendor sees (access lists name them).
    fn device_count(&self) -> Result<u32>;

    /// [`Vmm::allocate_physical_with`].
    fn allocate(&self, desc: &PhysicalDesc) -> Result<Self::Physical>;

    /// [`Vmm::reserve`].
    fn reserve(&self, size: u64, align: u64) -> Result<Self::Reservation>;

    /// [`Vmm::map_range`], once the reservation is
    /// this device's and the arguments passed [`checks::mapping`].
    ///
    /// [`checks::mapping`]: crate::kit::vmm::checks::mapping
    fn map(
        &self,
        reservation: &Self::Reservation,
        offset: u64,
        physical: &Self::Physical,
        physical_offset: u64,
        len: u64,
    ) -> Result<()>;

    /// [`Vmm::unmap`], once the reservation is this
    /// device's and the range passed [`checks::range`].
    ///
    /// [`checks::range`]: crate::kit::vmm::checks::range
    fn unmap(&self, reservation: &Self::Reservation, offset: u64, len: u64) -> Result<()>;

    /// [`Vmm::set_access_for`], once the
    /// reservation is this device's, the list passed
    /// [`check_grants`] and the range
    /// [`checks::range`].
    fn set_access(
        &self,
        reservation: &Self::Reservation,
        offset: u64,
        len: u64,
        grants: &[AccessGrant],
    ) -> Result<()>;

    /// [`Vmm::access`].
    fn access(
        &self,
        reservation: &Self::Reservation,
        offset: u64,
        target: AccessTarget,
    ) -> Result<Access>;

    /// [`Vmm::export_physical`].
    fn export(&self, physical: &Self::Physical, opts: &ExportOptions) -> Result<Exported>;

    /// [`Vmm::import_physical`]; the import
    /// options name nothing a VMM import uses.
    fn import(&self, shared: SharedHandle) -> Result<Self::Physical>;
}

/// A device whose [`Vmm`] is one set of [`VmmCalls`]: implementing
/// [`VmmByCalls::vmm`] implements [`Vmm`], every operation passing the
/// device's check under its own name, and a map, an unmap or an access
/// change the vendor-neutral checks of its arguments first.
pub trait VmmByCalls: Device {
    /// The physical allocation.
    type Physical: Physical;
    /// The address reservation.
    type Reservation: Reservation;
    /// The calls, once the device offers VMM.
    type Calls<'a>: VmmCalls<Physical = Self::Physical, Reservation = Self::Reservation>
    where
        Self: 'a;

    /// The calls, once the device checked that it offers VMM (and whatever
    /// else it checks first) for `operation`, which its errors name.
    fn vmm(&self, operation: &str) -> Result<Self::Calls<'_>>;
}

impl<D: VmmByCalls> Vmm for D {
    type Physical = <D as VmmByCalls>::Physical;
    type Reservation = <D as VmmByCalls>::Reservation;

    fn granularity(&self, which: Granularity) -> Result<u64> {
        Ok(self.vmm("granularity")?.info().granularity(which))
    }

    fn allocate_physical_with(&self, desc: &PhysicalDesc) -> Result<Self::Physical> {
        self.vmm("allocate_physical")?.allocate(desc)
    }

    fn reserve(&self, size: u64, align: u64) -> Result<Self::Reservation> {
        self.vmm("reserve")?.reserve(size, align)
    }

    fn map_range(
        &self,
        reservation: &Self::Reservation,
        offset: u64,
        physical: &Self::Physical,
        physical_offset: u64,
        len: u64,
    ) -> Result<()> {
        let calls = self.vmm("map")?;
        calls.check_reservation(reservation)?;
        checks::mapping(
            offset,
            physical_offset,
            len,
            calls.info().granularity_min,
            physical.size(),
            reservation.len(),
        )?;
        calls.map(reservation, offset, physical, physical_offset, len)
    }

    fn unmap(&self, reservation: &Self::Reservation, offset: u64, len: u64) -> Result<()> {
        let calls = self.vmm("unmap")?;
        calls.check_reservation(reservation)?;
        let granularity = calls.info().granularity_min;
        checks::range("unmap", offset, len, granularity, reservation.len())?;
        calls.unmap(reservation, offset, len)
    }

    fn set_access_for(
        &self,
        reservation: &Self::Reservation,
        offset: u64,
        len: u64,
        grants: &[AccessGrant],
    ) -> Result<()> {
        let calls = self.vmm("set_access")?;
        calls.check_reservation(reservation)?;
        check_grants(grants, calls.device_count()?)?;
        let granularity = calls.info().granularity_min;
        checks::range("access", offset, len, granularity, reservation.len())?;
        calls.set_access(reservation, offset, len, grants)
    }

    fn access(
        &self,
        reservation: &Self::Reservation,
        offset: u64,
        target: AccessTarget,
    ) -> Result<Access> {
        self.vmm("access")?.access(reservation, offset, target)
    }

    fn export_physical(&self, physical: &Self::Physical, opts: &ExportOptions) -> Result<Exported> {
        self.vmm("export_physical")?.export(physical, opts)
    }

    fn import_physical(
        &self,
        shared: SharedHandle,
        _opts: &ImportOptions,
    ) -> Result<Self::Physical> {
        self.vmm("import_physical")?.import(shared)
    }
}
