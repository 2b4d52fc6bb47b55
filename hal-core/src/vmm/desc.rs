//! What a VMM call says beyond sizes: the descriptions and the rules
//! every backend shares.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};
use crate::types::Access;

/// Where the pages of a physical allocation live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PhysicalLocation {
    /// The memory of device `ordinal` (CUDA `CU_MEM_LOCATION_TYPE_DEVICE`,
    /// Ascend `ACL_MEM_LOCATION_TYPE_DEVICE`).
    Device(u32),
    /// Host memory of NUMA node `node` (CUDA `CU_MEM_LOCATION_TYPE_HOST_NUMA`,
    /// measured working on an H200 with driver 580): GPU-visible host pages,
    /// shared by descriptor, that [`AccessTarget::Host`] makes
    /// CPU-accessible. Needs [`Capabilities::HOST_NUMA_VMM`](crate::Capabilities::HOST_NUMA_VMM).
    HostNuma(u32),
}

/// Which shareable handle a physical allocation is made for (CUDA's
/// `requestedHandleTypes`, Ascend's `handleType`). A vendor decides at
/// creation what an allocation can later be exported as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ShareableHandle {
    /// No shareable handle was requested. CUDA then refuses the export with
    /// `CUDA_ERROR_INVALID_VALUE` (measured); Ascend's `ACL_MEM_HANDLE_TYPE_NONE`
    /// still exports a 64-bit key.
    None,
    /// A POSIX file descriptor (CUDA `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`):
    /// the default, passed between processes over a Unix socket.
    #[default]
    PosixFd,
    /// A fabric handle (CUDA `CU_MEM_HANDLE_TYPE_FABRIC`): needs an IMEX
    /// daemon; without one the driver answers `CUDA_ERROR_NOT_PERMITTED`
    /// (measured), and the backend falls back to [`ShareableHandle::PosixFd`]
    /// with one warning ([`fabric_or_posix`]).
    Fabric,
}

/// What a physical allocation is: its size, where its pages live and which
/// shareable handle it is made for.
///
/// ```
/// use hal_core::{PhysicalDesc, PhysicalLocation, ShareableHandle};
///
/// let desc = PhysicalDesc::new(2 << 20)
///     .location(PhysicalLocation::HostNuma(0))
///     .handle(ShareableHandle::PosixFd);
/// assert_eq!(desc.size, 2 << 20);
/// assert_eq!(PhysicalDesc::new(4096).location, None, "the device itself by default");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PhysicalDesc {
    /// Size in bytes (a multiple of the minimum granularity).
    pub size: u64,
    /// Where the pages live; `None` is the device the allocation is made on.
    pub location: Option<PhysicalLocation>,
    /// The shareable handle it is made for.
    pub handle: ShareableHandle,
}

impl PhysicalDesc {
    /// `size` bytes on the device itself, exportable as a POSIX descriptor.
    pub const fn new(size: u64) -> PhysicalDesc {
        PhysicalDesc {
            size,
            location: None,
            handle: ShareableHandle::PosixFd,
        }
    }

    /// Place the pages at `location`.
    pub const fn location(mut self, location: PhysicalLocation) -> PhysicalDesc {
        self.location = Some(location);
        self
    }

    /// Make the allocation for `handle`.
    pub const fn handle(mut self, handle: ShareableHandle) -> PhysicalDesc {
        self.handle = handle;
        self
    }
}

/// Who a grant of [`Vmm::set_access_for`](crate::Vmm::set_access_for) is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessTarget {
    /// Device `ordinal` of the backend.
    Device(u32),
    /// The host's processors (CUDA `CU_MEM_LOCATION_TYPE_HOST`); only host
    /// pages ([`PhysicalLocation::HostNuma`]) can be made host-accessible.
    Host,
}

/// One entry of an access list: `target` gets `access` to a mapped range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccessGrant {
    /// Who.
    pub target: AccessTarget,
    /// What.
    pub access: Access,
}

impl AccessGrant {
    /// `access` for device `ordinal`.
    pub const fn device(ordinal: u32, access: Access) -> AccessGrant {
        AccessGrant {
            target: AccessTarget::Device(ordinal),
            access,
        }
    }

    /// `access` for the host.
    pub const fn host(access: Access) -> AccessGrant {
        AccessGrant {
            target: AccessTarget::Host,
            access,
        }
    }
}

/// The checks every backend makes on an access list before it changes
/// anything: at least one grant, no target twice, and every device one of
/// Refuse `value` (a size, offset, length or alignment named `what`) that
/// is not a multiple of the VMM `granularity`; 0 is refused unless
/// `zero_ok`. Every backend's VMM calls check with it.
pub fn check_granular(what: &str, value: u64, granularity: u64, zero_ok: bool) -> Result<()> {
    if (value == 0 && !zero_ok) || granularity == 0 || value % granularity != 0 {
        return Err(Error::invalid(format!(
            "{what} {value:#x} is not a {}multiple of the VMM granularity {granularity:#x} \
             (Vmm::granularity(Minimum))",
            if zero_ok { "" } else { "non-zero " }
        )));
    }
    Ok(())
}

/// The granularity a vendor's query (`call`) answered, refused unless it is
/// a power of two.
pub fn check_granularity(call: &str, granularity: u64) -> Result<u64> {
    if !granularity.is_power_of_two() {
        return Err(Error::invalid(format!(
            "{call} answered {granularity:#x}, not a power of two"
        )));
    }
    Ok(granularity)
}

