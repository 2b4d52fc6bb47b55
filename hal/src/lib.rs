//! # hal: share memory, events and notifications between processes
//!
//! One contract for CPU shared memory, CUDA device memory, CUDA managed memory
//! and Ascend NPU memory. Write the sharing code once; turn backends on with
//! Cargo features:
//!
//! | feature | backend | module |
//! |---|---|---|
//! | `cpu-shm` (default) | CPU shared memory: sealed memfd, named regions, futex events and notifies | `hal::cpu_shm` |
//! | `mock` | the simulator: CUDA-like (`mock-cuda`) and Ascend-like (`mock-ascend`) devices, memfd-backed so sharing works across real processes | `hal::mock` |
//! | `cuda` | CUDA device memory, events and notifies on the NVIDIA driver, loaded at run time | `hal::cuda` |
//! | `cuda-uvm` | CUDA managed memory shared across processes: memfd host pages registered with the GPU in every process, device copies on demand (implies `cuda`) | `hal::cuda_uvm` |
//! | `ascend` | Ascend NPU memory keys, IPC events and notifies on the ACL runtime, loaded at run time (`HAL_ASCEND_LIBRARY`) | `hal::ascend` |
//!
//! This crate re-exports the whole contract of `hal-core` ([`Backend`],
//! [`Device`], [`Memory`], [`Handle`], [`Error`], ...) and adds the
//! [`registry`], which lists the backends compiled in, probes which are
//! usable on this machine (and why not), opens one by name or picks the best.
//!
//! ## Two styles
//!
//! **Static**: name the backend type and call the traits of [`device`]
//! directly; no dynamic dispatch.
//!
//! ```
//! # #[cfg(feature = "cpu-shm")] {
//! use hal::cpu_shm::CpuShm;
//! use hal::{AllocDesc, Backend, Device, Memory};
//!
//! let device = CpuShm::new().open(0)?;
//! let buffer = device.allocate(&AllocDesc::host(4096))?;
//! buffer.write(0, b"hello")?;
//! # }
//! # Ok::<(), hal::Error>(())
//! ```
//!
//! **Dynamic**: choose the backend at run time through the [`Registry`] and
//! speak the object-safe mirror of the traits in [`dynamic`]. Resources come
//! boxed; pass them back to the device as `&*resource`.
//!
//! ```
//! use hal::dynamic::DynBackend;
//! use hal::{AllocDesc, Capabilities, Registry};
//!
//! let backend = Registry::new().best()?; // or .open("cpu-shm"), .open("mock")
//! let device = backend.open(0)?;
//! let desc = if device.info().capabilities.contains(Capabilities::HOST_VISIBLE) {
//!     AllocDesc::host(4096)
//! } else {
//!     AllocDesc::device(device.info().ordinal, 4096)
//! };
//! let buffer = device.allocate(&desc)?;
//! buffer.write(0, b"hello")?;
//! # Ok::<(), hal::Error>(())
//! ```
//!
//! ## Sharing a buffer between two processes
//!
//! The exporter turns an allocation into a [`Handle`]; its text form is all
//! another process needs (the file descriptors are served by the exporter's
//! descriptor broker to the processes the export allows). The importer finds
//! the backend from the handle itself.
//!
//! ```no_run
//! use hal::dynamic::DynBackend;
//! use hal::{AllocDesc, ExportOptions, Handle, ImportOptions, Registry, SharedHandle};
//! use std::process::Command;
//!
//! fn main() -> hal::Result<()> {
//!     let registry = Registry::new();
//!     if let Some(text) = std::env::args().nth(1) {
//!         // The consumer: import and read.
//!         let handle = Handle::from_text(&text)?;
//!         let device = registry.for_handle(&handle)?.open(0)?;
//!         let mapping = device.import_memory(SharedHandle::from(handle), &ImportOptions::default())?;
//!         let mut bytes = [0u8; 5];
//!         mapping.read(0, &mut bytes)?;
//!         assert_eq!(&bytes, b"hello");
//!         return Ok(());
//!     }
//!     // The producer: allocate, fill, export, start the consumer.
//!     let device = registry.open("cpu-shm")?.open(0)?;
//!     let buffer = device.allocate(&AllocDesc::host(4096))?;
//!     buffer.write(0, b"hello")?;
//!     let exported = device.export_memory(&*buffer, &ExportOptions::default())?;
//!     let exe = std::env::current_exe().map_err(|e| hal::Error::io("current_exe", e))?;
//!     let status = Command::new(exe)
//!         .arg(exported.to_text())
//!         .status()
//!         .map_err(|e| hal::Error::io("starting the consumer", e))?;
//!     assert!(status.success());
//!     Ok(())
//! }
//! ```
//!
//! The numbered examples in `hal/examples/` (`cargo run -p hal --example
//! 01_share_buffer`, ... `05_growable`) each run a producer and a consumer
//! process: a buffer, an event, a notify ping-pong, a named region, and a
//! buffer that grows after it was exported.
#![deny(missing_docs)]
#![cfg(unix)]

pub use hal_core::*;

/// The CPU shared-memory backend (feature `cpu-shm`, on by default).
#[cfg(feature = "cpu-shm")]
pub use hal_cpu_shm as cpu_shm;

/// The CUDA backend (feature `cuda`).
#[cfg(feature = "cuda")]
pub use hal_cuda as cuda;

/// The Ascend backend (feature `ascend`).
#[cfg(feature = "ascend")]
pub use hal_ascend as ascend;

/// The simulator backend (feature `mock`).
#[cfg(feature = "mock")]
pub use hal_mock as mock;

/// Managed memory shared across processes (feature `cuda-uvm`).
#[cfg(feature = "cuda-uvm")]
pub use hal_cuda_uvm as cuda_uvm;

pub mod registry;

pub use registry::{compiled_in, BackendEntry, Registry};

/// The README's examples, compiled and run as documentation tests so that
/// they stay true.
#[cfg(all(doctest, feature = "cpu-shm"))]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
