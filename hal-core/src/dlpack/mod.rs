//! Host-visible memory as a DLPack 1.x tensor.
//!
//! [`DlpackTensor::new`] (or its shorthand [`to_dlpack`]) describes any
//! [`Memory`] whose [`Memory::host_ptr`] is `Some` as a
//! [`DLManagedTensorVersioned`], the exchange structure of DLPack 1.x, that
//! array libraries (NumPy, PyTorch, JAX, CuPy, ...) import without a copy.
//! The tensor owns an [`Arc`] of the memory object: the mapping stays alive
//! until the consumer calls the tensor's deleter, even when every other
//! reference to the memory is gone.
//!
//! # Device types
//!
//! Each backend declares the DLPack device types of its memory in its
//! devices' [`DeviceInfo::dlpack`](crate::DeviceInfo::dlpack); [`dl_device`]
//! reads them for the memory's [`Location`]. The backends of this workspace
//! declare:
//!
//! | backend | location | device type | device id |
//! | --- | --- | --- | --- |
//! | cpu-shm | any | `kDLCPU` (1) | 0 |
//! | cuda, cuda-uvm | `Device(n)` | `kDLCUDA` (2) | n |
//! | cuda, cuda-uvm | `Host` (pinned) | `kDLCUDAHost` (3) | 0 |
//! | cuda, cuda-uvm | `Managed` | `kDLCUDAManaged` (13) | 0 |
//! | ascend | `Device(n)` | `kDLExtDev` (12) | n |
//! | ascend | `Host` | `kDLCPU` (1) | 0 |
//! | mock-cuda, mock-ascend | `Device(n)` | `kDLExtDev` (12) | n |
//! | mock-cuda, mock-ascend | `Host`, `Managed` | `kDLCPU` (1) | 0 |
//!
//! DLPack never added a type for shared CPU memory: shared host memory is
//! `kDLCPU`, with its lifetime tied to the mapping by the deleter.
//!
//! **Ascend.** The DLPack 1.0 and 1.1 headers have no Ascend device type.
//! PyTorch exchanges tensors of out-of-tree devices (its `PrivateUse1` path,
//! which `torch_npu` uses for NPUs) as `kDLExtDev`, so Ascend device memory
//! is `kDLExtDev` with the device ordinal as id. Upstream DLPack later
//! assigned `kDLAscend` (21, [`DLDeviceType::ASCEND`]); a consumer built
//! against a header that has it can be given it with
//! [`TensorSpec::with_device`]. Ascend host memory is plain host memory
//! (`kDLCPU`); Ascend has no managed memory.
//!
//! **The simulator.** Host and managed memory of the mock backends is
//! host-visible, so it is `kDLCPU`. Their device memory is no real device's:
//! it is `kDLExtDev` with the simulated ordinal and the simulator's device
//! address, so that no consumer takes it for CPU or CUDA memory (told
//! `kDLCUDA`, a consumer would hand the pointer to a GPU kernel).
//!
//! A location a backend declares no type for (managed memory of a
//! non-CUDA backend, device memory of CPU shared memory) is refused unless [`TensorSpec::with_device`]
//! names the device.
//!
//! The data pointer is [`Memory::host_ptr`] for `kDLCPU` and `kDLCUDAHost`,
//! and [`Memory::addr`] (the device's address of the memory) for the device
//! types. A tensor with no elements has a null data pointer, as the DLPack
//! header asks.
//!
//! # Why the ABI structures are defined here
//!
//! The `dlpark` crate (0.10) has the versioned structures, but it needs
//! Rust 1.88 while this workspace supports 1.85, and it brings its own error
//! framework (`snafu`) and `bitflags` into the contract crate. The ABI is
//! five small `#[repr(C)]` structures, defined here after the DLPack 1.x
//! header (`dlpack.h`) with tests of their size and field offsets.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use hal_core::dlpack::{to_dlpack, DLDataType};
//! use hal_core::Device;
//!
//! # fn demo<D: Device, M: hal_core::Memory + 'static>(device: &D, mem: Arc<M>) -> hal_core::Result<()> {
//! let tensor = to_dlpack(mem, device.info(), DLDataType::F32, &[256, 256])?;
//! assert_eq!(tensor.shape(), &[256, 256]);
//! // Hand the pointer to a consumer, which calls its deleter when done.
//! let raw = tensor.into_raw();
//! # let _ = raw;
//! # Ok(())
//! # }
//! ```
//!
//! [`Arc`]: std::sync::Arc
//! [`Location`]: crate::Location
//! [`Memory`]: crate::Memory
//! [`Memory::addr`]: crate::Memory::addr
//! [`Memory::host_ptr`]: crate::Memory::host_ptr

mod abi;
mod device;
mod handle;
mod spec;
#[allow(unsafe_code)]
mod tensor;

pub use abi::{
    DLDataType, DLDevice, DLDeviceType, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_MAJOR_VERSION,
    DLPACK_MINOR_VERSION,
};
pub use device::dl_device;
pub use handle::{
    TensorHandle, MAX_NDIM, MAX_TENSOR_ENCODED_LEN, MAX_TENSOR_TEXT_LEN, TENSOR_MAGIC,
    TENSOR_TEXT_PREFIX, TENSOR_VERSION,
};
pub use spec::TensorSpec;
pub use tensor::{to_dlpack, DlpackTensor};
