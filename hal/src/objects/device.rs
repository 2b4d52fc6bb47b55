//! A device as a door holds it: the device, its backend and the stream its
//! events are recorded on.

use std::sync::OnceLock;

use hal_core::dynamic::{DynBackend, DynDevice, DynStream};
use hal_core::{Handle, Result};

use crate::Registry;

/// A device and the backend it belongs to: what every object made on the
/// device keeps alive.
pub struct DeviceObj {
    /// The device.
    pub device: Box<dyn DynDevice>,
    /// Its backend.
    pub backend: Box<dyn DynBackend>,
    /// The stream events are recorded on, made on first use.
    stream: OnceLock<Box<dyn DynStream>>,
}

impl DeviceObj {
    /// `device` of `backend`.
    pub fn from_parts(backend: Box<dyn DynBackend>, device: Box<dyn DynDevice>) -> DeviceObj {
        DeviceObj {
            device,
            backend,
            stream: OnceLock::new(),
        }
    }

    /// The device's stream for event records, made on first use.
    pub fn stream(&self) -> Result<&dyn DynStream> {
        if let Some(stream) = self.stream.get() {
            return Ok(&**stream);
        }
        let made = self.device.create_stream()?;
        Ok(&**self.stream.get_or_init(|| made))
    }
}

impl std::fmt::Debug for DeviceObj {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceObj")
            .field("backend", &self.backend.name())
            .field("ordinal", &self.device.info().ordinal)
            .finish_non_exhaustive()
    }
}

/// Open device `ordinal` of the backend called `name` (`None`: the best
/// usable one), in this process's registry ([`Registry::this_process`]: a
/// child forked from a process that used it gets its own).
pub fn open_device(name: Option<&str>, ordinal: u32) -> Result<DeviceObj> {
    let registry = Registry::this_process();
    let backend = match name {
        Some(name) => registry.open(name)?,
        None => registry.best()?,
    };
    let device = backend.open(ordinal)?;
    Ok(DeviceObj::from_parts(backend, device))
}

/// The device to import `handle` on: its backend, and its device found by
/// UUID where the backend numbers devices.
pub fn device_for(handle: &Handle) -> Result<DeviceObj> {
    let backend = Registry::this_process().for_handle(handle)?;
    let ordinal = backend.device_for(handle)?;
    let device = backend.open(ordinal)?;
    Ok(DeviceObj::from_parts(backend, device))
}

#[cfg(all(test, feature = "cpu-shm"))]
mod tests {
    use super::*;

    #[test]
    fn a_device_opens_by_name_and_keeps_one_stream() {
        let device = open_device(Some("cpu-shm"), 0).unwrap();
        assert_eq!(device.backend.name(), "cpu-shm");
        let first: *const dyn DynStream = device.stream().unwrap();
        let second: *const dyn DynStream = device.stream().unwrap();
        assert!(std::ptr::addr_eq(first, second));
        assert!(format!("{device:?}").contains("cpu-shm"));
    }

    #[test]
    fn an_unknown_name_is_not_found() {
        let err = open_device(Some("no-such-backend"), 0).unwrap_err();
        assert!(matches!(err, hal_core::Error::NotFound { .. }), "{err}");
    }
}
