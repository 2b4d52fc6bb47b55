//! Device queries both the backend and its devices make: the device count
//! and device attributes (`cuDeviceGetCount`, `cuDeviceGetAttribute`).

use std::ffi::c_int;

use hal_core::Result;

use crate::sys::{CUdevice, Driver};

/// The number of devices the driver sees.
pub(crate) fn device_count(driver: &Driver) -> Result<u32> {
    let f = driver.device_get_count()?;
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid place for the count.
    driver.check("cuDeviceGetCount", unsafe { f(&mut n) })?;
    Ok(u32::try_from(n).unwrap_or(0))
}

/// An attribute of `dev` (`cuDeviceGetAttribute`).
pub(crate) fn attribute(
    driver: &Driver,
    dev: CUdevice,
    attr: cudarc::driver::sys::CUdevice_attribute,
) -> Result<i32> {
    attribute_number(driver, dev, attr as c_int)
}

/// The attribute numbered `attr` of `dev`: also numbers newer than the
/// headers' enum (`hal_core::vendor::cuda::ATTRIBUTE_*`).
pub(crate) fn attribute_number(driver: &Driver, dev: CUdevice, attr: c_int) -> Result<i32> {
    let f = driver.device_get_attribute()?;
    let mut v: c_int = 0;
    // SAFETY: `v` is a valid place; the attribute is passed as its number
    // (the enum's ABI), and the driver answers any number.
    let status = unsafe { f(&mut v, attr, dev) };
    driver.check("cuDeviceGetAttribute", status)?;
    Ok(v)
}
