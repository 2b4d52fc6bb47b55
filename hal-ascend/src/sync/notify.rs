//! Notifies of the runtime (`aclrtCreateNotify`): recorded on streams by
//! any process that holds them, waited on and reset only by the process
//! that created them (`aclrtWaitAndResetNotify`), shared by key with a pid
//! allow-list of bare tgids like memory, with the notify's own flag values
//! (0x02 where memory keys have 0x1). Each process destroys its own
//! notify; the runtime frees it when all have.
//!
//! The runtime records and waits only on streams, so the host side goes
//! through two internal streams of each notify: [`Notify::signal`]
//! records on one and synchronizes it; a host wait queues a
//! wait-and-reset of one slice on the other and synchronizes it, slice
//! after slice, so that timeouts hold and a dropped `wait_async` ends its
//! thread. The contract's timeout is mapped by [`vendor_timeout`]: the
//! runtime's 0 means forever.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use hal_core::kit::export::{new_handle, HandleSpec};
use hal_core::kit::stream::methods::VendorStream;
use hal_core::wait::blocking_future;
use hal_core::{
    BackendId, DeviceInfo, Error, ExportOptions, Exported, HandleKind, ImportOptions, Importers,
    Location, Notify, NotifyFlags, PidKind, Result, SharedHandle, WaitFuture, WaitOptions,
};

use crate::context::Ctx;
use crate::ffi::bindings::{
    ACL_ERROR_RT_WAIT_TIMEOUT, ACL_NOTIFY_DEFAULT, ACL_NOTIFY_DEVICE_USE_ONLY,
    ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT, ACL_RT_NOTIFY_EXPORT_FLAG_DISABLE_PID_VALIDATION,
    ACL_RT_NOTIFY_IMPORT_FLAG_DEFAULT, ACL_RT_NOTIFY_IMPORT_FLAG_ENABLE_PEER_ACCESS,
};
use crate::ffi::result::notify;
use crate::ffi::sys::{NotifyHandle, StreamHandle};
use crate::memory::ipc::{from_buffer, from_payload, tgids};
use crate::sync::stream::{between_slices, millis, AscendStream, SLICE};
use hal_core::kit::os::lock::lock;

/// The runtime's wait timeout for the contract's `timeout`: `None` (wait
/// forever) is the runtime's 0; a duration is milliseconds, rounded up and
/// at least 1, so that a short timeout never becomes "forever".
pub fn vendor_timeout(timeout: Option<Duration>) -> u32 {
    match timeout {
        None => 0,
        Some(t) => u32::try_from(millis(t)).unwrap_or(u32::MAX),
    }
}

/// A notify of this process or one imported from another.
#[must_use = "the notify is destroyed when this value drops"]
pub struct AscendNotify {
    pub(crate) inner: Arc<NotifyInner>,
}

/// What a notify's waiter threads share with it.
pub(crate) struct NotifyInner {
    pub(crate) ctx: Arc<Ctx>,
    pub(crate) raw: NotifyHandle,
    creator: bool,
    flags: NotifyFlags,
    signal_stream: OnceLock<AscendStream>,
    wait_stream: Mutex<Option<AscendStream>>,
}

impl std::fmt::Debug for AscendNotify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AscendNotify")
            .field("raw", &self.inner.raw)
            .field("creator", &self.inner.creator)
            .finish()
    }
}

/// This process's exported notifies by key, for `aclrtNotifySetImportPid`,
/// which takes the notify rather than the key.
fn exported() -> &'static Mutex<HashMap<Vec<u8>, Weak<NotifyInner>>> {
    static EXPORTED: OnceLock<Mutex<HashMap<Vec<u8>, Weak<NotifyInner>>>> = OnceLock::new();
    EXPORTED.get_or_init(|| Mutex::new(HashMap::new()))
}

impl NotifyInner {
    /// Create a notify on `ctx`'s device.
    pub(crate) fn create(ctx: &Arc<Ctx>, flags: NotifyFlags) -> Result<AscendNotify> {
        let flag = if flags.device_only {
            ACL_NOTIFY_DEVICE_USE_ONLY
        } else {
            ACL_NOTIFY_DEFAULT
        };
        ctx.call(|| {
            let raw = notify::create(&ctx.rt, flag)?;
            Ok(NotifyInner::wrap(ctx, raw, true, flags))
        })
    }

