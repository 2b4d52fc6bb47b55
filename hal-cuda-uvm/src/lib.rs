//! # hal-cuda-uvm: managed memory shared across processes
//!
//! CUDA refuses to share managed memory between processes
//! (`cuIpcGetMemHandle` on `cuMemAllocManaged` memory answers
//! `CUDA_ERROR_INVALID_VALUE`, measured). This backend gives every process
//! of a group (PostgreSQL's backends and background workers, a pool of
//! data loaders) one buffer that its CPU and its GPU both reach at one
//! address, without a service process that owns all GPU work.
//!
//! Start with [`UvmBackend`] and its [`UvmDevice`]: host and managed
//! allocations are [`SharedManaged`] buffers (sealed memfd pages,
//! registered with the GPU), imports are [`UvmMapping`]s, and processes
//! without CUDA map them with [`open_on_cpu`]. Strategies and measured
//! costs: [`Strategy`]; stream order: [`UvmStream`]; a host-NUMA home:
//! [`NumaHome`]. The crate's README.md has the PostgreSQL guide, the limits
//! and the rules' places.
//!
//! Device copies of chunks shared through a residency table (`Residency`)
//! are an experimental protocol behind the non-default feature
//! `experimental-residency`: no call of the backend uses them yet, and
//! they have not run on a GPU (the crate's README.md says what would make
//! them part of the default build).
//!
//! ```
//! use hal_core::{AllocDesc, Backend, Device, ExportOptions, ImportOptions, MemRef, Memory};
//! use hal_cuda_uvm::UvmBackend;
//!
//! // UvmBackend::new() runs on the NVIDIA driver; here, the simulator.
//! let dev = UvmBackend::over(hal_mock::MockBackend::cuda()).open(0)?;
//! let buffer = dev.allocate(&AllocDesc::managed(1 << 20))?; // memfd pages, registered
//! let gpu_addr = buffer.shared().and_then(|s| s.device_addr()); // for your kernels
//! assert!(gpu_addr.is_some());
//! let exported = dev.export_memory(&buffer, &ExportOptions::default())?;
//! let text = exported.to_text(); // ~190 characters: argv, a file, a shared-memory slot
//!
//! // In a worker process (here the same one): map, register once, use.
//! let handle = hal_core::Handle::from_text(&text)?;
//! let view = dev.import_memory(handle.into(), &ImportOptions::default())?;
//! let stream = dev.create_stream()?;
//! dev.memset_async(&stream, MemRef::Mapping(&view), 0, 4096, 7)?;
//! dev.synchronize(&stream, None)?;
//! let mut first = [0u8; 1];
//! buffer.read(0, &mut first)?;
//! assert_eq!(first, [7]);
//! # Ok::<(), hal_core::Error>(())
//! ```
#![deny(missing_docs)]
// `unsafe` only in the modules that say so (`#[allow(unsafe_code)]`).
#![deny(unsafe_code)]

mod backend;
mod brand;
mod cpu;
#[allow(unsafe_code)]
mod device;
mod gpu;
#[cfg(feature = "experimental-residency")]
#[allow(unsafe_code)]
mod header;
#[allow(unsafe_code)]
mod home;
mod info;
mod memory;
mod numa;
#[allow(unsafe_code)]
pub mod registration;
#[cfg(feature = "experimental-residency")]
mod residency;
mod route;
mod step;
mod step_errors;
mod stream;

pub use backend::UvmBackend;
pub use cpu::open_on_cpu;
pub use device::{Strategy, UvmDevice};
pub use gpu::GpuDevice;
#[cfg(feature = "experimental-residency")]
pub use header::Slot;
pub use info::{GPU_CAPABILITIES, MEMORY_CAPABILITIES};
pub use memory::{SharedManaged, SharedView, UvmAllocation, UvmMapping};
pub use numa::NumaHome;
#[cfg(feature = "experimental-residency")]
pub use residency::Residency;
pub use stream::UvmStream;
