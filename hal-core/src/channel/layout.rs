//! The control region of a channel (a sealed memfd of the publisher's,
//! found through its name: see the `record` module): a header, the handle of the slots'
//! memory, a ring of published samples, one word per slot, and one entry
//! per subscriber. Every field is read as another process may have written
//! it: a slot index, a length or a handle length out of range is an error,
//! never an index or a read out of bounds.
//!
//! | offset | field |
//! |---|---|
//! | 0 | magic `HCHN`, version (`u32` each) |
//! | 8 | slots, mode (0 broadcast, 1 queue) |
//! | 16 | slot size (`u64`) |
//! | 24 | publisher's pid, publisher's state (1 open, 2 closed) |
//! | 32 | publisher's process start time (`u64`) |
//! | 64 | published: samples published so far (`u64`; its low word is the futex subscribers sleep on) |
//! | 72 | how many subscribers sleep on it (a publish makes the wake system call only then) |
//! | 76 | the bits of the active subscribers |
//! | 128 | released: bumped, while the publisher sleeps, when a slot frees or a subscriber leaves |
//! | 132 | how many publishers sleep on it |
//! | 136 | length of the handle text |
//! | 140 | flags: bit 0, stream-ordered (the slots' events follow the subscriber entries) |
//! | 192 | head: the next sample a queue's subscribers claim (`u64`) |
//! | 256 | the handle text of the slots' memory, up to [`MAX_HANDLE`] bytes |
//! | `SLOTS` | `slots` descriptors of 64 bytes (a cache line each): sample word (`u64`: one more than the sequence's low 32 bits above, pending subscribers below), length (`u64`) |
//! | after | [`MAX_SUBSCRIBERS`] entries of 32 bytes: pid, state (0 free, 1 joining, 2 active), start time (`u64`) |
//! | after | stream-ordered channels only: `slots` entries of 1 KiB, the handle text of each slot's interprocess event (`u32` length, text) |
//!
//! Sample `seq` goes in slot `seq % slots`: the publisher loans the slots
//! in turn, and a subscriber that waits for its next sample watches one
//! cache line, that slot's descriptor, which the publisher writes once per
//! sample. A sample word whose sequence part is 0, or behind the sequence
//! looked for, holds no sample yet.
//!
//! A sample's pending bits say which subscribers still hold or are still
//! to receive it (bit `i` for subscriber entry `i`; in a queue, bit 31
//! while nobody claimed it). The slot is free again when they are all
//! clear: only then does the publisher loan it out, so a subscriber reads a
//! sample it holds while nobody writes it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::kit::os::SharedMap;
use crate::{Error, Result};

/// The most subscribers a channel has at once.
pub const MAX_SUBSCRIBERS: usize = 31;
/// The most slots a channel has.
pub const MAX_SLOTS: usize = 4096;
/// The longest handle text of the slots' memory.
pub(super) const MAX_HANDLE: usize = 4096;
/// The most slots of a stream-ordered channel (each has an event).
pub const MAX_ORDERED_SLOTS: usize = 256;
/// Bytes of a slot's event entry: its handle text's length, the text.
const EVENT: usize = 1024;
/// The longest handle text of a slot's event.
pub(super) const MAX_EVENT_HANDLE: usize = EVENT - 4;
/// The flag of a stream-ordered channel.
const ORDERED: u32 = 1;

pub(super) const MAGIC: u32 = u32::from_le_bytes(*b"HCHN");
pub(super) const VERSION: u32 = 2;
/// A queued sample nobody claimed yet.
pub(super) const QUEUED: u32 = 1 << 31;

