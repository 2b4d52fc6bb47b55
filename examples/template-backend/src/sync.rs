//! Events and notifies on a shared page ([`hal_core::kit::export::syncpage`]): a
//! one-page sealed memfd whose descriptor an export passes to importers.
//! Streams are host-synchronous, so recording completes at once.
//!
//! Page layout: magic `HTPL`, kind 1 (notify) or 2 (event); futex word 0
//! holds a notify's signal or an event's latest recorded sequence number,
//! word 1 an event's latest completed one.

use std::sync::Arc;

use hal_core::kit::export::syncpage::{PageKind, SyncPage};
use hal_core::wait::blocking_future;
use hal_core::{
    Error, Event, EventFlags, ExportOptions, Exported, HandleKind, Notify, NotifyFlags, Result,
    SharedHandle, WaitFuture, WaitOptions,
};

use crate::id::BACKEND_ID;
use crate::memory::handle;

const MAGIC: u32 = u32::from_le_bytes(*b"HTPL");
const NOTIFY_PAGE: PageKind = PageKind {
    magic: MAGIC,
    kind: 1,
};
const EVENT_PAGE: PageKind = PageKind {
    magic: MAGIC,
    kind: 2,
};
/// A notify's signal; an event's latest recorded sequence number.
const WORD: usize = 0;
/// An event's latest completed sequence number.
const DONE: usize = 1;

fn import_page(mut shared: SharedHandle, kind: HandleKind, page: PageKind) -> Result<SyncPage> {
    shared.handle.expect(kind, BACKEND_ID)?;
    let what = format!("a template {}", kind.name());
    SyncPage::import(&mut shared, page, &what, false)
}

fn export_page(page: &SyncPage, kind: HandleKind, opts: &ExportOptions) -> Result<Exported> {
    if opts.read_only || opts.range.is_some() {
        return Err(Error::invalid(format!(
            "read_only and range apply to memory exports, not to a {}",
            kind.name()
        )));
    }
    Exported::new(handle(kind, opts)?, vec![page.dup_fd()?])
}

/// A notify: any side may signal and wait; a wait consumes the signal.
#[derive(Debug, Clone)]
#[must_use = "the notify is gone when this value drops"]
pub struct TemplateNotify {
    page: Arc<SyncPage>,
    flags: NotifyFlags,
}

impl TemplateNotify {
    pub(crate) fn create(flags: NotifyFlags) -> Result<Self> {
        let page = SyncPage::create("hal-template-notify", NOTIFY_PAGE)?;
        Ok(TemplateNotify {
            page: Arc::new(page),
            flags,
        })
    }

    pub(crate) fn import(shared: SharedHandle) -> Result<Self> {
        Ok(TemplateNotify {
            page: Arc::new(import_page(shared, HandleKind::Notify, NOTIFY_PAGE)?),
            flags: NotifyFlags::default(),
        })
    }

    pub(crate) fn export(&self, opts: &ExportOptions) -> Result<Exported> {
        export_page(&self.page, HandleKind::Notify, opts)
    }

    /// Signal in stream order: at once, streams being host-synchronous.
    pub(crate) fn record(&self) -> Result<()> {
        self.page.signal(WORD)
    }

    /// Wait in stream order: the caller's thread waits here.
    pub(crate) fn stream_wait(&self, opts: WaitOptions) -> Result<()> {
        self.page
            .wait_signal(WORD, "a notify signal", opts, || Ok(()))
    }
}

impl Notify for TemplateNotify {
    fn signal(&self) -> Result<()> {
        self.flags.refuse_host("signal")?;
        self.record()
    }

    fn wait(&self, opts: WaitOptions) -> Result<()> {
        self.flags.refuse_host("wait")?;
        self.stream_wait(opts)
    }

    fn wait_async(&self, opts: WaitOptions) -> WaitFuture<'_> {
        let me = self.clone();
        blocking_future(move || me.wait(opts))
    }
}

/// An event: completion of the work recorded before it (at once, streams
/// being host-synchronous); its sequence numbers in the shared page let
/// another process query and wait on it.
#[derive(Debug, Clone)]
#[must_use = "the event is gone when this value drops"]
pub struct TemplateEvent {
    page: Arc<SyncPage>,
    flags: EventFlags,
}

impl TemplateEvent {
    pub(crate) fn create(flags: EventFlags) -> Result<Self> {
        let page = SyncPage::create("hal-template-event", EVENT_PAGE)?;
        Ok(TemplateEvent {
            page: Arc::new(page),
            flags,
        })
    }

    pub(crate) fn import(shared: SharedHandle) -> Result<Self> {
        Ok(TemplateEvent {
            page: Arc::new(import_page(shared, HandleKind::Event, EVENT_PAGE)?),
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

    /// Record: the work before it has run, so it completes at once.
    pub(crate) fn record(&self) -> Result<()> {
        let seq = self.page.next_sequence(WORD)?;
        self.page.complete(DONE, seq)
    }
}

impl Event for TemplateEvent {
    fn query(&self) -> Result<bool> {
        let target = self.page.sequence(WORD)?;
        self.page.reached(DONE, target)
    }

    fn wait(&self, opts: WaitOptions) -> Result<()> {
        let target = self.page.sequence(WORD)?;
        self.page
            .wait_reached(DONE, target, "an event", opts, || Ok(()))
    }

    fn wait_async(&self, opts: WaitOptions) -> WaitFuture<'_> {
        let me = self.clone();
        blocking_future(move || me.wait(opts))
    }
}
