//! The shared page of an event or a notify: one page of a sealed memfd
//! ([`SealedMemfd`]) with a magic word, a kind word, a count of sleeping
//! waiters and [`WORDS`] futex words, which a memfd-backed backend exports
//! and its importers map, so that events and notifies work across
//! processes.
//!
//! Layout (little-endian `u32` words):
//!
//! | offset | field |
//! |---|---|
//! | 0 | magic: the backend's, for the kind of object ([`PageKind::magic`]) |
//! | 4 | kind: the backend's, what the object is or its flags ([`PageKind::kind`]) |
//! | 8 | waiters: how many sleep on a futex word of the page, or are about to |
//! | 12 | zero |
//! | 16 + 4 `i` | futex word `i`, `i` < [`WORDS`] |
//!
//! The layout belongs to this library's version: processes that share a
//! page run builds of the same version.
//!
//! Waits spin for [`WaitOptions::spin`], then sleep on a futex word; a wake
//! makes the `futex` system call only while a waiter sleeps (the waiter
//! count), so an uncontended signal costs an atomic store. A waiter killed
//! while asleep leaves the count raised, which costs later wakes one system
//! call each, never a lost wake-up. Waits go through
//! [`spin_then_sleep`], so a wait whose
//! future was dropped ends within [`CANCEL_CHECK`](crate::wait::CANCEL_CHECK).
//!
//! Two protocols on a word are provided: a signal (a notify: set by
//! [`SyncPage::signal`], consumed by [`SyncPage::take_signal`]) and a
//! sequence (an event: numbers handed out by [`SyncPage::next_sequence`],
//! completed in order by [`SyncPage::complete`]).

use std::os::fd::OwnedFd;
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::time::Duration;

use crate::error::{Error, HandleError, Result};
use crate::kit::export::{KeepAlive, SealedMemfd};
use crate::kit::os;
use crate::types::WaitOptions;
use crate::wait::spin_then_sleep;

/// The length of a page, in bytes.
pub const PAGE_LEN: u64 = 4096;
/// How many futex words a page has.
pub const WORDS: usize = 8;

const MAGIC: usize = 0;
const KIND: usize = 4;
const WAITERS: usize = 8;
const FIRST_WORD: usize = 16;

/// What a page holds: written when it is created, checked when a peer's
/// page is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageKind {
    /// The backend's magic for this kind of object (four ASCII letters).
    pub magic: u32,
    /// The backend's kind word: what the object is, or its flags.
    pub kind: u32,
}