const H_MAGIC: usize = 0;
const H_VERSION: usize = 4;
const H_SLOTS: usize = 8;
const H_MODE: usize = 12;
const H_SLOT_SIZE: usize = 16;
const H_PUB_PID: usize = 24;
const H_PUB_STATE: usize = 28;
const H_PUB_START: usize = 32;
// What the publisher writes and the subscribers read, what they write and
// it reads, and a queue's head each on a cache line of their own.
const H_PUBLISHED: usize = 64;
const H_SUB_SLEEPERS: usize = 72;
const H_MASK: usize = 76;
const H_RELEASED: usize = 128;
const H_PUB_SLEEPERS: usize = 132;
const H_HANDLE_LEN: usize = 136;
const H_FLAGS: usize = 140;
/// How many first bytes of a control region state its shape.
pub(crate) const HEAD_READ: usize = H_FLAGS + 4;
const H_HEAD: usize = 192;
const HANDLE: usize = 256;
const _: () = assert!(
    H_HEAD + 8 <= HANDLE,
    "the header's fields end before the handle"
);
const SLOTS: usize = HANDLE + MAX_HANDLE;
const SLOT: usize = 64;
const SUB: usize = 32;

/// How samples reach subscribers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Every subscriber receives every sample published while it is
    /// subscribed; a slot is free once all of them released it.
    #[default]
    Broadcast,
    /// Each sample goes to one subscriber, whichever receives first;
    /// samples wait for a subscriber.
    Queue,
}

/// The shape of a channel, as its header states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) slots: u32,
    pub(crate) slot_size: u64,
    pub(crate) mode: Mode,
    /// Samples are published in stream order: each slot has an event.
    pub(crate) ordered: bool,
}

impl Shape {
    fn subs(self) -> usize {
        SLOTS + self.slots as usize * SLOT
    }

    fn events(self) -> usize {
        self.subs() + MAX_SUBSCRIBERS * SUB
    }

    /// The control region's length.
    pub(crate) fn file_len(self) -> u64 {
        let events = if self.ordered {
            self.slots as usize * EVENT
        } else {
            0
        };
        (self.events() + events) as u64
    }
}

/// A subscriber entry's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SubState {
    Free,
    Joining,
    Active,
    Bad(u32),
}

/// The publisher's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PubState {
    Open,
    Closed,
}

/// The first bytes of a new channel's control region: its header and the
/// slots' handle, and for a stream-ordered channel the slots' events'
/// handles (`events`, one per slot) too.
pub(crate) fn new_head(
    shape: Shape,
    pid: u32,
    start: u64,
    handle: &str,
    events: &[String],
) -> Result<Vec<u8>> {
    if handle.len() > MAX_HANDLE {
        return Err(Error::invalid(format!(
            "the slots' handle text is {} bytes, over the {MAX_HANDLE} a channel holds",
            handle.len()
        )));
    }
    let wanted = if shape.ordered {
        shape.slots as usize
    } else {
        0
    };
    if events.len() != wanted {
        return Err(Error::invalid(format!(
            "{} event handles for a channel of {wanted}",
            events.len()
        )));
    }
    let len = if shape.ordered {
        shape.file_len() as usize
    } else {
        HANDLE + handle.len()
    };
    let mut h = vec![0u8; len];
    for (i, text) in events.iter().enumerate() {
        if text.len() > MAX_EVENT_HANDLE {
            return Err(Error::invalid(format!(
                "an event's handle text of {} bytes, over the {MAX_EVENT_HANDLE} a channel holds",
                text.len()
            )));
        }
        let at = shape.events() + i * EVENT;
        h[at..at + 4].copy_from_slice(&(text.len() as u32).to_le_bytes());
        h[at + 4..at + 4 + text.len()].copy_from_slice(text.as_bytes());
    }
    let mut put = |at: usize, bytes: &[u8]| h[at..at + bytes.len()].copy_from_slice(bytes);
    put(H_MAGIC, &MAGIC.to_le_bytes());
    put(H_VERSION, &VERSION.to_le_bytes());
    put(H_SLOTS, &shape.slots.to_le_bytes());
    put(H_MODE, &(shape.mode as u32).to_le_bytes());
    put(H_SLOT_SIZE, &shape.slot_size.to_le_bytes());
    put(H_PUB_PID, &pid.to_le_bytes());
    put(H_PUB_STATE, &1u32.to_le_bytes());
    put(H_PUB_START, &start.to_le_bytes());
    put(H_HANDLE_LEN, &(handle.len() as u32).to_le_bytes());
    put(
        H_FLAGS,
        &(if shape.ordered { ORDERED } else { 0 }).to_le_bytes(),
    );
    put(HANDLE, handle.as_bytes());
    Ok(h)
}

