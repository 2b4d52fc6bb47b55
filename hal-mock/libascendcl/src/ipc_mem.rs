//! Memory keys: `aclrtIpcMemGetExportKey`, `aclrtIpcMemSetImportPid`,
//! `aclrtIpcMemImportByKey`, `aclrtIpcMemClose`, as `vendor/ascend.md`
//! documents them:
//!
//! - the exported range must be whole pages (4 KiB, 2 MiB or 1 GiB) of
//!   one allocation, else `ACL_ERROR_RT_PARAM_INVALID` (never widened);
//! - the default export admits nobody until `aclrtIpcMemSetImportPid`
//!   adds importers' bare tgids; `ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION`
//!   admits anyone. A value that is no bare tgid (an OS pid) admits
//!   nobody. Importers outside the list get `ACL_ERROR_RT_NO_PERMISSION`;
//! - an import onto another device than the memory's needs
//!   `ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS` (or peer access
//!   enabled before), and such memory takes only asynchronous
//!   device-to-device copies;
//! - close order: importers close (`aclrtIpcMemClose`), then the exporter
//!   closes its key (refused while importers hold the memory), then frees
//!   (refused while a key is open).

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use hal_core::kit::vendor::acl;
use hal_core::{Allocation, Device, ExportOptions, ImportOptions, Importers, Memory, SharedHandle};

use crate::abi::{guard, non_null, put, AclError};
use crate::error::sim;
use crate::key::{self, Names};
use crate::refusal::{refuse, Refusal};
use crate::state::{lock, runtime, Block, Imported, KeyExport, Mem, Runtime};
use crate::tgid::os_pid;

/// `ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION`.
pub const EXPORT_DISABLE_PID_VALIDATION: u64 = 0x1;
/// `ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS`.
pub const IMPORT_ENABLE_PEER_ACCESS: u64 = 0x1;

fn export(rt: &Runtime, ptr: u64, size: u64, flags: u64) -> Result<String, Refusal> {
    rt.current()?;
    if flags & !EXPORT_DISABLE_PID_VALIDATION != 0 {
        return Err(refuse(
            acl::INVALID_PARAM,
            format!("export flags {flags:#x}"),
        ));
    }
    let found = rt.find(ptr, size)?;
    let Mem::Alloc(alloc) = &found.mem else {
        return Err(refuse(
            acl::RT_PARAM_INVALID,
            "memory imported by key cannot be exported again",
        ));
    };
    let importers = if flags & EXPORT_DISABLE_PID_VALIDATION != 0 {
        Importers::Anyone
    } else {
        Importers::Pids(Vec::new())
    };
    let opts = ExportOptions {
        range: Some(hal_core::ByteRange::new(found.offset, size)),
        importers,
        read_only: false,
    };
    let exported = sim(rt.device(found.ordinal).driver_export_memory(alloc, &opts))?;
    let (envelope, k) = key::seal(&exported, Names::Memory)?;
    lock(&rt.keys).insert(
        k.clone(),
        KeyExport {
            export: exported,
            _envelope: envelope,
            base: found.base,
            ordinal: found.ordinal,
        },
    );
    if let Some(b) = lock(&rt.memory).get_mut(&found.base) {
        b.open_keys += 1;
    }
    Ok(k)
}

fn import(rt: &Runtime, k: &str, flags: u64) -> Result<u64, Refusal> {
    let o = rt.current()?;
    if flags & !IMPORT_ENABLE_PEER_ACCESS != 0 {
        return Err(refuse(
            acl::INVALID_PARAM,
            format!("import flags {flags:#x}"),
        ));
    }
    let mut imported = lock(&rt.imported);
    if let Some(i) = imported.get_mut(k) {
        i.refs += 1;
        return Ok(i.addr);
    }
    let inner = key::open(k, Names::Memory)?;
    crate::switches::cross_device(rt, o, &inner.device_uuid, "aclrtIpcMemImportByKey")?;
    let opts = ImportOptions {
        device: Some(o),
        peer_access: flags & IMPORT_ENABLE_PEER_ACCESS != 0,
        ..ImportOptions::default()
    };
    let m = sim(rt
        .device(o)
        .driver_open_memory(SharedHandle::from(inner), &opts))?;
    let addr = m.addr();
    let mut memory = lock(&rt.memory);
    // In the exporting process the import reaches the original memory,
    // whose block stays the allocation's.
    let own_block = !memory.contains_key(&addr);
    if own_block {
        memory.insert(
            addr,
            Block {
                mem: Mem::Map(Arc::new(m)),
                ordinal: o,
                open_keys: 0,
            },
        );
    }
    drop(memory);
    imported.insert(
        k.to_owned(),
        Imported {
            addr,
            refs: 1,
            own_block,
        },
    );
    Ok(addr)
}

