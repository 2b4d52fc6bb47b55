//! The board's shared page: its layout (see the [board](super)'s
//! documentation) and every read and write of it, each an aligned atomic
//! with its bounds checked, since the bytes are another process's to write.

use std::fmt;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use super::super::located::Located;
use super::super::policy::Allowed;
use crate::error::{Error, Result};
use crate::kit::os::{self, Prot, SharedMap};
use std::os::fd::{AsFd, OwnedFd};

/// The reserved object id under which the broker serves its board.
pub(crate) const BOARD_ID: [u8; 16] = *b"hal:broker:board";
/// `HALBOARD`, little-endian.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"HALBOARD");
/// The board's layout version (2: entries hold a key and a tag derived
/// from the object id, never the id itself; see [`binding`](super::binding)).
pub(crate) const VERSION: u32 = 2;
/// Entries on a board.
pub(crate) const ENTRIES: usize = 4096;
/// Bytes per entry.
pub(crate) const ENTRY_LEN: usize = 256;
/// Where the entries start.
pub(crate) const ENTRIES_AT: usize = 4096;
/// Lease slots on a board.
pub(crate) const LEASES: usize = 4096;
/// Bytes per lease slot.
pub(crate) const LEASE_LEN: usize = 32;
/// Where the lease slots start.
pub(crate) const LEASES_AT: usize = ENTRIES_AT + ENTRIES * ENTRY_LEN;
/// The board's size.
pub(crate) const LEN: usize = LEASES_AT + LEASES * LEASE_LEN;
/// Entries an id may be probed at, from its home entry on.
pub(crate) const PROBES: usize = 64;
/// The most descriptors an entry states.
pub(crate) const MAX_FDS: usize = 4;
/// The most pids an entry's allow-list states.
pub(crate) const MAX_PIDS: usize = 6;

// Header fields.
pub(super) const H_MAGIC: usize = 0;
pub(super) const H_VERSION: usize = 8;
pub(super) const H_ENTRIES: usize = 12;
pub(super) const H_LEASES: usize = 16;
pub(super) const H_PID: usize = 20;
pub(super) const H_PID_NS: usize = 24;

// Entry fields, from the entry's start.
pub(super) const E_SEQ: usize = 0;
pub(super) const E_STATE: usize = 4;
pub(super) const E_GENERATION: usize = 8;
pub(super) const E_ID: usize = 16;
pub(super) const E_FLAGS: usize = 32;
pub(super) const E_POLICY: usize = 36;
pub(super) const E_UID: usize = 40;
pub(super) const E_NFDS: usize = 44;
pub(super) const E_FDS: usize = 48;
pub(super) const E_FD_LEN: usize = 24;
pub(super) const E_NPIDS: usize = 144;
pub(super) const E_PIDS: usize = 152;
pub(super) const E_PID_LEN: usize = 16;

// The fields of an entry fit in it, the descriptors before the pids.
const _: () = assert!(E_FDS + MAX_FDS * E_FD_LEN <= E_NPIDS);
const _: () = assert!(E_PIDS + MAX_PIDS * E_PID_LEN <= ENTRY_LEN);

/// Entry states.
pub(super) const EMPTY: u32 = 0;
pub(super) const LIVE: u32 = 1;
pub(super) const WITHDRAWN: u32 = 2;

/// Entry flag: the export counts its importers (a lease is needed).
pub(crate) const COUNTS_LEASES: u32 = 1;

/// Entry policies.
pub(crate) const ANYONE: u32 = 1;
pub(crate) const SAME_USER: u32 = 2;
pub(crate) const PIDS: u32 = 3;

// Lease slot fields, from the slot's start.
pub(super) const L_WORD: usize = 0;
pub(super) const L_GENERATION: usize = 8;
pub(super) const L_ENTRY: usize = 16;
pub(super) const L_START: usize = 24;

/// Lease slot states (the low byte of the slot's word; its high half is the
/// holder's pid).
pub(crate) const CLAIMING: u64 = 1;
pub(crate) const HELD: u64 = 2;

