//! Memory keys in the raw form other libraries exchange: the runtime's
//! 65-byte key, with an offset and a size.
//!
//! A torch_npu-style peer shares NPU memory by sending the key
//! `aclrtIpcMemGetExportKey` wrote for an allocation (its characters and
//! the NUL, 65 bytes), where the tensor starts in the exported range and
//! its size in bytes; the receiver opens the key itself
//! (`aclrtIpcMemImportByKey`) and adds the offset. [`RawIpcKey`] is that
//! triple, as hal-cuda's `RawIpcHandle` is for CUDA.
//! [`AscendDevice::import_raw`](crate::AscendDevice::import_raw) opens one
//! that another library made and checks the range against the memory the
//! runtime opened (`aclrtMemGetAddressRange`);
//! [`AscendDevice::export_raw`](crate::AscendDevice::export_raw) hands one
//! out for a library that opens it itself.
//!
//! The key keeps the runtime's pid allow-list: exported for
//! [`Importers::Pids`] it admits those bare tgids only, for
//! [`Importers::Anyone`] it passes `DISABLE_PID_VALIDATION`. What a raw key
//! cannot do: it names no exporter and no device, and carries no lease, so
//! its importers are not counted. The exporter keeps the allocation alive
//! until every importer closed the key (`aclrtIpcMemClose`): the runtime's
//! documented close order. Prefer hal's handles between processes that
//! both use hal.

use std::ffi::{CStr, CString};
use std::sync::Arc;

use hal_core::kit::export::HandleSpec;
use hal_core::kit::vendor::raw_ipc;
use hal_core::{
    BackendId, ByteRange, DeviceInfo, Error, ExportOptions, HandleError, HandleKind, ImportOptions,
    Importers, Location, Result,
};

use crate::context::Ctx;
use crate::ffi::bindings::{
    ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT, ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS,
};
use crate::ffi::result::{ipc, mem};
use crate::memory::alloc::AscendAllocation;
use crate::memory::ipc::{from_payload, KEY_LEN};
use crate::memory::keys::exported_range;
use crate::memory::mapping::AscendMapping;

/// Bytes of [`RawIpcKey::to_bytes`].
pub const RAW_KEY_LEN: usize = KEY_LEN + 8 + 8;

/// An Ascend memory key as other libraries exchange it: the runtime's 65
/// key bytes (the characters and their NUL), and the range as an offset
/// from the start of the memory the key names and a size, in bytes.
///
/// ```
/// use hal_ascend::RawIpcKey;
///
/// // What a torch_npu-style producer sends for an NPU storage: the key of
/// // its block, the storage's offset in the block, and its size.
/// let mut key = [0u8; 65];
/// key[..4].copy_from_slice(b"k3y5");
/// let raw = RawIpcKey { key, offset: 4096, size: 1 << 20 };
/// let wire = raw.to_bytes();
/// assert_eq!(RawIpcKey::from_bytes(&wire)?, raw);
/// assert_eq!(raw.key_str()?, "k3y5");
/// # Ok::<(), hal_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawIpcKey {
    /// The key `aclrtIpcMemGetExportKey` wrote: up to 64 characters and a
    /// NUL, in 65 bytes.
    pub key: [u8; KEY_LEN],
    /// Where the range starts, in bytes from the start of the memory the
    /// key names.
    pub offset: u64,
    /// The range's length in bytes.
    pub size: u64,
}

impl RawIpcKey {
    /// The 65 key bytes, then the offset and the size as little-endian
    /// `u64`s.
    pub fn to_bytes(&self) -> [u8; RAW_KEY_LEN] {
        raw_ipc::encode(&self.key, self.offset, self.size)
    }

    /// Read what [`RawIpcKey::to_bytes`] wrote.
    pub fn from_bytes(b: &[u8]) -> Result<RawIpcKey> {
        let (key, offset, size) = raw_ipc::decode::<KEY_LEN>(b, "raw Ascend IPC key")?;
        Ok(RawIpcKey { key, offset, size })
    }

    /// The key's characters (before the NUL), as the runtime takes them;
    /// an error for bytes without a NUL or an empty key.
    pub fn key_str(&self) -> Result<&str> {
        let k = CStr::from_bytes_until_nul(&self.key)
            .ok()
            .and_then(|k| k.to_str().ok())
            .filter(|k| !k.is_empty());
        k.ok_or_else(|| {
            HandleError::Malformed {
                field: "raw Ascend IPC key",
                detail: "the key is not printable characters ended by a NUL".into(),
            }
            .into()
        })
    }
}