/// The shape a control region's first bytes state, checked: `None` when they
/// are no channel's of this version, or state a shape out of range.
pub(crate) fn read_shape(head: &[u8], file_len: u64) -> Option<Shape> {
    let u32_at = |at: usize| Some(u32::from_le_bytes(head.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(head.get(at..at + 8)?.try_into().ok()?));
    if u32_at(H_MAGIC)? != MAGIC || u32_at(H_VERSION)? != VERSION {
        return None;
    }
    let flags = u32_at(H_FLAGS)?;
    if flags & !ORDERED != 0 {
        return None;
    }
    let shape = Shape {
        slots: u32_at(H_SLOTS)?,
        slot_size: u64_at(H_SLOT_SIZE)?,
        mode: match u32_at(H_MODE)? {
            0 => Mode::Broadcast,
            1 => Mode::Queue,
            _ => return None,
        },
        ordered: flags & ORDERED != 0,
    };
    (shape_in_range(shape) && shape.file_len() == file_len).then_some(shape)
}

/// True when `shape` is one a publisher makes: 1 to [`MAX_SLOTS`] slots
/// ([`MAX_ORDERED_SLOTS`] stream-ordered) of a size above 0 whose product
/// fits.
pub(super) fn shape_in_range(shape: Shape) -> bool {
    let most = if shape.ordered {
        MAX_ORDERED_SLOTS
    } else {
        MAX_SLOTS
    };
    (1..=most as u32).contains(&shape.slots)
        && shape.slot_size > 0
        && shape.slot_size.checked_mul(shape.slots as u64).is_some()
}

/// A channel's control region, mapped, with the shape this process checked.
#[derive(Debug)]
pub(crate) struct Control {
    map: SharedMap,
    shape: Shape,
    /// `slots - 1` when the slots are a power of two: a sample's slot is
    /// then a mask of its sequence, not a division.
    slot_mask: Option<u64>,
}

impl Control {
    pub(crate) fn new(map: SharedMap, shape: Shape) -> Result<Control> {
        if (map.len() as u64) < shape.file_len() {
            return Err(Error::invalid(
                "a channel's control region shorter than its shape",
            ));
        }
        let slots = u64::from(shape.slots);
        Ok(Control {
            map,
            shape,
            slot_mask: slots.is_power_of_two().then(|| slots - 1),
        })
    }

    pub(super) fn shape(&self) -> Shape {
        self.shape
    }

    pub(crate) fn slots(&self) -> usize {
        self.shape.slots as usize
    }

    /// The slot of sample `seq`: `seq % slots`.
    #[inline]
    pub(super) fn slot_of(&self, seq: u64) -> usize {
        (match self.slot_mask {
            Some(mask) => seq & mask,
            None => seq % u64::from(self.shape.slots),
        }) as usize
    }

    fn u32_at(&self, at: usize) -> Result<&AtomicU32> {
        self.map.atomic_u32(at)
    }

    fn u64_at(&self, at: usize) -> Result<&AtomicU64> {
        self.map.atomic_u64(at)
    }

    /// The handle text of the slots' memory.
    pub(crate) fn handle_text(&self) -> Result<String> {
        let len = self.u32_at(H_HANDLE_LEN)?.load(Ordering::Acquire) as usize;
        if len > MAX_HANDLE {
            return Err(corrupt(format!("a handle of {len} bytes")));
        }
        let mut bytes = vec![0u8; len];
        self.map.read(HANDLE as u64, &mut bytes)?;
        String::from_utf8(bytes).map_err(|_| corrupt("a handle that is not UTF-8".into()))
    }

    /// The handle text of slot `slot`'s event (a stream-ordered channel).
    pub(crate) fn event_text(&self, slot: usize) -> Result<String> {
        if !self.shape.ordered || slot >= self.slots() {
            return Err(Error::invalid(format!(
                "no event of slot {slot} in this channel"
            )));
        }
        let at = self.shape.events() + slot * EVENT;
        let len = self.u32_at(at)?.load(Ordering::Acquire) as usize;
        if len > MAX_EVENT_HANDLE {
            return Err(corrupt(format!("an event handle of {len} bytes")));
        }
        let mut bytes = vec![0u8; len];
        self.map.read((at + 4) as u64, &mut bytes)?;
        String::from_utf8(bytes).map_err(|_| corrupt("an event handle that is not UTF-8".into()))
    }

    /// The publisher: pid, start time, state.
    pub(crate) fn publisher(&self) -> Result<(u32, u64, PubState)> {
        let state = match self.u32_at(H_PUB_STATE)?.load(Ordering::Acquire) {
            1 => PubState::Open,
            _ => PubState::Closed,
        };
        Ok((
            self.u32_at(H_PUB_PID)?.load(Ordering::Acquire),
            self.u64_at(H_PUB_START)?.load(Ordering::Acquire),
            state,
        ))
    }

    /// Mark the publisher closed and wake every subscriber.
    pub(super) fn close(&self) -> Result<()> {
        self.u32_at(H_PUB_STATE)?.store(2, Ordering::Release);
        crate::kit::os::futex_wake(self.published_word()?, u32::MAX);
        Ok(())
    }

    /// Samples published so far.
    pub(super) fn published(&self) -> Result<u64> {
        Ok(self.u64_at(H_PUBLISHED)?.load(Ordering::Acquire))
    }

    /// The futex word of `published` (its low half).
    pub(super) fn published_word(&self) -> Result<&AtomicU32> {
        self.u32_at(H_PUBLISHED)
    }

    /// The futex word the publisher sleeps on for a free slot.
    pub(super) fn released(&self) -> Result<&AtomicU32> {
        self.u32_at(H_RELEASED)
    }

    /// After a slot freed: bump `released` and wake the publisher, if it
    /// sleeps (one that is about to sleep looks for a free slot again once
    /// it counted itself, and finds this one).
    pub(super) fn bump_released(&self) -> Result<()> {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.pub_sleepers()?.load(Ordering::Relaxed) > 0 {
            let word = self.released()?;
            word.fetch_add(1, Ordering::AcqRel);
            crate::kit::os::futex_wake(word, u32::MAX);
        }
        Ok(())
    }

    /// A queue's head: the next sequence to claim.
    pub(super) fn head(&self) -> Result<&AtomicU64> {
        self.u64_at(H_HEAD)
    }

    /// Make `count` the number of published samples, and wake the
    /// subscribers that sleep.
    pub(super) fn set_published(&self, count: u64) -> Result<()> {
        self.u64_at(H_PUBLISHED)?.store(count, Ordering::Release);
        wake_sleepers(self.published_word()?, self.sub_sleepers()?);
        Ok(())
    }

    /// How many subscribers sleep on the published word.
    pub(super) fn sub_sleepers(&self) -> Result<&AtomicU32> {
        self.u32_at(H_SUB_SLEEPERS)
    }

    /// How many publishers sleep on the released word.
    pub(super) fn pub_sleepers(&self) -> Result<&AtomicU32> {
        self.u32_at(H_PUB_SLEEPERS)
    }

    /// The bits of the active subscribers.
    pub(super) fn mask(&self) -> Result<&AtomicU32> {
        self.u32_at(H_MASK)
    }

    /// Slot `i`'s sample word: one more than its sample's sequence (low 32
    /// bits) above, its pending bits below.
    pub(crate) fn sample_word(&self, i: usize) -> Result<&AtomicU64> {
        self.u64_at(SLOTS + i * SLOT)
    }

    /// The length of slot `i`'s sample, checked against the slot size.
    pub(crate) fn sample_len(&self, i: usize) -> Result<u64> {
        let len = self.u64_at(SLOTS + i * SLOT + 8)?.load(Ordering::Acquire);
        if len > self.shape.slot_size {
            return Err(corrupt(format!(
                "a sample of {len} bytes in slot {i} of {} bytes",
                self.shape.slot_size
            )));
        }
        Ok(len)
    }

    /// Fill slot `i`'s descriptor with sample `seq` of `len` bytes for the
    /// subscribers of `pending`: the length, then the word.
    pub(super) fn set_sample(&self, i: usize, seq: u64, len: u64, pending: u32) -> Result<()> {
        self.u64_at(SLOTS + i * SLOT + 8)?
            .store(len, Ordering::Relaxed);
        self.sample_word(i)?
            .store(join(seq, pending), Ordering::Release);
        Ok(())
    }

    fn sub_at(&self, i: usize) -> usize {
        self.shape.subs() + i * SUB
    }

    /// Subscriber entry `i`: pid, start time, state.
    pub(crate) fn subscriber(&self, i: usize) -> Result<(u32, u64, SubState)> {
        let at = self.sub_at(i);
        let state = match self.u32_at(at + 4)?.load(Ordering::Acquire) {
            0 => SubState::Free,
            1 => SubState::Joining,
            2 => SubState::Active,
            other => SubState::Bad(other),
        };
        Ok((
            self.u32_at(at)?.load(Ordering::Acquire),
            self.u64_at(at + 8)?.load(Ordering::Acquire),
            state,
        ))
    }

    /// Take subscriber entry `i` (free) for a joining process; false when
    /// another took it first.
    pub(super) fn claim_subscriber(&self, i: usize, pid: u32, start: u64) -> Result<bool> {
        let at = self.sub_at(i);
        if self
            .u32_at(at + 4)?
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Ok(false);
        }
        self.u32_at(at)?.store(pid, Ordering::Relaxed);
        self.u64_at(at + 8)?.store(start, Ordering::Release);
        Ok(true)
    }

    pub(super) fn set_subscriber_state(&self, i: usize, state: SubState) -> Result<()> {
        let v = match state {
            SubState::Free => 0,
            SubState::Joining => 1,
            SubState::Active => 2,
            SubState::Bad(v) => v,
        };
        self.u32_at(self.sub_at(i) + 4)?.store(v, Ordering::Release);
        Ok(())
    }
}