/// A board mapped in this process: the exporter's, or an importer's view
/// of an exporter's. Every read is of an atomic, every bound checked: the
/// bytes are another process's to write.
pub(crate) struct Page {
    map: SharedMap,
}

impl fmt::Debug for Page {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Page").field("len", &LEN).finish()
    }
}

/// What the exporter states of one export, to be written in an entry.
pub(super) struct Stated<'a> {
    pub(super) id: &'a [u8; 16],
    pub(super) generation: u64,
    pub(super) flags: u32,
    pub(super) policy: u32,
    pub(super) uid: u32,
    pub(super) pids: &'a [Allowed],
    pub(super) fds: &'a [Located],
}

/// What an entry says, read whole under its sequence word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) index: u32,
    pub(crate) generation: u64,
    pub(crate) flags: u32,
    pub(crate) policy: u32,
    pub(crate) uid: u32,
    pub(crate) fds: Vec<Located>,
    pub(crate) pids: Vec<Allowed>,
    /// The entry's tag: what binds it to its export's descriptors
    /// ([`binding::tag`](super::binding::tag)), checked by the importer.
    pub(crate) tag: u64,
}

impl Page {
    /// Map the board `fd` read-write (shared).
    pub(crate) fn map(fd: &OwnedFd) -> Result<Page> {
        let map = SharedMap::map(fd.as_fd(), LEN as u64, 0, Prot::ReadWrite, None)?;
        Ok(Page { map })
    }

    pub(super) fn u32_at(&self, at: usize) -> Result<&AtomicU32> {
        self.map.atomic_u32(at)
    }

    pub(super) fn u64_at(&self, at: usize) -> Result<&AtomicU64> {
        self.map.atomic_u64(at)
    }

    /// Whether the header is a board of this layout, and the exporter's pid
    /// and pid namespace it names.
    pub(crate) fn header(&self) -> Result<(u32, u64)> {
        let ok = self.u64_at(H_MAGIC)?.load(Ordering::Acquire) == MAGIC
            && self.u32_at(H_VERSION)?.load(Ordering::Relaxed) == VERSION
            && self.u32_at(H_ENTRIES)?.load(Ordering::Relaxed) == ENTRIES as u32
            && self.u32_at(H_LEASES)?.load(Ordering::Relaxed) == LEASES as u32;
        if !ok {
            return Err(Error::invalid(
                "the broker's board has another layout (another hal version)",
            ));
        }
        Ok((
            self.u32_at(H_PID)?.load(Ordering::Relaxed),
            self.u64_at(H_PID_NS)?.load(Ordering::Relaxed),
        ))
    }

    pub(super) fn entry_at(index: usize, field: usize) -> usize {
        ENTRIES_AT + index * ENTRY_LEN + field
    }

    pub(super) fn lease_at(slot: usize, field: usize) -> usize {
        LEASES_AT + slot * LEASE_LEN + field
    }

    fn home(key: u64) -> usize {
        (key % ENTRIES as u64) as usize
    }

    /// The live entry of `id`, read whole; `None` when there is none, or
    /// when it changed under every try.
    pub(crate) fn find(&self, id: &[u8; 16]) -> Option<Snapshot> {
        let key = super::binding::key(id);
        let home = Self::home(key);
        for k in 0..PROBES {
            let index = (home + k) % ENTRIES;
            for _ in 0..4 {
                match self.read_entry(index, key) {
                    Ok(Read::Empty) => return None,
                    Ok(Read::Other) => break,
                    Ok(Read::Found(s)) => return Some(s),
                    Ok(Read::Torn) => std::hint::spin_loop(),
                    Err(_) => return None,
                }
            }
        }
        None
    }

