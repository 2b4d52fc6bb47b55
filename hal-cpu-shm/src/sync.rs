//! Streams, events and notifies on the host.
//!
//! Streams are host-synchronous: an operation "queued" on a [`CpuStream`]
//! runs at once, in order, on the calling thread, so recording an event marks
//! it complete and [`Device::synchronize`](hal_core::Device::synchronize)
//! returns at once.
//!
//! Events and notifies live in a small sealed memfd (one page) that an export
//! passes to importers, so both work across processes. Waits spin for
//! [`WaitOptions::spin`] and then sleep on a futex in that page; a signal
//! makes a `futex` system call only when a waiter sleeps (a waiter count sits
//! beside the futex word), so an uncontended signal costs one atomic store.
//!
//! Page layout (little-endian `u32` words): 0 magic `HSYN`, 4 kind (1 notify,
//! 2 event), 8 notify: signalled flag / event: recorded sequence, 12 sleeping
//! waiters, 16 event: completed sequence. A waiter killed while asleep leaves
//! the waiter count raised, which costs later signals one system call each,
//! never a lost wake-up.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use hal_core::os::{self, Prot, SharedMap};
use hal_core::wait::{blocking_future, spin_then_sleep};
use hal_core::{
    BackendId, Error, Event, EventFlags, ExportOptions, Exported, HandleError, HandleKind,
    ImportOptions, Notify, Result, SharedHandle, WaitFuture, WaitOptions,
};

use crate::memory::new_handle;
use crate::plumb;

const MAGIC: u32 = u32::from_le_bytes(*b"HSYN");
const KIND_NOTIFY: u32 = 1;
const KIND_EVENT: u32 = 2;
const PAGE: u64 = 4096;
const W_KIND: usize = 4;
const W_WORD: usize = 8;
const W_WAITERS: usize = 12;
const W_DONE: usize = 16;

/// A host-synchronous stream: work runs at once, in order.
#[derive(Debug, Default)]
pub struct CpuStream {
    _private: (),
}

impl CpuStream {
    pub(crate) fn new() -> Self {
        CpuStream::default()
    }
}

/// The shared page of an event or notify.
#[derive(Debug)]
struct Cell {
    map: SharedMap,
    fd: OwnedFd,
}

impl Cell {
    fn create(kind: u32) -> Result<Arc<Cell>> {
        let fd = os::memfd("hal-cpu-shm-sync", PAGE, None)?;
        os::add_seals(fd.as_fd(), os::EXPORT_SEALS)?;
        let map = SharedMap::map(fd.as_fd(), PAGE, 0, Prot::ReadWrite, None)?;
        map.atomic_u32(W_KIND)?.store(kind, Ordering::Relaxed);
        map.atomic_u32(0)?.store(MAGIC, Ordering::Release);
        Ok(Arc::new(Cell { map, fd }))
    }

    fn import(mut shared: SharedHandle, kind: HandleKind, want: u32) -> Result<Arc<Cell>> {
        shared.handle.expect(kind, BackendId::CpuShm)?;
        let fds = plumb::take_fds(&mut shared)?;
        let [fd]: [OwnedFd; 1] = fds.try_into().map_err(|v: Vec<OwnedFd>| {
            Error::from(HandleError::Descriptors(format!(
                "a CPU {} handle takes 1 descriptor, {} came",
                kind.name(),
                v.len()
            )))
        })?;
        os::verify_sealed_memfd(fd.as_fd(), PAGE)?;
        let map = SharedMap::map(fd.as_fd(), PAGE, 0, Prot::ReadWrite, None)?;
        if map.atomic_u32(0)?.load(Ordering::Acquire) != MAGIC
            || map.atomic_u32(W_KIND)?.load(Ordering::Acquire) != want
        {
            return Err(HandleError::Descriptors(format!(
                "the descriptor does not hold a CPU {}",
                kind.name()
            ))
            .into());
        }
        Ok(Arc::new(Cell { map, fd }))
    }

    fn word(&self, at: usize) -> Result<&AtomicU32> {
        self.map.atomic_u32(at)
    }

    fn export(&self, kind: HandleKind, opts: &ExportOptions) -> Result<Exported> {
        if opts.read_only || opts.range.is_some() {
            return Err(Error::invalid(format!(
                "read_only and range apply to memory exports, not to a {}",
                kind.name()
            )));
        }
        let handle = new_handle(kind, opts)?;
        plumb::exported(handle, vec![os::dup(self.fd.as_fd())?])
    }

    /// Wait until `done()`: spin, then sleep on the futex word `futex` while
    /// `sleep_on()` gives the value it must still hold (`None`: do not sleep).
    /// The waiter is counted while it may sleep, so that signals wake it.
    fn wait_on(
        &self,
        what: &str,
        futex: usize,
        opts: WaitOptions,
        mut done: impl FnMut() -> bool,
        sleep_on: impl Fn() -> Option<u32>,
    ) -> Result<()> {
        let word = self.word(futex)?;
        let waiters = self.word(W_WAITERS)?;
        spin_then_sleep(what, opts.spin, opts.timeout, &mut done, |remaining| {
            waiters.fetch_add(1, Ordering::SeqCst);
            if let Some(expected) = sleep_on() {
                os::futex_wait(word, expected, remaining);
            }
            waiters.fetch_sub(1, Ordering::SeqCst);
        })
    }

