//! The registry of backends, and a device with the backend it belongs to:
//! what every object made on a device keeps alive.

use std::sync::{Arc, Mutex};

use hal::dynamic::{DynBackend, DynDevice};
use hal::{Handle, Registry};

/// This process's registry ([`Registry::this_process`]): a child forked
/// from a process that used it (multiprocessing's fork start method) gets
/// its own at its first call, where its parent's objects answer
/// `ForkedError`.
pub(crate) fn registry() -> Arc<Registry> {
    Registry::this_process()
}

/// A device and the backend it belongs to.
pub(crate) struct DeviceObj {
    pub device: Box<dyn DynDevice>,
    pub backend: Box<dyn DynBackend>,
    /// The stream events are recorded on, made on first use.
    stream: Mutex<Option<Arc<dyn hal::dynamic::DynStream>>>,
}

impl DeviceObj {
    pub(crate) fn from_parts(backend: Box<dyn DynBackend>, device: Box<dyn DynDevice>) -> Self {
        DeviceObj {
            device,
            backend,
            stream: Mutex::new(None),
        }
    }

    /// The device's stream for event records, made on first use.
    pub(crate) fn stream(&self) -> hal::Result<Arc<dyn hal::dynamic::DynStream>> {
        let mut held = self.stream.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(stream) = &*held {
            return Ok(Arc::clone(stream));
        }
        let made: Arc<dyn hal::dynamic::DynStream> = Arc::from(self.device.create_stream()?);
        *held = Some(Arc::clone(&made));
        Ok(made)
    }
}

/// Open device `ordinal` of the backend called `name` (`None`: the best).
pub(crate) fn open_device(name: Option<&str>, ordinal: u32) -> hal::Result<DeviceObj> {
    let backend = match name {
        Some(name) => registry().open(name)?,
        None => registry().best()?,
    };
    let device = backend.open(ordinal)?;
    Ok(DeviceObj::from_parts(backend, device))
}

/// The device to import `handle` on: its backend, and its device found by
/// UUID where the backend numbers devices.
pub(crate) fn device_for(handle: &Handle) -> hal::Result<DeviceObj> {
    let backend = registry().for_handle(handle)?;
    let ordinal = backend.device_for(handle)?;
    let device = backend.open(ordinal)?;
    Ok(DeviceObj::from_parts(backend, device))
}
