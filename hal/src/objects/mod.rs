//! The objects the language doors hand out (feature `objects`): what the C
//! library (`hal-ffi`) and the Python package (`hal-python`) both hold, in
//! one place, so that a device, a memory or a notify is the same object
//! whichever language holds it.
//!
//! - [`DeviceObj`]: a device opened by registry name ([`open_device`]) or
//!   found for a handle ([`device_for`]), with its backend and the stream
//!   events are recorded on;
//! - [`MemoryObj`]: memory this process allocated, adopted by address
//!   ([`Adopted`]) or imported ([`import_memory`]), with its exports kept
//!   as long as it lives and what the door adds to it;
//! - [`SyncObj`]: an event or a notify with its device and its exports
//!   ([`import_sync`], [`export_sync`]);
//! - [`KeptExports`] and [`KeptObject`]: exports kept as long as the object
//!   they export;
//! - [`SampleObj`]: a sample a subscriber received ([`SubscriberObj`], a
//!   [`SampleSource`]), read in place and held until it is released;
//! - [`GroupObj`]: a membership of a group on one host or across hosts
//!   (a [`Collective`]) with what it told at the join;
//! - `RemoteExportObj` (feature `ucx`): memory exported to other hosts,
//!   kept alive by its export;
//! - [`pids_importers`]: an export's pid list, checked as a handle holds it.
//!
//! A door keeps its own tokens or classes, errors and threads around these;
//! a Rust program speaks to the contract directly and does not need them.
//!
//! ```
//! # #[cfg(feature = "cpu-shm")] {
//! use hal::objects::{import_memory, open_device, MemoryObj};
//! use hal::{AllocDesc, ExportOptions, Memory};
//! use std::sync::Arc;
//!
//! let device = Arc::new(open_device(Some("cpu-shm"), 0)?);
//! let alloc = device.device.allocate(&AllocDesc::host(4096))?;
//! let memory: MemoryObj = MemoryObj::allocation(device, alloc);
//! memory.write(0, b"hello")?;
//! let handle = memory.export(&ExportOptions::default())?;
//! let imported: MemoryObj = import_memory(handle, Some("asked for read-only"))?;
//! assert!(imported.write(0, b"bye").is_err());
//! # }
//! # Ok::<(), hal::Error>(())
//! ```

mod adopted;
mod device;
mod group;
mod importers;
mod kept;
mod memory;
#[cfg(feature = "ucx")]
mod remote_export;
mod sample;
mod sync;

pub use adopted::Adopted;
pub use device::{device_for, open_device, DeviceObj};
pub use group::{Collective, GroupObj};
pub use importers::pids_importers;
pub use kept::{KeptExports, KeptObject};
pub use memory::{import_memory, Backing, MemoryObj};
#[cfg(feature = "ucx")]
pub use remote_export::RemoteExportObj;
pub use sample::{SampleObj, SampleSource, SubscriberObj};
pub use sync::{export_sync, import_sync, SyncObj};