    /// Wake the sleepers of `futex`, with no system call when none sleeps.
    fn wake(&self, futex: usize) -> Result<()> {
        if self.word(W_WAITERS)?.load(Ordering::SeqCst) != 0 {
            os::futex_wake(self.word(futex)?, u32::MAX);
        }
        Ok(())
    }
}

/// A notify: a wake-up signal shared across processes. Any side (creator or
/// importer) may signal and wait; a wait consumes the signal (wait-and-reset),
/// and signals given while nobody waits collapse into one.
#[derive(Debug, Clone)]
pub struct CpuNotify {
    cell: Arc<Cell>,
}

impl CpuNotify {
    pub(crate) fn create() -> Result<CpuNotify> {
        Ok(CpuNotify {
            cell: Cell::create(KIND_NOTIFY)?,
        })
    }

    pub(crate) fn import(shared: SharedHandle, _opts: &ImportOptions) -> Result<CpuNotify> {
        Ok(CpuNotify {
            cell: Cell::import(shared, HandleKind::Notify, KIND_NOTIFY)?,
        })
    }

    pub(crate) fn export(&self, opts: &ExportOptions) -> Result<Exported> {
        self.cell.export(HandleKind::Notify, opts)
    }
}

impl Notify for CpuNotify {
    fn signal(&self) -> Result<()> {
        self.cell.word(W_WORD)?.store(1, Ordering::SeqCst);
        self.cell.wake(W_WORD)
    }

    fn wait(&self, opts: WaitOptions) -> Result<()> {
        let word = self.cell.word(W_WORD)?;
        // Any value but 0 reads as signalled (a confused peer's too); the
        // waiter that swaps it back to 0 consumes the signal.
        //
        // Polled with the swap alone, not a load first: after a load the
        // waiter's cache holds the line shared and the swap needs a second
        // coherence transaction to own it, about 10 ns per hop, which took a
        // spinning round trip from 1.1x to 1.3x the raw atomic ping-pong
        // (`halctl bench`, notify-spin-pingpong). Swapping 0 for 0 changes
        // nothing. Several waiters spinning on one notify pass the line
        // between them; a notify has one waiter in the usual case.
        let take = || word.swap(0, Ordering::SeqCst) != 0;
        let sleep_on = || (word.load(Ordering::SeqCst) == 0).then_some(0);
        self.cell
            .wait_on("a notify signal", W_WORD, opts, take, sleep_on)
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
pub struct CpuEvent {
    cell: Arc<Cell>,
    flags: EventFlags,
}

impl CpuEvent {
    pub(crate) fn create(flags: EventFlags) -> Result<CpuEvent> {
        Ok(CpuEvent {
            cell: Cell::create(KIND_EVENT)?,
            flags,
        })
    }

    pub(crate) fn import(shared: SharedHandle, _opts: &ImportOptions) -> Result<CpuEvent> {
        Ok(CpuEvent {
            cell: Cell::import(shared, HandleKind::Event, KIND_EVENT)?,
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
        self.cell.export(HandleKind::Event, opts)
    }

    /// The flags the event was created (or imported) with.
    pub fn flags(&self) -> EventFlags {
        self.flags
    }

    /// Record: every operation queued before has run (streams are
    /// host-synchronous), so the new sequence number completes at once.
    pub(crate) fn record(&self) -> Result<()> {
        let seq = self
            .cell
            .word(W_WORD)?
            .fetch_add(1, Ordering::SeqCst)
            .wrapping_add(1);
        let done = self.cell.word(W_DONE)?;
        let mut cur = done.load(Ordering::SeqCst);
        while !reached(cur, seq) {
            match done.compare_exchange(cur, seq, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        self.cell.wake(W_DONE)
    }
}

/// True when the completed sequence `done` has reached `target` (wrapping).
fn reached(done: u32, target: u32) -> bool {
    (done.wrapping_sub(target) as i32) >= 0
}

impl Event for CpuEvent {
    fn query(&self) -> Result<bool> {
        let target = self.cell.word(W_WORD)?.load(Ordering::SeqCst);
        Ok(reached(
            self.cell.word(W_DONE)?.load(Ordering::SeqCst),
            target,
        ))
    }

    fn wait(&self, opts: WaitOptions) -> Result<()> {
        let target = self.cell.word(W_WORD)?.load(Ordering::SeqCst);
        let done = self.cell.word(W_DONE)?;
        self.cell.wait_on(
            "an event",
            W_DONE,
            opts,
            || reached(done.load(Ordering::SeqCst), target),
            || {
                let d = done.load(Ordering::SeqCst);
                (!reached(d, target)).then_some(d)
            },
        )
    }

    fn wait_async(&self, opts: WaitOptions) -> WaitFuture<'_> {
        let me = self.clone();
        blocking_future(move || me.wait(opts))
    }
}
