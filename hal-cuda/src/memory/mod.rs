//! Memory: allocations through the driver and their exports (`alloc.rs`),
//! memory of other libraries adopted by address (`adopt.rs`), legacy IPC
//! of device memory and its imports (`ipc.rs`, `raw.rs`), managed memory
//! (`managed.rs`), and host memory the device reaches: registration and
//! host-to-host copies (`host.rs`, `registration.rs`).

pub(crate) mod adopt;
pub(crate) mod alloc;
#[allow(unsafe_code)]
pub(crate) mod host;
pub(crate) mod ipc;
pub(crate) mod managed;
pub(crate) mod raw;
pub(crate) mod registration;

pub use alloc::CudaAllocation;
pub use ipc::CudaMapping;
pub use raw::{RawIpcHandle, RAW_HANDLE_LEN};