/// the backend's `device_count` devices. A list that fails changes nothing.
pub fn check_grants(grants: &[AccessGrant], device_count: u32) -> Result<()> {
    if grants.is_empty() {
        return Err(Error::invalid(
            "an empty access list: name at least one device (or the host)",
        ));
    }
    for (i, g) in grants.iter().enumerate() {
        if let AccessTarget::Device(d) = g.target {
            if d >= device_count {
                return Err(Error::invalid(format!(
                    "access for device {d}: this backend has {device_count} device(s)"
                )));
            }
        }
        if grants[..i].iter().any(|h| h.target == g.target) {
            return Err(Error::invalid(format!(
                "{:?} appears twice in the access list: give each target one grant",
                g.target
            )));
        }
    }
    Ok(())
}

static FABRIC_WARNED: AtomicBool = AtomicBool::new(false);

/// Create a physical allocation with `create`; when `desc` asks for a
/// [`ShareableHandle::Fabric`] handle and the device refuses it (a vendor
/// error or [`Error::Unsupported`]: CUDA answers `CUDA_ERROR_NOT_PERMITTED`
/// without an IMEX daemon, measured), create it again for a POSIX
/// descriptor. The first fallback in a process logs one `log::warn!` line
/// naming the refusal; the allocation's
/// [`Physical::handle_type`](crate::Physical::handle_type) then says
/// [`ShareableHandle::PosixFd`], so the fallback is never silent. Other
/// errors (out of memory, a bad size) are returned as they are.
pub fn fabric_or_posix<P>(
    backend: crate::types::BackendId,
    desc: &PhysicalDesc,
    mut create: impl FnMut(&PhysicalDesc) -> Result<P>,
) -> Result<P> {
    match create(desc) {
        Err(e @ (Error::Vendor(_) | Error::Unsupported { .. }))
            if desc.handle == ShareableHandle::Fabric =>
        {
            if !FABRIC_WARNED.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "{backend}: a fabric handle was refused ({e}); physical allocations fall \
                     back to POSIX file descriptors (shareable on this host only)"
                );
            }
            create(&desc.handle(ShareableHandle::PosixFd))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_checked_before_anything_changes() {
        let rw = Access::ReadWrite;
        assert!(check_grants(&[], 2).is_err());
        assert!(check_grants(&[AccessGrant::device(0, rw)], 1).is_ok());
        assert!(check_grants(&[AccessGrant::device(1, rw)], 1).is_err());
        assert!(check_grants(&[AccessGrant::device(0, rw), AccessGrant::host(rw)], 1).is_ok());
        let twice = [
            AccessGrant::device(0, rw),
            AccessGrant::device(0, Access::Read),
        ];
        assert!(check_grants(&twice, 1).is_err());
        let hosts = [AccessGrant::host(rw), AccessGrant::host(rw)];
        assert!(check_grants(&hosts, 1).is_err());
    }

    fn refused() -> Error {
        crate::kit::vendor::cuda::NOT_PERMITTED
            .error(crate::BackendId::Cuda, "cuMemCreate: no IMEX daemon")
    }

    #[test]
    fn a_refused_fabric_handle_falls_back_to_posix() {
        let desc = PhysicalDesc::new(4096).handle(ShareableHandle::Fabric);
        let mut asked = Vec::new();
        let got = fabric_or_posix(crate::BackendId::Cuda, &desc, |d| {
            asked.push(d.handle);
            if d.handle == ShareableHandle::Fabric {
                Err(refused())
            } else {
                Ok(d.handle)
            }
        })
        .unwrap();
        assert_eq!(got, ShareableHandle::PosixFd);
        assert_eq!(asked, [ShareableHandle::Fabric, ShareableHandle::PosixFd]);
    }

    #[test]
    fn other_errors_and_other_handles_do_not_fall_back() {
        let fabric = PhysicalDesc::new(4096).handle(ShareableHandle::Fabric);
        let mut calls = 0;
        let oom = fabric_or_posix::<()>(crate::BackendId::Cuda, &fabric, |_| {
            calls += 1;
            Err(Error::OutOfMemory {
                requested: 4096,
                detail: "full".into(),
            })
        });
        assert!(matches!(oom, Err(Error::OutOfMemory { .. })));
        assert_eq!(calls, 1);
        let posix = PhysicalDesc::new(4096);
        let mut calls = 0;
        let refused = fabric_or_posix::<()>(crate::BackendId::Cuda, &posix, |_| {
            calls += 1;
            Err(refused())
        });
        assert!(matches!(refused, Err(Error::Vendor(_))));
        assert_eq!(calls, 1, "only a fabric request is retried");
    }

    #[test]
    fn granules_and_granularities() {
        let g = 2 << 20;
        assert!(check_granular("x", 0, g, false).is_err());
        assert!(check_granular("x", 0, g, true).is_ok());
        assert!(check_granular("x", g / 2, g, true).is_err());
        assert!(check_granular("x", 3 * g, g, false).is_ok());
        assert!(check_granularity("q", 0).is_err());
        assert!(check_granularity("q", 3 << 20).is_err());
        assert_eq!(check_granularity("q", g).unwrap(), g);
    }
}
