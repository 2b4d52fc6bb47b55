//! Events of the driver, and CUDA IPC events.
//!
//! **Create.** An interprocess event is `cuEventCreate(CU_EVENT_INTERPROCESS
//! | CU_EVENT_DISABLE_TIMING)`; with timing it is refused with the driver's
//! own answer, `CUDA_ERROR_INVALID_VALUE` (measured). Past the cap on live
//! IPC events ([`DEFAULT_IPC_EVENT_CAP`], 1000 as in PyTorch) the fallback is PyTorch's
//! stream synchronize: the event is an ordinary driver event without
//! timing, and [`record_event`] of it waits on the host until the stream
//! ran everything before the record. Such an event is complete whenever
//! another process looks at it, so its export carries no driver handle
//! and an importer gets a driver event that is never recorded there
//! (`cuEventQuery` answers success, `cuStreamWaitEvent` waits for nothing):
//! the same answers the exporter's event would give after the synchronize.
//!
//! **Export.** `cuIpcGetEventHandle`; the hal handle (kind Event) carries
//! the 64 bytes in its payload ([`Payload`]). An event created without the
//! interprocess flag is refused by the driver. Exports count their
//! importers with leases from the descriptor broker; the exporter's drop
//! waits for them before destroying the driver's event (using an IPC event
//! after its exporter destroyed it is undefined in CUDA).
//!
//! **Import.** The lease is taken first, then `cuIpcOpenEventHandle`; the
//! lease is kept with the event and let go after `cuEventDestroy_v2` of
//! the opened event. An import in the exporting process reaches the
//! original event instead (whether the driver opens its own process's
//! event handle is not measured; it refuses its own memory handles). An opened event answers `cuEventQuery` and
//! `cuStreamWaitEvent` (measured: `Capabilities::IPC_EVENT_QUERY`), and
//! has no timing.
//!
//! **The cap.** Every driver IPC event holds driver resources for as long
//! as any process has it open, so this process keeps at most
//! [`DEFAULT_IPC_EVENT_CAP`] of them alive, as PyTorch does; past the cap
//! an interprocess event is made without a driver IPC handle (above), and
//! the first time a warning is logged.
//!
//! Host waits on an event poll `cuEventQuery` (`stream.rs`'s policy).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use hal_core::exchange::{take_fds_leased, Lease};
use hal_core::kit::export::{new_handle, HandleSpec};
use hal_core::kit::os::lock::lock;
use hal_core::lease::LazyLeases;
use hal_core::wait::blocking_future;
use hal_core::{
    BackendId, DeviceInfo, Error, Event, EventFlags, ExportOptions, Exported, HandleKind,
    Importers, Location, Result, SharedHandle, VendorError, WaitFuture, WaitOptions,
};

use crate::context::Primary;
use crate::ffi::result::{event, ipc};
use crate::ffi::Event as EventHandle;
use crate::sync::stream::{poll_until, CudaStream};

/// `CU_EVENT_DISABLE_TIMING`.
pub(crate) const DISABLE_TIMING: u32 = 2;
/// `CU_EVENT_INTERPROCESS`.
const INTERPROCESS: u32 = 4;
/// The payload layout's version.
const PAYLOAD_VERSION: u8 = 1;
/// Bytes of a payload.
const PAYLOAD_LEN: usize = 2 + 64;

/// What an event handle of this backend carries beyond hal's fields.
///
/// | bytes | field |
/// | ---: | --- |
/// | 0 | version, 1 |
/// | 1 | 0: a driver IPC event; 1: past the cap, synchronized on record (no driver handle) |
/// | 2..66 | the driver's `CUipcEventHandle` (zero past the cap) |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Payload {
    pub(crate) synchronized: bool,
    pub(crate) ipc: [u8; 64],
}

impl Payload {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(PAYLOAD_LEN);
        b.push(PAYLOAD_VERSION);
        b.push(u8::from(self.synchronized));
        b.extend_from_slice(&self.ipc);
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Payload> {
        if b.len() != PAYLOAD_LEN {
            return Err(Error::malformed_payload(format!(
                "a CUDA event payload is {PAYLOAD_LEN} bytes, this one {}",
                b.len()
            )));
        }
        if b[0] != PAYLOAD_VERSION || b[1] > 1 {
            return Err(Error::malformed_payload(format!(
                "CUDA event payload version {} mode {} (this build reads version \
                 {PAYLOAD_VERSION}, modes 0 and 1)",
                b[0], b[1]
            )));
        }
        let mut ipc = [0u8; 64];
        ipc.copy_from_slice(&b[2..66]);
        Ok(Payload {
            synchronized: b[1] == 1,
            ipc,
        })
    }
}

