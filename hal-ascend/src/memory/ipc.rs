//! Memory keys: Ascend IPC of device memory.
//!
//! **Export.** The range (the whole allocation or `ExportOptions::range`)
//! must be whole pages of the allocation's page size (4 KiB, 2 MiB or
//! 1 GiB, by its allocation policy: `pages.rs`) at a page-aligned address, else
//! [`Error::Misaligned`], never widened: `aclrtMalloc` sub-allocates small
//! buffers, which then do not start on a page. `aclrtIpcMemGetExportKey`
//! writes a key of the range (65 bytes, carried whole in the handle's
//! payload). The default export keeps the runtime's pid allow-list on: the
//! importers' bare tgids (`aclrtDeviceGetBareTgid`, through
//! [`Device::process_id`](hal_core::Device::process_id)) are added with
//! `aclrtIpcMemSetImportPid`, now or later with
//! [`Device::allow_importers`](hal_core::Device::allow_importers); an
//! export to anyone passes `DISABLE_PID_VALIDATION`. The handle's
//! allow-list says [`PidKind::Vendor`]: the runtime checks it, and the
//! exporter's broker serves the lease to anyone.
//!
//! **Import.** The lease is taken from the exporter's broker first. In the
//! exporting process the import reaches the original memory. Elsewhere
//! `aclrtIpcMemImportByKey` opens the key on the importing device; onto
//! another device than the memory's it is refused without
//! `Capabilities::PEER_ACCESS` (`peer.rs`), passes `ENABLE_PEER_ACCESS`
//! when the import asks for peer access, and the mapping then takes only
//! asynchronous device-to-device copies
//! ([`AscendMapping::device_copies_only`](crate::AscendMapping::device_copies_only)).
//! Dropping the mapping closes the key (`aclrtIpcMemClose`), then gives
//! the lease back; the exporter closes its keys and frees only after every
//! lease is back (`alloc.rs`).
//!
//! **Keys.** A key as the runtime writes it: up to 64 characters and a NUL
//! in a 65-byte buffer, carried whole in a handle's payload (notify keys
//! too, `sync/notify.rs`). This process's exported keys are remembered
//! with the range each names, which an import in the exporting process
//! reaches directly.

use std::ffi::{c_char, CStr, CString};
use std::sync::Arc;

use hal_core::exchange::take_fds_leased;
use hal_core::kit::export::{new_handle, HandleSpec};
use hal_core::kit::vendor::acl::entry;
use hal_core::{
    BackendId, ByteRange, Error, ExportOptions, Exported, HandleKind, ImportOptions, Importers,
    Location, PidKind, Result, SharedHandle,
};

use crate::context::{Ctx, DeviceRef};
use crate::ffi::bindings::{
    ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT, ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION,
    ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT, ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS,
};
use crate::ffi::result::ipc;
pub(crate) use crate::ffi::result::ipc::KEY_LEN;
use crate::memory::alloc::AscendAllocation;
use crate::memory::keys::exported_range;
use crate::memory::mapping::AscendMapping;

/// Export `alloc` as [`Device::export_memory`](hal_core::Device::export_memory) does.
pub(crate) fn export(
    DeviceRef { ctx, info }: DeviceRef<'_>,
    alloc: &AscendAllocation,
    opts: &ExportOptions,
) -> Result<Exported> {
    opts.refuse_read_only(
        hal_core::BackendId::Ascend,
        "memory",
        "Ascend memory keys map imports read-write",
    )?;
    let range = opts.range.unwrap_or(ByteRange::new(0, alloc.len));
    let (_, payload) = export_key(ctx, alloc, range, &opts.importers)?;
    let spec = HandleSpec {
        kind: HandleKind::Memory,
        backend: BackendId::Ascend,
        device: info.ordinal,
        device_uuid: info.uuid,
        location: Location::Device(info.ordinal),
        default_allow_list: true,
    };
    let mut handle = new_handle(&spec, opts)?;
    handle.pid_kind = PidKind::Vendor;
    handle.offset = range.offset;
    handle.size = range.len;
    handle.payload = payload;
    Exported::with_leases(handle, Vec::new(), alloc.leases.table()?)
}

/// The key of `range` of `alloc` (`aclrtIpcMemGetExportKey`) for
/// `importers`, and its 65 bytes: the range whole pages (`pages.rs`), the
/// key kept by the allocation (closed before it is freed) and remembered
/// for imports in this process.
pub(crate) fn export_key(
    ctx: &Ctx,
    alloc: &AscendAllocation,
    range: ByteRange,
    importers: &Importers,
) -> Result<(CString, Vec<u8>)> {
    range.check(alloc.len, 0)?;
    crate::pages::check_export(alloc.ptr, range, alloc.page)?;
    let (flags, pids) = match importers {
        Importers::Anyone => (
            ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION,
            Vec::new(),
        ),
        Importers::BackendDefault => (ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT, Vec::new()),
        Importers::Pids(p) => (ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT, p.clone()),
        Importers::SameUser => return Err(hal_core::types::same_user_unsupported(
            hal_core::BackendId::Ascend,
            "the Ascend runtime checks its own allow-list of process ids, not the importer's user",
        )),
    };
    let tgids = tgids(&pids)?;
    ctx.call(|| {
        // The range lies inside this allocation's live device memory.
        let buf = ipc::get_export_key(&ctx.rt, alloc.ptr + range.offset, range.len, flags)?;
        let (k, payload) = from_buffer(&buf)?;
        alloc.keys.keep(&k, alloc.ptr + range.offset, range.len);
        if !tgids.is_empty() {
            set_import_pids(ctx, &k, &tgids)?;
        }
        Ok((k, payload))
    })
}

