//! One open of an allocation another process exported.

use std::sync::Arc;

use hal_core::exchange::Lease;

use crate::context::Primary;
use crate::sys::CUdeviceptr;

/// One `cuIpcOpenMemHandle_v2` in this process, shared by the mappings of
/// every range of one exported allocation; closed when the last drops.
///
/// The process's lease on the exporter's allocation goes with it: one per
/// process and allocation, however many ranges are imported, given back
/// after the close (fields drop after `drop` runs).
pub(crate) struct Opened {
    pub(crate) primary: Arc<Primary>,
    pub(crate) base: CUdeviceptr,
    /// The allocation's size as the driver reports it after the open
    /// (`cuMemGetAddressRange_v2`); 0 for a bare open, which does not ask.
    pub(crate) size: u64,
    pub(crate) _lease: Option<Lease>,
}

impl Drop for Opened {
    fn drop(&mut self) {
        if self.primary.forked() {
            // A forked child: the context is the parent's; leave it be.
            return;
        }
        let driver = &self.primary.driver;
        let closed = self.primary.enter().and_then(|_ctx| {
            let f = driver.ipc_close_mem_handle()?;
            // SAFETY: `base` came from cuIpcOpenMemHandle_v2 and is closed
            // once, by its one owner.
            driver.check("cuIpcCloseMemHandle", unsafe { f(self.base) })
        });
        if let Err(e) = closed {
            log::warn!("closing imported CUDA memory at {:#x}: {e}", self.base);
        }
    }
}
