//! A subscriber of a channel: it opens the control region by name, imports
//! the slots' memory, receives samples and releases them.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::layout::{self, Control, Mode, SubState, TagAge, MAX_SUBSCRIBERS, QUEUED};
use super::options::SubscribeOptions;
use super::ticket::SampleTicket;
use super::{file, members, park};
use crate::dynamic::{DynDevice, DynEvent, DynMapping, DynStream};
use crate::kit::os::{self, Origin, PrivateFile};
use crate::{Error, EventFlags, Handle, ImportOptions, Memory, Result, WaitOptions};

/// The receiving end of a channel; dropping it unsubscribes (every sample
/// it has not received is released).
#[must_use = "dropping a Subscriber unsubscribes"]
pub struct Subscriber {
    name: String,
    file: PrivateFile,
    control: Control,
    mapping: Box<dyn DynMapping>,
    /// This subscriber's entry, and bit, in the control region.
    index: usize,
    /// The next sequence to look at (broadcast); threads that receive at
    /// once each claim a sequence from it, so none is received twice.
    cursor: AtomicU64,
    options: SubscribeOptions,
    origin: Origin,
    /// A stream-ordered channel's events, one per slot, imported.
    events: Vec<Box<dyn DynEvent>>,
    /// Samples released on a stream ([`Sample::release_on`]): each slot
    /// goes back once its event says the stream ran past it.
    deferred: Mutex<Vec<(usize, Box<dyn DynEvent>)>>,
    /// How many are deferred: a receive takes the lock only when some are.
    deferred_count: AtomicUsize,
}

