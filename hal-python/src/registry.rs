//! The registry of backends, and a device with the backend it belongs to:
//! what every object made on a device keeps alive.

use std::sync::{Arc, LazyLock, Mutex};

use hal::dynamic::{DynBackend, DynDevice};
use hal::{Handle, Registry};

/// The backends compiled in, probed once per process.
pub(crate) static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::new);

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
        Some(name) => REGISTRY.open(name)?,
        None => REGISTRY.best()?,
    };
    let device = backend.open(ordinal)?;
    Ok(DeviceObj::from_parts(backend, device))
}

/// The device to import `handle` on: its backend, and its device found by
/// UUID where the backend numbers devices.
pub(crate) fn device_for(handle: &Handle) -> hal::Result<DeviceObj> {
    let backend = REGISTRY.for_handle(handle)?;
    let ordinal = backend.device_for(handle)?;
    let device = backend.open(ordinal)?;
    Ok(DeviceObj::from_parts(backend, device))
}
