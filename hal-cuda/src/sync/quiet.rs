//! Quiet for a driver call that waits for the device: no stream of the
//! context waits for a notify while it runs.
//!
//! Some driver calls wait for the work queued on the device before they do
//! theirs: `cuCtxSynchronize` by definition, `cuMemFree_v2`,
//! `cuMemFreeHost` and `cuMemHostUnregister` as driver 580 did on an H200
//! (measured, `tests/driver_waits.rs`; the driver API says frees "may
//! perform implicit synchronization"). Meanwhile the last three held every
//! other driver call of the process that was tried (registration, event
//! creation, destruction and record, allocation, stream creation, stream
//! writes) but `cuStreamQuery`: a thread that had to make one more driver
//! call before it signalled a notify a stream waited for hung for ever
//! beside them (RELIABILITY.md, bug 11). A stream wait for a notify has no
//! bound (another process signals it, late or never), so such a call must
//! not start while one is queued.
//!
//! This module keeps that rule for the waits this crate queues
//! ([`Quiet::track`]): each stream wait for a notify is followed, on its
//! stream, by a write of 1 to a slot of a registered page of this
//! process, so the host sees it passed without asking the driver. A call
//! that waits for the device first holds [`Quiet::hold`], which returns
//! once every tracked wait has passed, and keeps new ones from being
//! queued until the call returned:
//!
//! 1. without blocking anyone, it waits until the waits queued before it
//!    began have passed (a wait that never passes, a crashed peer's,
//!    keeps it here, and with it only the teardown that asked);
//! 2. it then keeps new waits out and waits for those queued meanwhile,
//!    for a patience that doubles from [`FIRST_PATIENCE`] to
//!    [`LAST_PATIENCE`]; past it, new waits are let in again and it goes
//!    back to 1. Busy pipelines, whose streams always
//!    have a wait in flight, are held back for at most the patience.
//!
//! Every opened device of this process shares its context's [`Quiet`]
//! ([`Quiet::of`]): a device opened twice, by two backends, is one
//! primary context to the driver.
//!
//! Waits queued by other code on the same context (a framework's
//! `cuStreamWaitValue32`, a wait on another process's IPC event) are not
//! seen here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::{Duration, Instant};

use hal_core::kit::os::lock::lock;
use hal_core::{Error, Result};

use crate::ffi::{Driver, Stream};
use crate::memory::host::{WordPage, WORDS};

/// The slots of one registered page.
const SLOTS: usize = WORDS;

/// How often the host looks at the slots while it waits.
const POLL: Duration = Duration::from_micros(200);

/// How long a holder first keeps new waits out while those queued
/// meanwhile pass.
const FIRST_PATIENCE: Duration = Duration::from_millis(10);

/// The longest it keeps them out at a time.
const LAST_PATIENCE: Duration = Duration::from_secs(1);

/// The patience after `p`: twice as long, up to [`LAST_PATIENCE`].
fn next_patience(p: Duration) -> Duration {
    (p * 2).min(LAST_PATIENCE)
}

/// A slot's value before its stream passed the wait.
const QUEUED: u32 = 0;
/// The value the stream writes once it passed the wait.
const PASSED: u32 = 1;

/// Where a slot is: its page and its index there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    page: usize,
    index: usize,
}

#[derive(Default)]
struct Slots {
    pages: Vec<Arc<WordPage>>,
    free: Vec<Slot>,
    /// Slots whose wait was queued and not yet seen passed.
    queued: Vec<Slot>,
}

impl Slots {
    fn word(&self, slot: Slot) -> &AtomicU32 {
        self.pages[slot.page].word(slot.index)
    }

    /// Move the slots whose wait passed back to the free list; true when
    /// none is left queued.
    fn reap(&mut self) -> bool {
        let mut i = 0;
        while i < self.queued.len() {
            let slot = self.queued[i];
            if self.word(slot).load(Ordering::Acquire) == PASSED {
                self.queued.swap_remove(i);
                self.free.push(slot);
            } else {
                i += 1;
            }
        }
        self.queued.is_empty()
    }

    /// True when none of `slots` is still queued.
    fn all_passed(&mut self, slots: &[Slot]) -> bool {
        self.reap();
        !slots.iter().any(|s| self.queued.contains(s))
    }
}