impl Subscriber {
    /// Subscribe to the channel `name`, importing its slots onto `device`.
    /// In broadcast mode it receives the samples published from now on.
    ///
    /// [`Error::NotFound`] when the channel has no name (start its
    /// publisher first); [`Error::Closed`] when its publisher is gone;
    /// [`Error::Busy`] when it has [`MAX_SUBSCRIBERS`] subscribers already.
    pub fn open(
        device: &dyn DynDevice,
        name: &str,
        options: &SubscribeOptions,
    ) -> Result<Subscriber> {
        let (file, control) = file::open(name)?;
        let text = control.handle_text()?;
        let handle = Handle::from_text(&text)?;
        let mapping = device.import_memory(handle.into(), &ImportOptions::default())?;
        let shape = control.shape();
        let need = shape.slot_size * shape.slots as u64;
        if mapping.len() < need {
            return Err(Error::invalid(format!(
                "channel {name:?}'s memory has {} bytes; its {} slots of {} need {need}",
                mapping.len(),
                shape.slots,
                shape.slot_size
            )));
        }
        let events = if shape.ordered {
            (0..shape.slots as usize)
                .map(|slot| {
                    let text = control.event_text(slot)?;
                    device.import_event(Handle::from_text(&text)?.into(), &ImportOptions::default())
                })
                .collect::<Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        let (pid, start) = os::self_identity();
        let deadline = Instant::now() + options.timeout.unwrap_or(Duration::from_secs(60));
        let index = {
            let _locked = file.lock(deadline, "subscribing")?;
            let mut taken = None;
            for i in 0..MAX_SUBSCRIBERS {
                let (p, s, state) = control.subscriber(i)?;
                if matches!(state, SubState::Active | SubState::Joining) && !os::process_alive(p, s)
                {
                    // A dead subscriber's entry: its bits go when the
                    // publisher next reaps, or below.
                    control.set_subscriber_state(i, SubState::Free)?;
                }
                if control.subscriber(i)?.2 == SubState::Free
                    && control.claim_subscriber(i, pid, start)?
                {
                    taken = Some(i);
                    break;
                }
            }
            taken.ok_or_else(|| Error::Busy {
                what: format!("channel {name:?}: all {MAX_SUBSCRIBERS} subscriber entries"),
                holders: MAX_SUBSCRIBERS,
            })?
        };
        let joined_at = control.published()?;
        control.set_subscriber_state(index, SubState::Active)?;
        control.mask()?.fetch_or(1 << index, Ordering::AcqRel);
        // Bits a former subscriber of this entry left on samples published
        // before this one joined (a queue's claimed samples too) are stale.
        let mode = shape.mode;
        members::clear_bit(&control, index, |word| {
            mode == Mode::Broadcast
                && layout::tag_age(layout::split(word).0, joined_at) != TagAge::Older
        })?;
        Ok(Subscriber {
            name: name.to_string(),
            file,
            control,
            mapping,
            index,
            cursor: AtomicU64::new(joined_at),
            options: options.clone(),
            origin: Origin::here(),
            events,
            deferred: Mutex::new(Vec::new()),
            deferred_count: AtomicUsize::new(0),
        })
    }

    /// Whether the channel's samples may be published in stream order
    /// ([`ChannelOptions::stream_ordered`](super::ChannelOptions::stream_ordered)).
    pub fn stream_ordered(&self) -> bool {
        !self.events.is_empty()
    }

    /// Give back the slots of samples released on a stream whose stream
    /// ran past the release; how many are still waiting for their stream.
    /// Every receive does this first, and a wait for a sample does it
    /// while it waits; call it where a subscriber stops receiving for a
    /// while, so that the publisher gets its slots back.
    #[inline]
    pub fn settle(&self) -> Result<usize> {
        if self.deferred_count.load(Ordering::Acquire) == 0 {
            return Ok(0);
        }
        self.settle_deferred()
    }

    /// [`Subscriber::settle`] with samples released on streams.
    #[cold]
    fn settle_deferred(&self) -> Result<usize> {
        let mut deferred = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
        let mut kept = Vec::with_capacity(deferred.len());
        for (slot, event) in deferred.drain(..) {
            if event.query()? {
                self.release(slot);
            } else {
                kept.push((slot, event));
            }
        }
        *deferred = kept;
        self.deferred_count.store(deferred.len(), Ordering::Release);
        Ok(deferred.len())
    }

    /// This subscriber's entry in the control region.
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// The channel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many slots the channel has.
    pub fn slots(&self) -> usize {
        self.control.slots()
    }

    /// The channel's mode: broadcast or queue.
    pub fn mode(&self) -> Mode {
        self.control.shape().mode
    }

    /// The size of a slot: the most bytes a sample has.
    pub fn slot_size(&self) -> u64 {
        self.control.shape().slot_size
    }

    /// The imported memory of the slots.
    pub fn memory(&self) -> &dyn DynMapping {
        &*self.mapping
    }

    /// The next sample, waiting at most [`SubscribeOptions::timeout`].
    /// [`Error::Closed`] once the publisher closed or died and every sample
    /// for this subscriber was received.
    pub fn receive(&self) -> Result<Sample<'_>> {
        self.receive_timeout(self.options.timeout)
    }

