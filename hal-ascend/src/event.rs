//! Events and IPC events.
//!
//! An interprocess event is created with `ACL_EVENT_IPC` alone (the
//! runtime refuses it OR-ed with other flags): it cannot be queried, reset
//! or timed, so [`Event::query`] answers `Unsupported` and the capability
//! set has no `IPC_EVENT_QUERY`. The exporter records it; importers open
//! the handle's 64 bytes (`aclrtIpcOpenEventHandle`) and wait on it, on a
//! stream or from the host. Importers are counted with leases: the
//! exporter destroys the event only after every importer that opened it
//! is gone, and an import after the exporter dropped its export is refused
//! by the broker before the runtime is asked.
//!
//! Host waits poll `aclrtSynchronizeEventWithTimeout` in slices of a
//! millisecond, which works on IPC events too.

use std::sync::{Arc, OnceLock};

use hal_core::exchange::{take_fds_leased, Lease};
use hal_core::export::{new_handle, HandleSpec};
use hal_core::lease::{LeaseTable, DEFAULT_SLOTS};
use hal_core::wait::blocking_future;
use hal_core::{
    BackendId, DeviceInfo, Error, Event, EventFlags, ExportOptions, Exported, HandleFlags,
    HandleKind, Importers, Location, Result, SharedHandle, WaitFuture, WaitOptions,
};

use crate::bindings::{
    aclrtIpcEventHandle, ACL_ERROR_RT_EVENT_SYNC_TIMEOUT, ACL_EVENT_IPC,
    ACL_EVENT_RECORDED_STATUS_COMPLETE, ACL_EVENT_SYNC, ACL_EVENT_TIME_LINE,
    ACL_IPC_EVENT_HANDLE_SIZE,
};
use crate::context::Ctx;
use crate::stream::{poll_until, SLICE};
use crate::sys::Raw;

/// The runtime's flag for `flags`: `ACL_EVENT_IPC` alone for an
/// interprocess event, else `SYNC`, with `TIME_LINE` for timing. An
/// interprocess event with timing asks for `ACL_EVENT_IPC | TIME_LINE`,
/// which the runtime refuses (`ACL_ERROR_RT_PARAM_INVALID`): the rule is
/// the runtime's, and its answer reaches the caller unchanged.
pub(crate) fn acl_flags(flags: EventFlags) -> u32 {
    match (flags.interprocess, flags.timing) {
        (true, false) => ACL_EVENT_IPC,
        (true, true) => ACL_EVENT_IPC | ACL_EVENT_TIME_LINE,
        (false, true) => ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE,
        (false, false) => ACL_EVENT_SYNC,
    }
}

/// The shared part of an event.
pub(crate) struct Inner {
    pub(crate) ctx: Arc<Ctx>,
    pub(crate) raw: Raw,
    pub(crate) interprocess: bool,
    /// Importers' leases, made at the first export.
    leases: OnceLock<Arc<LeaseTable>>,
    /// An imported event's lease on its exporter, given back after the
    /// event is destroyed.
    lease: Option<Lease>,
}

// SAFETY: an aclrtEvent is an opaque handle the runtime lets any thread
// use; this value only passes it to the runtime.
unsafe impl Send for Inner {}
// SAFETY: see `Send`.
unsafe impl Sync for Inner {}

/// An event of an Ascend device, or one imported from another process.
#[must_use = "the event is destroyed when this value drops"]
pub struct AscendEvent {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for AscendEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AscendEvent")
            .field("raw", &self.inner.raw)
            .field("interprocess", &self.inner.interprocess)
            .field("imported", &self.inner.lease.is_some())
            .finish()
    }
}

/// Create an event with `flags` on `ctx`'s device.
pub(crate) fn create(ctx: &Arc<Ctx>, flags: EventFlags) -> Result<AscendEvent> {
    let flag = acl_flags(flags);
    let rt = &ctx.rt;
    ctx.call(|| {
        let f = rt.create_event_ex_with_flag()?;
        let mut raw: Raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid place; the flag is one of the runtime's.
        rt.check("aclrtCreateEventExWithFlag", unsafe { f(&mut raw, flag) })?;
        Ok(AscendEvent {
            inner: Arc::new(Inner {
                ctx: Arc::clone(ctx),
                raw,
                interprocess: flags.interprocess,
                leases: OnceLock::new(),
                lease: None,
            }),
        })
    })
}

/// Export an IPC event: its 64-byte handle in the payload, importers
/// counted with leases.
pub(crate) fn export(
    info: &DeviceInfo,
    event: &AscendEvent,
    opts: &ExportOptions,
) -> Result<Exported> {
    let inner = &event.inner;
    if !inner.interprocess || inner.lease.is_some() {
        return Err(Error::invalid(
            "only an event created here with EventFlags::interprocess can be exported",
        ));
    }
    opts.importers
        .refuse_same_user("ascend", "an Ascend IPC event handle has no allow-list")?;
    if matches!(opts.importers, Importers::Pids(_)) || opts.read_only || opts.range.is_some() {
        return Err(Error::unsupported(
            "ascend",
            "an IPC event export with a pid list, a range or read-only",
            "an Ascend IPC event handle has no allow-list: export it to anyone",
        ));
    }
    let rt = &inner.ctx.rt;
    inner.ctx.call(|| {
        let f = rt.ipc_get_event_handle()?;
        let mut h = aclrtIpcEventHandle {
            reserved: [0; ACL_IPC_EVENT_HANDLE_SIZE as usize],
        };
        // SAFETY: the event is live; `h` is a valid place for the handle.
        rt.check("aclrtIpcGetEventHandle", unsafe { f(inner.raw, &mut h) })?;
        let spec = HandleSpec {
            kind: HandleKind::Event,
            backend: BackendId::Ascend,
            device: info.ordinal,
            device_uuid: info.uuid,
            location: Location::Device(info.ordinal),
            default_allow_list: false,
        };
        let mut handle = new_handle(&spec, &ExportOptions::default())?;
        // An IPC event cannot be queried: importers learn it from the handle.
        handle.flags.insert(HandleFlags::NO_QUERY);
        handle.payload = h.reserved.iter().map(|&c| c as u8).collect();
        if inner.leases.get().is_none() {
            let _ = inner.leases.set(LeaseTable::new(DEFAULT_SLOTS)?);
        }
        let leases = inner
            .leases
            .get()
            .cloned()
            .ok_or_else(|| Error::invalid("lease table vanished"))?;
        Exported::with_leases(handle, Vec::new(), leases)
    })
}