    /// The entry `index` again: still live, of `generation`?
    pub(crate) fn still(&self, index: u32, generation: u64) -> bool {
        let i = index as usize;
        if i >= ENTRIES {
            return false;
        }
        let read = || -> Result<bool> {
            Ok(self
                .u32_at(Self::entry_at(i, E_STATE))?
                .load(Ordering::SeqCst)
                == LIVE
                && self
                    .u64_at(Self::entry_at(i, E_GENERATION))?
                    .load(Ordering::SeqCst)
                    == generation)
        };
        read().unwrap_or(false)
    }

    fn read_entry(&self, index: usize, key: u64) -> Result<Read> {
        let at = |f| Self::entry_at(index, f);
        let seq = self.u32_at(at(E_SEQ))?;
        let s1 = seq.load(Ordering::Acquire);
        if s1 & 1 == 1 {
            return Ok(Read::Torn);
        }
        let state = self.u32_at(at(E_STATE))?.load(Ordering::Relaxed);
        let found = self.u64_at(at(E_ID))?.load(Ordering::Relaxed);
        let tag = self.u64_at(at(E_ID + 8))?.load(Ordering::Relaxed);
        let generation = self.u64_at(at(E_GENERATION))?.load(Ordering::Relaxed);
        let flags = self.u32_at(at(E_FLAGS))?.load(Ordering::Relaxed);
        let policy = self.u32_at(at(E_POLICY))?.load(Ordering::Relaxed);
        let uid = self.u32_at(at(E_UID))?.load(Ordering::Relaxed);
        let nfds = self.u32_at(at(E_NFDS))?.load(Ordering::Relaxed) as usize;
        let npids = self.u32_at(at(E_NPIDS))?.load(Ordering::Relaxed) as usize;
        let mut fds = Vec::with_capacity(nfds.min(MAX_FDS));
        for i in 0..nfds.min(MAX_FDS) {
            let f = at(E_FDS + i * E_FD_LEN);
            fds.push(Located {
                fd: self.u32_at(f)?.load(Ordering::Relaxed),
                dev: self.u64_at(f + 8)?.load(Ordering::Relaxed),
                ino: self.u64_at(f + 16)?.load(Ordering::Relaxed),
            });
        }
        let mut pids = Vec::with_capacity(npids.min(MAX_PIDS));
        for i in 0..npids.min(MAX_PIDS) {
            let p = at(E_PIDS + i * E_PID_LEN);
            pids.push(Allowed {
                pid: self.u32_at(p)?.load(Ordering::Relaxed),
                start: self.u64_at(p + 8)?.load(Ordering::Relaxed),
            });
        }
        fence(Ordering::Acquire);
        if seq.load(Ordering::Relaxed) != s1 {
            return Ok(Read::Torn);
        }
        Ok(match state {
            EMPTY => Read::Empty,
            LIVE if found == key && nfds <= MAX_FDS && npids <= MAX_PIDS => Read::Found(Snapshot {
                index: index as u32,
                generation,
                flags,
                policy,
                uid,
                fds,
                pids,
                tag,
            }),
            _ => Read::Other,
        })
    }