/// `aclrtIpcMemSetImportPid` of `k` with `tgids`.
pub(crate) fn set_import_pids(ctx: &Ctx, k: &CStr, tgids: &[i32]) -> Result<()> {
    ctx.call(|| ipc::set_import_pid(&ctx.rt, k, tgids))
}

/// Import as [`Device::import_memory`](hal_core::Device::import_memory) does.
pub(crate) fn import(
    DeviceRef { ctx, info }: DeviceRef<'_>,
    mut shared: SharedHandle,
    opts: &ImportOptions,
) -> Result<AscendMapping> {
    shared
        .handle
        .expect(HandleKind::Memory, BackendId::Ascend)?;
    let handle = shared.handle.clone();
    opts.refuse_unplaceable(
        hal_core::BackendId::Ascend,
        entry::RT_IPC_MEM_IMPORT_BY_KEY,
        info.ordinal,
    )?;
    if handle.size == 0 {
        return Err(hal_core::HandleError::Malformed {
            field: "size",
            detail: "an empty range".into(),
        }
        .into());
    }
    let k = from_payload(&handle.payload)?;
    let other_device = handle.device_uuid != info.uuid;
    if other_device {
        crate::peer::require(&ctx.rt, info, "import_memory onto another device")?;
    }
    let taken = take_fds_leased(&mut shared)?;
    if handle.is_own() && !other_device {
        let (addr, len) = exported_range(k.as_bytes()).ok_or_else(|| Error::NotFound {
            what: "the exported Ascend memory was freed".into(),
        })?;
        if len != handle.size {
            return Err(hal_core::HandleError::Malformed {
                field: "size",
                detail: format!(
                    "the handle claims {:#x} bytes of a key that names {len:#x}",
                    handle.size
                ),
            }
            .into());
        }
        return Ok(AscendMapping {
            ctx: Arc::clone(ctx),
            handle,
            addr,
            key: None,
            copies_only: false,
            _lease: taken.lease,
        });
    }
    let flags = if other_device && opts.peer_access {
        ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS
    } else {
        ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT
    };
    ctx.call(|| {
        let addr = ipc::import_by_key(&ctx.rt, &k, flags)?;
        Ok(AscendMapping {
            ctx: Arc::clone(ctx),
            handle,
            addr,
            key: Some(k),
            copies_only: other_device,
            _lease: taken.lease,
        })
    })
}

// Keys.

/// A fresh key buffer.
#[cfg(test)]
pub(crate) fn buffer() -> [c_char; KEY_LEN] {
    [0; KEY_LEN]
}

/// The key the runtime wrote into `buf`, and the 65 payload bytes.
pub(crate) fn from_buffer(buf: &[c_char; KEY_LEN]) -> Result<(CString, Vec<u8>)> {
    let bytes: Vec<u8> = buf.iter().map(|&c| c as u8).collect();
    let key = CStr::from_bytes_until_nul(&bytes)
        .map_err(|_| Error::invalid("the runtime wrote a key without its NUL"))?;
    Ok((key.to_owned(), bytes))
}

/// The key in a handle's payload (65 bytes, NUL-terminated).
pub(crate) fn from_payload(payload: &[u8]) -> Result<CString> {
    if payload.len() != KEY_LEN {
        return Err(Error::malformed_payload(format!(
            "an Ascend key is {KEY_LEN} bytes, this one {}",
            payload.len()
        )));
    }
    let key = CStr::from_bytes_until_nul(payload)
        .map_err(|_| Error::malformed_payload("an Ascend key without its NUL"))?;
    if key.is_empty() {
        return Err(Error::malformed_payload("an empty Ascend key"));
    }
    Ok(key.to_owned())
}

/// Importer ids as the runtime takes them (`int32_t` bare tgids).
pub(crate) fn tgids(pids: &[u32]) -> Result<Vec<i32>> {
    pids.iter()
        .map(|&p| {
            i32::try_from(p)
                .ok()
                .filter(|&t| t > 0)
                .ok_or_else(|| Error::invalid(format!("{p} is no bare tgid")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_payloads() {
        let mut buf = buffer();
        for (i, c) in b"abc".iter().enumerate() {
            buf[i] = *c as c_char;
        }
        let (k, payload) = from_buffer(&buf).unwrap();
        assert_eq!(k.as_bytes(), b"abc");
        assert_eq!(payload.len(), 65);
        assert_eq!(from_payload(&payload).unwrap(), k);
        assert!(from_payload(&payload[1..]).is_err());
        assert!(from_payload(&[0u8; 65]).is_err());
        assert!(from_payload(&[b'a'; 65]).is_err());
        assert!(tgids(&[0]).is_err() && tgids(&[u32::MAX]).is_err());
    }
}