#[cfg(test)]
thread_local! {
    /// The `futex_wake` calls this thread made through [`SyncPage::wake`].
    static FUTEX_WAKES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A shared page of futex words (see the [module](self) documentation).
#[derive(Debug)]
pub struct SyncPage {
    mem: SealedMemfd,
    max_sleep: Option<Duration>,
    /// An importer's lease; given back when the page is dropped.
    _lease: Option<KeepAlive>,
    /// The process that made or imported the page: a child forked from
    /// it is refused every word (the events and notifies on the page are
    /// its parent's).
    origin: crate::kit::os::Origin,
}

impl SyncPage {
    /// A new page holding `kind`, its words zero, in a memfd named `label`.
    pub fn create(label: &str, kind: PageKind) -> Result<SyncPage> {
        let page = SyncPage::from(SealedMemfd::create(label, PAGE_LEN)?);
        page.slot(KIND)?.store(kind.kind, Ordering::Relaxed);
        page.slot(MAGIC)?.store(kind.magic, Ordering::Release);
        Ok(page)
    }

    /// Open a peer's page from its descriptor: a memfd sealed against size
    /// changes that holds a page ([`SealedMemfd::open`]) with `kind`'s magic
    /// and kind word, else [`HandleError::Descriptors`] saying that the
    /// descriptor does not hold `what` ("a CPU notify").
    pub fn open(fd: OwnedFd, kind: PageKind, what: &str) -> Result<SyncPage> {
        SyncPage::checked(SealedMemfd::open(fd, PAGE_LEN)?, kind, what)
    }

    /// `mem` as a page holding `kind`, else [`HandleError::Descriptors`].
    pub(crate) fn checked(mem: SealedMemfd, kind: PageKind, what: &str) -> Result<SyncPage> {
        let page = SyncPage::from(mem);
        if page.slot(MAGIC)?.load(Ordering::Acquire) != kind.magic || page.kind()? != kind.kind {
            return Err(
                HandleError::Descriptors(format!("the descriptor does not hold {what}")).into(),
            );
        }
        Ok(page)
    }

    /// Keep an importer's lease (an [`exchange::Lease`](crate::exchange::Lease))
    /// as long as the page.
    pub fn with_lease(mut self, lease: Option<impl Send + Sync + 'static>) -> SyncPage {
        self._lease = lease.map(KeepAlive::new);
        self
    }

    /// Sleep at most `nap` at a time, whatever the wait's timeout: for
    /// waiters that must look again now and then (a peer that died, a
    /// device that was lost).
    pub fn with_max_sleep(mut self, nap: Duration) -> SyncPage {
        self.max_sleep = Some(nap);
        self
    }

    /// The kind word.
    pub fn kind(&self) -> Result<u32> {
        Ok(self.slot(KIND)?.load(Ordering::Acquire))
    }

    /// Futex word `i` (< [`WORDS`]).
    pub fn word(&self, i: usize) -> Result<&AtomicU32> {
        if i >= WORDS {
            return Err(Error::invalid(format!(
                "word {i} of a sync page, which has {WORDS}"
            )));
        }
        self.slot(FIRST_WORD + 4 * i)
    }

    /// How many waiters sleep on the page, or are about to.
    pub fn waiters(&self) -> Result<u32> {
        Ok(self.slot(WAITERS)?.load(Ordering::SeqCst))
    }

    /// A duplicate of the page's descriptor, for an export.
    pub fn dup_fd(&self) -> Result<OwnedFd> {
        self.mem.dup_fd()
    }

    fn slot(&self, offset: usize) -> Result<&AtomicU32> {
        self.origin.check("an event or notify")?;
        self.mem.map().atomic_u32(offset)
    }

    /// The page's first byte in this process, for a device that must reach
    /// the page (registered host memory whose words streams write and wait
    /// on): [`PAGE_LEN`] bytes, page-aligned.
    pub fn as_ptr(&self) -> *mut u8 {
        self.mem.map().as_ptr()
    }

    /// The offset of word `i` in the page.
    pub const fn word_offset(i: usize) -> u64 {
        (FIRST_WORD + 4 * i) as u64
    }

    /// Wake every waiter sleeping on word `i`, after the caller changed it:
    /// no system call when nobody sleeps on the page.
    pub fn wake(&self, i: usize) -> Result<()> {
        let word = self.word(i)?;
        // Pairs with the fence of `sleep_while`: either this sees the
        // waiter counted, or the waiter sees the word changed.
        fence(Ordering::SeqCst);
        if self.waiters()? != 0 {
            #[cfg(test)]
            FUTEX_WAKES.with(|n| n.set(n.get() + 1));
            os::futex_wake(word, u32::MAX);
        }
        Ok(())
    }

    /// Sleep once on word `i`, counted among the waiters, while `sleep_on()`
    /// gives the value the word must still hold (`None`: do not sleep), for
    /// at most `timeout` (and the page's maximum sleep). Returns early when
    /// woken.
    pub fn sleep_while(
        &self,
        i: usize,
        sleep_on: impl Fn() -> Option<u32>,
        timeout: Option<Duration>,
    ) -> Result<()> {
        let word = self.word(i)?;
        let waiters = self.slot(WAITERS)?;
        let nap = match (timeout, self.max_sleep) {
            (Some(t), Some(m)) => Some(t.min(m)),
            (t, m) => t.or(m),
        };
        waiters.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if let Some(expected) = sleep_on() {
            os::futex_wait(word, expected, nap);
        }
        waiters.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    /// Wait until `done()` holds: spin for `opts.spin`, then sleep on word
    /// `i` ([`SyncPage::sleep_while`]) until `opts.timeout`
    /// ([`Error::Timeout`] naming `what`). An error
    /// from `done` ends the wait with it.
    pub fn wait_on(
        &self,
        i: usize,
        what: &str,
        opts: WaitOptions,
        mut done: impl FnMut() -> Result<bool>,
        sleep_on: impl Fn() -> Option<u32>,
    ) -> Result<()> {
        self.word(i)?;
        let mut failed = None;
        let r = spin_then_sleep(
            what,
            opts.spin,
            opts.timeout,
            || match done() {
                Ok(d) => d,
                Err(e) => {
                    failed = Some(e);
                    true
                }
            },
            |remaining| {
                let _ = self.sleep_while(i, &sleep_on, remaining);
            },
        );
        match failed {
            Some(e) => Err(e),
            None => r,
        }
    }

    // --- signals (notifies) ------------------------------------------------

    /// Signal word `i`: set it and wake its waiters. Signals given while
    /// nobody takes them collapse into one.
    pub fn signal(&self, i: usize) -> Result<()> {
        self.word(i)?.store(1, Ordering::SeqCst);
        self.wake(i)
    }

    /// Take the signal of word `i` if it is set (wait-and-reset). Any value
    /// but 0 reads as signalled (a confused peer's too).
    ///
    /// Polled with the swap alone, not a load first: after a load the
    /// waiter's cache holds the line shared and the swap needs a second
    /// coherence transaction to own it, about 10 ns per hop, which took a
    /// spinning round trip from 1.1x to 1.3x the raw atomic ping-pong
    /// (`halctl bench`, notify-spin-pingpong, on a 2-core VM, recorded by
    /// commit be81f85). Swapping 0 for 0 changes
    /// nothing.
    pub fn take_signal(&self, i: usize) -> Result<bool> {
        Ok(self.word(i)?.swap(0, Ordering::SeqCst) != 0)
    }

    /// Sleep while word `i` is not signalled, at most `timeout`.
    pub fn sleep_unsignalled(&self, i: usize, timeout: Option<Duration>) -> Result<()> {
        let word = self.word(i)?;
        self.sleep_while(i, || unsignalled(word), timeout)
    }

    /// Wait for the signal of word `i` and take it. `check` runs before
    /// every look at the signal; its error ends the wait (and leaves the
    /// signal for somebody else).
    pub fn wait_signal(
        &self,
        i: usize,
        what: &str,
        opts: WaitOptions,
        check: impl FnMut() -> Result<()>,
    ) -> Result<()> {
        let word = self.word(i)?;
        let look = checked(check, || self.take_signal(i));
        self.wait_on(i, what, opts, look, || unsignalled(word))
    }

    // --- sequences (events) ------------------------------------------------

    /// The next number of the sequence in word `i` (it wraps).
    pub fn next_sequence(&self, i: usize) -> Result<u32> {
        Ok(self.word(i)?.fetch_add(1, Ordering::SeqCst).wrapping_add(1))
    }

    /// The latest number handed out by [`SyncPage::next_sequence`] on word `i`.
    pub fn sequence(&self, i: usize) -> Result<u32> {
        Ok(self.word(i)?.load(Ordering::SeqCst))
    }

    /// Complete `seq` (and every earlier number) in word `i`, which holds
    /// the latest completed number, and wake its waiters. Completing an
    /// earlier number than the word holds changes nothing.
    pub fn complete(&self, i: usize, seq: u32) -> Result<()> {
        let word = self.word(i)?;
        let mut cur = word.load(Ordering::SeqCst);
        while !reached(cur, seq) {
            match word.compare_exchange(cur, seq, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        self.wake(i)
    }

    /// True when `target` (and every earlier number) has completed in word `i`.
    pub fn reached(&self, i: usize, target: u32) -> Result<bool> {
        Ok(reached(self.word(i)?.load(Ordering::SeqCst), target))
    }

    /// Sleep while `target` has not completed in word `i`, at most `timeout`.
    pub fn sleep_unreached(&self, i: usize, target: u32, timeout: Option<Duration>) -> Result<()> {
        let word = self.word(i)?;
        self.sleep_while(i, || unreached(word, target), timeout)
    }

    /// Wait until `target` completes in word `i`. `check` runs before every
    /// look; its error ends the wait.
    pub fn wait_reached(
        &self,
        i: usize,
        target: u32,
        what: &str,
        opts: WaitOptions,
        check: impl FnMut() -> Result<()>,
    ) -> Result<()> {
        let word = self.word(i)?;
        let look = checked(check, || self.reached(i, target));
        self.wait_on(i, what, opts, look, || unreached(word, target))
    }
}

impl From<SealedMemfd> for SyncPage {
    fn from(mem: SealedMemfd) -> SyncPage {
        SyncPage {
            mem,
            max_sleep: None,
            _lease: None,
            origin: crate::kit::os::Origin::here(),
        }
    }
}

/// `look`, after `check`, whose error it returns instead.
fn checked(
    mut check: impl FnMut() -> Result<()>,
    mut look: impl FnMut() -> Result<bool>,
) -> impl FnMut() -> Result<bool> {
    move || {
        check()?;
        look()
    }
}

/// The value to sleep on while the signal in `word` is not set.
fn unsignalled(word: &AtomicU32) -> Option<u32> {
    (word.load(Ordering::SeqCst) == 0).then_some(0)
}

/// True when the completed number `done` has reached `target` (wrapping).
fn reached(done: u32, target: u32) -> bool {
    (done.wrapping_sub(target) as i32) >= 0
}

/// The completed number to sleep on while `target` is not reached.
fn unreached(word: &AtomicU32, target: u32) -> Option<u32> {
    let done = word.load(Ordering::SeqCst);
    (!reached(done, target)).then_some(done)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    const TEST: PageKind = PageKind {
        magic: u32::from_le_bytes(*b"TSYN"),
        kind: 7,
    };

    fn wakes() -> usize {
        FUTEX_WAKES.with(|n| n.get())
    }

    fn descriptors(r: Result<SyncPage>) -> String {
        match r {
            Err(Error::InvalidHandle(HandleError::Descriptors(m))) => m,
            other => panic!("a Descriptors error, not {other:?}"),
        }
    }

    #[test]
    fn a_peer_opens_the_page_and_sees_its_words() {
        let page = SyncPage::create("syncpage-test", TEST).unwrap();
        let peer = SyncPage::open(page.dup_fd().unwrap(), TEST, "a test page").unwrap();
        assert_eq!(peer.kind().unwrap(), 7);
        page.word(3).unwrap().store(99, Ordering::SeqCst);
        assert_eq!(peer.word(3).unwrap().load(Ordering::SeqCst), 99);
        assert!(page.word(WORDS).is_err());
    }

    /// The layout of the module's table: word `i` at byte 16 + 4 `i`, where
    /// a device writes it through the page's address.
    #[test]
    fn word_offsets_follow_the_layout() {
        let page = SyncPage::create("syncpage-test", TEST).unwrap();
        assert_eq!(
            (SyncPage::word_offset(0), SyncPage::word_offset(1)),
            (16, 20)
        );
        for i in 0..WORDS {
            let at = page.word(i).unwrap() as *const AtomicU32 as usize;
            assert_eq!(
                (at - page.as_ptr() as usize) as u64,
                SyncPage::word_offset(i),
                "word {i}"
            );
        }
    }

    #[test]
    fn a_page_of_another_magic_or_kind_is_refused() {
        let page = SyncPage::create("syncpage-test", TEST).unwrap();
        let other_kind = PageKind { kind: 8, ..TEST };
        let msg = descriptors(SyncPage::open(
            page.dup_fd().unwrap(),
            other_kind,
            "a test page",
        ));
        assert_eq!(msg, "the descriptor does not hold a test page");
        let other_magic = PageKind {
            magic: u32::from_le_bytes(*b"XSYN"),
            ..TEST
        };
        descriptors(SyncPage::open(
            page.dup_fd().unwrap(),
            other_magic,
            "a test page",
        ));
        // A forged page: sealed, the right size, zero words.
        let forged =
            crate::kit::export::sealed_memfd("forged", PAGE_LEN, os::EXPORT_SEALS).unwrap();
        descriptors(SyncPage::open(forged, TEST, "a test page"));
    }

    #[test]
    fn an_unsealed_memfd_is_refused() {
        let fd = os::memfd("syncpage-test", PAGE_LEN, None).unwrap();
        let msg = descriptors(SyncPage::open(fd, TEST, "a test page"));
        assert!(msg.contains("not sealed"), "{msg}");
    }

    #[test]
    fn an_uncontended_signal_makes_no_system_call() {
        let page = SyncPage::create("syncpage-test", TEST).unwrap();
        let before = wakes();
        for _ in 0..3 {
            page.signal(0).unwrap();
        }
        let seq = page.next_sequence(1).unwrap();
        page.complete(2, seq).unwrap();
        assert_eq!(wakes(), before, "nobody sleeps: no futex_wake");
        assert!(page.take_signal(0).unwrap());
        assert!(!page.take_signal(0).unwrap(), "signals collapse into one");
        assert!(page.reached(2, seq).unwrap());
    }

    #[test]
    fn a_sleeping_waiter_is_woken() {
        let page = Arc::new(SyncPage::create("syncpage-test", TEST).unwrap());
        let waiter = {
            let page = Arc::clone(&page);
            std::thread::spawn(move || {
                let opts = WaitOptions {
                    timeout: Some(Duration::from_secs(30)),
                    spin: Duration::ZERO,
                };
                page.wait_signal(0, "a signal", opts, || Ok(()))
            })
        };
        while page.waiters().unwrap() == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let before = wakes();
        page.signal(0).unwrap();
        assert_eq!(wakes(), before + 1, "a waiter sleeps: one futex_wake");
        waiter.join().unwrap().unwrap();
        assert!(!page.take_signal(0).unwrap(), "the waiter took the signal");
    }

    /// A sleeper sleeps, counted among the waiters, until its word changes
    /// (a signal, a completed number); one whose word already holds what it
    /// waits for does not sleep, even with no timeout and no bound.
    #[test]
    fn sleepers_sleep_until_their_word_changes() {
        let page = Arc::new(SyncPage::create("syncpage-test", TEST).unwrap());
        page.complete(2, 5).unwrap();
        for signal in [true, false] {
            let sleeper = {
                let page = Arc::clone(&page);
                std::thread::spawn(move || {
                    if signal {
                        page.sleep_unsignalled(0, None)
                    } else {
                        page.sleep_unreached(2, 7, None)
                    }
                })
            };
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while page.waiters().unwrap() == 0 {
                assert!(std::time::Instant::now() < deadline, "never slept");
                std::thread::sleep(Duration::from_millis(1));
            }
            if signal {
                page.signal(0).unwrap();
            } else {
                page.complete(2, 7).unwrap();
            }
            sleeper.join().unwrap().unwrap();
        }
        page.sleep_unsignalled(0, None).unwrap();
        page.sleep_unreached(2, 6, None).unwrap();
        assert_eq!(page.waiters().unwrap(), 0);
    }

    #[test]
    fn sequences_complete_in_order_and_wrap() {
        let page = SyncPage::create("syncpage-test", TEST).unwrap();
        page.word(1).unwrap().store(u32::MAX - 1, Ordering::SeqCst);
        let a = page.next_sequence(1).unwrap();
        let b = page.next_sequence(1).unwrap();
        assert_eq!((a, b), (u32::MAX, 0));
        assert_eq!(page.sequence(1).unwrap(), 0);
        page.next_sequence(1).unwrap();
        assert_eq!(page.sequence(1).unwrap(), 1, "the latest handed out");
        page.word(2).unwrap().store(u32::MAX - 1, Ordering::SeqCst);
        assert!(!page.reached(2, a).unwrap());
        page.complete(2, b).unwrap();
        assert!(page.reached(2, a).unwrap() && page.reached(2, b).unwrap());
        page.complete(2, a).unwrap();
        assert_eq!(
            page.word(2).unwrap().load(Ordering::SeqCst),
            b,
            "never back"
        );
    }

    #[test]
    fn waits_time_out_stop_on_errors_and_bound_their_sleeps() {
        let page = SyncPage::create("syncpage-test", TEST)
            .unwrap()
            .with_max_sleep(Duration::from_millis(2));
        let opts = WaitOptions {
            timeout: Some(Duration::from_millis(30)),
            spin: Duration::ZERO,
        };
        let e = page
            .wait_reached(2, 1, "the test event", opts, || Ok(()))
            .unwrap_err();
        assert!(e.is_timeout(), "{e:?}");
        page.signal(0).unwrap();
        let e = page
            .wait_signal(0, "a signal", opts, || Err(Error::invalid("lost")))
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
        assert!(
            page.take_signal(0).unwrap(),
            "a failed check leaves the signal"
        );
        // No timeout, but the page's bound: the sleep returns.
        page.sleep_unsignalled(0, None).unwrap();
        assert_eq!(page.waiters().unwrap(), 0);
    }
}
