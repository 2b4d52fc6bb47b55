//! # hal-cuda-uvm: managed memory shared across processes
//!
//! CUDA refuses to share managed memory between processes
//! (`cuIpcGetMemHandle` on `cuMemAllocManaged` memory answers
//! `CUDA_ERROR_INVALID_VALUE`, measured). This backend gives every process
//! of a group (PostgreSQL's backends and background workers, a pool of
//! data loaders) one buffer that its CPU and its GPU both reach at one
//! address, without a service process that owns all GPU work.
//!
//! DOCS
#![deny(missing_docs)]

mod backend;
mod brand;
mod cpu;
mod device;
mod gpu;
mod header;
mod home;
mod info;
mod memory;
pub mod registration;
mod residency;
mod route;
mod step;

pub use backend::UvmBackend;
pub use cpu::open_on_cpu;
pub use device::{Strategy, UvmDevice};
pub use gpu::GpuDevice;
pub use header::Slot;
pub use info::{GPU_CAPABILITIES, MEMORY_CAPABILITIES};
pub use memory::{SharedManaged, SharedView, UvmAllocation, UvmMapping};
pub use residency::Residency;
