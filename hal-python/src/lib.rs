//! # The Python package `hal` (the distribution `hal-ipc`)
//!
//! Python programs share memory, tensors, events and notifies between
//! processes through this extension module, on every backend compiled into
//! it (`cpu-shm`, `mock-cuda`, `mock-ascend`, `cuda`, `cuda-uvm`,
//! `ascend`), chosen by name at run time. It is built by maturin into an
//! abi3 wheel (CPython 3.11 and later) and imported as `hal`:
//!
//! ```text
//! pip install './hal-python[numpy]'    # the numpy extra: NumPy, for the views
//! ```
//!
//! ```python
//! import hal, numpy
//! shared = hal.share(numpy.arange(12.0).reshape(3, 4))
//! print(shared.text)                 # another process: hal.open_tensor(text)
//! # keep `shared` alive while others open the text: the export ends with it
//! ```
//!
//! The rules the module keeps:
//!
//! - every failure of hal raises `hal.Error` or one of its subclasses, one
//!   per error kind of the contract (`hal.PermissionDeniedError`,
//!   `hal.InvalidHandleError`, ...), with the vendor's `code` and `name`
//!   where a vendor runtime answered;
//! - blocking calls (waits, imports, copies) release the GIL;
//! - memory lent out (a `memoryview`, a DLPack tensor) keeps its memory
//!   mapped until the last borrower lets go;
//! - the type stubs are `hal.pyi` beside this crate's `Cargo.toml`.
#![cfg(unix)]
#![deny(missing_docs)]
// `unsafe` only in the modules that say so (`#![allow(unsafe_code)]` at their top).
#![deny(unsafe_code)]

mod buffer;
mod bytes;
mod capsule;
mod channel;
mod channel_end;
mod channel_view;
mod cuda_ipc;
mod device;
mod errors;
mod event;
mod foreign;
mod group;
mod importing;
mod live;
mod memory;
mod memory_obj;
mod notify;
mod options;
#[cfg(feature = "ucx")]
mod raw_buffer;
#[cfg(feature = "ucx")]
mod remote;
#[cfg(feature = "ucx")]
mod remote_export;
#[cfg(feature = "ucx")]
mod remote_group;
#[cfg(feature = "ucx")]
mod remote_memory;
#[cfg(feature = "ucx")]
mod remote_node;
#[cfg(feature = "ucx")]
mod remote_notify;
#[cfg(feature = "ucx")]
mod remote_offer;
#[cfg(feature = "ucx")]
mod remote_subscriber;
#[cfg(feature = "ucx")]
mod remote_wait;
mod sample;
mod share;
mod sync_obj;
mod tensor;
mod timeout;
mod trust;

use pyo3::prelude::*;

pub use channel::{Publisher, Subscriber};
pub use device::Device;
pub use event::Event;
pub use group::Group;
pub use memory::Memory;
pub use notify::Notify;
pub use share::Shared;
pub use tensor::Tensor;

/// Share memory, tensors, events and notifies between processes: CPU
/// shared memory, CUDA, CUDA managed memory and Ascend behind one contract.
#[pymodule]
#[pyo3(name = "hal")]
fn hal_python(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Device>()?;
    m.add_class::<Memory>()?;
    m.add_class::<Tensor>()?;
    m.add_class::<Shared>()?;
    m.add_class::<Notify>()?;
    m.add_class::<Event>()?;
    m.add_class::<Group>()?;
    m.add_class::<Publisher>()?;
    m.add_class::<Subscriber>()?;
    m.add_class::<channel_view::Loan>()?;
    m.add_class::<channel_view::Sample>()?;
    m.add_function(wrap_pyfunction!(device::backends, m)?)?;
    m.add_function(wrap_pyfunction!(device::open, m)?)?;
    m.add_function(wrap_pyfunction!(importing::import_handle, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::open_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(share::share, m)?)?;
    m.add_function(wrap_pyfunction!(trust::trust_exporter_uid, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_ipc::import_cuda_ipc, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_ipc::cuda_ipc_handle, m)?)?;
    errors::add_to(m)?;
    #[cfg(feature = "ucx")]
    remote::add_to(m)?;
    Ok(())
}
