//! Legacy CUDA IPC in the raw form other libraries exchange: the driver's
//! 64 bytes of an allocation's base, with an offset and a size.
//!
//! PyTorch's CUDA tensor sharing (and code written after it) sends the
//! 64-byte `cudaIpcMemHandle_t` of the storage's base allocation, the
//! storage's offset in it and its size in bytes, and the receiver opens
//! the 64 bytes itself. [`RawIpcHandle`] is that triple.
//! [`CudaDevice::import_raw`](crate::CudaDevice::import_raw) opens one that
//! another library made, through the same per-process open cache as hal's
//! own imports, and checks the range against the allocation's size as the
//! driver reports it after the open. [`CudaDevice::export_raw`](crate::CudaDevice::export_raw)
//! hands one out for a library that opens it itself.
//!
//! What a raw handle cannot do: it names no exporter and carries no lease,
//! so its importers are not counted. The exporter must keep the allocation
//! alive until every other library has closed it (`cuIpcCloseMemHandle`);
//! freeing earlier is undefined behaviour in CUDA. Prefer hal's handles
//! between processes that both use hal.

use std::sync::Arc;

use hal_core::kit::vendor::raw_ipc;
use hal_core::{ByteRange, DeviceInfo, Error, ExportOptions, Importers, Result};

use crate::context::Primary;
use crate::ffi::result::mem;
use crate::memory::alloc::{own_base, own_raw, CudaAllocation};
use crate::memory::ipc::{self, CudaMapping, Key, Payload};
use hal_core::kit::os::lock::lock;

/// Bytes of [`RawIpcHandle::to_bytes`].
pub const RAW_HANDLE_LEN: usize = 64 + 8 + 8;

/// A legacy CUDA IPC handle as other libraries exchange it: the driver's
/// 64 bytes of the allocation's base, and the range as an offset from the
/// base and a size, in bytes.
///
/// ```
/// use hal_cuda::RawIpcHandle;
///
/// // What a PyTorch producer sends for a CUDA storage: the handle bytes,
/// // the storage's offset in its allocation, and its size.
/// let raw = RawIpcHandle { bytes: [7; 64], offset: 4096, size: 1 << 20 };
/// let wire = raw.to_bytes();
/// assert_eq!(RawIpcHandle::from_bytes(&wire)?, raw);
/// # Ok::<(), hal_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawIpcHandle {
    /// The driver's `CUipcMemHandle` (`cudaIpcMemHandle_t`) of the base.
    pub bytes: [u8; 64],
    /// Where the range starts, in bytes from the base.
    pub offset: u64,
    /// The range's length in bytes.
    pub size: u64,
}

impl RawIpcHandle {
    /// The 64 bytes, then the offset and the size as little-endian `u64`s.
    pub fn to_bytes(&self) -> [u8; RAW_HANDLE_LEN] {
        raw_ipc::encode(&self.bytes, self.offset, self.size)
    }

    /// The raw handle a hal CUDA memory handle carries (the `cuda`
    /// backend's export of legacy IPC memory): its 64 bytes, and its range
    /// as an offset from the allocation's base and a size. For a library
    /// that opens it itself (PyTorch's `_new_shared_cuda`); such importers
    /// are not counted by the export's leases.
    pub fn from_handle(handle: &hal_core::Handle) -> Result<RawIpcHandle> {
        if handle.backend != hal_core::BackendId::Cuda
            || handle.kind != hal_core::HandleKind::Memory
        {
            return Err(Error::invalid(format!(
                "a {:?} handle of backend {}: only CUDA memory handles carry a raw IPC handle",
                handle.kind,
                handle.backend.name()
            )));
        }
        let payload = Payload::decode(&handle.payload)?;
        Ok(RawIpcHandle {
            bytes: payload.ipc,
            offset: handle.offset,
            size: handle.size,
        })
    }

    /// Read what [`RawIpcHandle::to_bytes`] wrote.
    pub fn from_bytes(b: &[u8]) -> Result<RawIpcHandle> {
        let (bytes, offset, size) = raw_ipc::decode::<64>(b, "raw CUDA IPC handle")?;
        Ok(RawIpcHandle {
            bytes,
            offset,
            size,
        })
    }
}

/// The raw handle of `range` of `alloc` (the whole allocation by default).
pub(crate) fn export(
    primary: &Primary,
    alloc: &CudaAllocation,
    range: Option<ByteRange>,
) -> Result<RawIpcHandle> {
    ipc::exportable(alloc)?;
    let range = range.unwrap_or(ByteRange::new(0, alloc.len));
    range.check(alloc.len, 0)?;
    if range.len == 0 {
        return Err(Error::invalid("a raw CUDA IPC handle of zero bytes"));
    }
    let base = ipc::base_of(primary, alloc.ptr)?;
    // Made so that freeing the allocation forgets it (`alloc.rs`).
    alloc.exports(base.buffer_id, base.base)?;
    lock(own_raw()).insert(base.ipc, base.buffer_id);
    Ok(RawIpcHandle {
        bytes: base.ipc,
        offset: alloc.ptr - base.base + range.offset,
        size: range.len,
    })
}

/// Open a raw handle on this device.
pub(crate) fn import(
    primary: &Arc<Primary>,
    info: &DeviceInfo,
    raw: &RawIpcHandle,
) -> Result<CudaMapping> {
    if raw.size == 0 {
        return Err(Error::invalid("a raw CUDA IPC handle of zero bytes"));
    }
    // This process's own export reaches the original memory.
    let own_base = lock(own_raw()).get(&raw.bytes).and_then(|id| own_base(*id));
    let (base, base_size, open) = match own_base {
        Some(base) => {
            let size = {
                let _ctx = primary.enter()?;
                mem::address_range(&primary.driver, base)?.1
            };
            (base, size, None)
        }
        None => {
            let key = Key::Raw(raw.bytes, primary.device);
            let opened = ipc::open(primary, key, &raw.bytes, None)?;
            (opened.base, opened.size, Some(opened))
        }
    };
    // The range is checked against the allocation the driver opened, not
    // against what the sender claims.
    let end = raw.offset.checked_add(raw.size);
    if end.is_none_or(|e| e > base_size) {
        return Err(ipc::out_of_range(
            raw.offset,
            raw.size,
            base_size,
            " (as the driver opened it)",
        ));
    }
    let spec = ipc::memory_spec(info);
    let opts = ExportOptions {
        importers: Importers::Anyone,
        ..ExportOptions::default()
    };
    // A description of what was opened: a raw handle names no creator.
    let payload = Payload {
        ipc: raw.bytes,
        base_size,
        buffer_id: 0,
    };
    let handle = raw_ipc::opened(&spec, &opts, raw.offset, raw.size, payload.encode())?;
    Ok(CudaMapping {
        primary: Arc::clone(primary),
        handle,
        addr: base + raw.offset,
        len: raw.size,
        ordinal: info.ordinal,
        open,
        _peer: None,
        _lease: None,
    })
}
