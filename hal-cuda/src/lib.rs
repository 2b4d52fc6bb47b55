//! # hal-cuda: the CUDA driver behind the hal contract
//!
//! `libcuda.so.1` is loaded at run time with `libloading`, never linked: a
//! program built with this backend starts on a machine without the NVIDIA
//! driver, and [`CudaBackend::availability`](hal_core::Backend::availability)
//! says why the backend is unavailable, naming every path it searched. Set
//! [`LIBRARY_VAR`] (`HAL_CUDA_LIBRARY=/path/to/libcuda.so.1`) to load a
//! given library instead of searching.
//!
//! Layers, as in `cudarc`: a thin table of entry points ([`RESOLVED`]),
//! each resolved on first use by the versioned name of
//! [`hal_core::kit::vendor::cuda::entry`] (a missing one is
//! [`Error::Unsupported`](hal_core::Error::Unsupported) naming it); a typed
//! result layer whose functions make one call each and turn a `CUresult`
//! into a [`VendorError`](hal_core::VendorError) with the driver's number
//! and name (`cuGetErrorName`); and the backend on top. Handle types come
//! from `cudarc::driver::sys` (CUDA 12.8 headers); cudarc's own loader is
//! never used.
//!
//! The sources are laid out by role: `ffi/` (the library, its table and
//! the typed calls), `memory/` (allocations, IPC of memory, adoption,
//! managed memory, host registration), `sync/` (streams, events,
//! notifies, the quiet of calls that wait for the device), `vmm/`
//! (physical memory, reservations), and the backend, devices, contexts
//! and peer access at the top. Each rule of the driver this backend keeps,
//! with its measurement and the file that keeps it, is listed in
//! `RELIABILITY.md` ("hal-cuda: the vendor rules it keeps, and where").
#![deny(missing_docs)]
// `unsafe` only in the modules that say so (`#[allow(unsafe_code)]`).
#![deny(unsafe_code)]

mod backend;
#[cfg(feature = "baselines")]
pub mod baseline;
mod context;
#[allow(unsafe_code)]
mod device;
mod ffi;
mod memory;
mod needs;
mod peer;
mod sync;
mod vmm;

pub use backend::{CudaBackend, DLPACK};
pub use device::CudaDevice;
pub use ffi::loader::{LIBRARY_NAME, LIBRARY_VAR};
pub use ffi::sys::RESOLVED;
pub use memory::{CudaAllocation, CudaMapping, RawIpcHandle, RAW_HANDLE_LEN};
#[cfg(feature = "testing")]
pub use sync::event::{live_ipc_events, own_exported_events, set_ipc_event_cap};
pub use sync::{CudaEvent, CudaNotify, CudaStream, DEFAULT_IPC_EVENT_CAP};
pub use vmm::{CudaPhysical, CudaReservation};
