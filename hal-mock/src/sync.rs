//! Events and notifies whose state lives in shared memory (futex words in
//! a sealed memfd), so that they work across processes.
//!
//! The block is a shared page of [`hal_core::kit::export::syncpage`] (little-endian
//! `u32` words):
//!
//! | offset | field |
//! |---|---|
//! | 0 | magic: `HMEV` (event) or `HMNT` (notify) |
//! | 4 | kind: an event's flags (1 interprocess, 2 timing); 0 for a notify |
//! | 8 | sleeping waiters |
//! | 12 | zero |
//! | 16 | word 0: event, records enqueued; notify, the signal (not 0 = signalled) |
//! | 20 | word 1: event, records completed (futex word) |
//! | 24 | word 2: 1 once the creator destroyed the object |
//!
//! Every sleep lasts at most [`NAP`], so that waiters notice a lost device
//! or a destroyed object.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hal_core::exchange::Lease;
use hal_core::kit::export::syncpage::{PageKind, SyncPage, PAGE_LEN};
use hal_core::kit::os;
use hal_core::lease::{LazyLeases, LeaseTable};
use hal_core::wait::blocking_future;
use hal_core::{
    Capabilities, Error, Event, EventFlags, Notify, NotifyFlags, Result, WaitFuture, WaitOptions,
};

use crate::fault::FaultOp;
use crate::state::DevRef;
use crate::vendor::Api;

/// Size of a shared event or notify block.
pub(crate) const SYNC_LEN: u64 = PAGE_LEN;
const EVENT_MAGIC: u32 = u32::from_le_bytes(*b"HMEV");
const NOTIFY_MAGIC: u32 = u32::from_le_bytes(*b"HMNT");
/// What an importer opens: an IPC event without timing.
const IPC_EVENT: PageKind = PageKind {
    magic: EVENT_MAGIC,
    kind: FLAG_IPC,
};
const NOTIFY: PageKind = PageKind {
    magic: NOTIFY_MAGIC,
    kind: 0,
};
/// Word 0 of an event page: the sequence number of the latest record enqueued.
const RECORDED: usize = 0;
/// Word 0 of a notify page (a page is an event's or a notify's, never both):
/// the signal, set by a signal and taken by a wait.
const SIGNAL: usize = 0;
/// Word 1 of an event page: the latest record the stream completed.
const COMPLETED: usize = 1;
const DESTROYED: usize = 2;
const FLAG_IPC: u32 = 1;
const FLAG_TIMING: u32 = 2;
/// The longest a waiter sleeps before it looks again (for cancellation and
/// for peers that died).
pub(crate) const NAP: Duration = Duration::from_millis(20);

/// A shared block of futex words.
pub(crate) struct SyncWords {
    /// The page; an importer's lease goes with it.
    page: SyncPage,
    /// The creator's count of importers, made at the first export.
    leases: LazyLeases,
    /// When this process's stream last completed a record of the event (for
    /// the elapsed time between two events).
    completed_at: std::sync::Mutex<Option<std::time::Instant>>,
}

impl SyncWords {
    fn create(label: &str, kind: PageKind) -> Result<Arc<SyncWords>> {
        Ok(SyncWords::wrap(SyncPage::create(label, kind)?))
    }

    fn open(
        fd: OwnedFd,
        kind: PageKind,
        what: &str,
        lease: Option<Lease>,
    ) -> Result<Arc<SyncWords>> {
        Ok(SyncWords::wrap(
            SyncPage::open(fd, kind, what)?.with_lease(lease),
        ))
    }

    fn wrap(page: SyncPage) -> Arc<SyncWords> {
        Arc::new(SyncWords {
            page: page.with_max_sleep(NAP),
            leases: LazyLeases::default(),
            completed_at: std::sync::Mutex::new(None),
        })
    }

    /// The importers' lease table, made at the first export.
    pub(crate) fn leases(&self) -> Result<Arc<LeaseTable>> {
        self.leases.table()
    }

