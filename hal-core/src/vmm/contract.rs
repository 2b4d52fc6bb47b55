//! The VMM half of the contract: physical allocations with no address,
//! address reservations, mapping and access rights, and the export and
//! import of physical allocations (CUDA's `cuMem*` VMM calls, Ascend's
//! `aclrtMallocPhysical` family, the CPU and simulator equivalents).
//!
//! [`Vmm`] is a trait of its own beside [`Device`]: a program that uses no
//! VMM never sees it, and a backend's VMM code sits in one `impl Vmm`.
//! [`VmmExt`] holds the conveniences, written once for every backend.

use crate::device::Device;
use crate::error::Result;
use crate::handle::SharedHandle;
#[cfg(doc)]
use crate::types::Capabilities;
use crate::types::{Access, ExportOptions, Granularity, ImportOptions};
use crate::vmm::desc::{
    AccessGrant, AccessTarget, PhysicalDesc, PhysicalLocation, ShareableHandle,
};
use crate::Exported;

/// A VMM physical allocation: memory with no address until mapped.
pub trait Physical: Send + Sync {
    /// Size in bytes (a multiple of the minimum granularity).
    fn size(&self) -> u64;

    /// Where its pages live (for an import: where the exporter put them).
    fn location(&self) -> PhysicalLocation;

    /// The shareable handle it was made for: what was asked in
    /// [`PhysicalDesc::handle`], or [`ShareableHandle::PosixFd`] after a
    /// refused fabric request fell back ([`crate::vmm::fabric_or_posix`]).
    /// An import answers the handle it came through.
    fn handle_type(&self) -> ShareableHandle;
}

/// A VMM address range reservation.
pub trait Reservation: Send + Sync {
    /// First address of the range.
    fn base(&self) -> u64;
    /// Length in bytes.
    fn len(&self) -> u64;
    /// True when the length is zero.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copy out of a mapped, accessible part of the range.
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()>;
    /// Copy into a mapped, writable part of the range.
    fn write(&self, offset: u64, src: &[u8]) -> Result<()>;
}

/// The VMM operations of a device. Every backend of this workspace
/// implements it; a device whose runtime lacks VMM answers
/// [`Error::Unsupported`](crate::Error::Unsupported) from each call and
/// does not claim [`Capabilities::VMM`].
pub trait Vmm: Device {
    /// A VMM physical allocation.
    type Physical: Physical;
    /// A VMM address reservation.
    ///
    /// Dropping a reservation unmaps what is mapped and frees the range
    /// only after the device's queued work has run (a kernel may still use
    /// the range through its address), but never waits long for it: the
    /// vendor backends finish the teardown on a worker thread when
    /// that work waits for a notify or an event ([`crate::kit::stream::teardown`]).
    type Reservation: Reservation;

    /// The VMM granularity.
    fn granularity(&self, which: Granularity) -> Result<u64>;

    /// Allocate physical memory as `desc` says: its size (a multiple of the
    /// minimum granularity), where the pages live (this device, or host
    /// NUMA memory with [`Capabilities::HOST_NUMA_VMM`]) and the shareable
    /// handle it is made for. A fabric handle the device refuses falls back
    /// to a POSIX descriptor with one warning
    /// ([`crate::vmm::fabric_or_posix`]); an allocation made for
    /// [`ShareableHandle::None`] may be refused at export, as the vendor
    /// does (CUDA: `CUDA_ERROR_INVALID_VALUE`, measured).
    fn allocate_physical_with(&self, desc: &PhysicalDesc) -> Result<Self::Physical>;

    /// Reserve an address range (size and alignment multiples of the minimum granularity).
    fn reserve(&self, size: u64, align: u64) -> Result<Self::Reservation>;

    /// Map `len` bytes of `physical`, from `physical_offset`, at `offset` in
    /// `reservation` (`cuMemMap`'s `offset`, `aclrtMapMem`'s): offsets and
    /// length are multiples of the minimum granularity and the range lies
    /// inside both. A mapping starts with no access on every backend; give
    /// it with [`VmmExt::set_access`] or [`Vmm::set_access_for`].
    fn map_range(
        &self,
        reservation: &Self::Reservation,
        offset: u64,
        physical: &Self::Physical,
        physical_offset: u64,
        len: u64,
    ) -> Result<()>;

    /// Unmap `len` bytes at `offset` of `reservation`.
    fn unmap(&self, reservation: &Self::Reservation, offset: u64, len: u64) -> Result<()>;

    /// Set the access rights of several devices (and the host, for host
    /// NUMA pages) to a mapped part of `reservation` in one call
    /// (`cuMemSetAccess` with an array of descriptors, `aclrtMemSetAccess`).
    /// The list is checked whole first ([`crate::vmm::check_grants`]): a list
    /// that is refused changes nothing. Grants for devices not named keep
    /// what they had.
    fn set_access_for(
        &self,
        reservation: &Self::Reservation,
        offset: u64,
        len: u64,
        grants: &[AccessGrant],
    ) -> Result<()>;

    /// The access `target` has to the mapped byte at `offset` of
    /// `reservation` (`cuMemGetAccess`).
    fn access(
        &self,
        reservation: &Self::Reservation,
        offset: u64,
        target: AccessTarget,
    ) -> Result<Access>;

    /// Export a physical allocation.
    fn export_physical(&self, physical: &Self::Physical, opts: &ExportOptions) -> Result<Exported>;

    /// Import a physical allocation.
    fn import_physical(&self, shared: SharedHandle, opts: &ImportOptions)
        -> Result<Self::Physical>;
}

/// The conveniences of [`Vmm`], the same on every backend.
pub trait VmmExt: Vmm {
    /// Allocate `size` bytes of physical memory on this device, exportable
    /// as a POSIX descriptor: [`Vmm::allocate_physical_with`] with
    /// [`PhysicalDesc::new`].
    fn allocate_physical(&self, size: u64) -> Result<Self::Physical> {
        self.allocate_physical_with(&PhysicalDesc::new(size))
    }

    /// Map the whole of `physical` at `offset` in `reservation`:
    /// [`Vmm::map_range`] from the physical allocation's first byte.
    fn map(
        &self,
        reservation: &Self::Reservation,
        offset: u64,
        physical: &Self::Physical,
    ) -> Result<()> {
        self.map_range(reservation, offset, physical, 0, physical.size())
    }

    /// Set this device's access rights to a mapped part of `reservation`:
    /// [`Vmm::set_access_for`] with one grant for this device.
    fn set_access(
        &self,
        reservation: &Self::Reservation,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<()> {
        let me = AccessGrant::device(self.info().ordinal, access);
        self.set_access_for(reservation, offset, len, &[me])
    }
}

impl<D: Vmm + ?Sized> VmmExt for D {}
