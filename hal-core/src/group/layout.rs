//! A group's board: a header and one slot per member, in a memfd sealed
//! against shrinking and growing (`record.rs` says how members reach it).
//! Every field is read as a peer may have written it: the lengths are
//! checked against the group's capacity before a byte is copied, and
//! nothing read from the board sizes an allocation or an index without a
//! bound.
//!
//! Layout (little-endian, offsets in bytes):
//!
//! | offset | header field |
//! |---|---|
//! | 0 | magic `HGRP` |
//! | 4 | version |
//! | 8 | members (`u32`) |
//! | 12 | capacity: bytes a member may post in a round (`u32`) |
//! | 16 | posts: bumped at every post and leave, the futex word waiters sleep on |
//!
//! Slot `i` starts at `64 + i * slot_len`:
//!
//! | offset | slot field |
//! |---|---|
//! | 0 | pid of the member (0: free) |
//! | 4 | state: 0 free, 1 joined, 2 left |
//! | 8 | start time of the member's process (`u64`, clock ticks since boot) |
//! | 16 | rounds posted |
//! | 20, 24 | lengths of the two payload buffers |
//! | 64 | buffer 0, then buffer 1, `capacity` bytes each (rounded up to 64) |
//!
//! Round `r` is posted in buffer `r % 2`. A member reaches round `r + 2`
//! only after every member posted round `r + 1`, which each does only after
//! reading round `r`: a buffer is never written while a peer may still read
//! it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::kit::os::SharedMap;
use crate::{Error, Result};

/// The most members a group may have.
pub const MAX_MEMBERS: usize = 4096;
/// The most bytes a member may post in one round.
pub const MAX_PAYLOAD: usize = 1 << 20;

const MAGIC: u32 = u32::from_le_bytes(*b"HGRP");
const VERSION: u32 = 1;
const HEADER_LEN: usize = 64;

const H_MAGIC: usize = 0;
const H_VERSION: usize = 4;
const H_SIZE: usize = 8;
const H_CAPACITY: usize = 12;
const H_POSTS: usize = 16;

const S_PID: usize = 0;
const S_STATE: usize = 4;
const S_START: usize = 8;
const S_ROUND: usize = 16;
const S_LEN: usize = 20;
const S_DATA: usize = 64;

/// The state of a member's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotState {
    /// Nobody took it yet.
    Free,
    /// A member took it and has not left.
    Joined,
    /// Its member left.
    Left,
    /// A value no member writes (a hostile or corrupt slot).
    Bad(u32),
}

/// How many members a group has and what each may post in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) members: u32,
    pub(crate) capacity: u32,
}

impl Shape {
    fn slot_len(self) -> usize {
        S_DATA + 2 * (self.capacity as usize).next_multiple_of(64)
    }

    /// The length of the group's board.
    pub(crate) fn board_len(self) -> u64 {
        (HEADER_LEN + self.members as usize * self.slot_len()) as u64
    }

    fn slot(self, i: usize) -> usize {
        HEADER_LEN + i * self.slot_len()
    }

    fn buffer(self, i: usize, buf: usize) -> usize {
        self.slot(i) + S_DATA + buf * (self.capacity as usize).next_multiple_of(64)
    }
}

/// True when `shape` is one a join asks for: 1 to [`MAX_MEMBERS`]
/// members, each posting at most [`MAX_PAYLOAD`] bytes a round.
pub(super) fn shape_in_range(shape: Shape) -> bool {
    (1..=MAX_MEMBERS as u32).contains(&shape.members) && shape.capacity as usize <= MAX_PAYLOAD
}

/// The shape a board's header states, from its first bytes: `None` when
/// they are no header of this version, or state a shape out of range.
pub(crate) fn read_shape(bytes: &[u8]) -> Option<Shape> {
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    if word(H_MAGIC)? != MAGIC || word(H_VERSION)? != VERSION {
        return None;
    }
    let shape = Shape {
        members: word(H_SIZE)?,
        capacity: word(H_CAPACITY)?,
    };
    shape_in_range(shape).then_some(shape)
}

/// The header a new group's board starts with.
pub(crate) fn new_header(shape: Shape) -> Vec<u8> {
    let mut h = vec![0u8; HEADER_LEN];
    h[H_MAGIC..H_MAGIC + 4].copy_from_slice(&MAGIC.to_le_bytes());
    h[H_VERSION..H_VERSION + 4].copy_from_slice(&VERSION.to_le_bytes());
    h[H_SIZE..H_SIZE + 4].copy_from_slice(&shape.members.to_le_bytes());
    h[H_CAPACITY..H_CAPACITY + 4].copy_from_slice(&shape.capacity.to_le_bytes());
    h
}

