//! A driver backend's [`Vmm`](crate::Vmm) as one set of calls: the device
//! checks that it offers VMM (and whatever else it checks first) once,
//! in a method `vmm(&self, operation: &str) -> Result<Calls>`, and the
//! calls ([`VmmCalls`]) do the work. [`forward_vmm!`](crate::forward_vmm)
//! writes the `impl Vmm` that goes from one to the other, so that every
//! operation passes the same check under its own name, and a map or an
//! unmap the vendor-neutral checks of its arguments
//! ([`vmm_checks`](crate::kit::vmm_checks)) before the backend's calls.

use crate::error::Result;
use crate::{
    Access, AccessGrant, AccessTarget, DeviceInfo, ExportOptions, Exported, PhysicalDesc,
    SharedHandle,
};

/// The VMM calls of a device that offers VMM, one per operation of
/// [`Vmm`](crate::Vmm) (whose documentation says what each does).
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

    /// [`Vmm::allocate_physical_with`](crate::Vmm::allocate_physical_with).
    fn allocate(&self, desc: &PhysicalDesc) -> Result<Self::Physical>;

    /// [`Vmm::reserve`](crate::Vmm::reserve).
    fn reserve(&self, size: u64, align: u64) -> Result<Self::Reservation>;

    /// [`Vmm::map_range`](crate::Vmm::map_range), once the reservation is
    /// this device's and the arguments passed [`vmm_checks::mapping`].
    ///
    /// [`vmm_checks::mapping`]: crate::kit::vmm_checks::mapping
    fn map(
        &self,
        reservation: &Self::Reservation,
        offset: u64,
        physical: &Self::Physical,
        physical_offset: u64,
        len: u64,
    ) -> Result<()>;

    /// [`Vmm::unmap`](crate::Vmm::unmap), once the reservation is this
    /// device's and the range passed [`vmm_checks::range`].
    ///
    /// [`vmm_checks::range`]: crate::kit::vmm_checks::range
    fn unmap(&self, reservation: &Self::Reservation, offset: u64, len: u64) -> Result<()>;

    /// [`Vmm::set_access_for`](crate::Vmm::set_access_for), once the
    /// reservation is this device's, the list passed
    /// [`check_grants`](crate::vmm::check_grants) and the range
    /// [`vmm_checks::range`](crate::kit::vmm_checks::range).
    fn set_access(
        &self,
        reservation: &Self::Reservation,
        offset: u64,
        len: u64,
        grants: &[AccessGrant],
    ) -> Result<()>;

    /// [`Vmm::access`](crate::Vmm::access).
    fn access(
        &self,
        reservation: &Self::Reservation,
        offset: u64,
        target: AccessTarget,
    ) -> Result<Access>;

    /// [`Vmm::export_physical`](crate::Vmm::export_physical).
    fn export(&self, physical: &Self::Physical, opts: &ExportOptions) -> Result<Exported>;

    /// [`Vmm::import_physical`](crate::Vmm::import_physical); the import
    /// options name nothing a VMM import uses.
    fn import(&self, shared: SharedHandle) -> Result<Self::Physical>;
}

/// `impl Vmm for $device`, each operation forwarded to the [`VmmCalls`]
/// that `$device`'s inherent method `vmm(&self, operation: &str) ->
/// Result<impl VmmCalls<Physical = $physical, Reservation = $reservation>>`
/// answers under the operation's name.
///
/// [`VmmCalls`]: crate::kit::vmm_forward::VmmCalls
#[macro_export]
macro_rules! forward_vmm {
    ($device:ty, $physical:ty, $reservation:ty) => {
        impl $crate::Vmm for $device {
            type Physical = $physical;
            type Reservation = $reservation;

            fn granularity(&self, which: $crate::Granularity) -> $crate::Result<u64> {
                let calls = self.vmm("granularity")?;
                Ok($crate::kit::vmm_forward::VmmCalls::info(&calls).granularity(which))
            }

            fn allocate_physical_with(
                &self,
                desc: &$crate::PhysicalDesc,
            ) -> $crate::Result<$physical> {
                $crate::kit::vmm_forward::VmmCalls::allocate(&self.vmm("allocate_physical")?, desc)
            }

            fn reserve(&self, size: u64, align: u64) -> $crate::Result<$reservation> {
                $crate::kit::vmm_forward::VmmCalls::reserve(&self.vmm("reserve")?, size, align)
            }

            fn map_range(
                &self,
                reservation: &$reservation,
                offset: u64,
                physical: &$physical,
                physical_offset: u64,
                len: u64,
            ) -> $crate::Result<()> {
                use $crate::kit::vmm_forward::VmmCalls;
                let calls = self.vmm("map")?;
                calls.check_reservation(reservation)?;
                $crate::kit::vmm_checks::mapping(
                    offset,
                    physical_offset,
                    len,
                    calls.info().granularity_min,
                    $crate::Physical::size(physical),
                    $crate::Reservation::len(reservation),
                )?;
                calls.map(reservation, offset, physical, physical_offset, len)
            }

            fn unmap(
                &self,
                reservation: &$reservation,
                offset: u64,
                len: u64,
            ) -> $crate::Result<()> {
                use $crate::kit::vmm_forward::VmmCalls;
                let calls = self.vmm("unmap")?;
                calls.check_reservation(reservation)?;
                let granularity = calls.info().granularity_min;
                let reserved = $crate::Reservation::len(reservation);
                $crate::kit::vmm_checks::range("unmap", offset, len, granularity, reserved)?;
                calls.unmap(reservation, offset, len)
            }

            fn set_access_for(
                &self,
                reservation: &$reservation,
                offset: u64,
                len: u64,
                grants: &[$crate::AccessGrant],
            ) -> $crate::Result<()> {
                use $crate::kit::vmm_forward::VmmCalls;
                let calls = self.vmm("set_access")?;
                calls.check_reservation(reservation)?;
                $crate::vmm::check_grants(grants, calls.device_count()?)?;
                let granularity = calls.info().granularity_min;
                let reserved = $crate::Reservation::len(reservation);
                $crate::kit::vmm_checks::range("access", offset, len, granularity, reserved)?;
                calls.set_access(reservation, offset, len, grants)
            }

            fn access(
                &self,
                reservation: &$reservation,
                offset: u64,
                target: $crate::AccessTarget,
            ) -> $crate::Result<$crate::Access> {
                $crate::kit::vmm_forward::VmmCalls::access(
                    &self.vmm("access")?,
                    reservation,
                    offset,
                    target,
                )
            }

            fn export_physical(
                &self,
                physical: &$physical,
                opts: &$crate::ExportOptions,
            ) -> $crate::Result<$crate::Exported> {
                $crate::kit::vmm_forward::VmmCalls::export(
                    &self.vmm("export_physical")?,
                    physical,
                    opts,
                )
            }

            fn import_physical(
                &self,
                shared: $crate::SharedHandle,
                _opts: &$crate::ImportOptions,
            ) -> $crate::Result<$physical> {
                $crate::kit::vmm_forward::VmmCalls::import(&self.vmm("import_physical")?, shared)
            }
        }
    };
}
