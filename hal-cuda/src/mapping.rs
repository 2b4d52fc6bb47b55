//! [`CudaMapping`]: device memory of another process opened here with
//! legacy IPC (or, for this process's own export, the original memory),
//! reached with `cuMemcpyHtoD` / `DtoH`, never dereferenced.

use std::sync::Arc;

use hal_core::exchange::Lease;
use hal_core::{Handle, Location, Mapping, Memory, Result};

use crate::context::Primary;
use crate::opened::Opened;
use crate::sys::CUdeviceptr;

/// Device memory imported from an export (`Device::import_memory`).
///
/// Imports of one allocation in one process share one
/// `cuIpcOpenMemHandle_v2`; the last mapping to drop closes it
/// (`cuIpcCloseMemHandle`, with the context pushed) and then gives its
/// lease back, so the exporter counts this process until its memory is no
/// longer mapped here.
#[must_use = "the import is closed and its lease released when this value drops"]
pub struct CudaMapping {
    pub(crate) primary: Arc<Primary>,
    pub(crate) handle: Handle,
    /// The first byte of the imported range.
    pub(crate) addr: CUdeviceptr,
    pub(crate) len: u64,
    pub(crate) ordinal: u32,
    /// The shared open; `None` for this process's own export, which is
    /// the original memory.
    pub(crate) open: Option<Arc<Opened>>,
    /// For this process's own memory of another device: that device's
    /// primary context, retained while peer access to it is used.
    pub(crate) _peer: Option<Arc<Primary>>,
    /// Declared after `open`: fields drop in order, so the lease goes
    /// back only once the memory is closed.
    pub(crate) _lease: Option<Lease>,
}

// SAFETY: the mapping is a driver address range; it is only passed to the
// driver, with bounds checks.
unsafe impl Send for CudaMapping {}
// SAFETY: see `Send`.
unsafe impl Sync for CudaMapping {}

impl std::fmt::Debug for CudaMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaMapping")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("device", &self.ordinal)
            .field("same_process", &self.open.is_none())
            .finish()
    }
}

impl Memory for CudaMapping {
    fn addr(&self) -> u64 {
        self.addr
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn location(&self) -> Location {
        Location::Device(self.ordinal)
    }

    fn host_ptr(&self) -> Option<*mut u8> {
        None
    }

    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        crate::memory::copy_out(&self.primary, self.addr, self.len, offset, dst)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        crate::memory::copy_in(&self.primary, self.addr, self.len, offset, src)
    }
}

impl Mapping for CudaMapping {
    fn handle(&self) -> &Handle {
        &self.handle
    }
}