/// The stream waits for notifies this context has queued, and the lock
/// with which a call that waits for the device keeps new ones out.
#[derive(Default)]
pub(crate) struct Quiet {
    /// Its place in the registry.
    key: Key,
    /// Read while a wait is queued; written while a call that waits for the
    /// device runs.
    admit: RwLock<()>,
    slots: Mutex<Slots>,
}

/// Held while a call that waits for the device runs: no tracked stream
/// wait is queued, and none can be until it drops.
pub(crate) struct QuietGuard<'a> {
    _waits_out: RwLockWriteGuard<'a, ()>,
}

/// A primary context: the address of the library's
/// `cuDevicePrimaryCtxRetain` (one per loaded library) and the context's
/// handle.
pub(crate) type Key = (usize, usize);

/// The quiet of each primary context, shared by every opened device of it
/// and ended by the last.
type Registry = HashMap<Key, Weak<Quiet>>;

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

impl Quiet {
    /// The quiet of the primary context `key`: the one its other opened
    /// devices share, or a new one.
    pub(crate) fn of(key: Key) -> Arc<Quiet> {
        let mut registry = lock(&REGISTRY);
        let map = registry.get_or_insert_with(HashMap::new);
        if let Some(q) = map.get(&key).and_then(Weak::upgrade) {
            return q;
        }
        let q = Arc::new(Quiet {
            key,
            ..Quiet::default()
        });
        map.insert(key, Arc::downgrade(&q));
        q
    }

    /// Let go of a share of a context's quiet, the context current and not
    /// yet released: the last share unregisters the pages with
    /// `unregister` (`WordPage::unregister`; no stream of the context is
    /// left then: each holds a share).
    pub(crate) fn release(share: Arc<Quiet>, unregister: impl Fn(&WordPage) -> Result<()>) {
        let mut registry = lock(&REGISTRY);
        // Under the registry's lock, as `of`'s upgrade: one caller is last.
        let Some(last) = Arc::into_inner(share) else {
            return;
        };
        if let Some(map) = registry.as_mut() {
            map.remove(&last.key);
        }
        last.unregister(unregister);
    }

    /// Queue a stream wait for a notify with `queue`, then, on `stream`, a
    /// write that tells the host it passed. The context is current (a new
    /// page of slots is registered with it).
    pub(crate) fn track(
        &self,
        driver: &Driver,
        stream: Stream,
        queue: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let _admitted = self.admitted();
        let (slot, page) = self.take(driver)?;
        // The slot is written by this operation alone until the host saw it.
        let queued = queue().and_then(|()| page.queue_write(driver, stream, slot.index, PASSED));
        let mut slots = lock(&self.slots);
        match queued {
            Ok(()) => slots.queued.push(slot),
            // Nothing will write the slot.
            Err(_) => slots.free.push(slot),
        }
        queued
    }