/// This process's exported events, by the export's object id: what a
/// same-process import reaches.
fn own() -> &'static Mutex<HashMap<[u8; 16], Weak<RawEvent>>> {
    static OWN: OnceLock<Mutex<HashMap<[u8; 16], Weak<RawEvent>>>> = OnceLock::new();
    OWN.get_or_init(|| Mutex::new(HashMap::new()))
}

/// How many events this process's table of its own exports names (tests:
/// the table forgets destroyed events at the next export). Only with the
/// `testing` feature.
#[cfg(feature = "testing")]
pub fn own_exported_events() -> usize {
    lock(own()).len()
}

/// The driver's `CUDA_ERROR_INVALID_VALUE`, for what it refuses so.
fn invalid_value(message: String) -> Error {
    Error::Vendor(VendorError {
        backend: "cuda".into(),
        code: hal_core::kit::vendor::cuda::INVALID_VALUE.code,
        name: hal_core::kit::vendor::cuda::INVALID_VALUE.name.into(),
        message,
    })
}

/// A new event from `cuEventCreate(bits)`.
fn create_raw(primary: &Arc<Primary>, bits: u32, slot: Option<Slot>) -> Result<RawEvent> {
    let _ctx = primary.enter()?;
    let raw = event::create(&primary.driver, bits)?;
    Ok(RawEvent {
        primary: Arc::clone(primary),
        raw,
        _slot: slot,
    })
}

/// Create an event: an IPC event when `flags.interprocess` (the caller
/// checked the capability).
pub(crate) fn create(primary: &Arc<Primary>, flags: EventFlags) -> Result<CudaEvent> {
    let (bits, slot, ipc) = match (flags.interprocess, flags.timing) {
        (false, true) => (0, None, IpcMode::None),
        (false, false) => (DISABLE_TIMING, None, IpcMode::None),
        (true, true) => {
            // What the driver answers (measured), also past the cap.
            return Err(invalid_value(
                "cuEventCreate: CU_EVENT_INTERPROCESS needs CU_EVENT_DISABLE_TIMING \
                 (create the interprocess event without timing)"
                    .into(),
            ));
        }
        (true, false) => match Slot::take() {
            Some(slot) => (INTERPROCESS | DISABLE_TIMING, Some(slot), IpcMode::Driver),
            None => (DISABLE_TIMING, None, IpcMode::SyncOnRecord),
        },
    };
    Ok(CudaEvent {
        inner: Arc::new(create_raw(primary, bits, slot)?),
        flags,
        ipc,
        imported: false,
        leases: LazyLeases::default(),
        _lease: None,
    })
}

/// Record `event` on `stream`; past the cap, then wait until the stream
/// ran everything before the record.
pub(crate) fn record(primary: &Primary, stream: &CudaStream, event: &CudaEvent) -> Result<()> {
    {
        let _ctx = primary.enter()?;
        event::record(&primary.driver, event.inner.raw, stream.raw)?;
    }
    if event.ipc == IpcMode::SyncOnRecord {
        hal_core::kit::stream::methods::VendorStream::wait(stream, None)?;
    }
    Ok(())
}