    /// Destroy the object as its creator's drop does: at once when no
    /// importer holds it, otherwise once the last one let go (on a thread
    /// of its own). The vendors make using an IPC event after its exporter
    /// destroyed it undefined (CUDA) and forbid destroying one before the
    /// importer is done (Ascend): the leases make the order right.
    ///
    /// A deferred destroy counts among the device's deferred releases
    /// ([`MockDevice::deferred_frees`](crate::MockDevice::deferred_frees))
    /// until it ran.
    fn destroy_when_unleased(self: &Arc<Self>, dev: &DevRef) {
        let held = self.leases.held();
        let Some(table) = held else {
            self.mark_destroyed();
            return;
        };
        let me = Arc::clone(self);
        let owner = dev.clone();
        owner.state().deferred.fetch_add(1, Ordering::AcqRel);
        let spawned = hal_core::kit::os::thread::spawn("hal-mock-deferred-destroy", move || {
            let _ = table.wait_empty(None);
            me.mark_destroyed();
            drop(me);
            owner.state().deferred.fetch_sub(1, Ordering::AcqRel);
        });
        if spawned.is_err() {
            dev.state().deferred.fetch_sub(1, Ordering::AcqRel);
            log::warn!("no thread to defer destroying an exported event or notify; destroyed now");
            self.mark_destroyed();
        }
    }

    fn mark_destroyed(&self) {
        if let Ok(w) = self.word(DESTROYED) {
            w.store(1, Ordering::Release);
        }
    }

    /// Refuse to use a block its creator destroyed (an importer that outlived
    /// the exporter's destroy: undefined behaviour on the vendors).
    fn live(&self) -> Result<()> {
        if self.destroyed() {
            return Err(Error::Closed {
                what: "the exporter destroyed this event or notify while it was still imported \
                       (using it afterwards is undefined on the vendors)"
                    .into(),
            });
        }
        Ok(())
    }

    fn word(&self, i: usize) -> Result<&AtomicU32> {
        self.page.word(i)
    }

    /// A duplicate of the descriptor, for an export.
    pub(crate) fn dup_fd(&self) -> Result<OwnedFd> {
        self.page.dup_fd()
    }

    fn destroyed(&self) -> bool {
        self.word(DESTROYED)
            .map(|w| w.load(Ordering::Acquire) != 0)
            .unwrap_or(true)
    }

    // --- event words -------------------------------------------------------

    /// Enqueue a record: the sequence number the stream completes.
    pub(crate) fn next_record(&self) -> Result<u32> {
        self.live()?;
        self.page.next_sequence(RECORDED)
    }

    /// The latest record enqueued.
    pub(crate) fn last_record(&self) -> Result<u32> {
        self.live()?;
        self.page.sequence(RECORDED)
    }

    /// True when record `target` (and every earlier one) has completed.
    pub(crate) fn reached(&self, target: u32) -> Result<bool> {
        self.page.reached(COMPLETED, target)
    }

    /// Complete record `seq` (stream side).
    pub(crate) fn complete(&self, seq: u32) -> Result<()> {
        *crate::state::lock(&self.completed_at) = Some(std::time::Instant::now());
        self.page.complete(COMPLETED, seq)
    }

    /// When this process completed the latest record, once every record so
    /// far has completed.
    pub(crate) fn completed_at(&self) -> Result<Option<std::time::Instant>> {
        let last = self.last_record()?;
        if !self.reached(last)? {
            return Ok(None);
        }
        Ok(*crate::state::lock(&self.completed_at))
    }

    /// Sleep until record `target` completes, or `nap` (at most [`NAP`]) passes.
    pub(crate) fn sleep_until_reached(&self, target: u32, nap: Option<Duration>) -> Result<()> {
        self.page.sleep_unreached(COMPLETED, target, nap)
    }

    // --- notify words ------------------------------------------------------

    /// Signal (record) a notify.
    pub(crate) fn signal(&self) -> Result<()> {
        self.live()?;
        self.page.signal(SIGNAL)
    }

    /// Take the signal if it is set (wait-and-reset).
    pub(crate) fn take_signal(&self) -> Result<bool> {
        self.live()?;
        self.page.take_signal(SIGNAL)
    }

