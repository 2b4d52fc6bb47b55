//! The broker's board: a shared page where an exporter publishes where its
//! exports' descriptors are, and who may import them, so that an importer
//! with ptrace access to it (`pidfd_getfd(2)`) imports without asking: no
//! round trip per import. Importers record their own leases on it, and the
//! exporter counts them with the leases its broker registered.
//!
//! The board is a sealed memfd (its size fixed: `F_SEAL_SHRINK`,
//! `F_SEAL_GROW`, `F_SEAL_SEAL`) made when the first importer asks for it:
//! an exporter no importer asks pays nothing. It is registered with the
//! broker under the reserved id [`BOARD_ID`], which the broker serves only
//! by location ("lease and locate"), never by `SCM_RIGHTS`, and only to
//! processes of its own user: only an importer that can take the
//! exporter's descriptors itself, and could therefore read and write the
//! exporter's memory anyway, ever maps it.
//!
//! Layout (little-endian, every field an aligned atomic):
//!
//! | at | what |
//! | --- | --- |
//! | 0 | header: magic `HALBOARD`, version, entry and lease counts, the exporter's pid and pid namespace |
//! | [`ENTRIES_AT`] | [`ENTRIES`] entries of [`ENTRY_LEN`] bytes, open addressing on the object id |
//! | [`LEASES_AT`] | [`LEASES`] lease slots of [`LEASE_LEN`] bytes |
//!
//! An entry is written by the exporter alone, under a sequence word (odd
//! while it changes): its state (empty, live, withdrawn), a generation (the
//! registration's serial), the object id, whether it counts importers, its
//! policy (anyone of the user, one uid, or up to [`MAX_PIDS`] pinned pids)
//! and up to [`MAX_FDS`] descriptors as number, `st_dev` and `st_ino`. An
//! export the board cannot state (more descriptors, a longer allow-list, a
//! pid not pinned yet) is not published, and its importers ask the broker.
//!
//! A lease slot is claimed by an importer: a word holding its pid and a
//! state (claiming, held), the entry and generation it holds, and its start
//! time. The importer claims, then reads the entry again: the exporter
//! withdraws an entry before it counts the leases of a release, so either
//! the importer sees the withdrawal (and gives the slot back) or the
//! exporter's count sees the lease. Holders whose process died are not
//! counted and their slots are freed.

use std::fmt;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::located::Located;
use super::policy::{Allowed, Policy};
use super::registry::Entry;
use crate::error::{Error, Result};
use crate::kit::lock::lock;
use crate::kit::os::{self, Prot, SharedMap};
use crate::lease::OutsideLeases;

/// The reserved object id under which the broker serves its board.
pub(crate) const BOARD_ID: [u8; 16] = *b"hal:broker:board";
/// `HALBOARD`, little-endian.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"HALBOARD");
/// The board's layout version.
pub(crate) const VERSION: u32 = 1;
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
const H_MAGIC: usize = 0;
const H_VERSION: usize = 8;
const H_ENTRIES: usize = 12;
const H_LEASES: usize = 16;
const H_PID: usize = 20;
const H_PID_NS: usize = 24;

// Entry fields, from the entry's start.
const E_SEQ: usize = 0;
const E_STATE: usize = 4;
const E_GENERATION: usize = 8;
const E_ID: usize = 16;
const E_FLAGS: usize = 32;
const E_POLICY: usize = 36;
const E_UID: usize = 40;
const E_NFDS: usize = 44;
const E_FDS: usize = 48;
const E_FD_LEN: usize = 24;
const E_NPIDS: usize = 144;
const E_PIDS: usize = 152;
const E_PID_LEN: usize = 16;

/// Entry states.
const EMPTY: u32 = 0;
const LIVE: u32 = 1;
const WITHDRAWN: u32 = 2;

/// Entry flag: the export counts its importers (a lease is needed).
pub(crate) const COUNTS_LEASES: u32 = 1;

