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

use std::sync::Arc;

use hal_core::exchange::{take_fds_leased, Lease};
use hal_core::kit::export::{new_handle, HandleSpec};
use hal_core::lease::LazyLeases;
use hal_core::wait::blocking_future;
use hal_core::{
    BackendId, DeviceInfo, Error, Event, EventFlags, ExportOptions, Exported, HandleFlags,
    HandleKind, Importers, Location, Result, SharedHandle, WaitFuture, WaitOptions,
};

use crate::context::Ctx;
use crate::ffi::bindings::{ACL_EVENT_IPC, ACL_EVENT_SYNC, ACL_EVENT_TIME_LINE};
use crate::ffi::result::event::{self, HANDLE_LEN};
use crate::ffi::sys::EventHandle;
use crate::sync::stream::{between_slices, millis, SLICE};

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
    pub(crate) raw: EventHandle,
    pub(crate) interprocess: bool,
    /// Importers' leases, made at the first export.
    leases: LazyLeases,
    /// An imported event's lease on its exporter, given back after the
    /// event is destroyed.
    lease: Option<Lease>,
}

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
    ctx.call(|| {
        Ok(AscendEvent {
            inner: Arc::new(Inner {
                ctx: Arc::clone(ctx),
                raw: event::create(&ctx.rt, flag)?,
                interprocess: flags.interprocess,
                leases: LazyLeases::default(),
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
    opts.importers.refuse_same_user(
        hal_core::BackendId::Ascend,
        "an Ascend IPC event handle has no allow-list",
    )?;
    if matches!(opts.importers, Importers::Pids(_)) || opts.read_only || opts.range.is_some() {
        return Err(Error::unsupported(
            hal_core::BackendId::Ascend,
            "an IPC event export with a pid list, a range or read-only",
            "an Ascend IPC event handle has no allow-list: export it to anyone",
        ));
    }
    inner.ctx.call(|| {
        let h = event::ipc_handle(&inner.ctx.rt, &inner.raw)?;
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
        handle.payload = h.to_vec();
        Exported::with_leases(handle, Vec::new(), inner.leases.table()?)
    })
}

/// Open an exported IPC event on `ctx`'s device.
pub(crate) fn import(ctx: &Arc<Ctx>, mut shared: SharedHandle) -> Result<AscendEvent> {
    shared.handle.expect(HandleKind::Event, BackendId::Ascend)?;
    let payload = shared.handle.payload.clone();
    let Ok(h) = <[u8; HANDLE_LEN]>::try_from(payload.as_slice()) else {
        return Err(hal_core::Error::malformed_payload(format!(
            "an Ascend IPC event handle is 64 bytes, this one {}",
            payload.len()
        )));
    };
    let taken = take_fds_leased(&mut shared)?;
    ctx.call(|| {
        Ok(AscendEvent {
            inner: Arc::new(Inner {
                ctx: Arc::clone(ctx),
                raw: event::ipc_open(&ctx.rt, &h)?,
                interprocess: true,
                leases: LazyLeases::default(),
                lease: taken.lease,
            }),
        })
    })
}

impl Inner {
    /// Wait up to one slice: true once the latest record completed.
    fn slice(&self) -> Result<bool> {
        let ms = millis(SLICE) as i32;
        self.ctx
            .call(|| event::synchronize(&self.ctx.rt, &self.raw, ms))
    }

    fn wait(&self, opts: WaitOptions) -> Result<()> {
        let (spin, timeout) = (opts.spin, opts.timeout);
        let done = || self.slice();
        hal_core::wait::poll_until("the Ascend event", spin, timeout, done, between_slices)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Created or opened here, destroyed once.
        let raw = self.raw.take();
        let destroyed = self.ctx.call(|| event::destroy(&self.ctx.rt, raw));
        if let Err(e) = destroyed {
            log::warn!("destroying an Ascend event: {e}");
        }
    }
}

impl Drop for AscendEvent {
    fn drop(&mut self) {
        // While importers hold it, the event is destroyed after they are
        // gone (the last holder of `inner` destroys it).
        let inner = Arc::clone(&self.inner);
        self.inner.leases.release_when_unleased(
            "hal-ascend-deferred-event",
            || "an Ascend IPC event".into(),
            move || drop(inner),
        );
    }
}

impl Event for AscendEvent {
    fn query(&self) -> Result<bool> {
        let inner = &self.inner;
        if inner.interprocess {
            return Err(Error::unsupported(
                hal_core::BackendId::Ascend,
                "query an IPC event",
                "an event created with ACL_EVENT_IPC cannot be queried \
                 (Capabilities::IPC_EVENT_QUERY is absent); wait on it instead",
            ));
        }
        inner.ctx.call(|| event::query(&inner.ctx.rt, &inner.raw))
    }

    fn wait(&self, opts: WaitOptions) -> Result<()> {
        self.inner.wait(opts)
    }

    fn wait_async(&self, opts: WaitOptions) -> WaitFuture<'_> {
        let inner = Arc::clone(&self.inner);
        blocking_future(move || inner.wait(opts))
    }
}