    /// Sleep while the notify is not signalled, at most `nap` (and [`NAP`]).
    pub(crate) fn sleep_unsignalled(&self, nap: Option<Duration>) -> Result<()> {
        self.page.sleep_unsignalled(SIGNAL, nap)
    }
}

fn label(dev: &DevRef, what: &str) -> String {
    format!("hal-mock-{}-{}-{what}", dev.profile().name, dev.ordinal)
}

/// An event: stream-ordered completion, with its state in shared memory.
///
/// Records are numbered: recording enqueues the next number, the stream
/// completes it when it reaches it, and waits (host or stream) wait for the
/// number that was the latest when the wait began.
#[must_use = "the event is destroyed when this value drops"]
pub struct MockEvent {
    pub(crate) dev: DevRef,
    pub(crate) sync: Arc<SyncWords>,
    pub(crate) flags: EventFlags,
    pub(crate) imported: bool,
}

impl std::fmt::Debug for MockEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockEvent")
            .field("backend", &self.dev.name())
            .field("device", &self.dev.ordinal)
            .field("flags", &self.flags)
            .field("imported", &self.imported)
            .finish()
    }
}

impl MockEvent {
    pub(crate) fn create(dev: &DevRef, flags: EventFlags) -> Result<MockEvent> {
        let mut bits = 0;
        if flags.interprocess {
            bits |= FLAG_IPC;
        }
        if flags.timing {
            bits |= FLAG_TIMING;
        }
        Ok(MockEvent {
            dev: dev.clone(),
            sync: SyncWords::create(
                &label(dev, "event"),
                PageKind {
                    magic: EVENT_MAGIC,
                    kind: bits,
                },
            )?,
            flags,
            imported: false,
        })
    }

    /// Open an exported event's block; refused once its creator destroyed it.
    pub(crate) fn open(dev: &DevRef, fd: OwnedFd, lease: Option<Lease>) -> Result<MockEvent> {
        let sync = SyncWords::open(fd, IPC_EVENT, "a simulated IPC event without timing", lease)?;
        if sync.destroyed() {
            return Err(dev.err(
                dev.vendor().invalid_handle(),
                format!(
                    "{}: the exporter destroyed the event before it was opened",
                    Api::IpcOpenEvent.symbol(dev.vendor())
                ),
            ));
        }
        Ok(MockEvent {
            dev: dev.clone(),
            sync,
            flags: EventFlags {
                interprocess: true,
                timing: false,
            },
            imported: true,
        })
    }

    /// Destroy the event as a vendor driver does when its creator destroys
    /// it: at once, even while other processes hold it open. Their later
    /// records, queries and waits answer [`Error::Closed`] (undefined
    /// behaviour on CUDA's driver, made visible here); work already queued
    /// on streams completes. The contract's drop waits for the importers'
    /// leases instead. An imported event is left as it is.
    pub fn destroy_at_once(&self) {
        if !self.imported {
            self.sync.mark_destroyed();
        }
    }

    /// True when this event was imported from another process (or this one).
    pub fn is_imported(&self) -> bool {
        self.imported
    }

    /// The flags it was created with.
    pub fn flags(&self) -> EventFlags {
        self.flags
    }

    /// IPC events of vendors without [`Capabilities::IPC_EVENT_QUERY`]
    /// (Ascend: "cannot be reset, queried or timed") refuse queries.
    fn check_query(&self) -> Result<()> {
        if self.flags.interprocess && !self.dev.caps().contains(Capabilities::IPC_EVENT_QUERY) {
            return Err(Error::unsupported(
                self.dev.name(),
                Api::EventQuery.symbol(self.dev.vendor()),
                format!(
                    "an event created with {} cannot be queried or timed on this vendor; wait \
                     on it instead",
                    self.dev.vendor().ipc_event_flag()
                ),
            ));
        }
        Ok(())
    }
}

fn wait_event(dev: &DevRef, sync: &SyncWords, opts: WaitOptions) -> Result<()> {
    dev.enter(Api::EventSynchronize, Some(FaultOp::Wait))?;
    let target = sync.last_record()?;
    sync.page
        .wait_reached(COMPLETED, target, "the event to complete", opts, || {
            dev.alive()
        })
}