/// Export `event` as [`Device::export_event`](hal_core::Device::export_event) does.
pub(crate) fn export(
    info: &DeviceInfo,
    event: &CudaEvent,
    opts: &ExportOptions,
) -> Result<Exported> {
    if event.imported {
        return Err(Error::invalid(
            "an imported event is exported again by its creator, not by an importer",
        ));
    }
    if opts.range.is_some() {
        return Err(Error::invalid("an event export takes no range"));
    }
    if opts.read_only {
        return Err(Error::invalid("an event cannot be exported read-only"));
    }
    opts.importers.refuse_same_user("cuda", "a CUDA IPC handle is opened by whoever holds its bytes: no broker checks the importer's user")?;
    if matches!(opts.importers, Importers::Pids(_)) {
        return Err(Error::unsupported(
            "cuda",
            "an export to a pid list",
            "CUDA keeps no allow-list of importers: export to anyone \
             (Capabilities::PID_ALLOW_LIST is absent)",
        ));
    }
    let mut handle_bytes = [0u8; 64];
    if event.ipc != IpcMode::SyncOnRecord {
        // The driver refuses an event created without CU_EVENT_INTERPROCESS.
        let primary = &event.inner.primary;
        let _ctx = primary.enter()?;
        handle_bytes = ipc::get_event_handle(&primary.driver, event.inner.raw)?;
    }
    let spec = HandleSpec {
        kind: HandleKind::Event,
        backend: BackendId::Cuda,
        device: info.ordinal,
        device_uuid: info.uuid,
        location: Location::Device(info.ordinal),
        default_allow_list: false,
    };
    let mut handle = new_handle(&spec, opts)?;
    handle.payload = Payload {
        synchronized: event.ipc == IpcMode::SyncOnRecord,
        ipc: handle_bytes,
    }
    .encode();
    let mut exported = lock(own());
    exported.retain(|_, w| w.strong_count() > 0);
    exported.insert(handle.object_id, Arc::downgrade(&event.inner));
    drop(exported);
    Exported::with_leases(handle, Vec::new(), event.leases.table()?)
}

/// Import as [`Device::import_event`](hal_core::Device::import_event) does.
pub(crate) fn import(
    primary: &Arc<Primary>,
    info: &DeviceInfo,
    mut shared: SharedHandle,
) -> Result<CudaEvent> {
    shared.handle.expect(HandleKind::Event, BackendId::Cuda)?;
    if shared.handle.device_uuid != info.uuid {
        return Err(Error::invalid(format!(
            "the event is on the device with UUID {} (ordinal {} of the exporter), not on \
             device {}: import it through that device",
            hal_core::kit::os::hex(&shared.handle.device_uuid),
            shared.handle.device,
            info.ordinal
        )));
    }
    let payload = Payload::decode(&shared.handle.payload)?;
    let taken = take_fds_leased(&mut shared)?;
    let own_event = || {
        lock(own())
            .get(&shared.handle.object_id)
            .and_then(Weak::upgrade)
            .ok_or_else(|| Error::NotFound {
                what: "the exported event was destroyed".into(),
            })
    };
    let (inner, ipc) = if shared.handle.is_own() {
        let mode = if payload.synchronized {
            IpcMode::SyncOnRecord
        } else {
            IpcMode::Driver
        };
        (own_event()?, mode)
    } else if payload.synchronized {
        // Never recorded here: complete, as the exporter's event is
        // whenever anyone looks at it.
        let inner = create_raw(primary, DISABLE_TIMING, None)?;
        (Arc::new(inner), IpcMode::SyncOnRecord)
    } else {
        let _ctx = primary.enter()?;
        let raw = ipc::open_event_handle(&primary.driver, &payload.ipc)?;
        let inner = RawEvent {
            primary: Arc::clone(primary),
            raw,
            _slot: None,
        };
        (Arc::new(inner), IpcMode::Driver)
    };
    Ok(CudaEvent {
        inner,
        flags: EventFlags {
            interprocess: true,
            timing: false,
        },
        ipc,
        imported: true,
        leases: LazyLeases::default(),
        _lease: taken.lease,
    })
}

/// What an event is to IPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IpcMode {
    /// Not an IPC event.
    None,
    /// A driver IPC event (`CU_EVENT_INTERPROCESS`, or opened by handle).
    Driver,
    /// An interprocess event past the cap on live IPC events: no driver
    /// handle; recording it synchronizes the stream, so that it is complete
    /// whenever anyone looks.
    SyncOnRecord,
}

/// An event of the driver.
#[must_use = "the event is destroyed when this value drops"]
pub struct CudaEvent {
    pub(crate) inner: Arc<RawEvent>,
    pub(crate) flags: EventFlags,
    pub(crate) ipc: IpcMode,
    /// Imported from an export (never exported again).
    pub(crate) imported: bool,
    /// Its importers' leases, made at the first export; its drop waits
    /// for them before the driver's event is destroyed.
    pub(crate) leases: LazyLeases,
    /// An importer's lease on the exporter's event, let go after the
    /// opened event is destroyed.
    pub(crate) _lease: Option<Lease>,
}