fn close(rt: &Runtime, k: &str) -> Result<(), Refusal> {
    let mut imported = lock(&rt.imported);
    if let Some(i) = imported.get_mut(k) {
        i.refs -= 1;
        if i.refs == 0 {
            let (addr, own_block) = (i.addr, i.own_block);
            imported.remove(k);
            let gone = own_block.then(|| lock(&rt.memory).remove(&addr)).flatten();
            drop(imported);
            drop(gone);
        }
        return Ok(());
    }
    drop(imported);
    let mut keys = lock(&rt.keys);
    let e = keys
        .get(k)
        .ok_or_else(|| refuse(acl::RT_PARAM_INVALID, "no open key of this process"))?;
    let memory = lock(&rt.memory);
    if let Some(Block {
        mem: Mem::Alloc(a), ..
    }) = memory.get(&e.base)
    {
        // An importer's close reaches the exporter's lease table through
        // its broker connection: give a close that just happened a moment.
        let _ = a.wait_unleased(Some(std::time::Duration::from_millis(200)));
        let holders = sim(a.importers())?;
        if holders > 0 {
            return Err(refuse(
                acl::RT_PARAM_INVALID,
                format!(
                    "{holders} importer(s) still hold the memory: they close it \
                     (aclrtIpcMemClose) before the exporter closes its key"
                ),
            ));
        }
    }
    drop(memory);
    let gone = keys.remove(k);
    drop(keys);
    if let Some(g) = &gone {
        if let Some(b) = lock(&rt.memory).get_mut(&g.base) {
            b.open_keys = b.open_keys.saturating_sub(1);
        }
    }
    drop(gone);
    Ok(())
}

/// Exports `size` bytes at `dev_ptr` (whole pages of one allocation) under
/// a key written to `key` (at least 65 bytes).
#[no_mangle]
pub unsafe extern "C" fn aclrtIpcMemGetExportKey(
    dev_ptr: *mut c_void,
    size: usize,
    key: *mut c_char,
    len: usize,
    flags: u64,
) -> AclError {
    guard("aclrtIpcMemGetExportKey", || {
        let rt = runtime()?;
        non_null(key, "key")?;
        if len < key::KEY_LEN {
            return Err(refuse(
                acl::INVALID_PARAM,
                format!("a key buffer of {len} bytes"),
            ));
        }
        let k = export(rt, dev_ptr.addr() as u64, size as u64, flags)?;
        // SAFETY: `key` is valid for `len` bytes (the caller's contract).
        unsafe { key::write(key, len, &k) }
    })
}

/// Adds the processes with the bare tgids `pid[..num]` to the key's
/// allow-list (the exporter only).
#[no_mangle]
pub unsafe extern "C" fn aclrtIpcMemSetImportPid(
    key: *const c_char,
    pid: *mut i32,
    num: usize,
) -> AclError {
    guard("aclrtIpcMemSetImportPid", || {
        let rt = runtime()?;
        rt.current()?;
        // SAFETY: NUL-terminated or null (the caller's contract).
        let k = unsafe { key::read(key) }?;
        non_null(pid, "pid")?;
        if num == 0 {
            return Err(refuse(acl::INVALID_PARAM, "no pid given"));
        }
        // SAFETY: `pid` holds `num` values (the caller's contract).
        let tgids = unsafe { std::slice::from_raw_parts(pid, num) };
        let pids: Vec<u32> = tgids.iter().filter_map(|&t| os_pid(t)).collect();
        let mut keys = lock(&rt.keys);
        let e = keys.get_mut(&k).ok_or_else(|| {
            refuse(
                acl::RT_PARAM_INVALID,
                "the key was not exported by this process",
            )
        })?;
        if pids.is_empty() {
            return Ok(());
        }
        let ordinal = e.ordinal;
        sim(rt.device(ordinal).allow_importers(&mut e.export, &pids))
    })
}

/// Imports the memory `key` names on the current device.
#[no_mangle]
pub unsafe extern "C" fn aclrtIpcMemImportByKey(
    dev_ptr: *mut *mut c_void,
    key: *const c_char,
    flags: u64,
) -> AclError {
    guard("aclrtIpcMemImportByKey", || {
        let rt = runtime()?;
        non_null(dev_ptr, "devPtr")?;
        // SAFETY: NUL-terminated or null (the caller's contract).
        let k = unsafe { key::read(key) }?;
        let addr = import(rt, &k, flags)?;
        // SAFETY: not null, valid for a write (the caller's contract).
        unsafe { put(dev_ptr, std::ptr::without_provenance_mut(addr as usize)) }
    })
}

/// Closes one import of `key` in this process, or, in the exporter, the
/// key itself (refused while importers hold the memory).
#[no_mangle]
pub unsafe extern "C" fn aclrtIpcMemClose(key: *const c_char) -> AclError {
    guard("aclrtIpcMemClose", || {
        let rt = runtime()?;
        // SAFETY: NUL-terminated or null (the caller's contract).
        let k = unsafe { key::read(key) }?;
        close(rt, &k)
    })
}
