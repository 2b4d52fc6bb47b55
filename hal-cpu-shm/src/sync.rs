//! Streams, events and notifies on the host.
//!
//! Streams are host-synchronous: an operation "queued" on a [`CpuStream`]
//! runs at once, in order, on the calling thread, so recording an event marks
//! it complete and [`Device::synchronize`](hal_core::Device::synchronize)
//! returns at once.
//!
//! Events and notifies live in a shared page ([`hal_core::kit::export::syncpage`]: a
//! one-page sealed memfd) that an export passes to importers, so both work
//! across processes. Waits spin for [`WaitOptions::spin`] and then sleep on a
//! futex in that page; a signal makes a `futex` system call only when a
//! waiter sleeps (the page counts its waiters), so an uncontended signal
//! costs one atomic store.
//!
//! Page layout: the shared page's, with magic `HSYN` and kind 1 (notify) or
//! 2 (event); futex word 0 holds a notify's signalled flag or an event's
//! latest recorded sequence number, word 1 an event's latest completed one.

use std::sync::Arc;

use hal_core::kit::export::syncpage::{PageKind, SyncPage};
use hal_core::wait::blocking_future;
use hal_core::{
    BackendId, Error, Event, EventFlags, ExportOptions, Exported, HandleKind, ImportOptions,
    Notify, NotifyFlags, Result, SharedHandle, WaitFuture, WaitOptions,
};

use crate::memory::new_handle;

const MAGIC: u32 = u32::from_le_bytes(*b"HSYN");
const NOTIFY_PAGE: PageKind = PageKind {
    magic: MAGIC,
    kind: 1,
};
const EVENT_PAGE: PageKind = PageKind {
    magic: MAGIC,
    kind: 2,
};
/// A notify's signal; an event's latest recorded sequence number.
const W_WORD: usize = 0;
/// An event's latest completed sequence number.
const W_DONE: usize = 1;

/// A host-synchronous stream: work runs at once, in order.
///
/// # Events, notifies, streams
///
/// Streams are host-synchronous: operations run at once, in order. Events
/// and notifies live in a sealed one-page memfd that exports with the handle;
/// waits spin briefly ([`WaitOptions::spin`](hal_core::WaitOptions), zero
/// sleeps at once), then sleep on a futex with the timeout; an uncontended
/// signal makes no system call. Awaitable waits run on a waiter thread and
/// never block the executor. Notifies are not creator-only: both sides may
/// signal and wait.
#[derive(Debug, Default)]
pub struct CpuStream {
    _private: (),
}

impl CpuStream {
    pub(crate) fn new() -> Self {
        CpuStream::default()
    }
}

fn create_page(kind: PageKind) -> Result<Arc<SyncPage>> {
    Ok(Arc::new(SyncPage::create("hal-cpu-shm-sync", kind)?))
}

fn import_page(
    mut shared: SharedHandle,
    kind: HandleKind,
    page: PageKind,
) -> Result<Arc<SyncPage>> {
    shared.handle.expect(kind, BackendId::CpuShm)?;
    let what = format!("a CPU {}", kind.name());
    Ok(Arc::new(SyncPage::import(&mut shared, page, &what, false)?))
}

fn export_page(page: &SyncPage, kind: HandleKind, opts: &ExportOptions) -> Result<Exported> {
    if opts.read_only || opts.range.is_some() {
        return Err(Error::invalid(format!(
            "read_only and range apply to memory exports, not to a {}",
            kind.name()
        )));
    }
    let handle = new_handle(kind, opts)?;
    Exported::new(handle, vec![page.dup_fd()?])
}

/// A notify: a wake-up signal shared across processes. Any side (creator or
/// importer) may signal and wait; a wait consumes the signal (wait-and-reset),
/// and signals given while nobody waits collapse into one.
#[derive(Debug, Clone)]
#[must_use = "the notify is gone when this value drops"]
pub struct CpuNotify {
    page: Arc<SyncPage>,
    flags: NotifyFlags,
}

