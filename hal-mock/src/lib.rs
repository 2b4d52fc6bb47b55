//! # hal-mock: a strict simulator of CUDA-like and Ascend-like devices
//!
//! `hal-mock` implements the [`hal_core`] contract without a GPU or an NPU,
//! and refuses what the real runtimes refuse: a simulator that accepts what
//! the hardware rejects teaches its users bugs. It is what the conformance
//! suite proves the contract against, and what programs test their sharing
//! code with in CI.
//!
//! Start with [`MockBackend`] ([`MockBackend::cuda`],
//! [`MockBackend::ascend`]) and its [`MockDevice`]s. A [`Profile`]
//! describes the devices (the two built in, visible devices as
//! `CUDA_VISIBLE_DEVICES` numbers them); [`MockBackend`] tells how the
//! simulator is built (memfds, stream threads, futex events, leases,
//! descriptor brokers); [`Vendor`] lists the rules enforced and where they
//! come from, with the vendors' error codes ([`codes`]). [`fault`] injects
//! failures and lost devices; [`older`] makes a stand-in library an older
//! runtime.
//!
//! ```
//! use hal_core::{AllocDesc, Backend, Device, ExportOptions, ImportOptions, Memory};
//! use hal_mock::MockBackend;
//!
//! let backend = MockBackend::cuda(); // or MockBackend::ascend()
//! let gpu = backend.open(0)?;
//! let buf = gpu.allocate(&AllocDesc::device(0, 8192))?;
//! assert_eq!(buf.host_ptr(), None); // device memory is not host-visible
//! buf.write(4096, b"hello")?;
//! let exported = gpu.export_memory(&buf, &ExportOptions::default())?;
//! // In another process: `Handle::from_text(&exported.to_text())` and import;
//! // the exporter's descriptor broker serves the memory's descriptors.
//! let mapping = gpu.import_memory(exported.share()?, &ImportOptions::default())?;
//! let mut out = [0u8; 5];
//! mapping.read(4096, &mut out)?;
//! assert_eq!(&out, b"hello");
//! # Ok::<(), hal_core::Error>(())
//! ```
#![deny(missing_docs)]
// `unsafe` only in the modules that say so (`#[allow(unsafe_code)]`).
#![deny(unsafe_code)]
#![cfg(target_os = "linux")]

mod backend;
mod backing;
pub mod bad_library;
pub mod codes;
pub mod context;
mod device;
pub mod fault;
mod memory;
pub mod older;
mod profile;
mod rules;
#[allow(unsafe_code)]
pub mod standin;
mod state;
#[allow(unsafe_code)]
mod stream;
mod sync;
mod vendor;
mod vmm;

pub use backend::MockBackend;
pub use device::MockDevice;
pub use memory::{DeviceMemory, MockAllocation, MockMapping};
pub use profile::{Profile, SubAllocation, DLPACK};
pub use stream::MockStream;
pub use sync::{MockEvent, MockNotify};
pub use vendor::Vendor;
pub use vmm::{MockPhysical, MockReservation};