    /// The notify `raw`, with its internal streams made now (a host
    /// signal or wait then starts no thread of the runtime's): a signal
    /// stream, and for the creator of a notify the host may use, a wait
    /// stream.
    fn wrap(ctx: &Arc<Ctx>, raw: NotifyHandle, creator: bool, flags: NotifyFlags) -> AscendNotify {
        let inner = NotifyInner {
            ctx: Arc::clone(ctx),
            raw,
            creator,
            flags,
            signal_stream: OnceLock::new(),
            wait_stream: Mutex::new(None),
        };
        if !flags.device_only {
            if let Ok(s) = AscendStream::create(ctx) {
                let _ = inner.signal_stream.set(s);
            }
            if creator {
                *lock(&inner.wait_stream) = AscendStream::create(ctx).ok();
            }
        }
        AscendNotify {
            inner: Arc::new(inner),
        }
    }

    /// Only the creating process waits (`CREATOR_ONLY_NOTIFY_WAIT`).
    pub(crate) fn check_waiter(&self) -> Result<()> {
        if !self.creator {
            return Err(Error::PermissionDenied {
                pid: None,
                reason: "only the process that created an Ascend notify may wait on it; \
                         importers record (signal) it"
                    .into(),
            });
        }
        Ok(())
    }

    /// `aclrtRecordNotify` on `stream`.
    pub(crate) fn record(&self, stream: &StreamHandle) -> Result<()> {
        self.ctx
            .call(|| notify::record(&self.ctx.rt, &self.raw, stream))
    }

    /// `aclrtWaitAndResetNotify` on `stream` with the runtime's `timeout`.
    pub(crate) fn stream_wait(
        &self,
        stream: &StreamHandle,
        timeout: Option<Duration>,
    ) -> Result<()> {
        self.check_waiter()?;
        let timeout = vendor_timeout(timeout);
        self.ctx
            .call(|| notify::wait_and_reset(&self.ctx.rt, &self.raw, stream, timeout))
    }

