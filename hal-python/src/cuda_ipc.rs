//! Raw CUDA IPC handles as PyTorch exchanges them: `hal.import_cuda_ipc`
//! opens one that `storage._share_cuda_()` gave, and
//! `hal.cuda_ipc_handle` gives one of hal CUDA memory for
//! `torch.UntypedStorage._new_shared_cuda`.
//!
//! PyTorch's handle is 66 bytes: a version byte (`0x02`) and a type byte
//! (`b'c'`, memory of `cudaMalloc`) before the driver's 64 bytes of the
//! allocation's base. The bare 64 bytes are taken too.

use std::sync::{Arc, LazyLock};

use hal::cuda::{CudaBackend, RawIpcHandle};
use hal::Backend;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{handle_error, OrRaise};
use crate::memory::Memory;
use crate::memory_obj::MemoryObj;
use hal::objects::{open_device, DeviceObj};

/// PyTorch's version byte of a CUDA IPC handle.
const TORCH_VERSION: u8 = 0x02;
/// PyTorch's type byte of memory from `cudaMalloc`.
const TORCH_CUDA_MALLOC: u8 = b'c';

/// The CUDA backend raw handles are opened on (the driver
/// `HAL_CUDA_LIBRARY` names, or the one the search finds).
static CUDA: LazyLock<CudaBackend> = LazyLock::new(CudaBackend::new);

/// The driver's 64 bytes of a handle in PyTorch's 66-byte form or bare.
pub(crate) fn driver_bytes(handle: &[u8]) -> Result<[u8; 64], hal::HandleError> {
    let bare = match handle.len() {
        66 if handle[0] == TORCH_VERSION && handle[1] == TORCH_CUDA_MALLOC => &handle[2..],
        66 => {
            return Err(hal::HandleError::Malformed {
                field: "PyTorch CUDA IPC handle",
                detail: format!(
                    "version byte {:#04x} and type byte {:#04x}: expected 0x02 and b'c' \
                     (memory of cudaMalloc; PyTorch's expandable segments are not legacy IPC)",
                    handle[0], handle[1]
                ),
            })
        }
        64 => handle,
        n => {
            return Err(hal::HandleError::Malformed {
                field: "CUDA IPC handle",
                detail: format!(
                    "{n} bytes: expected the driver's 64, or PyTorch's 66 (b'\\x02c' + 64)"
                ),
            })
        }
    };
    let mut out = [0u8; 64];
    out.copy_from_slice(bare);
    Ok(out)
}

/// Open a raw CUDA IPC handle another library made: `handle` is
/// `storage._share_cuda_()`'s 66 bytes (or the driver's bare 64), `offset`
/// and `size` the storage's range in bytes from the allocation's base, on
/// CUDA device `device`. The memory is opened once per process however
/// often it is imported; the range is checked against the allocation as
/// the driver opened it. The exporter must keep the memory alive until
/// this import is gone (no lease counts it).
#[pyfunction]
#[pyo3(signature = (handle, offset, size, device=0))]
pub(crate) fn import_cuda_ipc(
    py: Python<'_>,
    handle: &[u8],
    offset: u64,
    size: u64,
    device: u32,
) -> PyResult<Memory> {
    let raw = RawIpcHandle {
        bytes: driver_bytes(handle).map_err(handle_error)?,
        offset,
        size,
    };
    let (cuda, mapping) = py
        .allow_threads(|| -> hal::Result<_> {
            let cuda = CUDA.open(device)?;
            let mapping = cuda.import_raw(&raw)?;
            Ok((cuda, mapping))
        })
        .or_raise()?;
    let registered = open_device(Some("cuda"), device).or_raise()?;
    let device = Arc::new(DeviceObj::from_parts(registered.backend, Box::new(cuda)));
    Ok(Memory::new(MemoryObj::mapping(
        device,
        Box::new(mapping),
        None,
    )))
}

/// The raw CUDA IPC handle of hal CUDA memory this process allocated, as
/// `(handle, offset, size)`: `handle` in PyTorch's 66-byte form
/// (`b'\x02c'` + the driver's 64 bytes), `offset` and `size` in bytes,
/// what `torch.UntypedStorage._new_shared_cuda` takes for the storage.
/// The memory is exported to anyone (as `memory.export()`); importers that
/// open the raw handle are not counted, so keep the memory alive until
/// they closed it.
#[pyfunction]
pub(crate) fn cuda_ipc_handle<'py>(
    py: Python<'py>,
    memory: &Memory,
) -> PyResult<(Bound<'py, PyBytes>, u64, u64)> {
    let handle = memory
        .inner
        .export(&hal::ExportOptions {
            importers: hal::Importers::Anyone,
            ..Default::default()
        })
        .or_raise()?;
    let raw = RawIpcHandle::from_handle(&handle).or_raise()?;
    let mut torch = Vec::with_capacity(66);
    torch.extend_from_slice(&[TORCH_VERSION, TORCH_CUDA_MALLOC]);
    torch.extend_from_slice(&raw.bytes);
    Ok((PyBytes::new(py, &torch), raw.offset, raw.size))
}