/// Wake the sleepers of `word` after a change of it, with a system call
/// only when `sleepers` says someone sleeps. A sleeper counts itself
/// before it sleeps on the value it saw, so either this sees it counted,
/// or its sleep sees the changed word and returns at once.
fn wake_sleepers(word: &AtomicU32, sleepers: &AtomicU32) {
    std::sync::atomic::fence(Ordering::SeqCst);
    if sleepers.load(Ordering::Relaxed) > 0 {
        crate::kit::os::futex_wake(word, u32::MAX);
    }
}

/// The tag of sample `seq` in a sample word: one more than its low 32
/// bits (0 is a slot that never held a sample).
pub(super) fn tag(seq: u64) -> u32 {
    (seq as u32).wrapping_add(1)
}

/// How a sample word's tag stands to sequence `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TagAge {
    /// It holds `seq`.
    This,
    /// It holds an older sample (or none): `seq` is not published yet.
    Older,
    /// It holds a newer sample: `seq` was published and its slot reused.
    Newer,
}

/// How the tag `held` stands to `seq`.
pub(super) fn tag_age(held: u32, seq: u64) -> TagAge {
    match held.wrapping_sub(tag(seq)) as i32 {
        0 => TagAge::This,
        d if d < 0 => TagAge::Older,
        _ => TagAge::Newer,
    }
}