impl CpuNotify {
    pub(crate) fn create(flags: NotifyFlags) -> Result<CpuNotify> {
        Ok(CpuNotify {
            page: create_page(NOTIFY_PAGE)?,
            flags,
        })
    }

    pub(crate) fn import(shared: SharedHandle, _opts: &ImportOptions) -> Result<CpuNotify> {
        Ok(CpuNotify {
            page: import_page(shared, HandleKind::Notify, NOTIFY_PAGE)?,
            flags: NotifyFlags::default(),
        })
    }

    /// Signal in stream order: streams are host-synchronous, so at once.
    pub(crate) fn record(&self) -> Result<()> {
        self.page.signal(W_WORD)
    }

    /// Wait in stream order: the host-synchronous stream waits here.
    pub(crate) fn stream_wait(&self, opts: WaitOptions) -> Result<()> {
        self.page
            .wait_signal(W_WORD, "a notify signal", opts, || Ok(()))
    }

    pub(crate) fn export(&self, opts: &ExportOptions) -> Result<Exported> {
        export_page(&self.page, HandleKind::Notify, opts)
    }
}

impl Notify for CpuNotify {
    fn signal(&self) -> Result<()> {
        self.flags.refuse_host("signal")?;
        self.record()
    }

    /// Any value but 0 reads as signalled (a confused peer's too); the
    /// waiter that swaps it back to 0 consumes the signal. Several waiters
    /// spinning on one notify pass its cache line between them; a notify
    /// has one waiter in the usual case.
    fn wait(&self, opts: WaitOptions) -> Result<()> {
        self.flags.refuse_host("wait")?;
        self.stream_wait(opts)
    }

    fn wait_async(&self, opts: WaitOptions) -> WaitFuture<'_> {
        let me = self.clone();
        blocking_future(move || me.wait(opts))
    }
}

/// An event: completion of the work recorded before it. Streams are
/// host-synchronous, so a record completes at once; the sequence numbers in
/// shared memory let another process query and wait on it.
#[derive(Debug, Clone)]
#[must_use = "the event is gone when this value drops"]
pub struct CpuEvent {
    page: Arc<SyncPage>,
    flags: EventFlags,
}

impl CpuEvent {
    pub(crate) fn create(flags: EventFlags) -> Result<CpuEvent> {
        Ok(CpuEvent {
            page: create_page(EVENT_PAGE)?,
            flags,
        })
    }

    pub(crate) fn import(shared: SharedHandle, _opts: &ImportOptions) -> Result<CpuEvent> {
        Ok(CpuEvent {
            page: import_page(shared, HandleKind::Event, EVENT_PAGE)?,
            flags: EventFlags {
                interprocess: true,
                timing: false,
            },
        })
    }

    pub(crate) fn export(&self, opts: &ExportOptions) -> Result<Exported> {
        if !self.flags.interprocess {
            return Err(Error::invalid(
                "the event was created without EventFlags::interprocess; create it with that \
                 flag to export it",
            ));
        }
        export_page(&self.page, HandleKind::Event, opts)
    }

    /// The flags the event was created (or imported) with.
    pub fn flags(&self) -> EventFlags {
        self.flags
    }

    /// Record: every operation queued before has run (streams are
    /// host-synchronous), so the new sequence number completes at once.
    pub(crate) fn record(&self) -> Result<()> {
        let seq = self.page.next_sequence(W_WORD)?;
        self.page.complete(W_DONE, seq)
    }
}

impl Event for CpuEvent {
    fn query(&self) -> Result<bool> {
        let target = self.page.sequence(W_WORD)?;
        self.page.reached(W_DONE, target)
    }

    fn wait(&self, opts: WaitOptions) -> Result<()> {
        let target = self.page.sequence(W_WORD)?;
        self.page
            .wait_reached(W_DONE, target, "an event", opts, || Ok(()))
    }

    fn wait_async(&self, opts: WaitOptions) -> WaitFuture<'_> {
        let me = self.clone();
        blocking_future(move || me.wait(opts))
    }
}
