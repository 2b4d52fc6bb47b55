//! What a group's name holds: where its board is. The board (`layout.rs`)
//! is a memfd sealed against shrinking and growing, made by the member
//! that founds the group, so that no process can truncate it under the
//! members' mappings (they would die of `SIGBUS`). Every member keeps a
//! descriptor of it open, and the name, the user's private file
//! `/dev/shm/.hal-UID/group.NAME`, lists them all: a joiner reaches the
//! board through any live member's descriptor (`/proc/PID/fd/N`), so the
//! board outlives its founder. Members read and write the name with
//! `pread` and `pwrite`, never through a mapping: a process that truncates
//! it can make joins fail, and no member crash.
//!
//! | offset | field |
//! |---|---|
//! | 0 | magic `HGRN`, version (`u32` each) |
//! | 8 | members, capacity (`u32` each: the board's shape) |
//! | 16 | the board's device and inode (`u64` each) |
//! | 32 | zero, to 64 |
//! | 64 + 16 i | member `i`: its pid and its descriptor of the board (`u32` each), its process's start time (`u64`); pid 0 where slot `i` has no member |

use super::layout::{self, Shape, MAX_MEMBERS};
use crate::kit::os::peer_region::PeerRegion;

const MAGIC: u32 = u32::from_le_bytes(*b"HGRN");
const VERSION: u32 = 1;
const HEAD_LEN: usize = 64;
/// The length of one member's entry.
pub(crate) const ENTRY_LEN: usize = 16;
/// The longest name file of any shape.
pub(super) const MAX_LEN: u64 = (HEAD_LEN + MAX_MEMBERS * ENTRY_LEN) as u64;

/// A member that holds the board open: its process and its descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Holder {
    pub(crate) pid: u32,
    pub(crate) fd: u32,
    pub(crate) start: u64,
}

/// What a name holds, decoded and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Names {
    pub(crate) shape: Shape,
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    /// By slot; `None` where the slot has no member.
    pub(crate) holders: Vec<Option<Holder>>,
}

impl Names {
    /// Where `holder` says the board is.
    pub(super) fn region(&self, holder: Holder) -> PeerRegion {
        PeerRegion {
            pid: holder.pid,
            start: holder.start,
            fd: holder.fd,
            dev: self.dev,
            ino: self.ino,
        }
    }
}

/// The length of the name of a group of `shape`.
pub(super) fn len(shape: Shape) -> u64 {
    (HEAD_LEN + shape.members as usize * ENTRY_LEN) as u64
}

/// Where slot `i`'s entry is.
pub(crate) fn entry_at(i: usize) -> u64 {
    (HEAD_LEN + i * ENTRY_LEN) as u64
}

/// Slot `i`'s entry, with `holder` in it (`None`: the slot has no member).
pub(crate) fn encode_entry(holder: Option<Holder>) -> [u8; ENTRY_LEN] {
    let mut b = [0u8; ENTRY_LEN];
    if let Some(h) = holder {
        b[0..4].copy_from_slice(&h.pid.to_le_bytes());
        b[4..8].copy_from_slice(&h.fd.to_le_bytes());
        b[8..16].copy_from_slice(&h.start.to_le_bytes());
    }
    b
}

/// A new group's name: of `shape`, its board `(dev, ino)`, `founder` in
/// slot 0.
pub(crate) fn encode(shape: Shape, (dev, ino): (u64, u64), founder: Holder) -> Vec<u8> {
    let mut b = vec![0u8; len(shape) as usize];
    b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&VERSION.to_le_bytes());
    b[8..12].copy_from_slice(&shape.members.to_le_bytes());
    b[12..16].copy_from_slice(&shape.capacity.to_le_bytes());
    b[16..24].copy_from_slice(&dev.to_le_bytes());
    b[24..32].copy_from_slice(&ino.to_le_bytes());
    let at = entry_at(0) as usize;
    b[at..at + ENTRY_LEN].copy_from_slice(&encode_entry(Some(founder)));
    b
}

/// The name in `bytes` (the whole file), checked: `None` when they are no
/// group's name of this version, state a shape out of range, or are not as
/// long as that shape's name.
pub(crate) fn decode(bytes: &[u8]) -> Option<Names> {
    let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
    if u32_at(0)? != MAGIC || u32_at(4)? != VERSION {
        return None;
    }
    let shape = Shape {
        members: u32_at(8)?,
        capacity: u32_at(12)?,
    };
    if !layout::shape_in_range(shape) || bytes.len() as u64 != len(shape) {
        return None;
    }
    let holders = (0..shape.members as usize)
        .map(|i| {
            let at = entry_at(i) as usize;
            let pid = u32_at(at)?;
            Some((pid != 0).then_some(Holder {
                pid,
                fd: u32_at(at + 4)?,
                start: u64_at(at + 8)?,
            }))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Names {
        shape,
        dev: u64_at(16)?,
        ino: u64_at(24)?,
        holders,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: Shape = Shape {
        members: 3,
        capacity: 100,
    };
    const FOUNDER: Holder = Holder {
        pid: 41,
        fd: 7,
        start: 9_000_000_001,
    };

    #[test]
    fn a_name_decodes_as_encoded_and_an_entry_lands_in_its_slot() {
        let mut b = encode(SHAPE, (5, 6), FOUNDER);
        assert_eq!(b.len() as u64, len(SHAPE));
        let second = Holder {
            pid: 42,
            fd: 8,
            start: 3,
        };
        let at = entry_at(2) as usize;
        b[at..at + ENTRY_LEN].copy_from_slice(&encode_entry(Some(second)));
        let names = decode(&b).unwrap();
        assert_eq!(
            names,
            Names {
                shape: SHAPE,
                dev: 5,
                ino: 6,
                holders: vec![Some(FOUNDER), None, Some(second)],
            }
        );
        assert_eq!(
            names.region(second),
            PeerRegion {
                pid: 42,
                start: 3,
                fd: 8,
                dev: 5,
                ino: 6
            }
        );
        b[at..at + ENTRY_LEN].copy_from_slice(&encode_entry(None));
        assert_eq!(decode(&b).unwrap().holders[2], None);
    }

    #[test]
    fn other_magic_version_shapes_and_lengths_are_no_name() {
        let good = encode(SHAPE, (5, 6), FOUNDER);
        let with = |at: usize, v: u32| {
            let mut b = good.clone();
            b[at..at + 4].copy_from_slice(&v.to_le_bytes());
            b
        };
        assert!(decode(&with(0, u32::from_le_bytes(*b"HGRP"))).is_none());
        assert!(decode(&with(4, 2)).is_none());
        assert!(decode(&with(8, 0)).is_none(), "no members");
        assert!(
            decode(&with(8, 4)).is_none(),
            "a shape the length does not fit"
        );
        assert!(decode(&with(8, MAX_MEMBERS as u32 + 1)).is_none());
        assert!(decode(&with(12, layout::MAX_PAYLOAD as u32 + 1)).is_none());
        assert!(decode(&with(12, layout::MAX_PAYLOAD as u32)).is_some());
        assert!(decode(&good[..good.len() - 1]).is_none());
        let mut longer = good.clone();
        longer.push(0);
        assert!(decode(&longer).is_none());
        assert!(decode(&[]).is_none());
        assert!(decode(&good[..10]).is_none());
        let most = Shape {
            members: MAX_MEMBERS as u32,
            capacity: 0,
        };
        assert_eq!(len(most), MAX_LEN);
        assert!(decode(&encode(most, (1, 2), FOUNDER)).is_some());
    }
}