    /// The next sample, waiting at most `timeout` (`None`: until there is
    /// one or the publisher is gone).
    pub fn receive_timeout(&self, timeout: Option<Duration>) -> Result<Sample<'_>> {
        self.check()?;
        self.settle()?;
        // A sample already there is taken without the wait's set-up.
        if let Some(sample) = self.take()? {
            return Ok(sample);
        }
        park::park_until(
            self.control.published_word()?,
            self.control.sub_sleepers()?,
            self.options.spin,
            timeout,
            || format!("a sample of channel {:?}", self.name),
            || self.take(),
            || self.look(),
        )
    }

    /// The next sample if one is there now.
    pub fn try_receive(&self) -> Result<Option<Sample<'_>>> {
        self.check()?;
        self.settle()?;
        self.take()
    }

    /// The sample of sequence `seq` in `slot`, which this subscriber just
    /// claimed: its length is checked against the slot, and a length no
    /// publisher writes gives the slot back and is an error.
    fn claimed(&self, slot: usize, seq: u64) -> Result<Sample<'_>> {
        match self.control.sample_len(slot) {
            Ok(len) => Ok(Sample {
                subscriber: self,
                slot,
                len,
                seq,
            }),
            Err(e) => {
                self.release(slot);
                Err(e)
            }
        }
    }

    /// A slot that holds a newer sample than `seq` says that `seq` was
    /// published, and its slot reused since. The publisher counts a sample
    /// as published before it writes the next one's word, so `seq` is below
    /// the count; a word that says otherwise was forged, and believing it
    /// would walk the cursor past samples never published (one step at a
    /// time, for as long as a forger keeps its tags ahead).
    fn check_reused(&self, seq: u64) -> Result<()> {
        let published = self.control.published()?;
        if seq < published {
            return Ok(());
        }
        Err(layout::corrupt(format!(
            "a slot whose sample is newer than sample {seq}, of which {published} were published"
        )))
    }

    fn check(&self) -> Result<()> {
        self.origin
            .check(format_args!("the subscriber of channel {:?}", self.name))
    }

    /// Between waits: slots released on streams that ran past go back, and
    /// a publisher that is gone ends the wait, once nothing is left to
    /// receive.
    fn look(&self) -> Result<()> {
        self.settle()?;
        if file::publisher_gone(&self.control)? && self.take_peek()?.is_none() {
            let (pid, _, state) = self.control.publisher()?;
            return Err(Error::Closed {
                what: match state {
                    layout::PubState::Closed => {
                        format!("channel {:?}: its publisher closed it", self.name)
                    }
                    layout::PubState::Open => {
                        format!("channel {:?}: its publisher (pid {pid}) died", self.name)
                    }
                },
            });
        }
        Ok(())
    }

    /// Whether a sample is there to receive (without taking it).
    fn take_peek(&self) -> Result<Option<()>> {
        let published = self.control.published()?;
        Ok(match self.control.shape().mode {
            Mode::Broadcast => (self.cursor.load(Ordering::Acquire) < published).then_some(()),
            Mode::Queue => (self.control.head()?.load(Ordering::Acquire) < published).then_some(()),
        })
    }

    fn take(&self) -> Result<Option<Sample<'_>>> {
        match self.control.shape().mode {
            Mode::Broadcast => self.take_broadcast(),
            Mode::Queue => self.take_queued(),
        }
    }

    fn take_broadcast(&self) -> Result<Option<Sample<'_>>> {
        let bit = 1u32 << self.index;
        loop {
            let seq = self.cursor.load(Ordering::Acquire);
            let slot = self.control.slot_of(seq);
            let (tag, pending) =
                layout::split(self.control.sample_word(slot)?.load(Ordering::Acquire));
            match layout::tag_age(tag, seq) {
                TagAge::Older => return Ok(None),
                // Published while this subscriber was not among the active
                // ones, and its slot reused since.
                TagAge::Newer => {
                    self.check_reused(seq)?;
                    self.advance(seq);
                }
                TagAge::This => {
                    if !self.advance(seq) {
                        // Another thread claimed this sequence first.
                        continue;
                    }
                    if pending & bit != 0 && pending != QUEUED {
                        return self.claimed(slot, seq).map(Some);
                    }
                }
            }
        }
    }

    fn take_queued(&self) -> Result<Option<Sample<'_>>> {
        let bit = 1u32 << self.index;
        let head = self.control.head()?;
        loop {
            let h = head.load(Ordering::Acquire);
            let slot = self.control.slot_of(h);
            let word = self.control.sample_word(slot)?;
            let seen = word.load(Ordering::Acquire);
            let (tag, pending) = layout::split(seen);
            match layout::tag_age(tag, h) {
                TagAge::Older => return Ok(None),
                TagAge::This if pending == QUEUED => {
                    if word
                        .compare_exchange(
                            seen,
                            layout::with_pending(seen, bit),
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        )
                        .is_ok()
                    {
                        let _ =
                            head.compare_exchange(h, h + 1, Ordering::AcqRel, Ordering::Acquire);
                        return self.claimed(slot, h).map(Some);
                    }
                }
                // Claimed by another subscriber, or its slot reused since:
                // help the head past it.
                TagAge::This => {
                    let _ = head.compare_exchange(h, h + 1, Ordering::AcqRel, Ordering::Acquire);
                }
                TagAge::Newer => {
                    self.check_reused(h)?;
                    let _ = head.compare_exchange(h, h + 1, Ordering::AcqRel, Ordering::Acquire);
                }
            }
        }
    }

    /// Wait on the host until a detached sample's bytes are there, as
    /// [`Sample::wait`] does (a stream-ordered channel's publisher may still
    /// be filling the slot on its stream).
    pub fn wait_ticket(&self, ticket: &SampleTicket) -> Result<()> {
        match self.events.get(ticket.slot) {
            Some(event) => event.wait(WaitOptions {
                timeout: self.options.timeout,
                ..WaitOptions::default()
            }),
            None => Ok(()),
        }
    }

    /// Release a detached sample's slot, as dropping its [`Sample`] does.
    /// A ticket of another subscriber (its slot out of this channel's
    /// range) is refused, and so is a release in a forked child
    /// ([`Error::Forked`]): the slot is the parent's, which may still read
    /// it.
    pub fn release_ticket(&self, ticket: SampleTicket) -> Result<()> {
        self.check()?;
        if ticket.slot >= self.control.slots() {
            return Err(Error::invalid(format!(
                "a sample ticket of slot {} on channel {:?} of {} slots",
                ticket.slot,
                self.name,
                self.control.slots()
            )));
        }
        self.release(ticket.slot);
        Ok(())
    }

    /// Move the cursor past `seq` if it is still there; false when another
    /// thread did first.
    fn advance(&self, seq: u64) -> bool {
        self.cursor
            .compare_exchange(seq, seq + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Give `slot` back to the publisher; nothing in a forked child, whose
    /// copies of the parent's samples are the parent's to release.
    fn release(&self, slot: usize) {
        if self.origin.forked() {
            return;
        }
        let bit = 1u32 << self.index;
        let Ok(word) = self.control.sample_word(slot) else {
            return;
        };
        let before = word.fetch_and(!(bit as u64), Ordering::AcqRel);
        if layout::split(before).1 == bit {
            let _ = self.control.bump_released();
        }
    }
}

impl Drop for Subscriber {
    /// Unsubscribes; samples released on a stream are waited for first (at
    /// most the subscriber's timeout, 60 s without one), so that neither
    /// the publisher nor the unmapping of the slots goes under work their
    /// streams still queue on them.
    fn drop(&mut self) {
        if self.origin.forked() {
            return;
        }
        let deferred =
            std::mem::take(&mut *self.deferred.lock().unwrap_or_else(|e| e.into_inner()));
        let patience = self.options.timeout.unwrap_or(Duration::from_secs(60));
        for (slot, event) in deferred {
            if let Err(e) = event.wait(WaitOptions::timeout(patience)) {
                log::warn!(
                    "channel {:?}: the stream that was to release slot {slot} did not run past \
                     its work on it ({e}); the slot is released with the subscriber",
                    self.name
                );
            }
        }
        if let Ok(mask) = self.control.mask() {
            mask.fetch_and(!(1 << self.index), Ordering::AcqRel);
        }
        let _ = members::clear_bit(&self.control, self.index, |_| false);
        let _ = self
            .control
            .set_subscriber_state(self.index, SubState::Free);
        let _ = self.control.bump_released();
        file::remove_if_gone(&self.file, Some(&self.control));
    }
}

/// A received sample: its bytes stay as they are until it is dropped,
/// which releases its slot.
#[must_use = "dropping a Sample releases it"]
pub struct Sample<'a> {
    subscriber: &'a Subscriber,
    slot: usize,
    len: u64,
    seq: u64,
}