/// The raw key of `range` of `alloc` (the whole allocation by default):
/// the key names the whole allocation, the range is its offset and size.
pub(crate) fn export(
    ctx: &Ctx,
    alloc: &AscendAllocation,
    range: Option<ByteRange>,
    importers: &Importers,
) -> Result<RawIpcKey> {
    let range = range.unwrap_or(ByteRange::new(0, alloc.len));
    range.check(alloc.len, 0)?;
    if range.len == 0 {
        return Err(Error::invalid("a raw Ascend IPC key of zero bytes"));
    }
    let (_, payload) =
        crate::memory::ipc::export_key(ctx, alloc, ByteRange::new(0, alloc.len), importers)?;
    let mut key = [0u8; KEY_LEN];
    key.copy_from_slice(&payload);
    Ok(RawIpcKey {
        key,
        offset: range.offset,
        size: range.len,
    })
}

/// Open a raw key on this device. With `opts.peer_access` the key is taken
/// to name memory of another device: the import passes
/// `ENABLE_PEER_ACCESS`, and the mapping takes only device-to-device copies.
pub(crate) fn import(
    ctx: &Arc<Ctx>,
    info: &DeviceInfo,
    raw: &RawIpcKey,
    opts: &ImportOptions,
) -> Result<AscendMapping> {
    if raw.size == 0 {
        return Err(Error::invalid("a raw Ascend IPC key of zero bytes"));
    }
    let k = from_payload(&raw.key)?;
    if opts.peer_access {
        crate::peer::require(&ctx.rt, info, "import_raw onto another device")?;
    }
    // This process's own export reaches the original memory.
    let (base, len, opened) = match exported_range(k.as_bytes()) {
        Some((addr, len)) => (addr, len, None),
        None => {
            let flags = if opts.peer_access {
                ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS
            } else {
                ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT
            };
            let base = ctx.call(|| ipc::import_by_key(&ctx.rt, &k, flags))?;
            // Closed again if the range does not fit.
            let opened = Opened {
                ctx,
                key: Some(k.clone()),
            };
            let len = opened_size(ctx, base)?;
            (base, len, Some(opened))
        }
    };
    // The range is checked against the memory the runtime opened, not
    // against what the sender claims.
    if raw.offset.checked_add(raw.size).is_none_or(|end| end > len) {
        return Err(Error::invalid(format!(
            "the raw key's range {:#x}+{:#x} is outside the {len:#x} bytes the key names: \
             send the offset and size within the exported memory",
            raw.offset, raw.size
        )));
    }
    let spec = HandleSpec {
        kind: HandleKind::Memory,
        backend: BackendId::Ascend,
        device: info.ordinal,
        device_uuid: info.uuid,
        location: Location::Device(info.ordinal),
        default_allow_list: false,
    };
    // A description of what was opened: a raw key names no creator, and
    // (no default allow-list) no allow-list of hal's.
    let described = ExportOptions::default();
    let payload = raw.key.to_vec();
    let handle = raw_ipc::opened(&spec, &described, raw.offset, raw.size, payload)?;
    let key = opened.and_then(|mut o| o.key.take());
    Ok(AscendMapping {
        ctx: Arc::clone(ctx),
        handle,
        addr: base + raw.offset,
        key,
        copies_only: opts.peer_access,
        _lease: None,
    })
}

/// The size of the memory the runtime opened at `base`
/// (`aclrtMemGetAddressRange`).
fn opened_size(ctx: &Ctx, base: u64) -> Result<u64> {
    ctx.call(|| {
        let (start, size) = mem::address_range(&ctx.rt, base)?;
        Ok((start + size).saturating_sub(base))
    })
}

/// A key opened here, closed (`aclrtIpcMemClose`) if the import fails
/// before a mapping owns it.
struct Opened<'a> {
    ctx: &'a Ctx,
    key: Option<CString>,
}

impl Drop for Opened<'_> {
    fn drop(&mut self) {
        let Some(k) = self.key.take() else { return };
        // The key opened above, closed once.
        let _ = self.ctx.call(|| ipc::close(&self.ctx.rt, &k));
    }
}