    /// Claim a lease slot for the process `pid` (started at `start`) on the
    /// entry `index` of `generation`; the slot, or `None` when every slot is
    /// taken. The slot holds the lease once this returns.
    pub(crate) fn claim(&self, pid: u32, start: u64, index: u32, generation: u64) -> Option<u32> {
        let first = (pid as usize).wrapping_mul(2_654_435_761) % LEASES;
        let mine = u64::from(pid) << 32;
        for k in 0..LEASES {
            let slot = (first + k) % LEASES;
            let Ok(word) = self.u64_at(Self::lease_at(slot, L_WORD)) else {
                return None;
            };
            if word.load(Ordering::Relaxed) != 0
                || word
                    .compare_exchange(0, mine | CLAIMING, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            let filled = (|| -> Result<()> {
                self.u64_at(Self::lease_at(slot, L_GENERATION))?
                    .store(generation, Ordering::Relaxed);
                self.u32_at(Self::lease_at(slot, L_ENTRY))?
                    .store(index, Ordering::Relaxed);
                self.u64_at(Self::lease_at(slot, L_START))?
                    .store(start, Ordering::Relaxed);
                Ok(())
            })();
            if filled.is_err() {
                word.store(0, Ordering::Release);
                return None;
            }
            // SeqCst: ordered before the importer's second look at the
            // entry, as the exporter's withdrawal is before its count.
            word.store(mine | HELD, Ordering::SeqCst);
            return Some(slot as u32);
        }
        None
    }

    /// Give back the lease in `slot`, held by `pid` on `generation`; false
    /// when the slot holds something else (a forged or stale slot).
    pub(crate) fn give_back(&self, slot: u32, pid: u32, generation: u64) -> bool {
        let s = slot as usize;
        if s >= LEASES {
            return false;
        }
        let give = || -> Result<bool> {
            let word = self.u64_at(Self::lease_at(s, L_WORD))?;
            let held = (u64::from(pid) << 32) | HELD;
            if self
                .u64_at(Self::lease_at(s, L_GENERATION))?
                .load(Ordering::Acquire)
                != generation
            {
                return Ok(false);
            }
            Ok(word
                .compare_exchange(held, 0, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok())
        };
        give().unwrap_or(false)
    }

    /// How many live processes hold a lease on the entry `index` of
    /// `generation`, each counted only where `holds` (the pid and start
    /// time the slot names) vouches for it; slots of dead holders (and of
    /// claims their process died in) are freed.
    pub(crate) fn count(
        &self,
        index: u32,
        generation: u64,
        holds: &mut dyn FnMut(u32, u64) -> bool,
    ) -> usize {
        let mut n = 0;
        for slot in 0..LEASES {
            let Ok(word) = self.u64_at(Self::lease_at(slot, L_WORD)) else {
                return n;
            };
            let w = word.load(Ordering::SeqCst);
            if w == 0 {
                continue;
            }
            let pid = (w >> 32) as u32;
            let state = w & 0xff;
            let field = |f| self.lease_at_u64(slot, f);
            let start = field(L_START);
            if state == CLAIMING {
                // The claimer may die between its claim and its hold.
                if !os::process_alive(pid, 0) {
                    let _ = word.compare_exchange(w, 0, Ordering::SeqCst, Ordering::Relaxed);
                }
                continue;
            }
            let entry = self
                .u32_at(Self::lease_at(slot, L_ENTRY))
                .map_or(u32::MAX, |a| a.load(Ordering::Relaxed));
            if state != HELD || entry != index || field(L_GENERATION) != generation {
                continue;
            }
            if os::process_alive(pid, start) {
                if holds(pid, start) {
                    n += 1;
                }
            } else {
                let _ = word.compare_exchange(w, 0, Ordering::SeqCst, Ordering::Relaxed);
            }
        }
        n
    }

    /// Write the header of a new board: the layout, and the exporter's pid
    /// and pid namespace; the magic last.
    pub(super) fn write_header(&self, pid: u32, pid_ns: u64) -> Result<()> {
        self.u64_at(H_MAGIC)?.store(0, Ordering::Relaxed);
        self.u32_at(H_VERSION)?.store(VERSION, Ordering::Relaxed);
        self.u32_at(H_ENTRIES)?
            .store(ENTRIES as u32, Ordering::Relaxed);
        self.u32_at(H_LEASES)?
            .store(LEASES as u32, Ordering::Relaxed);
        self.u32_at(H_PID)?.store(pid, Ordering::Relaxed);
        self.u64_at(H_PID_NS)?.store(pid_ns, Ordering::Relaxed);
        self.u64_at(H_MAGIC)?.store(MAGIC, Ordering::Release);
        Ok(())
    }

    /// The first entry free for `id` on its probe sequence.
    pub(super) fn free_entry(&self, id: &[u8; 16]) -> Option<u32> {
        let home = Self::home(super::binding::key(id));
        (0..PROBES).map(|k| (home + k) % ENTRIES).find_map(|i| {
            let state = self.u32_at(Self::entry_at(i, E_STATE)).ok()?;
            matches!(state.load(Ordering::Relaxed), EMPTY | WITHDRAWN).then_some(i as u32)
        })
    }

    /// Write the entry `index` whole, under its sequence word (the
    /// exporter alone writes entries, under its broker's table lock).
    pub(super) fn write(&self, index: u32, e: &Stated<'_>) -> Result<()> {
        let at = |f| Self::entry_at(index as usize, f);
        let seq = self.u32_at(at(E_SEQ))?;
        let s = seq.load(Ordering::Relaxed);
        seq.store(s.wrapping_add(1) | 1, Ordering::Relaxed);
        fence(Ordering::Release);
        // The id itself never goes on the board (see `binding`).
        let key = super::binding::key(e.id);
        let tag = super::binding::tag(e.id, e.fds);
        self.u64_at(at(E_ID))?.store(key, Ordering::Relaxed);
        self.u64_at(at(E_ID + 8))?.store(tag, Ordering::Relaxed);
        self.u64_at(at(E_GENERATION))?
            .store(e.generation, Ordering::Relaxed);
        self.u32_at(at(E_FLAGS))?.store(e.flags, Ordering::Relaxed);
        self.u32_at(at(E_POLICY))?
            .store(e.policy, Ordering::Relaxed);
        self.u32_at(at(E_UID))?.store(e.uid, Ordering::Relaxed);
        self.u32_at(at(E_NFDS))?
            .store(e.fds.len() as u32, Ordering::Relaxed);
        for (i, l) in e.fds.iter().enumerate() {
            let f = at(E_FDS + i * E_FD_LEN);
            self.u32_at(f)?.store(l.fd, Ordering::Relaxed);
            self.u64_at(f + 8)?.store(l.dev, Ordering::Relaxed);
            self.u64_at(f + 16)?.store(l.ino, Ordering::Relaxed);
        }
        self.u32_at(at(E_NPIDS))?
            .store(e.pids.len() as u32, Ordering::Relaxed);
        for (i, a) in e.pids.iter().enumerate() {
            let f = at(E_PIDS + i * E_PID_LEN);
            self.u32_at(f)?.store(a.pid, Ordering::Relaxed);
            self.u64_at(f + 8)?.store(a.start, Ordering::Relaxed);
        }
        self.u32_at(at(E_STATE))?.store(LIVE, Ordering::Relaxed);
        seq.store((s | 1).wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// Withdraw the entry `index`: importers stop finding it.
    pub(super) fn withdraw(&self, index: u32) {
        let at = |f| Self::entry_at(index as usize, f);
        let (Ok(seq), Ok(state)) = (self.u32_at(at(E_SEQ)), self.u32_at(at(E_STATE))) else {
            return;
        };
        let s = seq.load(Ordering::Relaxed);
        seq.store(s.wrapping_add(1) | 1, Ordering::Relaxed);
        fence(Ordering::Release);
        // SeqCst: before any count of this entry's leases that follows.
        state.store(WITHDRAWN, Ordering::SeqCst);
        seq.store((s | 1).wrapping_add(1), Ordering::Release);
    }

    fn lease_at_u64(&self, slot: usize, field: usize) -> u64 {
        self.u64_at(Self::lease_at(slot, field))
            .map_or(0, |a| a.load(Ordering::Relaxed))
    }
}

pub(super) enum Read {
    Empty,
    Other,
    Torn,
    Found(Snapshot),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key's home entry is the key modulo the number of entries: the
    /// entry itself, not only a start that the probe reduces again. The
    /// largest key is a home too, with no overflow on the way (keys are
    /// hashes, so any word may come).
    #[test]
    fn a_keys_home_is_the_key_modulo_the_entries() {
        assert_eq!(Page::home(0), 0);
        assert_eq!(Page::home(5), 5);
        assert_eq!(Page::home(ENTRIES as u64 + 5), 5);
        assert_eq!(Page::home(u64::MAX), ENTRIES - 1);
    }
}
