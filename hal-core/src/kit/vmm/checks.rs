//! The checks a VMM backend makes of a call's arguments before it asks the
//! vendor: granular sizes and offsets, ranges inside the reservation and
//! the physical allocation, devices that exist. Each answers the error the
//! contract names ([`Error::InvalidArgument`]
//! or [`Error::Misaligned`]) and leaves what the
//! vendor needs beyond them to the backend.
//!
//! ```
//! use hal_core::kit::vmm::checks;
//!
//! let granularity = 0x20_0000;
//! assert!(checks::reservation(4 * granularity, 0, granularity).is_ok());
//! assert!(checks::reservation(4 * granularity, 3, granularity).is_err());
//! // Two granules of a four-granule physical allocation, mapped at the
//! // reservation's second granule:
//! let len = 2 * granularity;
//! assert!(checks::mapping(granularity, 0, len, granularity, 4 * granularity, 4 * granularity).is_ok());
//! assert!(checks::range("unmap", 1, len, granularity, 4 * granularity).is_err());
//! ```

use crate::device::check_bounds;
use crate::error::{Error, HandleError, Result};
use crate::handle::Handle;
use crate::types::ExportOptions;
use crate::vmm::{check_granular, AccessTarget, PhysicalDesc, PhysicalLocation};

/// The arguments of a reservation of `size` bytes aligned to `align` (0:
/// the granularity): a whole number of granules, a power of two
/// alignment that is one too.
pub fn reservation(size: u64, align: u64, granularity: u64) -> Result<()> {
    check_granular("reservation size", size, granularity, false)?;
    if align != 0 && !align.is_power_of_two() {
        return Err(Error::invalid(format!(
            "alignment {align:#x} is not a power of two"
        )));
    }
    check_granular("reservation alignment", align, granularity, true)
}

/// Where a physical allocation of `desc` on device `device` goes: its
/// location (the device by default), after the checks of its size (whole
/// granules) and of a device location (this device only).
pub fn physical(desc: &PhysicalDesc, device: u32, granularity: u64) -> Result<PhysicalLocation> {
    check_granular("physical allocation size", desc.size, granularity, false)?;
    let location = desc.location.unwrap_or(PhysicalLocation::Device(device));
    match location {
        PhysicalLocation::Device(d) if d != device => Err(Error::invalid(format!(
            "physical memory of device {d} asked of device {device}: allocate it through \
             device {d}"
        ))),
        _ => Ok(location),
    }
}

/// The arguments of a map of `len` bytes at `offset` of a reservation of
/// `reservation_len` bytes, from `physical_offset` of a physical
/// allocation of `physical_size` bytes: whole granules, inside both.
pub fn mapping(
    offset: u64,
    physical_offset: u64,
    len: u64,
    granularity: u64,
    physical_size: u64,
    reservation_len: u64,
) -> Result<()> {
    check_granular("mapping offset", offset, granularity, true)?;
    check_granular(
        "offset in the physical allocation",
        physical_offset,
        granularity,
        true,
    )?;
    check_granular("mapping length", len, granularity, false)?;
    check_bounds(physical_offset, len, physical_size)?;
    check_bounds(offset, len, reservation_len)
}

/// The range `offset..offset + len` of a reservation of `reservation_len`
/// bytes that an `operation` ("unmap", "access") names: whole granules,
/// inside the reservation.
pub fn range(
    operation: &str,
    offset: u64,
    len: u64,
    granularity: u64,
    reservation_len: u64,
) -> Result<()> {
    check_granular(&format!("{operation} offset"), offset, granularity, true)?;
    check_granular(&format!("{operation} length"), len, granularity, false)?;
    check_bounds(offset, len, reservation_len)
}

/// The size of the physical allocation that an imported physical `handle`
/// names: a whole allocation of granules, from its start
/// ([`HandleError::Malformed`] otherwise).
pub fn whole_physical(handle: &Handle, granularity: u64) -> Result<u64> {
    let size = handle.size;
    if size == 0 || size % granularity != 0 || handle.offset != 0 {
        return Err(HandleError::Malformed {
            field: "size",
            detail: format!(
                "a physical handle names a whole allocation of granules ({granularity:#x}), not \
                 {:#x}+{size:#x}",
                handle.offset
            ),
        }
        .into());
    }
    Ok(size)
}

/// The options of a physical allocation's export by `backend`: the whole
/// allocation (no range) and not read-only, which a shareable handle
/// cannot carry; `access_call` is the vendor's call with which each
/// importer sets its own access ("cuMemSetAccess").
pub fn physical_export(opts: &ExportOptions, backend: &str, access_call: &str) -> Result<()> {
    if opts.range.is_some() {
        return Err(Error::invalid(
            "a physical allocation is exported whole; a range is not allowed",
        ));
    }
    let why = format!(
        "the shareable handle carries no access rights: each importer sets its own with \
         {access_call}"
    );
    opts.refuse_read_only(backend, "physical memory", &why)
}

/// Refuse a device target that the vendor library does not see: `vendor`
/// names the devices ("CUDA"), `library` what counted them ("the
/// driver").
pub fn device_exists(
    target: AccessTarget,
    device_count: u32,
    vendor: &str,
    library: &str,
) -> Result<()> {
    match target {
        AccessTarget::Device(d) if d >= device_count => Err(Error::invalid(format!(
            "{vendor} device {d} does not exist: {library} sees {device_count} device(s)"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_name_the_operation_and_stay_inside() {
        let e = range("unmap", 1, 2, 2, 8).unwrap_err().to_string();
        assert!(e.contains("unmap offset"), "{e}");
        let e = range("access", 0, 3, 2, 8).unwrap_err().to_string();
        assert!(e.contains("access length"), "{e}");
        assert!(range("access", 6, 4, 2, 8).is_err());
        assert!(range("access", 6, 2, 2, 8).is_ok());
    }

    #[test]
    fn only_devices_the_library_sees_exist() {
        assert!(device_exists(AccessTarget::Host, 0, "X", "the library").is_ok());
        assert!(device_exists(AccessTarget::Device(1), 2, "X", "the library").is_ok());
        let e = device_exists(AccessTarget::Device(2), 2, "X", "the library")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("X device 2 does not exist: the library sees 2 device(s)"),
            "{e}"
        );
    }
}