    /// One slice of a host wait: true when the signal came (and was reset).
    fn slice(&self, stream: &AscendStream) -> Result<bool> {
        self.stream_wait(&stream.raw, Some(SLICE))?;
        match stream.wait(None) {
            Ok(()) => Ok(true),
            Err(Error::Vendor(v)) if v.code == i64::from(ACL_ERROR_RT_WAIT_TIMEOUT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn host_wait(&self, opts: WaitOptions) -> Result<()> {
        self.flags.refuse_host("wait")?;
        self.check_waiter()?;
        let mut stream = lock(&self.wait_stream);
        if stream.is_none() {
            *stream = Some(AscendStream::create(&self.ctx)?);
        }
        let s = stream
            .as_ref()
            .ok_or_else(|| Error::invalid("the notify's wait stream vanished"))?;
        let (spin, timeout) = (opts.spin, opts.timeout);
        let done = || self.slice(s);
        hal_core::wait::poll_until("the Ascend notify", spin, timeout, done, between_slices)
    }

    /// Export as [`Device::export_notify`](hal_core::Device::export_notify).
    pub(crate) fn export(
        self: &Arc<Self>,
        info: &DeviceInfo,
        opts: &ExportOptions,
    ) -> Result<Exported> {
        if !self.creator {
            return Err(Error::invalid(
                "an imported notify cannot be exported again: export the creator's",
            ));
        }
        if opts.read_only || opts.range.is_some() {
            return Err(Error::invalid(
                "a notify export has no range and no read-only form",
            ));
        }
        let (flags, pids) = match &opts.importers {
            Importers::Anyone => (ACL_RT_NOTIFY_EXPORT_FLAG_DISABLE_PID_VALIDATION, Vec::new()),
            Importers::BackendDefault => (ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT, Vec::new()),
            Importers::Pids(p) => (ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT, p.clone()),
            Importers::SameUser => {
                return Err(hal_core::types::same_user_unsupported("ascend", "the Ascend runtime checks its own allow-list of process ids, not the importer's user"))
            }
        };
        let tgids = tgids(&pids)?;
        self.ctx.call(|| {
            let buf = notify::get_export_key(&self.ctx.rt, &self.raw, flags)?;
            let (k, payload) = from_buffer(&buf)?;
            lock(exported()).insert(k.as_bytes().to_vec(), Arc::downgrade(self));
            if !tgids.is_empty() {
                set_import_pids(self, &tgids)?;
            }
            let spec = HandleSpec {
                kind: HandleKind::Notify,
                backend: BackendId::Ascend,
                device: info.ordinal,
                device_uuid: info.uuid,
                location: Location::Device(info.ordinal),
                default_allow_list: true,
            };
            let mut handle = new_handle(&spec, opts)?;
            handle.pid_kind = PidKind::Vendor;
            handle.payload = payload;
            Exported::new(handle, Vec::new())
        })
    }

    /// Import as [`Device::import_notify`](hal_core::Device::import_notify).
    pub(crate) fn import(
        ctx: &Arc<Ctx>,
        info: &DeviceInfo,
        shared: SharedHandle,
        opts: &ImportOptions,
    ) -> Result<AscendNotify> {
        shared
            .handle
            .expect(HandleKind::Notify, BackendId::Ascend)?;
        let k = from_payload(&shared.handle.payload)?;
        let other_device = shared.handle.device_uuid != info.uuid;
        if other_device {
            crate::peer::require(&ctx.rt, info, "import_notify onto another device")?;
        }
        let flags = if other_device && opts.peer_access {
            ACL_RT_NOTIFY_IMPORT_FLAG_ENABLE_PEER_ACCESS
        } else {
            ACL_RT_NOTIFY_IMPORT_FLAG_DEFAULT
        };
        ctx.call(|| {
            let raw = notify::import_by_key(&ctx.rt, &k, flags)?;
            Ok(NotifyInner::wrap(ctx, raw, false, NotifyFlags::default()))
        })
    }
}

/// `aclrtNotifySetImportPid` of `inner`'s notify with `tgids`.
fn set_import_pids(inner: &NotifyInner, tgids: &[i32]) -> Result<()> {
    inner
        .ctx
        .call(|| notify::set_import_pid(&inner.ctx.rt, &inner.raw, tgids))
}

/// Allow `tgids` to import the exported notify whose key is `payload`.
pub(crate) fn allow(ctx: &Ctx, payload: &[u8], tgids: &[i32]) -> Result<()> {
    let k: CString = from_payload(payload)?;
    let inner = lock(exported())
        .get(k.as_bytes())
        .and_then(Weak::upgrade)
        .ok_or_else(|| Error::NotFound {
            what: "the exported Ascend notify (destroyed, or exported by another process)".into(),
        })?;
    ctx.call(|| notify::set_import_pid(&ctx.rt, &inner.raw, tgids))
}

impl Drop for NotifyInner {
    fn drop(&mut self) {
        // The streams first (they may hold work on the notify).
        drop(self.signal_stream.take());
        drop(lock(&self.wait_stream).take());
        let me: *const NotifyInner = self;
        lock(exported()).retain(|_, w| !std::ptr::eq(w.as_ptr(), me));
        // Created or imported here, destroyed once.
        let raw = self.raw.take();
        let destroyed = self.ctx.call(|| notify::destroy(&self.ctx.rt, raw));
        if let Err(e) = destroyed {
            log::warn!("destroying an Ascend notify: {e}");
        }
    }
}

impl Notify for AscendNotify {
    fn signal(&self) -> Result<()> {
        self.inner.flags.refuse_host("signal")?;
        let s = match self.inner.signal_stream.get() {
            Some(s) => s,
            None => {
                let made = AscendStream::create(&self.inner.ctx)?;
                let _ = self.inner.signal_stream.set(made);
                self.inner
                    .signal_stream
                    .get()
                    .ok_or_else(|| Error::invalid("the notify's signal stream vanished"))?
            }
        };
        self.inner.record(&s.raw)?;
        s.wait(None)
    }

    fn wait(&self, opts: WaitOptions) -> Result<()> {
        self.inner.host_wait(opts)
    }

    fn wait_async(&self, opts: WaitOptions) -> WaitFuture<'_> {
        if let Err(e) = self
            .inner
            .flags
            .refuse_host("wait")
            .and_then(|()| self.inner.check_waiter())
        {
            return hal_core::wait::ready(Err(e));
        }
        let inner = Arc::clone(&self.inner);
        blocking_future(move || inner.host_wait(opts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_mapping_never_turns_a_bound_into_forever() {
        assert_eq!(vendor_timeout(None), 0, "the runtime's 0 is forever");
        assert_eq!(vendor_timeout(Some(Duration::ZERO)), 1);
        assert_eq!(vendor_timeout(Some(Duration::from_micros(10))), 1);
        assert_eq!(vendor_timeout(Some(Duration::from_millis(250))), 250);
    }
}