/// The driver's event, destroyed when the last holder (the event, a
/// waiter thread of a dropped `wait_async`, or the wait for an exported
/// event's importers) lets go.
pub(crate) struct RawEvent {
    pub(crate) primary: Arc<Primary>,
    pub(crate) raw: EventHandle,
    /// Its place among the live IPC events, given back after the destroy.
    pub(crate) _slot: Option<Slot>,
}

impl std::fmt::Debug for CudaEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaEvent")
            .field("raw", &self.inner.raw)
            .field("flags", &self.flags)
            .field("ipc", &self.ipc)
            .field("imported", &self.imported)
            .finish()
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        // While importers use it: CUDA makes using an IPC event after its
        // exporter destroyed it undefined, so the destroy waits for their
        // leases (the last holder of `inner` destroys it).
        let inner = Arc::clone(&self.inner);
        self.leases.release_when_unleased(
            "hal-cuda-deferred-event",
            || "a CUDA IPC event".into(),
            move || drop(inner),
        );
    }
}

impl Drop for RawEvent {
    fn drop(&mut self) {
        if self.primary.forked() {
            // A forked child: the context is the parent's; leave it be.
            return;
        }
        // The event was created for this value, which destroys it once,
        // when no one holds it any more.
        let destroyed = self
            .primary
            .enter()
            .and_then(|_ctx| event::destroy(&self.primary.driver, self.raw));
        if let Err(e) = destroyed {
            log::warn!("destroying a CUDA event: {e}");
        }
    }
}

impl RawEvent {
    fn query(&self) -> Result<bool> {
        let _ctx = self.primary.enter()?;
        event::query(&self.primary.driver, self.raw)
    }

    fn wait(&self, opts: WaitOptions) -> Result<()> {
        poll_until("the CUDA event", opts.spin, opts.timeout, || self.query())
    }
}

impl Event for CudaEvent {
    fn query(&self) -> Result<bool> {
        self.inner.query()
    }

    fn wait(&self, opts: WaitOptions) -> Result<()> {
        self.inner.wait(opts)
    }

    fn wait_async(&self, opts: WaitOptions) -> WaitFuture<'_> {
        let inner = Arc::clone(&self.inner);
        blocking_future(move || inner.wait(opts))
    }
}

/// The cap PyTorch keeps on live IPC events.
pub const DEFAULT_IPC_EVENT_CAP: usize = 1000;

static CAP: AtomicUsize = AtomicUsize::new(DEFAULT_IPC_EVENT_CAP);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static WARNED: AtomicBool = AtomicBool::new(false);

/// One of the live driver IPC events, given back when it drops (after the
/// event was destroyed).
#[derive(Debug)]
pub(crate) struct Slot(());

impl Slot {
    /// A slot, or `None` (and a warning, the first time) past the cap.
    pub(crate) fn take() -> Option<Slot> {
        let cap = CAP.load(Ordering::Relaxed);
        let taken = LIVE.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < cap).then_some(n + 1)
        });
        if taken.is_ok() {
            return Some(Slot(()));
        }
        if !WARNED.swap(true, Ordering::Relaxed) {
            log::warn!(
                "{cap} CUDA IPC events are alive in this process: further interprocess events \
                 carry no driver IPC handle, and recording one synchronizes the stream instead"
            );
        }
        None
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Set the cap on live IPC events (the default is
/// [`DEFAULT_IPC_EVENT_CAP`]). Only with the `testing` feature.
#[cfg(feature = "testing")]
pub fn set_ipc_event_cap(cap: usize) {
    CAP.store(cap, Ordering::Relaxed);
}

/// How many driver IPC events this process created are alive. Only with
/// the `testing` feature.
#[cfg(feature = "testing")]
pub fn live_ipc_events() -> usize {
    LIVE.load(Ordering::Acquire)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_refuse_other_layouts() {
        for synchronized in [false, true] {
            let p = Payload {
                synchronized,
                ipc: [7; 64],
            };
            let b = p.encode();
            assert_eq!(b.len(), PAYLOAD_LEN);
            assert_eq!(Payload::decode(&b).unwrap(), p);
            assert!(Payload::decode(&b[1..]).is_err());
            let mut v = b.clone();
            v[0] = 2;
            assert!(Payload::decode(&v).is_err());
            v = b.clone();
            v[1] = 2;
            assert!(Payload::decode(&v).is_err());
        }
    }
}
