//! What a channel's name holds: where its control region is. The control
//! region is a memfd of the publisher's, sealed against shrinking and
//! growing, so that no process can truncate it under the members' mappings
//! (they would die of `SIGBUS`); the name, a private file of the user in
//! `/dev/shm`, holds this record: the publisher's pid, start time and
//! descriptor number, the region's identity, and the channel's shape.
//! Subscribers open the region through `/proc/PID/fd/N` and check its
//! identity and seals before they map it.
//!
//! | offset | field |
//! |---|---|
//! | 0 | magic `HCHR`, version (`u32` each) |
//! | 8 | publisher's pid, the region's descriptor number in it |
//! | 16 | publisher's process start time (`u64`) |
//! | 24 | the region's device and inode (`u64` each) |
//! | 40 | slots, mode (0 broadcast, 1 queue) |
//! | 48 | slot size (`u64`) |
//! | 56 | flags: bit 0, stream-ordered |

use super::layout::{self, Mode, Shape};
use crate::kit::os::peer_region::PeerRegion;

/// The record's length in bytes.
pub(super) const LEN: usize = 64;
const MAGIC: u32 = u32::from_le_bytes(*b"HCHR");
const VERSION: u32 = 1;
const ORDERED: u32 = 1;

/// Where a channel's control region is, and the channel's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) pid: u32,
    pub(crate) fd: u32,
    pub(crate) start: u64,
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) shape: Shape,
}

impl Record {
    /// Where the record says the control region is.
    pub(super) fn region(&self) -> PeerRegion {
        PeerRegion {
            pid: self.pid,
            start: self.start,
            fd: self.fd,
            dev: self.dev,
            ino: self.ino,
        }
    }

    pub(crate) fn encode(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        let mut put = |at: usize, bytes: &[u8]| b[at..at + bytes.len()].copy_from_slice(bytes);
        put(0, &MAGIC.to_le_bytes());
        put(4, &VERSION.to_le_bytes());
        put(8, &self.pid.to_le_bytes());
        put(12, &self.fd.to_le_bytes());
        put(16, &self.start.to_le_bytes());
        put(24, &self.dev.to_le_bytes());
        put(32, &self.ino.to_le_bytes());
        put(40, &self.shape.slots.to_le_bytes());
        put(44, &(self.shape.mode as u32).to_le_bytes());
        put(48, &self.shape.slot_size.to_le_bytes());
        let flags = if self.shape.ordered { ORDERED } else { 0 };
        put(56, &flags.to_le_bytes());
        b
    }

    /// The record in `bytes` (the whole name file), checked: `None` when
    /// they are no record of this version, or state a shape out of range.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Record> {
        if bytes.len() != LEN {
            return None;
        }
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"));
        if u32_at(0) != MAGIC || u32_at(4) != VERSION || u32_at(56) & !ORDERED != 0 {
            return None;
        }
        let shape = Shape {
            slots: u32_at(40),
            slot_size: u64_at(48),
            mode: match u32_at(44) {
                0 => Mode::Broadcast,
                1 => Mode::Queue,
                _ => return None,
            },
            ordered: u32_at(56) & ORDERED != 0,
        };
        layout::shape_in_range(shape).then_some(Record {
            pid: u32_at(8),
            fd: u32_at(12),
            start: u64_at(16),
            dev: u64_at(24),
            ino: u64_at(32),
            shape,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        Record {
            pid: 41,
            fd: 7,
            start: 123_456,
            dev: 0x1f,
            ino: 99,
            shape: Shape {
                slots: 8,
                slot_size: 4096,
                mode: Mode::Queue,
                ordered: true,
            },
        }
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let r = record();
        assert_eq!(Record::decode(&r.encode()), Some(r));
        let plain = Record {
            shape: Shape {
                mode: Mode::Broadcast,
                ordered: false,
                ..r.shape
            },
            ..r
        };
        assert_eq!(Record::decode(&plain.encode()), Some(plain));
    }

    #[test]
    fn bytes_of_no_record_are_refused() {
        let good = record().encode();
        assert_eq!(Record::decode(&good[..LEN - 1]), None, "short");
        let mut long = good.to_vec();
        long.push(0);
        assert_eq!(Record::decode(&long), None, "long");
        for (at, value) in [
            (0, 0u32),        // magic
            (4, VERSION + 1), // version
            (44, 2),          // mode
            (56, 2),          // an unknown flag
            (40, 0),          // no slots
            (40, 257),        // over the stream-ordered most
        ] {
            let mut b = good;
            b[at..at + 4].copy_from_slice(&value.to_le_bytes());
            assert_eq!(Record::decode(&b), None, "{value} at {at}");
        }
        let mut b = good;
        b[48..56].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(Record::decode(&b), None, "slots of no bytes");
    }
}