impl Event for MockEvent {
    fn query(&self) -> Result<bool> {
        self.check_query()?;
        self.dev.enter(Api::EventQuery, None)?;
        let target = self.sync.last_record()?;
        self.sync.reached(target)
    }

    fn wait(&self, opts: WaitOptions) -> Result<()> {
        wait_event(&self.dev, &self.sync, opts)
    }

    fn wait_async(&self, opts: WaitOptions) -> WaitFuture<'_> {
        let dev = self.dev.clone();
        let sync = Arc::clone(&self.sync);
        blocking_future(move || wait_event(&dev, &sync, opts))
    }
}

impl Drop for MockEvent {
    fn drop(&mut self) {
        if !self.imported {
            self.sync.destroy_when_unleased(&self.dev);
        }
    }
}

/// A notify: a wake-up signal in shared memory, recorded by one side and
/// waited-and-reset by the other.
#[must_use = "the notify is destroyed when this value drops"]
pub struct MockNotify {
    pub(crate) dev: DevRef,
    pub(crate) sync: Arc<SyncWords>,
    pub(crate) creator: bool,
    pub(crate) flags: NotifyFlags,
}

impl std::fmt::Debug for MockNotify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockNotify")
            .field("backend", &self.dev.name())
            .field("device", &self.dev.ordinal)
            .field("creator", &self.creator)
            .finish()
    }
}

impl MockNotify {
    pub(crate) fn create(dev: &DevRef, flags: NotifyFlags) -> Result<MockNotify> {
        Ok(MockNotify {
            dev: dev.clone(),
            sync: SyncWords::create(&label(dev, "notify"), NOTIFY)?,
            creator: true,
            flags,
        })
    }

    pub(crate) fn open(dev: &DevRef, fd: OwnedFd, lease: Option<Lease>) -> Result<MockNotify> {
        Ok(MockNotify {
            dev: dev.clone(),
            sync: SyncWords::open(fd, NOTIFY, "a simulated notify", lease)?,
            creator: false,
            flags: NotifyFlags::default(),
        })
    }

    /// True when this process created the notify (it was not imported).
    pub fn is_creator(&self) -> bool {
        self.creator
    }

    /// Refuse a wait by an importer on vendors where only the creator waits.
    pub(crate) fn check_waiter(&self) -> Result<()> {
        if !self.creator
            && self
                .dev
                .caps()
                .contains(Capabilities::CREATOR_ONLY_NOTIFY_WAIT)
        {
            return Err(Error::PermissionDenied {
                pid: Some(os::pid()),
                reason: format!(
                    "only the process that created a notify may wait on it ({}); importers \
                     record it",
                    Api::NotifyWait.symbol(self.dev.vendor())
                ),
            });
        }
        Ok(())
    }
}

fn wait_notify(dev: &DevRef, sync: &SyncWords, opts: WaitOptions) -> Result<()> {
    dev.enter(Api::NotifyWait, Some(FaultOp::Wait))?;
    sync.page
        .wait_signal(SIGNAL, "the notify to be signalled", opts, || {
            sync.live()?;
            dev.alive()
        })
}

impl Drop for MockNotify {
    fn drop(&mut self) {
        if self.creator {
            self.sync.destroy_when_unleased(&self.dev);
        }
    }
}

impl Notify for MockNotify {
    fn signal(&self) -> Result<()> {
        self.flags.refuse_host("signal")?;
        self.dev.alive()?;
        self.sync.signal()
    }

    fn wait(&self, opts: WaitOptions) -> Result<()> {
        self.flags.refuse_host("wait")?;
        self.check_waiter()?;
        wait_notify(&self.dev, &self.sync, opts)
    }

    fn wait_async(&self, opts: WaitOptions) -> WaitFuture<'_> {
        if let Err(e) = self
            .flags
            .refuse_host("wait")
            .and_then(|()| self.check_waiter())
        {
            return hal_core::wait::ready(Err(e));
        }
        let dev = self.dev.clone();
        let sync = Arc::clone(&self.sync);
        blocking_future(move || wait_notify(&dev, &sync, opts))
    }
}
