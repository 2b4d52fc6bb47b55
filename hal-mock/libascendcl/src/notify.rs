//! Notifies: created on the current device, recorded on streams by anyone
//! who holds them, waited on and reset (on a stream) only by the process
//! that created them; shared by key with a pid allow-list like memory
//! (with the notify's own flag values: 0x02 where memory has 0x1); each
//! process destroys its own.

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::Arc;
use std::time::Duration;

use hal_core::kit::vendor::acl;
use hal_core::{Device, ExportOptions, ImportOptions, Importers, NotifyFlags, SharedHandle};

use crate::abi::{guard, non_null, put, AclError};
use crate::error::sim;
use crate::key::{self, Names};
use crate::refusal::refuse;
use crate::state::{lock, runtime, NotifyEntry};
use crate::tgid::os_pid;

/// `ACL_NOTIFY_DEVICE_USE_ONLY`.
pub const NOTIFY_DEVICE_USE_ONLY: u64 = 0x1;
/// `ACL_RT_NOTIFY_EXPORT_FLAG_DISABLE_PID_VALIDATION`.
pub const NOTIFY_EXPORT_DISABLE_PID_VALIDATION: u64 = 0x02;
/// `ACL_RT_NOTIFY_IMPORT_FLAG_ENABLE_PEER_ACCESS`.
pub const NOTIFY_IMPORT_ENABLE_PEER_ACCESS: u64 = 0x02;

/// Creates a notify on the current device (`flag`: `ACL_NOTIFY_DEFAULT`
/// or `ACL_NOTIFY_DEVICE_USE_ONLY`).
#[no_mangle]
pub unsafe extern "C" fn aclrtCreateNotify(notify: *mut *mut c_void, flag: u64) -> AclError {
    guard("aclrtCreateNotify", || {
        let rt = runtime()?;
        let o = rt.current()?;
        non_null(notify, "notify")?;
        if flag & !NOTIFY_DEVICE_USE_ONLY != 0 {
            return Err(refuse(acl::INVALID_PARAM, format!("notify flag {flag:#x}")));
        }
        let flags = NotifyFlags {
            device_only: flag == NOTIFY_DEVICE_USE_ONLY,
        };
        let n = sim(rt.device(o).create_notify_with(flags))?;
        let h = rt.new_handle();
        lock(&rt.notifies).insert(
            h,
            NotifyEntry {
                notify: Arc::new(n),
                ordinal: o,
                keys: HashMap::new(),
            },
        );
        // SAFETY: not null, valid for a write (the caller's contract).
        unsafe { put(notify, std::ptr::without_provenance_mut(h)) }
    })
}

/// Destroys this process's notify (its keys with it).
#[no_mangle]
pub unsafe extern "C" fn aclrtDestroyNotify(notify: *mut c_void) -> AclError {
    guard("aclrtDestroyNotify", || {
        let rt = runtime()?;
        let gone = lock(&rt.notifies).remove(&notify.addr());
        gone.map(drop)
            .ok_or_else(|| refuse(acl::RT_INVALID_HANDLE, "no such notify"))
    })
}

/// Records (signals) the notify on the stream.
#[no_mangle]
pub unsafe extern "C" fn aclrtRecordNotify(notify: *mut c_void, stream: *mut c_void) -> AclError {
    guard("aclrtRecordNotify", || {
        let rt = runtime()?;
        let (n, _) = rt.notify(notify.addr())?;
        let (s, o) = rt.stream(stream.addr())?;
        sim(rt.device(o).record_notify(&s, &n))
    })
}

/// Makes the stream wait for the notify and reset it: the creating
/// process only (`ACL_ERROR_RT_NO_PERMISSION` elsewhere). `timeout` in
/// milliseconds, 0 waits forever; past it the stream's work fails with
/// `ACL_ERROR_RT_WAIT_TIMEOUT`, answered by its synchronize.
#[no_mangle]
pub unsafe extern "C" fn aclrtWaitAndResetNotify(
    notify: *mut c_void,
    stream: *mut c_void,
    timeout: u32,
) -> AclError {
    guard("aclrtWaitAndResetNotify", || {
        let rt = runtime()?;
        let (n, _) = rt.notify(notify.addr())?;
        let (s, o) = rt.stream(stream.addr())?;
        if !n.is_creator() {
            return Err(refuse(
                acl::RT_NO_PERMISSION,
                "only the process that created a notify may wait on it",
            ));
        }
        let t = (timeout != 0).then(|| Duration::from_millis(u64::from(timeout)));
        sim(rt.device(o).stream_wait_notify(&s, &n, t))
    })
}