/// Open an exported IPC event on `ctx`'s device.
pub(crate) fn import(ctx: &Arc<Ctx>, mut shared: SharedHandle) -> Result<AscendEvent> {
    shared.handle.expect(HandleKind::Event, BackendId::Ascend)?;
    let payload = shared.handle.payload.clone();
    if payload.len() != ACL_IPC_EVENT_HANDLE_SIZE as usize {
        return Err(hal_core::HandleError::Malformed {
            field: "payload",
            detail: format!(
                "an Ascend IPC event handle is 64 bytes, this one {}",
                payload.len()
            ),
        }
        .into());
    }
    let taken = take_fds_leased(&mut shared)?;
    let mut h = aclrtIpcEventHandle {
        reserved: [0; ACL_IPC_EVENT_HANDLE_SIZE as usize],
    };
    for (d, s) in h.reserved.iter_mut().zip(&payload) {
        *d = *s as _;
    }
    let rt = &ctx.rt;
    ctx.call(|| {
        let f = rt.ipc_open_event_handle()?;
        let mut raw: Raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid place; the handle is passed by value.
        rt.check("aclrtIpcOpenEventHandle", unsafe { f(h, &mut raw) })?;
        Ok(AscendEvent {
            inner: Arc::new(Inner {
                ctx: Arc::clone(ctx),
                raw,
                interprocess: true,
                leases: OnceLock::new(),
                lease: taken.lease,
            }),
        })
    })
}

impl Inner {
    /// Wait up to one slice: true once the latest record completed.
    fn slice(&self) -> Result<bool> {
        let rt = &self.ctx.rt;
        self.ctx.call(|| {
            let f = rt.synchronize_event_with_timeout()?;
            // SAFETY: the event is live.
            let status = unsafe { f(self.raw, crate::stream::millis(SLICE) as i32) };
            if status as u32 == ACL_ERROR_RT_EVENT_SYNC_TIMEOUT {
                return Ok(false);
            }
            rt.check("aclrtSynchronizeEventWithTimeout", status)?;
            Ok(true)
        })
    }

    fn wait(&self, opts: WaitOptions) -> Result<()> {
        poll_until("the Ascend event", opts.spin, opts.timeout, || self.slice())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let rt = &self.ctx.rt;
        let destroyed = self.ctx.call(|| {
            let f = rt.destroy_event()?;
            // SAFETY: the event was created or opened here, destroyed once.
            rt.check("aclrtDestroyEvent", unsafe { f(self.raw) })
        });
        if let Err(e) = destroyed {
            log::warn!("destroying an Ascend event: {e}");
        }
    }
}

impl Drop for AscendEvent {
    fn drop(&mut self) {
        let Some(leases) = self.inner.leases.get().filter(|l| l.count() > 0).cloned() else {
            return;
        };
        // Importers hold it: the event is destroyed after they are gone.
        let inner = Arc::clone(&self.inner);
        let spawned = hal_core::os::thread::spawn("hal-ascend-deferred-event", move || {
            if let Err(e) = leases.wait_empty(None) {
                log::warn!("waiting for the importers of an Ascend IPC event: {e}");
            }
            drop(inner);
        });
        if let Err(e) = spawned {
            log::warn!("an imported Ascend IPC event is left alive: no thread waits ({e})");
        }
    }
}

impl Event for AscendEvent {
    fn query(&self) -> Result<bool> {
        let inner = &self.inner;
        if inner.interprocess {
            return Err(Error::unsupported(
                "ascend",
                "query an IPC event",
                "an event created with ACL_EVENT_IPC cannot be queried \
                 (Capabilities::IPC_EVENT_QUERY is absent); wait on it instead",
            ));
        }
        let rt = &inner.ctx.rt;
        inner.ctx.call(|| {
            let f = rt.query_event_status()?;
            let mut status = 0;
            // SAFETY: the event is live; `status` is a valid place.
            rt.check("aclrtQueryEventStatus", unsafe {
                f(inner.raw, &mut status)
            })?;
            Ok(status == ACL_EVENT_RECORDED_STATUS_COMPLETE)
        })
    }

    fn wait(&self, opts: WaitOptions) -> Result<()> {
        self.inner.wait(opts)
    }

    fn wait_async(&self, opts: WaitOptions) -> WaitFuture<'_> {
        let inner = Arc::clone(&self.inner);
        blocking_future(move || inner.wait(opts))
    }
}
