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
//! | `template` | the template backend (`examples/template-backend`): host memory, events and notifies written only with the kit, registered at run time as `template` the way a backend of another crate is ([`registry::register`]) | — |
//!
//! This crate re-exports the contract of `hal-core` that programs use (the
//! traits [`Backend`], [`Device`], [`Memory`], ..., the [`Handle`], the
//! [`Error`], the options of allocate, export and import; the modules
//! [`dynamic`], [`exchange`], [`group`], [`growable`], [`dlpack`], [`handle`],
//! [`vmm`] and [`wait`]) and adds the [`registry`], which lists the backends compiled in,
//! probes which are usable on this machine (and why not), opens one by name
//! or picks the best. What only a backend's author needs (sealed memfds,
//! the export layer, shared sync pages, the vendors' codes) is in
//! [`kit`]. With the feature `objects`, `hal::objects` holds the objects
//! the C library and the Python package hand out (a device opened by
//! name, memory with its exports kept, events and notifies, samples read
//! in place, group memberships): one layer under both languages.
//!
//! A program keeps what it exports: dropping an [`Exported`] unregisters it,
//! so `device.export_memory(..)?.to_text()` hands out a handle that no import
//! can use. The compiler says so for an export dropped unused:
//!
//! ```compile_fail
//! #![deny(unused_must_use)]
//! use hal::cpu_shm::CpuShm;
//! use hal::{AllocDesc, Backend, Device, ExportOptions};
//!
//! fn main() -> hal::Result<()> {
//!     let device = CpuShm::new().open(0)?;
//!     let buffer = device.allocate(&AllocDesc::host(4096))?;
//!     device.export_memory(&buffer, &ExportOptions::default())?; // error: unused `Exported`
//!     Ok(())
//! }
//! ```
//!
//! ## Two styles
//!
//! **Static**: name the backend type and call the traits ([`Backend`],
//! [`Device`], [`Memory`], ...) directly; no dynamic dispatch.
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
//! let desc = if device.info().capabilities.contains(Capabilities::MEMORY_IS_HOST) {
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
//! ```
//! use hal::{AllocDesc, Capabilities, ExportOptions, Handle, ImportOptions, Registry};
//! use hal::SharedHandle;
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
//!     // CPU shared memory, or the simulator in a build without it.
//!     let device = registry.best_of(&["cpu-shm", "mock"])?.open(0)?;
//!     let buffer = if device.info().capabilities.contains(Capabilities::MEMORY_IS_HOST) {
//!         device.allocate(&AllocDesc::host(4096))?
//!     } else {
//!         device.allocate(&AllocDesc::device(0, 4096))?
//!     };
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
//! This example runs as a test: the test's own program is the producer, and
//! it starts itself again, with the handle's text as its argument, as the
//! consumer.
//!
//! The numbered examples in `hal/examples/` (`cargo run -p hal-ipc --example
//! 01_share_buffer`, ... `06_shared_managed_workers`) each run a producer
//! and a consumer process: a buffer, an event, a notify ping-pong, a named
//! region, a buffer that grows after it was exported, and workers sharing
//! one managed buffer.
#![deny(missing_docs)]
// `unsafe` only in the modules that say so (`#[allow(unsafe_code)]`).
#![deny(unsafe_code)]
#![cfg(unix)]

// Every item of hal-core stays reachable at the path it always had here
// (`hal::kit::os`, `hal::kit::export`, ...), so code written against those paths keeps
// compiling; the documentation shows the program's part below and the
// backend author's part under `kit`.
#[doc(hidden)]
pub use hal_core::*;

#[doc(inline)]
pub use hal_core::{
    AccessGrant, AccessTarget, Allocation, Backend, Device, Error, Event, Exported, FdSource,
    FreeError, Handle, HandleError, HandleFlags, HandleKind, Mapping, MemRef, Memory, Notify,
    Physical, PhysicalDesc, PhysicalLocation, PidKind, Reservation, Result, ShareableHandle,
    SharedHandle, VendorError, Vmm, VmmExt, WaitFuture,
};

#[doc(inline)]
pub use hal_core::{
    Access, Advice, AllocDesc, Availability, BackendId, ByteRange, Capabilities, DeviceInfo,
    EventFlags, ExportOptions, Granularity, HugePages, ImportOptions, ImportPlacement, Importers,
    Location, NotifyFlags, NumaPolicy, Placement, WaitOptions,
};

#[doc(inline)]
pub use hal_core::{
    channel, dlpack, dynamic, exchange, group, growable, handle, lease, testing, vmm, wait,
};

/// The backend author's kit: what a backend crate builds on and a program
/// does not need (docs/adding-a-backend.md says how it fits together).
pub use hal_core::kit;

#[cfg(feature = "cpu-shm")]
pub mod cpu_shm {
    //! The CPU shared-memory backend (crate `hal-cpu-shm`; feature `cpu-shm`,
    //! on by default): sealed memfds, named POSIX regions, futex events and
    //! notifies. Start with [`CpuShm`].

    #[doc(inline)]
    pub use hal_cpu_shm::*;
}

#[cfg(feature = "cuda")]
pub mod cuda {
    //! The CUDA backend (crate `hal-cuda`; feature `cuda`): the NVIDIA driver,
    //! loaded at run time. Start with [`CudaBackend`].

    #[doc(inline)]
    pub use hal_cuda::*;
}

#[cfg(feature = "ascend")]
pub mod ascend {
    //! The Ascend backend (crate `hal-ascend`; feature `ascend`): the ACL
    //! runtime, loaded at run time. Start with [`AscendBackend`].

    #[doc(inline)]
    pub use hal_ascend::*;
}

#[cfg(feature = "mock")]
pub mod mock {
    //! The simulator (crate `hal-mock`; feature `mock`): CUDA-like and
    //! Ascend-like devices across real processes. Start with
    //! [`MockBackend::cuda`] or [`MockBackend::ascend`].

    #[doc(inline)]
    pub use hal_mock::*;
}

#[cfg(feature = "cuda-uvm")]
pub mod cuda_uvm {
    //! Managed memory shared across processes (crate `hal-cuda-uvm`; feature
    //! `cuda-uvm`). Start with [`UvmBackend`].

    #[doc(inline)]
    pub use hal_cuda_uvm::*;
}

#[cfg(feature = "ucx")]
pub mod remote {
    //! Across machines (crate `hal-ucx`; feature `ucx`): memory and
    //! notifies of any backend read, written and signalled from other hosts
    //! over UCX, loaded at run time. Start with [`Node`]; [`RemoteGroup`]
    //! gathers processes on many hosts at one address.

    #[doc(inline)]
    pub use hal_ucx::*;
}

#[cfg(feature = "objects")]
pub mod objects;
pub mod registry;
mod this_process;

pub use registry::{compiled_in, BackendEntry, Registry};

/// The README's examples, compiled and run as documentation tests so that
/// they stay true.
#[cfg(all(doctest, feature = "cpu-shm"))]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