/// A group's board, mapped, with the shape this process checked it has.
#[derive(Debug)]
pub(crate) struct Board {
    map: SharedMap,
    shape: Shape,
}

impl Board {
    /// `map` holds at least `shape.board_len()` bytes (checked).
    pub(crate) fn new(map: SharedMap, shape: Shape) -> Result<Board> {
        if (map.len() as u64) < shape.board_len() {
            return Err(Error::invalid(format!(
                "a group's board of {} bytes is shorter than its {} members need",
                map.len(),
                shape.members
            )));
        }
        Ok(Board { map, shape })
    }

    pub(super) fn shape(&self) -> Shape {
        self.shape
    }

    pub(crate) fn members(&self) -> usize {
        self.shape.members as usize
    }

    /// The futex word every post and leave bumps.
    pub(super) fn posts(&self) -> Result<&AtomicU32> {
        self.map.atomic_u32(H_POSTS)
    }

    fn slot_u32(&self, i: usize, field: usize) -> Result<&AtomicU32> {
        self.map.atomic_u32(self.shape.slot(i) + field)
    }

    fn slot_u64(&self, i: usize, field: usize) -> Result<&AtomicU64> {
        self.map.atomic_u64(self.shape.slot(i) + field)
    }

    /// Take slot `i` for the process `pid` that started at `start`: false
    /// when another took it first.
    pub(crate) fn claim(&self, i: usize, pid: u32, start: u64) -> Result<bool> {
        let word = self.slot_u32(i, S_PID)?;
        if word
            .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Ok(false);
        }
        self.slot_u64(i, S_START)?.store(start, Ordering::Relaxed);
        self.slot_u32(i, S_ROUND)?.store(0, Ordering::Relaxed);
        self.slot_u32(i, S_STATE)?.store(1, Ordering::Release);
        Ok(true)
    }

    /// The member of slot `i`: its pid and its process's start time.
    pub(crate) fn member(&self, i: usize) -> Result<(u32, u64)> {
        Ok((
            self.slot_u32(i, S_PID)?.load(Ordering::Acquire),
            self.slot_u64(i, S_START)?.load(Ordering::Acquire),
        ))
    }

    pub(crate) fn state(&self, i: usize) -> Result<SlotState> {
        Ok(match self.slot_u32(i, S_STATE)?.load(Ordering::Acquire) {
            0 => SlotState::Free,
            1 => SlotState::Joined,
            2 => SlotState::Left,
            other => SlotState::Bad(other),
        })
    }

    /// Mark slot `i` left and wake every waiter.
    pub(super) fn leave(&self, i: usize) -> Result<()> {
        self.slot_u32(i, S_STATE)?.store(2, Ordering::Release);
        self.bump()
    }

    /// How many rounds slot `i`'s member posted.
    pub(crate) fn round(&self, i: usize) -> Result<u32> {
        Ok(self.slot_u32(i, S_ROUND)?.load(Ordering::Acquire))
    }

    /// Post round `round` of slot `i`: the payload, then the round number,
    /// then a wake.
    pub(crate) fn post(&self, i: usize, round: u32, data: &[u8]) -> Result<()> {
        if data.len() > self.shape.capacity as usize {
            return Err(Error::invalid(format!(
                "a payload of {} bytes is over the group's {} bytes a round (GroupOptions::max_payload)",
                data.len(),
                self.shape.capacity
            )));
        }
        let buf = (round % 2) as usize;
        self.map.write(self.shape.buffer(i, buf) as u64, data)?;
        self.slot_u32(i, S_LEN + 4 * buf)?
            .store(data.len() as u32, Ordering::Relaxed);
        self.slot_u32(i, S_ROUND)?.store(round, Ordering::Release);
        self.bump()
    }

    /// The payload slot `i`'s member posted for `round`, once it did.
    pub(crate) fn payload(&self, i: usize, round: u32) -> Result<Vec<u8>> {
        let buf = (round % 2) as usize;
        let len = self.slot_u32(i, S_LEN + 4 * buf)?.load(Ordering::Acquire);
        if len > self.shape.capacity {
            return Err(Error::invalid(format!(
                "member {i} of the group posted {len} bytes in a round of at most {}: its \
                 board was written by something other than a member",
                self.shape.capacity
            )));
        }
        let mut out = vec![0u8; len as usize];
        self.map.read(self.shape.buffer(i, buf) as u64, &mut out)?;
        Ok(out)
    }

    fn bump(&self) -> Result<()> {
        let posts = self.posts()?;
        posts.fetch_add(1, Ordering::AcqRel);
        crate::kit::os::futex_wake(posts, u32::MAX);
        Ok(())
    }
}
