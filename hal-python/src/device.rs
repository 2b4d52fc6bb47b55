//! Backends and devices: `hal.backends()`, `hal.open()`, `Device`.

use std::sync::Arc;

use hal::objects::SyncObj;
use hal::{AllocDesc, Availability, Capabilities};
use pyo3::prelude::*;

use crate::channel::{Publisher, Subscriber};
use crate::errors::{invalid, OrRaise};
use crate::event::Event;
use crate::memory::Memory;
use crate::memory_obj::MemoryObj;
use crate::notify::Notify;
use hal::objects::{open_device, DeviceObj};

/// Every backend compiled into the module, in preference order, with
/// whether it is usable here: a list of `(name, available, reason)`,
/// `reason` saying why not (the vendor library missing, no device, ...) or
/// `""`.
#[pyfunction]
pub(crate) fn backends() -> Vec<(String, bool, String)> {
    hal::Registry::this_process()
        .entries()
        .into_iter()
        .map(|entry| match entry.availability {
            Availability::Available => (entry.name, true, String::new()),
            Availability::Unavailable { reason, .. } => (entry.name, false, reason),
        })
        .collect()
}

/// Open device `device` of the backend called `backend` (`"cpu-shm"`,
/// `"mock-cuda"`, `"mock-ascend"`, `"cuda"`, `"cuda-uvm"`, `"ascend"`;
/// None: the best usable one, hardware first). An unknown name is
/// `NotFoundError`; a backend unusable here is `UnavailableError` saying
/// why.
#[pyfunction]
#[pyo3(signature = (backend=None, device=0))]
pub(crate) fn open(py: Python<'_>, backend: Option<String>, device: u32) -> PyResult<Device> {
    let obj = py
        .allow_threads(|| open_device(backend.as_deref(), device))
        .or_raise()?;
    Ok(Device {
        inner: Arc::new(obj),
    })
}

/// An open device of a backend (`hal.open(...)`). Memory, notifies and
/// events made on it keep what they need of it alive.
#[pyclass(module = "hal", frozen)]
pub struct Device {
    pub(crate) inner: Arc<DeviceObj>,
}

/// The capability labels (those `halctl devices` lists).
fn capability_labels(caps: Capabilities) -> Vec<&'static str> {
    Capabilities::ALL
        .iter()
        .filter(|(flag, _)| caps.contains(*flag))
        .map(|(_, label)| *label)
        .collect()
}

#[pymethods]
impl Device {
    /// The registry name of the device's backend (`"cpu-shm"`, `"mock-cuda"`, ...).
    #[getter]
    fn backend(&self) -> String {
        self.inner.backend.name()
    }

    /// The device's ordinal on its backend.
    #[getter]
    fn ordinal(&self) -> u32 {
        self.inner.device.info().ordinal
    }

    /// The page size exports of this device's memory are whole multiples
    /// of (allocate sizes that are multiples of it to export them).
    #[getter]
    fn page_size(&self) -> u64 {
        self.inner.device.info().page_size()
    }

    /// The device's name as its vendor gives it.
    #[getter]
    fn name(&self) -> String {
        self.inner.device.info().name.clone()
    }

    /// The capabilities of the device, as labels: `"memory-is-host"`,
    /// `"pid-allow-list"`, `"ipc-event"`, `"ipc-notify"`,
    /// `"managed-memory"`, ...
    #[getter]
    fn capabilities(&self) -> Vec<&'static str> {
        capability_labels(self.inner.device.capabilities())
    }

    /// This process's id as the device's runtime knows it: what an exporter
    /// puts on its `importers` list for this process.
    fn process_id(&self) -> PyResult<u32> {
        self.inner.device.process_id().or_raise()
    }

    /// Allocate `size` bytes at `location`: `"device"`, `"host"` or
    /// `"managed"` (None: host memory where the device has it, else device
    /// memory).
    #[pyo3(signature = (size, location=None))]
    fn allocate(&self, py: Python<'_>, size: u64, location: Option<&str>) -> PyResult<Memory> {
        let info = self.inner.device.info();
        let desc = match location {
            Some("device") => AllocDesc::device(info.ordinal, size),
            Some("host") => AllocDesc::host(size),
            Some("managed") => AllocDesc::managed(size),
            None if info.capabilities.contains(Capabilities::MEMORY_IS_HOST) => {
                AllocDesc::host(size)
            }
            None => AllocDesc::device(info.ordinal, size),
            Some(other) => {
                return Err(invalid(format!(
                    "location {other:?}: use \"device\", \"host\" or \"managed\""
                )))
            }
        };
        let alloc = py
            .allow_threads(|| self.inner.device.allocate(&desc))
            .or_raise()?;
        Ok(Memory::new(
            MemoryObj::allocation(Arc::clone(&self.inner), alloc).with_size(size),
        ))
    }

    /// Create a notify on the device, to `export()` to the process that
    /// signals it. Some backends (Ascend) let only the creator wait: each
    /// side then creates the notify it waits on.
    fn notify(&self) -> PyResult<Notify> {
        let notify = self.inner.device.create_notify().or_raise()?;
        Ok(Notify::new(SyncObj::new(Arc::clone(&self.inner), notify)))
    }

    /// Create the channel `name` (this user's) on the device: `slots`
    /// slots of `slot_size` bytes, `mode` "broadcast" (every subscriber
    /// receives every sample) or "queue" (each sample goes to one);
    /// `publish` waits up to `timeout` seconds for a free slot.
    #[pyo3(signature = (name, slots=8, slot_size=65536, mode="broadcast", timeout=60.0))]
    fn publisher(
        &self,
        py: Python<'_>,
        name: &str,
        slots: usize,
        slot_size: u64,
        mode: &str,
        timeout: Option<f64>,
    ) -> PyResult<Publisher> {
        Publisher::create(
            py,
            Arc::clone(&self.inner),
            name,
            slots,
            slot_size,
            mode,
            timeout,
        )
    }

    /// Subscribe to the channel `name` (this user's), its slots imported
    /// onto this device.
    fn subscribe(&self, py: Python<'_>, name: &str) -> PyResult<Subscriber> {
        Subscriber::open(py, Arc::clone(&self.inner), name)
    }

    /// Create an interprocess event on the device, to `export()`.
    /// `UnsupportedError` where the backend does not share events.
    fn event(&self) -> PyResult<Event> {
        let event = self
            .inner
            .device
            .create_event(hal::EventFlags {
                interprocess: true,
                timing: false,
            })
            .or_raise()?;
        Ok(Event::new(SyncObj::new(Arc::clone(&self.inner), event)))
    }

    fn __repr__(&self) -> String {
        format!(
            "<hal.Device {} {} ({})>",
            self.backend(),
            self.ordinal(),
            self.name()
        )
    }
}
