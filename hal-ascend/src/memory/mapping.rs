//! [`AscendMapping`]: device memory of another process opened here by key
//! (or, for this process's own export, the original memory), reached with
//! `aclrtMemcpy`, never dereferenced.

use std::sync::Arc;

use hal_core::exchange::Lease;
use hal_core::{Error, Handle, Location, Mapping, Memory, Result};

use crate::context::Ctx;
use crate::ffi::result::ipc;
use crate::memory::copy::{copy_in, copy_out};

/// Device memory imported from an export (`Device::import_memory`).
///
/// Dropping it closes the key (`aclrtIpcMemClose`, with the device
/// current) and then gives its lease back: the exporter frees only after.
#[must_use = "the import is closed and its lease released when this value drops"]
pub struct AscendMapping {
    pub(crate) ctx: Arc<Ctx>,
    pub(crate) handle: Handle,
    /// The first byte of the imported range.
    pub(crate) addr: u64,
    /// The key opened here; `None` for this process's own export.
    pub(crate) key: Option<std::ffi::CString>,
    /// Imported onto another device: asynchronous device-to-device copies only.
    pub(crate) copies_only: bool,
    /// Declared last: fields drop in order, so the lease goes back only
    /// once the key is closed (`Drop` closes it first).
    pub(crate) _lease: Option<Lease>,
}

impl std::fmt::Debug for AscendMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AscendMapping")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.handle.size)
            .field("device", &self.ctx.ordinal)
            .field("copies_only", &self.copies_only)
            .finish()
    }
}

impl Drop for AscendMapping {
    fn drop(&mut self) {
        let Some(k) = &self.key else { return };
        // The key this mapping opened, closed once.
        let closed = self.ctx.call(|| ipc::close(&self.ctx.rt, k));
        if let Err(e) = closed {
            log::warn!("closing imported Ascend memory at {:#x}: {e}", self.addr);
        }
    }
}

impl AscendMapping {
    /// True when the mapping takes only asynchronous device-to-device
    /// copies ([`Device::copy_async`](hal_core::Device::copy_async) between
    /// device memory): memory imported onto another device than its own.
    /// Host reads and writes, host writes on a stream and memsets are then
    /// refused with [`Error::Unsupported`](hal_core::Error::Unsupported).
    pub fn device_copies_only(&self) -> bool {
        self.copies_only
    }

    fn host_copy(&self, what: &str) -> Result<()> {
        if self.copies_only {
            return Err(Error::unsupported(
                hal_core::BackendId::Ascend,
                what,
                "memory imported onto another device takes only asynchronous device-to-device \
                 copies (Device::copy_async)",
            ));
        }
        Ok(())
    }
}

impl Memory for AscendMapping {
    fn addr(&self) -> u64 {
        self.addr
    }

    fn len(&self) -> u64 {
        self.handle.size
    }

    fn location(&self) -> Location {
        Location::Device(self.ctx.ordinal)
    }

    fn host_ptr(&self) -> Option<*mut u8> {
        None
    }

    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.host_copy("read")?;
        copy_out(&self.ctx, self.addr, self.handle.size, offset, dst)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.host_copy("write")?;
        copy_in(&self.ctx, self.addr, self.handle.size, offset, src)
    }
}

impl Mapping for AscendMapping {
    fn handle(&self) -> &Handle {
        &self.handle
    }
}