impl Sample<'_> {
    /// The sample's sequence number (the publisher's count, from 0).
    pub fn sequence(&self) -> u64 {
        self.seq
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty sample.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where it starts in [`Subscriber::memory`].
    pub fn offset(&self) -> u64 {
        self.slot as u64 * self.subscriber.control.shape().slot_size
    }

    /// The memory it is part of (for device work on it).
    pub fn memory(&self) -> &dyn DynMapping {
        &*self.subscriber.mapping
    }

    /// Make `stream` wait until the sample's bytes are there: in a
    /// stream-ordered channel, until the publisher's stream ran the work it
    /// queued before [`Loan::publish_on`](super::Loan::publish_on) (the
    /// slot's event); otherwise they are there already. `device` is this
    /// subscriber's device.
    pub fn wait_on(&self, device: &dyn DynDevice, stream: &dyn DynStream) -> Result<()> {
        match self.subscriber.events.get(self.slot) {
            Some(event) => device.stream_wait_event(stream, &**event),
            None => Ok(()),
        }
    }

    /// Wait on the host until the sample's bytes are there (see
    /// [`Sample::wait_on`]), at most the subscriber's timeout. Reads
    /// ([`Sample::read`], [`Sample::to_vec`]) do this first.
    pub fn wait(&self) -> Result<()> {
        match self.subscriber.events.get(self.slot) {
            Some(event) => event.wait(WaitOptions {
                timeout: self.subscriber.options.timeout,
                ..WaitOptions::default()
            }),
            None => Ok(()),
        }
    }

    /// Release the sample once `stream` ran the work queued on it so far
    /// (device work that reads the slot): an event is recorded on `stream`,
    /// and the slot goes back to the publisher once it passed, at this
    /// subscriber's next receive or [`Subscriber::settle`]. `device` is
    /// this subscriber's device.
    pub fn release_on(self, device: &dyn DynDevice, stream: &dyn DynStream) -> Result<()> {
        // In a forked child: `Forked`, and the drop releases nothing.
        self.subscriber.check()?;
        let event = device.create_event(EventFlags::default())?;
        device.record_event(stream, &*event)?;
        let subscriber = self.subscriber;
        let slot = self.slot;
        // Not released now: the event holds the slot.
        std::mem::forget(self);
        let mut deferred = subscriber
            .deferred
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        deferred.push((slot, event));
        subscriber
            .deferred_count
            .store(deferred.len(), Ordering::Release);
        Ok(())
    }

    /// Copy bytes `offset ..` of the sample into `dst`.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(dst.len() as u64);
        if end.is_none_or(|e| e > self.len) {
            return Err(Error::invalid(format!(
                "{} bytes at {offset} of a sample of {}",
                dst.len(),
                self.len
            )));
        }
        self.wait()?;
        self.subscriber.mapping.read(self.offset() + offset, dst)
    }

    /// The sample as plain data, for a binding that cannot hold this
    /// borrow across calls: its slot stays held until
    /// [`Subscriber::release_ticket`] (or the subscriber's drop).
    pub fn detach(self) -> SampleTicket {
        let ticket = SampleTicket {
            slot: self.slot,
            seq: self.seq,
            offset: self.offset(),
            len: self.len,
        };
        // Not released: the ticket holds the slot now.
        std::mem::forget(self);
        ticket
    }

    /// The sample's bytes, copied.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut v = vec![0u8; self.len as usize];
        self.read(0, &mut v)?;
        Ok(v)
    }
}

impl Drop for Sample<'_> {
    fn drop(&mut self) {
        self.subscriber.release(self.slot);
    }
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber")
            .field("name", &self.name)
            .field("index", &self.index)
            .field("cursor", &self.cursor.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Sample<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sample")
            .field("channel", &self.subscriber.name)
            .field("sequence", &self.seq)
            .field("slot", &self.slot)
            .field("len", &self.len)
            .finish()
    }
}

/// A subscriber may be shared between threads (`Arc<Subscriber>`): each
/// receive claims its own sample, and releases touch only shared words.
const _: () = {
    const fn sync<T: Sync + Send>() {}
    sync::<Subscriber>();
};
