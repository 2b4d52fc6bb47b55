//! Bare driver calls that benchmarks measure hal against in the same run
//! (`halctl bench --backend cuda`): the floor, with none of hal's work.

use crate::device::CudaDevice;
use crate::opened::Opened;
use crate::raw::RawIpcHandle;
use hal_core::Result;

/// One bare `cuIpcOpenMemHandle_v2` (no cache, no lease, no checks),
/// closed with `cuIpcCloseMemHandle` when dropped.
pub struct BareOpen(Opened);

impl BareOpen {
    /// The device pointer the driver gave (the allocation's base).
    pub fn base(&self) -> u64 {
        self.0.base
    }
}

impl std::fmt::Debug for BareOpen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BareOpen")
            .field("base", &format_args!("{:#x}", self.0.base))
            .finish()
    }
}

impl CudaDevice {
    /// Open `raw`'s 64 bytes with nothing but the driver call, this
    /// device's context pushed around it: what an import of an IPC handle
    /// already in hand costs at the least. For benchmarks; programs use
    /// [`CudaDevice::import_raw`] or `import_memory`.
    pub fn bare_ipc_open(&self, raw: &RawIpcHandle) -> Result<BareOpen> {
        crate::ipc::open_bare(&self.primary, &raw.bytes).map(BareOpen)
    }
}
