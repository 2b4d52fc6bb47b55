//! # The template backend
//!
//! The smallest complete hal backend, and the one to copy when starting a
//! vendor's: host memory in sealed memfds shared across processes, events
//! and notifies on a shared page, host-synchronous streams and no VMM,
//! written only with what [`hal_core`] offers a crate outside hal's
//! workspace (its kit). docs/adding-a-backend.md walks through it.
//!
//! | file | what |
//! |---|---|
//! | `lib.rs` | this page |
//! | `id.rs` | the backend's id and name |
//! | `backend.rs` | `impl Backend`: availability, devices |
//! | `info.rs` | the device's `DeviceInfo` and capabilities |
//! | `device.rs` | `impl Device` (streams by `host_stream_methods!`), `impl Vmm` by `no_vmm!` |
//! | `memory.rs` | allocations, their export with leases, imports |
//! | `sync.rs` | events and notifies on `kit::syncpage` |
//! | `errors.rs` | the backend's own error codes, as a vendor's would be |
//!
//! Its id is external ([`ID`], one of `0x8000..=0xFFFF`), so hal's
//! registry knows it only once it is registered at run time under its name
//! ([`NAME`]): the `hal` crate does so when its `template` feature is on
//! (`hal::registry::register`), which is how `halctl`, the C library and the
//! Python package open it by name.
//!
//! ```
//! use hal_core::{Backend, Device, DeviceExt, Notify, WaitOptions};
//! use hal_template_backend::TemplateBackend;
//!
//! let device = TemplateBackend::new().open(0)?;
//! let notify = device.create_notify()?;
//! notify.signal()?;
//! notify.wait(WaitOptions::default())?;
//! # Ok::<(), hal_core::Error>(())
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod backend;
mod device;
pub mod errors;
mod id;
mod info;
mod memory;
mod sync;

pub use backend::TemplateBackend;
pub use device::TemplateDevice;
pub use id::{BACKEND_ID, ID, NAME};
pub use memory::{TemplateAllocation, TemplateMapping};
pub use sync::{TemplateEvent, TemplateNotify};