/// Exports the notify under a key written to `key` (at least 65 bytes).
#[no_mangle]
pub unsafe extern "C" fn aclrtNotifyGetExportKey(
    notify: *mut c_void,
    key: *mut c_char,
    len: usize,
    flags: u64,
) -> AclError {
    guard("aclrtNotifyGetExportKey", || {
        let rt = runtime()?;
        non_null(key, "key")?;
        if len < key::KEY_LEN {
            return Err(refuse(
                acl::INVALID_PARAM,
                format!("a key buffer of {len} bytes"),
            ));
        }
        if flags & !NOTIFY_EXPORT_DISABLE_PID_VALIDATION != 0 {
            return Err(refuse(
                acl::INVALID_PARAM,
                format!("notify export flags {flags:#x}"),
            ));
        }
        let mut notifies = lock(&rt.notifies);
        let e = notifies
            .get_mut(&notify.addr())
            .ok_or_else(|| refuse(acl::RT_INVALID_HANDLE, "no such notify"))?;
        let importers = if flags & NOTIFY_EXPORT_DISABLE_PID_VALIDATION != 0 {
            Importers::Anyone
        } else {
            Importers::Pids(Vec::new())
        };
        let opts = ExportOptions {
            importers,
            ..ExportOptions::default()
        };
        let exported = sim(rt.device(e.ordinal).export_notify(&e.notify, &opts))?;
        let (envelope, k) = key::seal(&exported, Names::Notify)?;
        e.keys.insert(k.clone(), (exported, envelope));
        // SAFETY: `key` is valid for `len` bytes (the caller's contract).
        unsafe { key::write(key, len, &k) }
    })
}

/// Adds the bare tgids `pid[..num]` to the allow-list of every key of the
/// notify.
#[no_mangle]
pub unsafe extern "C" fn aclrtNotifySetImportPid(
    notify: *mut c_void,
    pid: *mut i32,
    num: usize,
) -> AclError {
    guard("aclrtNotifySetImportPid", || {
        let rt = runtime()?;
        non_null(pid, "pid")?;
        if num == 0 {
            return Err(refuse(acl::INVALID_PARAM, "no pid given"));
        }
        // SAFETY: `pid` holds `num` values (the caller's contract).
        let tgids = unsafe { std::slice::from_raw_parts(pid, num) };
        let pids: Vec<u32> = tgids.iter().filter_map(|&t| os_pid(t)).collect();
        let mut notifies = lock(&rt.notifies);
        let e = notifies
            .get_mut(&notify.addr())
            .ok_or_else(|| refuse(acl::RT_INVALID_HANDLE, "no such notify"))?;
        if e.keys.is_empty() {
            return Err(refuse(
                acl::RT_PARAM_INVALID,
                "the notify has no export key: call aclrtNotifyGetExportKey first",
            ));
        }
        if pids.is_empty() {
            return Ok(());
        }
        let dev = rt.device(e.ordinal);
        for (exported, _) in e.keys.values_mut() {
            sim(dev.allow_importers(exported, &pids))?;
        }
        Ok(())
    })
}

/// Imports the notify `key` names on the current device.
#[no_mangle]
pub unsafe extern "C" fn aclrtNotifyImportByKey(
    notify: *mut *mut c_void,
    key: *const c_char,
    flags: u64,
) -> AclError {
    guard("aclrtNotifyImportByKey", || {
        let rt = runtime()?;
        let o = rt.current()?;
        non_null(notify, "notify")?;
        // SAFETY: NUL-terminated or null (the caller's contract).
        let k = unsafe { key::read(key) }?;
        if flags & !NOTIFY_IMPORT_ENABLE_PEER_ACCESS != 0 {
            return Err(refuse(
                acl::INVALID_PARAM,
                format!("notify import flags {flags:#x}"),
            ));
        }
        let inner = key::open(&k, Names::Notify)?;
        crate::switches::cross_device(rt, o, &inner.device_uuid, "aclrtNotifyImportByKey")?;
        let opts = ImportOptions {
            device: Some(o),
            peer_access: flags & NOTIFY_IMPORT_ENABLE_PEER_ACCESS != 0,
            ..ImportOptions::default()
        };
        let n = sim(rt.device(o).import_notify(SharedHandle::from(inner), &opts))?;
        let h = rt.new_handle();
        lock(&rt.notifies).insert(
            h,
            NotifyEntry {
                notify: Arc::new(n),
                ordinal: o,
                keys: HashMap::new(),
            },
        );
        // SAFETY: not null, valid for a write (the caller's contract).
        unsafe { put(notify, std::ptr::without_provenance_mut(h)) }
    })
}
