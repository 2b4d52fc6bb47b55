//! [`Backend`]: a vendor runtime, which lists and opens its devices.

use crate::device::Device;
use crate::error::Result;
use crate::types::{Availability, BackendId, DeviceInfo};
use crate::vmm::Vmm;

/// A vendor runtime: lists and opens devices.
pub trait Backend: Send + Sync + 'static {
    /// The device type: a [`Device`] with its VMM half ([`Vmm`]). A
    /// runtime without VMM answers [`Error::Unsupported`](crate::Error::Unsupported) from the VMM
    /// calls and does not claim [`Capabilities::VMM`](crate::Capabilities::VMM).
    type Device: Device + Vmm;

    /// Which backend this is.
    fn id(&self) -> BackendId;

    /// Whether it can be used on this machine, and why not.
    fn availability(&self) -> Availability;

    /// Information about every device, in ordinal order.
    fn devices(&self) -> Result<Vec<DeviceInfo>>;

    /// Open device `ordinal`.
    fn open(&self, ordinal: u32) -> Result<Self::Device>;

    /// The ordinal, in this process, of the device to import `handle`
    /// through: the device with the handle's UUID (see
    /// [`Handle::device_in`](crate::Handle::device_in)).
    /// [`Error::NotFound`](crate::Error::NotFound) when this process sees no such device.
    fn device_for(&self, handle: &crate::Handle) -> Result<u32> {
        let devices = self.devices()?;
        handle.device_in(&devices).ok_or_else(|| {
            crate::error::no_device_for(&handle.device_uuid, handle.device, devices.len())
        })
    }
}
