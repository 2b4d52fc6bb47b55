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
//! ([`Memory::device_copies_only`](hal_core::Memory::device_copies_only)).
//! Dropping the mapping closes the key (`aclrtIpcMemClose`), then gives
//! the lease back; the exporter closes its keys and frees only after every
//! lease is back (`memory.rs`).

use std::ffi::c_void;
use std::sync::Arc;

use hal_core::exchange::take_fds_leased;
use hal_core::export::{new_handle, HandleSpec};
use hal_core::{
    BackendId, ByteRange, DeviceInfo, Error, ExportOptions, Exported, HandleKind, ImportOptions,
    Importers, Location, PidKind, Result, SharedHandle,
};

use crate::bindings::{
    ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT, ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION,
    ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT, ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS,
};
use crate::context::Ctx;
use crate::key;
use crate::mapping::AscendMapping;
use crate::memory::AscendAllocation;

/// Export `alloc` as [`Device::export_memory`](hal_core::Device::export_memory) does.
pub(crate) fn export(
    ctx: &Ctx,
    info: &DeviceInfo,
    alloc: &AscendAllocation,
    opts: &ExportOptions,
) -> Result<Exported> {
    if opts.read_only {
        return Err(Error::unsupported(
            "ascend",
            "a read-only export",
            "Ascend memory keys map imports read-write (Capabilities::READ_ONLY_EXPORT is absent)",
        ));
    }
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
    Exported::with_leases(handle, Vec::new(), alloc.leases()?)
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
) -> Result<(std::ffi::CString, Vec<u8>)> {
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
            "ascend",
            "the Ascend runtime checks its own allow-list of process ids, not the importer's user",
        )),
    };
    let tgids = key::tgids(&pids)?;
    let rt = &ctx.rt;
    ctx.call(|| {
        let mut buf = key::buffer();
        let f = rt.ipc_mem_get_export_key()?;
        // SAFETY: the range lies inside live device memory of this allocation;
        // `buf` holds KEY_LEN bytes, the length passed.
        let status = unsafe {
            f(
                (alloc.ptr + range.offset) as *mut c_void,
                range.len as usize,
                buf.as_mut_ptr(),
                buf.len(),
                u64::from(flags),
            )
        };
        rt.check("aclrtIpcMemGetExportKey", status)?;
        let (k, payload) = key::from_buffer(&buf)?;
        hal_core::lock::lock(&alloc.keys).push(k.clone());
        crate::exports::remember(&k, alloc.ptr + range.offset, range.len);
        if !tgids.is_empty() {
            set_import_pids(ctx, &k, &tgids)?;
        }
        Ok((k, payload))
    })
}

/// `aclrtIpcMemSetImportPid` of `k` with `tgids`.
pub(crate) fn set_import_pids(ctx: &Ctx, k: &std::ffi::CStr, tgids: &[i32]) -> Result<()> {
    let rt = &ctx.rt;
    ctx.call(|| {
        let f = rt.ipc_mem_set_import_pid()?;
        let mut list = tgids.to_vec();
        // SAFETY: `k` is NUL-terminated; `list` holds `len` ids.
        let status = unsafe { f(k.as_ptr(), list.as_mut_ptr(), list.len()) };
        rt.check("aclrtIpcMemSetImportPid", status)
    })
}

/// Import as [`Device::import_memory`](hal_core::Device::import_memory) does.
pub(crate) fn import(
    ctx: &Arc<Ctx>,
    info: &DeviceInfo,
    mut shared: SharedHandle,
    opts: &ImportOptions,
) -> Result<AscendMapping> {
    shared
        .handle
        .expect(HandleKind::Memory, BackendId::Ascend)?;
    let handle = shared.handle.clone();
    opts.refuse_unplaceable("ascend", "aclrtIpcMemImportByKey", info.ordinal)?;
    if handle.size == 0 {
        return Err(hal_core::HandleError::Malformed {
            field: "size",
            detail: "an empty range".into(),
        }
        .into());
    }
    let k = key::from_payload(&handle.payload)?;
    let other_device = handle.device_uuid != info.uuid;
    if other_device {
        crate::peer::require(&ctx.rt, info, "import_memory onto another device")?;
    }
    let taken = take_fds_leased(&mut shared)?;
    if handle.is_own() && !other_device {
        let (addr, len) = crate::exports::range(k.as_bytes()).ok_or_else(|| Error::NotFound {
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
    let rt = &ctx.rt;
    ctx.call(|| {
        let f = rt.ipc_mem_import_by_key()?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid place; `k` is NUL-terminated.
        let status = unsafe { f(&mut ptr, k.as_ptr(), u64::from(flags)) };
        rt.check("aclrtIpcMemImportByKey", status)
            .map_err(crate::result::refused_import)?;
        Ok(AscendMapping {
            ctx: Arc::clone(ctx),
            handle,
            addr: ptr as u64,
            key: Some(k),
            copies_only: other_device,
            _lease: taken.lease,
        })
    })
}