/// A sample word's tag and pending bits.
pub(super) fn split(word: u64) -> (u32, u32) {
    ((word >> 32) as u32, word as u32)
}

/// The sample word of `seq` with `pending` bits.
pub(super) fn join(seq: u64, pending: u32) -> u64 {
    ((tag(seq) as u64) << 32) | pending as u64
}

/// A sample word with the same tag as `word` and `pending` bits.
pub(super) fn with_pending(word: u64, pending: u32) -> u64 {
    (word & !0xffff_ffff) | pending as u64
}

pub(super) fn corrupt(what: String) -> Error {
    Error::invalid(format!(
        "a channel's control region holds {what}, which its publisher never writes: it was \
         written by another process"
    ))
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;
    use crate::kit::os::{self, Prot};

    fn control_of(bytes: &[u8], len: u64) -> Option<Control> {
        let fd = os::memfd("hal-channel-layout-test", len, None).unwrap();
        let map = SharedMap::map(fd.as_fd(), len, 0, Prot::ReadWrite, None).unwrap();
        map.write(0, bytes).unwrap();
        let shape = read_shape(bytes, len)?;
        Some(Control::new(map, shape).unwrap())
    }

    #[test]
    fn a_samples_slot_is_its_sequence_modulo_the_slots() {
        // Powers of two take the mask, the others the division: the same
        // answer either way, up to the last sequence numbers.
        for slots in [1u32, 2, 3, 4, 6, 7, 8, 64, 100, 4095, 4096] {
            let shape = Shape {
                slots,
                slot_size: 64,
                mode: Mode::Broadcast,
                ordered: false,
            };
            let head = new_head(shape, 7, 9, "memory handle", &[]).unwrap();
            let control = control_of(&head, shape.file_len()).expect("a channel's head");
            let n = u64::from(slots);
            for seq in (0..3 * n + 2).chain(u64::MAX - 2 * n..=u64::MAX) {
                assert_eq!(control.slot_of(seq) as u64, seq % n, "{slots} slots, {seq}");
            }
        }
    }

    #[test]
    fn a_stream_ordered_head_carries_each_slots_event() {
        let shape = Shape {
            slots: 3,
            slot_size: 4096,
            mode: Mode::Broadcast,
            ordered: true,
        };
        let events: Vec<String> = (0..3).map(|i| format!("event handle {i}")).collect();
        let head = new_head(shape, 7, 9, "memory handle", &events).unwrap();
        assert_eq!(head.len() as u64, shape.file_len());
        let control = control_of(&head, shape.file_len()).expect("a channel's head");
        assert_eq!(control.shape(), shape);
        assert_eq!(control.handle_text().unwrap(), "memory handle");
        for (i, e) in events.iter().enumerate() {
            assert_eq!(&control.event_text(i).unwrap(), e);
        }
        assert!(control.event_text(3).is_err(), "no fourth slot");
        // A length past the entry is corrupt, never a read past it.
        let at = shape.events() + EVENT;
        control
            .u32_at(at)
            .unwrap()
            .store(EVENT as u32, Ordering::Release);
        assert!(control.event_text(1).is_err());
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        for (slots, ordered) in [(1, false), (3, true), (MAX_ORDERED_SLOTS as u32, true)] {
            let shape = Shape {
                slots,
                slot_size: 64,
                mode: Mode::Broadcast,
                ordered,
            };
            let subs = HANDLE + MAX_HANDLE + slots as usize * SLOT;
            assert_eq!(shape.events(), subs + MAX_SUBSCRIBERS * SUB);
            let events = if ordered { slots as usize * EVENT } else { 0 };
            assert_eq!(shape.file_len() as usize, shape.events() + events);
        }
    }

    #[test]
    fn the_longest_handles_fit_and_one_byte_more_does_not() {
        let shape = Shape {
            slots: 2,
            slot_size: 64,
            mode: Mode::Broadcast,
            ordered: true,
        };
        let longest = "e".repeat(MAX_EVENT_HANDLE);
        let events = vec![longest.clone(), "f".into()];
        let handle = "h".repeat(MAX_HANDLE);
        let head = new_head(shape, 1, 1, &handle, &events).unwrap();
        let control = control_of(&head, shape.file_len()).unwrap();
        assert_eq!(control.handle_text().unwrap(), handle);
        assert_eq!(control.event_text(0).unwrap(), longest);
        assert_eq!(control.event_text(1).unwrap(), "f");
        let too_long = "h".repeat(MAX_HANDLE + 1);
        assert!(new_head(shape, 1, 1, &too_long, &events).is_err());
        // Subscriber entries and sample words written do not reach the
        // events.
        for i in 0..MAX_SUBSCRIBERS {
            assert!(control.claim_subscriber(i, u32::MAX, u64::MAX).unwrap());
        }
        for slot in 0..2 {
            control.set_sample(slot, 7, 64, u32::MAX).unwrap();
        }
        assert_eq!(control.event_text(0).unwrap(), longest);
        assert_eq!(control.event_text(1).unwrap(), "f");
    }

    #[test]
    fn heads_of_another_version_or_no_slot_size_are_no_channels() {
        let shape = Shape {
            slots: 2,
            slot_size: 64,
            mode: Mode::Broadcast,
            ordered: false,
        };
        let head = new_head(shape, 1, 1, "h", &[]).unwrap();
        let mut older = head.clone();
        older[H_VERSION..H_VERSION + 4].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(read_shape(&older, shape.file_len()), None, "version 1");
        let mut empty = head;
        empty[H_SLOT_SIZE..H_SLOT_SIZE + 8].copy_from_slice(&0u64.to_le_bytes());
        let zero = Shape {
            slot_size: 0,
            ..shape
        };
        assert_eq!(
            read_shape(&empty, zero.file_len()),
            None,
            "slots of 0 bytes"
        );
    }

    #[test]
    fn ordered_shapes_are_checked() {
        let plain = Shape {
            slots: 2,
            slot_size: 64,
            mode: Mode::Queue,
            ordered: false,
        };
        let head = new_head(plain, 1, 1, "h", &[]).unwrap();
        assert_eq!(read_shape(&head, plain.file_len()), Some(plain));
        let no_event = control_of(&head, plain.file_len())
            .unwrap()
            .event_text(0)
            .unwrap_err();
        assert!(
            no_event.to_string().contains("no event of slot 0"),
            "a plain channel has no events: {no_event}"
        );
        assert!(
            new_head(plain, 1, 1, "h", &["e".into()]).is_err(),
            "events of a plain channel"
        );
        let ordered = Shape {
            ordered: true,
            ..plain
        };
        assert!(
            new_head(ordered, 1, 1, "h", &["e".into()]).is_err(),
            "one event for two slots"
        );
        assert!(
            new_head(
                ordered,
                1,
                1,
                "h",
                &["e".into(), "x".repeat(MAX_EVENT_HANDLE + 1)]
            )
            .is_err(),
            "an event handle too long"
        );
        // Unknown flags, and an ordered channel of too many slots, are no
        // channel's.
        let mut forged = head.clone();
        forged[H_FLAGS..H_FLAGS + 4].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(read_shape(&forged, plain.file_len()), None);
        let many = Shape {
            slots: MAX_ORDERED_SLOTS as u32 + 1,
            ..ordered
        };
        let mut forged = head;
        forged[H_SLOTS..H_SLOTS + 4].copy_from_slice(&many.slots.to_le_bytes());
        forged[H_FLAGS..H_FLAGS + 4].copy_from_slice(&ORDERED.to_le_bytes());
        assert_eq!(read_shape(&forged, many.file_len()), None);
        // The file's length must be the ordered shape's, events included.
        let events = vec!["e".to_string(), "f".to_string()];
        let head = new_head(ordered, 1, 1, "h", &events).unwrap();
        assert_eq!(read_shape(&head, ordered.file_len()), Some(ordered));
        assert_eq!(read_shape(&head, plain.file_len()), None);
    }
}