/// Entry policies.
pub(crate) const ANYONE: u32 = 1;
pub(crate) const SAME_USER: u32 = 2;
pub(crate) const PIDS: u32 = 3;

// Lease slot fields, from the slot's start.
const L_WORD: usize = 0;
const L_GENERATION: usize = 8;
const L_ENTRY: usize = 16;
const L_START: usize = 24;

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
}

impl Page {
    /// Map the board `fd` read-write (shared).
    pub(crate) fn map(fd: &OwnedFd) -> Result<Page> {
        let map = SharedMap::map(fd.as_fd(), LEN as u64, 0, Prot::ReadWrite, None)?;
        Ok(Page { map })
    }

    fn u32_at(&self, at: usize) -> Result<&AtomicU32> {
        self.map.atomic_u32(at)
    }

    fn u64_at(&self, at: usize) -> Result<&AtomicU64> {
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

    fn entry_at(index: usize, field: usize) -> usize {
        ENTRIES_AT + index * ENTRY_LEN + field
    }

    fn lease_at(slot: usize, field: usize) -> usize {
        LEASES_AT + slot * LEASE_LEN + field
    }

    fn home(id: &[u8; 16]) -> usize {
        let mut lo = [0u8; 8];
        lo.copy_from_slice(&id[..8]);
        (u64::from_le_bytes(lo) % ENTRIES as u64) as usize
    }

    fn id_words(id: &[u8; 16]) -> (u64, u64) {
        let mut lo = [0u8; 8];
        let mut hi = [0u8; 8];
        lo.copy_from_slice(&id[..8]);
        hi.copy_from_slice(&id[8..]);
        (u64::from_le_bytes(lo), u64::from_le_bytes(hi))
    }

    /// The live entry of `id`, read whole; `None` when there is none, or
    /// when it changed under every try.
    pub(crate) fn find(&self, id: &[u8; 16]) -> Option<Snapshot> {
        let (lo, hi) = Self::id_words(id);
        let home = Self::home(id);
        for k in 0..PROBES {
            let index = (home + k) % ENTRIES;
            for _ in 0..4 {
                match self.read_entry(index, lo, hi) {
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

    fn read_entry(&self, index: usize, lo: u64, hi: u64) -> Result<Read> {
        let at = |f| Self::entry_at(index, f);
        let seq = self.u32_at(at(E_SEQ))?;
        let s1 = seq.load(Ordering::Acquire);
        if s1 & 1 == 1 {
            return Ok(Read::Torn);
        }
        let state = self.u32_at(at(E_STATE))?.load(Ordering::Relaxed);
        let id = (
            self.u64_at(at(E_ID))?.load(Ordering::Relaxed),
            self.u64_at(at(E_ID + 8))?.load(Ordering::Relaxed),
        );
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
            LIVE if id == (lo, hi) && nfds <= MAX_FDS && npids <= MAX_PIDS => {
                Read::Found(Snapshot {
                    index: index as u32,
                    generation,
                    flags,
                    policy,
                    uid,
                    fds,
                    pids,
                })
            }
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
    /// `generation`; slots of dead holders (and of claims their process
    /// died in) are freed.
    pub(crate) fn count(&self, index: u32, generation: u64) -> usize {
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
                n += 1;
            } else {
                let _ = word.compare_exchange(w, 0, Ordering::SeqCst, Ordering::Relaxed);
            }
        }
        n
    }

    fn lease_at_u64(&self, slot: usize, field: usize) -> u64 {
        self.u64_at(Self::lease_at(slot, field))
            .map_or(0, |a| a.load(Ordering::Relaxed))
    }
}

enum Read {
    Empty,
    Other,
    Torn,
    Found(Snapshot),
}

/// This process's board, once an importer asked for it.
pub(crate) struct Board {
    page: Page,
    /// The process that made it: a forked child never writes its parent's.
    pid: u32,
    /// The entry of each published registration (by serial), for the
    /// withdrawal.
    published: Mutex<std::collections::HashMap<u64, u32>>,
}

impl fmt::Debug for Board {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Board").field("pid", &self.pid).finish()
    }
}

/// This process's board: made at the first request for it.
static BOARD: Mutex<Option<Arc<Board>>> = Mutex::new(None);

/// This process's board when it has one.
pub(super) fn active() -> Option<Arc<Board>> {
    lock(&BOARD)
        .as_ref()
        .filter(|b| b.pid == os::pid())
        .cloned()
}

/// Make this process's board (once; again in a forked child), register it
/// in `table` under [`BOARD_ID`] and publish every export `table` holds.
/// Called with `table` locked, by the broker deciding a request for the
/// board.
pub(super) fn activate(
    table: &mut std::collections::HashMap<[u8; 16], Vec<Entry>>,
    serial: u64,
) -> Result<()> {
    let mut slot = lock(&BOARD);
    if slot.as_ref().is_some_and(|b| b.pid == os::pid()) && table.contains_key(&BOARD_ID) {
        return Ok(());
    }
    let fd = os::memfd("hal-broker-board", LEN as u64, None)?;
    os::add_seals(fd.as_fd(), os::EXPORT_SEALS)?;
    let page = Page::map(&fd)?;
    page.u64_at(H_MAGIC)?.store(0, Ordering::Relaxed);
    page.u32_at(H_VERSION)?.store(VERSION, Ordering::Relaxed);
    page.u32_at(H_ENTRIES)?
        .store(ENTRIES as u32, Ordering::Relaxed);
    page.u32_at(H_LEASES)?
        .store(LEASES as u32, Ordering::Relaxed);
    page.u32_at(H_PID)?.store(os::pid(), Ordering::Relaxed);
    page.u64_at(H_PID_NS)?
        .store(os::pid_namespace(), Ordering::Relaxed);
    page.u64_at(H_MAGIC)?.store(MAGIC, Ordering::Release);
    let board = Arc::new(Board {
        page,
        pid: os::pid(),
        published: Mutex::new(std::collections::HashMap::new()),
    });
    for (id, entries) in table.iter() {
        for e in entries {
            board.publish(id, e);
        }
    }
    table.insert(
        BOARD_ID,
        vec![Entry {
            serial,
            fds: Arc::from(vec![fd]),
            policy: Policy::SameUser(nix::unistd::geteuid().as_raw()),
            leases: None,
        }],
    );
    *slot = Some(board);
    Ok(())
}

/// What the board states of `policy`, or `None` when it cannot.
fn stated(policy: &Policy) -> Option<(u32, u32, &[Allowed])> {
    match policy {
        Policy::Anyone => Some((ANYONE, 0, &[])),
        Policy::SameUser(uid) => Some((SAME_USER, *uid, &[])),
        Policy::Pids(list) if list.len() <= MAX_PIDS && list.iter().all(|a| a.start != 0) => {
            Some((PIDS, 0, list.as_slice()))
        }
        Policy::Pids(_) => None,
    }
}

impl Board {
    /// Publish the registration `e` of `id` (or state it again after its
    /// policy changed); withdrawn when the board cannot state it.
    pub(super) fn publish(self: &Arc<Self>, id: &[u8; 16], e: &Entry) {
        if *id == BOARD_ID {
            return;
        }
        let known = lock(&self.published).get(&e.serial).copied();
        let stated_policy = stated(&e.policy);
        let located = if e.fds.len() <= MAX_FDS {
            super::located::locate(&e.fds)
        } else {
            None
        };
        let (Some((policy, uid, pids)), Some(fds)) = (stated_policy, located) else {
            if let Some(index) = known {
                self.withdraw(e.serial, index);
            }
            return;
        };
        let index = match known {
            Some(i) => i,
            None => match self.free_entry(id) {
                Some(i) => i,
                None => return,
            },
        };
        if self
            .write_entry(index, id, e, policy, uid, pids, &fds)
            .is_err()
        {
            return;
        }
        if known.is_none() {
            lock(&self.published).insert(e.serial, index);
            if let Some(t) = &e.leases {
                t.add_outside(Arc::new(EntryLeases {
                    board: Arc::clone(self),
                    index,
                    generation: e.serial,
                }));
            }
        }
    }

    /// The first entry free for `id` on its probe sequence.
    fn free_entry(&self, id: &[u8; 16]) -> Option<u32> {
        let home = Page::home(id);
        (0..PROBES).map(|k| (home + k) % ENTRIES).find_map(|i| {
            let state = self.page.u32_at(Page::entry_at(i, E_STATE)).ok()?;
            matches!(state.load(Ordering::Relaxed), EMPTY | WITHDRAWN).then_some(i as u32)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn write_entry(
        &self,
        index: u32,
        id: &[u8; 16],
        e: &Entry,
        policy: u32,
        uid: u32,
        pids: &[Allowed],
        fds: &[Located],
    ) -> Result<()> {
        let p = &self.page;
        let at = |f| Page::entry_at(index as usize, f);
        let seq = p.u32_at(at(E_SEQ))?;
        let s = seq.load(Ordering::Relaxed);
        seq.store(s.wrapping_add(1) | 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let (lo, hi) = Page::id_words(id);
        p.u64_at(at(E_ID))?.store(lo, Ordering::Relaxed);
        p.u64_at(at(E_ID + 8))?.store(hi, Ordering::Relaxed);
        p.u64_at(at(E_GENERATION))?
            .store(e.serial, Ordering::Relaxed);
        let flags = if e.leases.is_some() { COUNTS_LEASES } else { 0 };
        p.u32_at(at(E_FLAGS))?.store(flags, Ordering::Relaxed);
        p.u32_at(at(E_POLICY))?.store(policy, Ordering::Relaxed);
        p.u32_at(at(E_UID))?.store(uid, Ordering::Relaxed);
        p.u32_at(at(E_NFDS))?
            .store(fds.len() as u32, Ordering::Relaxed);
        for (i, l) in fds.iter().enumerate() {
            let f = at(E_FDS + i * E_FD_LEN);
            p.u32_at(f)?.store(l.fd, Ordering::Relaxed);
            p.u64_at(f + 8)?.store(l.dev, Ordering::Relaxed);
            p.u64_at(f + 16)?.store(l.ino, Ordering::Relaxed);
        }
        p.u32_at(at(E_NPIDS))?
            .store(pids.len() as u32, Ordering::Relaxed);
        for (i, a) in pids.iter().enumerate() {
            let f = at(E_PIDS + i * E_PID_LEN);
            p.u32_at(f)?.store(a.pid, Ordering::Relaxed);
            p.u64_at(f + 8)?.store(a.start, Ordering::Relaxed);
        }
        p.u32_at(at(E_STATE))?.store(LIVE, Ordering::Relaxed);
        seq.store((s | 1).wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// Withdraw the entry of the registration `serial` (its export was
    /// dropped): importers stop finding it, and those that claimed a lease
    /// on it see the withdrawal and give the lease back, or are counted.
    pub(super) fn withdraw_serial(&self, serial: u64) {
        let index = lock(&self.published).get(&serial).copied();
        if let Some(index) = index {
            self.withdraw(serial, index);
        }
    }

    fn withdraw(&self, serial: u64, index: u32) {
        lock(&self.published).remove(&serial);
        let p = &self.page;
        let at = |f| Page::entry_at(index as usize, f);
        let (Ok(seq), Ok(state)) = (p.u32_at(at(E_SEQ)), p.u32_at(at(E_STATE))) else {
            return;
        };
        let s = seq.load(Ordering::Relaxed);
        seq.store(s.wrapping_add(1) | 1, Ordering::Relaxed);
        fence(Ordering::Release);
        // SeqCst: before any count of this entry's leases that follows.
        state.store(WITHDRAWN, Ordering::SeqCst);
        seq.store((s | 1).wrapping_add(1), Ordering::Release);
    }
}

/// The leases importers hold on one published registration, counted by the
/// export's lease table with the broker's own.
struct EntryLeases {
    board: Arc<Board>,
    index: u32,
    generation: u64,
}

impl fmt::Debug for EntryLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntryLeases")
            .field("index", &self.index)
            .field("generation", &self.generation)
            .finish()
    }
}

impl OutsideLeases for EntryLeases {
    fn count_live(&self) -> usize {
        self.board.page.count(self.index, self.generation)
    }

    fn closed(&self) -> bool {
        !self.board.page.still(self.index, self.generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::LeaseTable;

    fn board() -> Arc<Board> {
        let fd = os::memfd("hal-board-test", LEN as u64, None).unwrap();
        Arc::new(Board {
            page: Page::map(&fd).unwrap(),
            pid: os::pid(),
            published: Mutex::new(std::collections::HashMap::new()),
        })
    }

    fn entry(serial: u64, policy: Policy, n: usize, leases: Option<Arc<LeaseTable>>) -> Entry {
        let fds: Vec<OwnedFd> = (0..n)
            .map(|_| os::memfd("hal-board-entry", 4096, None).unwrap())
            .collect();
        Entry {
            serial,
            fds: Arc::from(fds),
            policy,
            leases,
        }
    }

    /// A pid that no process has (a reaped child's).
    fn dead_pid() -> u32 {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    }

    #[test]
    fn published_entries_are_found_whole_and_withdrawn() {
        let b = board();
        let (me, start) = os::self_identity();
        let id = os::random_id();
        let pinned = Policy::Pids(vec![Allowed { pid: me, start }]);
        let e = entry(7, pinned, 2, None);
        b.publish(&id, &e);
        let s = b.page.find(&id).expect("published");
        assert_eq!((s.generation, s.flags, s.policy), (7, 0, PIDS));
        assert_eq!(s.pids, vec![Allowed { pid: me, start }]);
        assert_eq!(Some(s.fds.clone()), super::super::located::locate(&e.fds));
        assert!(b.page.still(s.index, 7) && !b.page.still(s.index, 8));
        assert!(b.page.find(&os::random_id()).is_none(), "another id");
        // Stated again with another policy: the same entry.
        let e2 = Entry {
            policy: Policy::SameUser(5),
            ..entry(7, Policy::Anyone, 0, None)
        };
        b.publish(
            &id,
            &Entry {
                fds: Arc::clone(&e.fds),
                ..e2
            },
        );
        let again = b.page.find(&id).unwrap();
        assert_eq!(
            (again.index, again.policy, again.uid),
            (s.index, SAME_USER, 5)
        );
        b.withdraw_serial(7);
        assert!(b.page.find(&id).is_none() && !b.page.still(s.index, 7));
        // A torn entry (its sequence odd, as while the exporter writes it)
        // is never read.
        b.publish(&id, &entry(9, Policy::Anyone, 1, None));
        let s = b.page.find(&id).unwrap();
        let seq = b
            .page
            .u32_at(Page::entry_at(s.index as usize, E_SEQ))
            .unwrap();
        seq.fetch_add(1, Ordering::SeqCst);
        assert!(b.page.find(&id).is_none(), "torn");
        seq.fetch_add(1, Ordering::SeqCst);
        assert!(b.page.find(&id).is_some());
    }

    #[test]
    fn exports_the_board_cannot_state_are_not_published() {
        let b = board();
        let many = (1..=7).map(|pid| Allowed { pid, start: 1 }).collect();
        let unpinned = Policy::Pids(vec![Allowed { pid: 1, start: 0 }]);
        for (k, e) in [
            entry(1, Policy::Pids(many), 1, None),
            entry(2, unpinned, 1, None),
            entry(3, Policy::Anyone, MAX_FDS + 1, None),
        ]
        .iter()
        .enumerate()
        {
            let id = os::random_id();
            b.publish(&id, e);
            assert!(b.page.find(&id).is_none(), "case {k}");
        }
        // A published export whose policy can no longer be stated leaves.
        let id = os::random_id();
        let e = entry(4, Policy::Anyone, 1, None);
        b.publish(&id, &e);
        assert!(b.page.find(&id).is_some());
        let unpinned = Policy::Pids(vec![Allowed { pid: 1, start: 0 }]);
        b.publish(
            &id,
            &Entry {
                policy: unpinned,
                fds: Arc::clone(&e.fds),
                ..entry(4, Policy::Anyone, 0, None)
            },
        );
        assert!(b.page.find(&id).is_none());
        // The board itself is never an entry.
        b.publish(&BOARD_ID, &entry(5, Policy::Anyone, 1, None));
        assert!(b.page.find(&BOARD_ID).is_none());
    }

    #[test]
    fn leases_are_counted_given_back_by_their_holder_and_freed_when_it_dies() {
        let b = board();
        let table = LeaseTable::new(4).unwrap();
        let id = os::random_id();
        b.publish(&id, &entry(11, Policy::Anyone, 1, Some(Arc::clone(&table))));
        let s = b.page.find(&id).unwrap();
        assert_eq!(s.flags, COUNTS_LEASES);
        let (me, start) = os::self_identity();
        let slot = b.page.claim(me, start, s.index, 11).unwrap();
        assert_eq!(table.count(), 1, "the table counts the board's lease");
        assert_eq!(b.page.count(s.index, 12), 0, "another generation");
        assert!(!b.page.give_back(slot, me + 1, 11), "another pid");
        assert!(!b.page.give_back(slot, me, 12), "another generation");
        assert!(!b.page.give_back(LEASES as u32, me, 11), "out of bounds");
        assert!(b.page.give_back(slot, me, 11));
        assert!(!b.page.give_back(slot, me, 11), "given back once");
        assert_eq!(table.count(), 0);
        // A holder whose process died: not counted, its slot freed.
        let dead = dead_pid();
        let slot = b.page.claim(dead, 1, s.index, 11).unwrap();
        assert_eq!(table.count(), 0);
        let word = b
            .page
            .u64_at(Page::lease_at(slot as usize, L_WORD))
            .unwrap();
        assert_eq!(word.load(Ordering::SeqCst), 0, "freed");
        // A claim its process died in (never held) is freed too.
        word.store((u64::from(dead) << 32) | CLAIMING, Ordering::SeqCst);
        assert_eq!(b.page.count(s.index, 11), 0);
        assert_eq!(word.load(Ordering::SeqCst), 0);
        // A live claimer's claim is left alone, and not counted.
        word.store((u64::from(me) << 32) | CLAIMING, Ordering::SeqCst);
        assert_eq!(b.page.count(s.index, 11), 0);
        assert_ne!(word.load(Ordering::SeqCst), 0);
        word.store(0, Ordering::SeqCst);
        // Withdrawn with a lease held: counted until given back, then the
        // table forgets the record.
        let slot = b.page.claim(me, start, s.index, 11).unwrap();
        b.withdraw_serial(11);
        assert_eq!(table.count(), 1);
        assert!(b.page.give_back(slot, me, 11));
        assert_eq!(table.count(), 0);
        assert!(lock(table_outside(&table)).is_empty(), "forgotten");
    }

    #[test]
    fn a_full_board_takes_no_claim() {
        let b = board();
        let (me, start) = os::self_identity();
        for slot in 0..LEASES {
            let w = b.page.u64_at(Page::lease_at(slot, L_WORD)).unwrap();
            w.store(u64::MAX, Ordering::Relaxed);
        }
        assert_eq!(b.page.claim(me, start, 0, 1), None);
    }

    fn table_outside(t: &LeaseTable) -> &Mutex<Vec<Arc<dyn OutsideLeases>>> {
        t.outside_for_test()
    }
}
