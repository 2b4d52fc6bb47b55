//! The second home: host-NUMA pages allocated through the GPU's VMM and
//! shared by descriptor.
//!
//! Measured on an H200 with plain driver calls, before this crate existed
//! (the vendor notes, `shared/vendor/cuda.md`, "Measured on an H200",
//! driver 580.159.04; nothing of this module has run on a GPU): a 1 GiB
//! host-NUMA VMM allocation made
//! host-accessible (`cuMemSetAccess` with a host location) is read by the
//! GPU at 55 GB/s (as pinned memory) and by the CPU as fast as `malloc`
//! memory, and a second process attaches it in about 23 ms (import,
//! reserve, map, access) instead of 446 ms of registration. The price:
//! every process that maps it initialises CUDA, where memfd pages (the
//! default home) are mapped by CPU-only processes too. Picked explicitly
//! with [`NumaHome`]; it needs [`Capabilities::VMM`] and
//! [`Capabilities::HOST_NUMA_VMM`] (not offered by `hal-cuda` yet:
//! `Unsupported` there).

use hal_core::DeviceExt;
use hal_core::{
    AccessGrant, Capabilities, Device, Error, ExportOptions, Exported, Granularity, Handle,
    ImportOptions, Location, Memory, PhysicalDesc, PhysicalLocation, Reservation, Result,
    ShareableHandle, SharedHandle, Vmm, VmmExt,
};

use crate::device::UvmDevice;
use crate::gpu::GpuDevice;

/// A buffer whose home is host-NUMA pages of the GPU's VMM: the CPU and the
/// GPU of every process that attaches reach it at one address
/// ([`NumaHome::device_addr`], the host address too).
///
/// Dropping it drops its reservation, which unmaps the pages after the
/// device's queued work without waiting long for that work.
#[must_use = "the host-NUMA pages are unmapped and released when this value drops"]
pub struct NumaHome<'d, D: GpuDevice> {
    dev: &'d UvmDevice<D>,
    reservation: D::Reservation,
    physical: D::Physical,
    len: u64,
}

impl<D: GpuDevice> std::fmt::Debug for NumaHome<'_, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NumaHome")
            .field("base", &format_args!("{:#x}", self.reservation.base()))
            .field("len", &self.len)
            .finish()
    }
}

fn need_numa_vmm<D: GpuDevice>(dev: &UvmDevice<D>) -> Result<()> {
    let caps = dev.capabilities();
    if !caps.contains(Capabilities::VMM) || !caps.contains(Capabilities::HOST_NUMA_VMM) {
        return Err(Error::unsupported(
            hal_core::BackendId::CudaUvm,
            "a host-NUMA home",
            "the GPU backend offers no host-NUMA VMM (Capabilities::VMM and HOST_NUMA_VMM): use \
             the default home, memfd pages registered with the GPU",
        ));
    }
    Ok(())
}

impl<'d, D: GpuDevice> NumaHome<'d, D> {
    /// `size` bytes (a multiple of the GPU's granularity) of host memory on
    /// NUMA node `node`, mapped here for the CPU and this GPU.
    pub fn create(dev: &'d UvmDevice<D>, size: u64, node: u32) -> Result<Self> {
        need_numa_vmm(dev)?;
        let desc = PhysicalDesc::new(size)
            .location(PhysicalLocation::HostNuma(node))
            .handle(ShareableHandle::PosixFd);
        let physical = dev.allocate_physical_with(&desc)?;
        NumaHome::map_here(dev, physical)
    }

    /// Attach the buffer another process exported ([`NumaHome::export`]).
    pub fn attach(dev: &'d UvmDevice<D>, shared: SharedHandle) -> Result<Self> {
        need_numa_vmm(dev)?;
        if shared.handle.location != Location::Host {
            return Err(Error::invalid(
                "the handle names device memory, not a host-NUMA home",
            ));
        }
        let physical = dev.import_physical(shared, &ImportOptions::default())?;
        NumaHome::map_here(dev, physical)
    }

    /// Attach by handle text.
    pub fn attach_text(dev: &'d UvmDevice<D>, text: &str) -> Result<Self> {
        NumaHome::attach(dev, SharedHandle::from(Handle::from_text(text)?))
    }

    fn map_here(dev: &'d UvmDevice<D>, physical: D::Physical) -> Result<Self> {
        use hal_core::Physical;
        let len = physical.size();
        let min = dev.granularity(Granularity::Minimum)?;
        // Address space for this buffer only.
        let reservation = dev.reserve(len, min)?;
        dev.map(&reservation, 0, &physical)?;
        let grants = [
            AccessGrant::device(dev.info().ordinal, hal_core::Access::ReadWrite),
            AccessGrant::host(hal_core::Access::ReadWrite),
        ];
        if let Err(e) = dev.set_access_for(&reservation, 0, len, &grants) {
            let _ = dev.unmap(&reservation, 0, len);
            return Err(e);
        }
        Ok(NumaHome {
            dev,
            reservation,
            physical,
            len,
        })
    }

    /// Export the buffer's pages by descriptor.
    pub fn export(&self, opts: &ExportOptions) -> Result<Exported> {
        self.dev.export_physical(&self.physical, opts)
    }

    /// The address the CPU and the GPU use here.
    pub fn device_addr(&self) -> u64 {
        self.reservation.base()
    }
}

impl<D: GpuDevice> Memory for NumaHome<'_, D> {
    fn addr(&self) -> u64 {
        self.reservation.base()
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn location(&self) -> Location {
        Location::Host
    }
    fn host_ptr(&self) -> Option<*mut u8> {
        Some(self.reservation.base() as *mut u8)
    }
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.reservation.read(offset, dst)
    }
    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.reservation.write(offset, src)
    }
}