    /// Wait until no tracked stream wait is queued, then keep new ones out
    /// until the returned guard drops (the module's steps 1 and 2).
    pub(crate) fn hold(&self) -> QuietGuard<'_> {
        let mut patience = FIRST_PATIENCE;
        loop {
            let before = lock(&self.slots).queued.clone();
            self.wait_passed(&before);
            if let Some(held) = self.keep_out(patience) {
                return held;
            }
            patience = next_patience(patience);
        }
    }

    /// Step 1: wait, keeping no one out, until the waits `before` passed.
    /// (A slot of `before` that passed and was taken again by a new wait
    /// is waited for again: longer, never wrongly shorter.)
    fn wait_passed(&self, before: &[Slot]) {
        while !lock(&self.slots).all_passed(before) {
            std::thread::sleep(POLL);
        }
    }

    /// Step 2: keep new waits out and wait for the queued ones, for at
    /// most `patience`; `None`, new waits let in again, past it.
    fn keep_out(&self, patience: Duration) -> Option<QuietGuard<'_>> {
        let waits_out = match self.admit.write() {
            Ok(d) => d,
            Err(poisoned) => poisoned.into_inner(),
        };
        let end = Instant::now() + patience;
        loop {
            if lock(&self.slots).reap() {
                return Some(QuietGuard {
                    _waits_out: waits_out,
                });
            }
            if Instant::now() >= end {
                return None;
            }
            std::thread::sleep(POLL);
        }
    }

    /// How many tracked waits have not been seen passed.
    #[cfg(test)]
    fn queued(&self) -> usize {
        let mut slots = lock(&self.slots);
        slots.reap();
        slots.queued.len()
    }

    /// Unregister the pages with `unregister`, the context current: at
    /// its release, when no stream of it is left.
    fn unregister(&self, unregister: impl Fn(&WordPage) -> Result<()>) {
        let mut slots = lock(&self.slots);
        for page in slots.pages.drain(..) {
            if let Err(e) = unregister(&page) {
                log::warn!(
                    "unregistering the stream-wait slots at {:#x}: {e}",
                    page.host_addr()
                );
            }
        }
        slots.free.clear();
        slots.queued.clear();
    }

    /// Let a tracked wait be queued (none is while a call that waits for
    /// the device runs).
    fn admitted(&self) -> RwLockReadGuard<'_, ()> {
        match self.admit.read() {
            Ok(d) => d,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A free slot set to [`QUEUED`] and its page, registering a new page
    /// when none is free.
    fn take(&self, driver: &Driver) -> Result<(Slot, Arc<WordPage>)> {
        let mut slots = lock(&self.slots);
        if slots.free.is_empty() {
            slots.reap();
        }
        if slots.free.is_empty() {
            let page = WordPage::register(driver, QUEUED)?;
            let n = slots.pages.len();
            slots.pages.push(Arc::new(page));
            slots
                .free
                .extend((0..SLOTS).rev().map(|index| Slot { page: n, index }));
        }
        let slot = slots
            .free
            .pop()
            .ok_or_else(|| Error::invalid("no free slot after a new page"))?;
        slots.word(slot).store(QUEUED, Ordering::Release);
        let page = Arc::clone(&slots.pages[slot.page]);
        Ok((slot, page))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;

    /// Longer than any step below needs: past it, a step hangs.
    const BOUND: Duration = Duration::from_secs(10);

    /// Run `f` on a thread of its own; its answer, or a failure (not a
    /// hang) when it has not returned within [`BOUND`].
    fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(BOUND)
            .unwrap_or_else(|_| panic!("{what} did not return"))
    }

    /// A slot marked queued, on a page that is not registered (the host
    /// logic only).
    fn queued(q: &Quiet) -> Slot {
        let mut slots = lock(&q.slots);
        if slots.free.is_empty() {
            let n = slots.pages.len();
            slots.pages.push(Arc::new(WordPage::unregistered(QUEUED)));
            slots
                .free
                .extend((0..SLOTS).rev().map(|index| Slot { page: n, index }));
        }
        let slot = slots.free.pop().unwrap();
        slots.word(slot).store(QUEUED, Ordering::Release);
        slots.queued.push(slot);
        slot
    }

    /// What the stream does once it passed the wait.
    fn pass(q: &Quiet, slot: Slot) {
        lock(&q.slots).word(slot).store(PASSED, Ordering::Release);
    }

    /// True when a tracked wait could be queued now.
    fn admits_waits(q: &Quiet) -> bool {
        q.admit.try_read().is_ok()
    }

    #[test]
    fn the_patience_doubles_up_to_its_cap() {
        assert_eq!(next_patience(FIRST_PATIENCE), FIRST_PATIENCE * 2);
        assert_eq!(next_patience(LAST_PATIENCE), LAST_PATIENCE);
        assert_eq!(
            next_patience(LAST_PATIENCE / 2 + FIRST_PATIENCE),
            LAST_PATIENCE
        );
    }

    #[test]
    fn a_context_has_one_quiet_and_its_last_share_unregisters_the_pages() {
        // A key no driver hands out (no entry point lives at address 1).
        let key = (1, std::process::id() as usize);
        let (a, b) = (Quiet::of(key), Quiet::of(key));
        assert!(
            Arc::ptr_eq(&a, &b),
            "two opens of a context share its quiet"
        );
        queued(&a);
        let unregistered = std::sync::Mutex::new(Vec::new());
        let note = |p: &WordPage| {
            lock(&unregistered).push(p.host_addr());
            Ok(())
        };
        Quiet::release(a, note);
        assert!(lock(&unregistered).is_empty(), "a share is left");
        assert!(lock(&REGISTRY).as_ref().unwrap().contains_key(&key));
        Quiet::release(b, note);
        assert_eq!(lock(&unregistered).len(), 1, "the one page, once");
        assert!(
            !lock(&REGISTRY).as_ref().unwrap().contains_key(&key),
            "the registry forgot the context"
        );
        let c = Quiet::of(key);
        assert_eq!(c.queued(), 0, "a new quiet after the last release");
        Quiet::release(c, note);
    }

    #[test]
    fn a_passed_wait_goes_back_to_the_free_list() {
        let q = Quiet::default();
        let (a, b) = (queued(&q), queued(&q));
        assert_eq!(q.queued(), 2);
        pass(&q, a);
        assert_eq!(q.queued(), 1);
        let mut slots = lock(&q.slots);
        assert!(slots.free.contains(&a) && !slots.free.contains(&b));
        assert!(!slots.all_passed(&[a, b]));
        assert!(slots.all_passed(&[a]));
        drop(slots);
        pass(&q, b);
        assert_eq!(q.queued(), 0);
        assert!(lock(&q.slots).all_passed(&[a, b]));
    }

    #[test]
    fn hold_returns_at_once_when_no_wait_is_queued_and_keeps_new_waits_out() {
        let q = Arc::new(Quiet::default());
        within("hold with nothing queued", move || {
            let held = q.hold();
            assert!(!admits_waits(&q), "a wait was let in while the holder runs");
            drop(held);
            assert!(admits_waits(&q));
        });
    }

    #[test]
    fn hold_waits_admitting_new_waits_for_the_waits_queued_before_it() {
        let q = Arc::new(Quiet::default());
        let slot = queued(&q);
        let returned = Arc::new(AtomicBool::new(false));
        let (tx, holder) = mpsc::channel();
        {
            let (q, returned) = (Arc::clone(&q), Arc::clone(&returned));
            std::thread::spawn(move || {
                let held = q.hold();
                returned.store(true, Ordering::SeqCst);
                drop(held);
                let _ = tx.send(());
            });
        }
        std::thread::sleep(Duration::from_millis(50));
        assert!(!returned.load(Ordering::SeqCst), "held past a queued wait");
        // Step 1 blocks nobody: a new wait can still be queued.
        assert!(admits_waits(&q));
        pass(&q, slot);
        holder
            .recv_timeout(BOUND)
            .expect("hold once the wait passed");
        assert!(returned.load(Ordering::SeqCst));
        assert_eq!(q.queued(), 0);
    }

    #[test]
    fn keeping_waits_out_waits_for_the_queued_ones_at_most_the_patience() {
        let q = Arc::new(Quiet::default());
        // Nothing queued: waits kept out at once, and while held.
        let held = q
            .keep_out(Duration::ZERO)
            .expect("waits kept out with nothing queued");
        assert!(!admits_waits(&q));
        drop(held);
        assert!(admits_waits(&q));
        // A wait that does not pass: waits are let in again past the patience.
        let slot = queued(&q);
        assert!(q.keep_out(Duration::from_millis(20)).is_none());
        assert!(admits_waits(&q), "waits were kept out past the patience");
        assert_eq!(q.queued(), 1);
        // A wait that passes while waits are kept out: held.
        let (tx, passed) = mpsc::channel();
        {
            let q = Arc::clone(&q);
            std::thread::spawn(move || {
                let end = Instant::now() + BOUND;
                // Passes once waits are kept out.
                while admits_waits(&q) && Instant::now() < end {
                    std::thread::sleep(Duration::from_micros(100));
                }
                pass(&q, slot);
                let _ = tx.send(());
            });
        }
        let held = q
            .keep_out(BOUND)
            .expect("waits kept out once the wait passed");
        assert!(!admits_waits(&q));
        drop(held);
        passed.recv_timeout(BOUND).expect("the passer");
        assert_eq!(q.queued(), 0);
    }

    #[test]
    fn waiting_for_passes_waits_only_for_the_waits_it_was_given() {
        let q = Arc::new(Quiet::default());
        let (a, b) = (queued(&q), queued(&q));
        pass(&q, a);
        // Returns although `b` is still queued.
        let q = within("wait for a passed wait", move || {
            q.wait_passed(&[a]);
            q
        });
        assert_eq!(q.queued(), 1);
        // Waits for `b` until it passes.
        let passed_all = Arc::new(AtomicBool::new(false));
        let (q2, s2) = (Arc::clone(&q), Arc::clone(&passed_all));
        let (tx, done) = mpsc::channel();
        std::thread::spawn(move || {
            q2.wait_passed(&[a, b]);
            s2.store(true, Ordering::SeqCst);
            let _ = tx.send(());
        });
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            !passed_all.load(Ordering::SeqCst),
            "returned past a queued wait"
        );
        pass(&q, b);
        done.recv_timeout(BOUND)
            .expect("return once the wait passed");
        assert_eq!(q.queued(), 0);
    }
}
