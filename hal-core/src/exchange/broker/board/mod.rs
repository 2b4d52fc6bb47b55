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
//! | [`ENTRIES_AT`](page::ENTRIES_AT) | [`ENTRIES`](page::ENTRIES) entries of [`ENTRY_LEN`](page::ENTRY_LEN) bytes, open addressing on the object id |
//! | [`LEASES_AT`](page::LEASES_AT) | [`LEASES`](page::LEASES) lease slots of [`LEASE_LEN`](page::LEASE_LEN) bytes |
//!
//! An entry is written by the exporter alone, under a sequence word (odd
//! while it changes): its state (empty, live, withdrawn), a generation (the
//! registration's serial), a key and a tag derived from the object id
//! ([`binding`]: the id itself is never on the board, and the tag binds
//! the entry to its descriptors' identities, which the importer checks
//! against the id its handle carries), whether it counts importers, its
//! policy (anyone of the user, one uid, or up to [`MAX_PIDS`] pinned pids)
//! and up to [`MAX_FDS`] descriptors as number, `st_dev` and `st_ino`. An
//! export the board cannot state (more descriptors, descriptors that are not
//! memfds, a longer allow-list, a pid not pinned yet, a full probe sequence)
//! is not published, and its importers ask the broker.
//!
//! A lease slot is claimed by an importer: a word holding its pid and a
//! state (claiming, held), the entry and generation it holds, and its start
//! time. The importer claims, then reads the entry again: the exporter
//! withdraws an entry before it counts the leases of a release, so either
//! the importer sees the withdrawal (and gives the slot back) or the
//! exporter's count sees the lease. Holders whose process died are not
//! counted and their slots are freed.

use std::collections::HashMap;
use std::fmt;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};

use super::entry::Entry;
use super::policy::{Allowed, Policy};
use crate::error::Result;
use crate::kit::os;
use crate::kit::os::lock::lock;
use crate::lease::OutsideLeases;

pub(crate) mod binding;
pub(crate) mod page;

pub(crate) use page::{
    Page, Snapshot, ANYONE, BOARD_ID, COUNTS_LEASES, LEN, MAX_FDS, PIDS, SAME_USER,
};
use page::{Stated, MAX_PIDS};

/// Lease holders (pid, start time) seen to hold a board.
type Holders = Mutex<Vec<(u32, u64)>>;

/// The rule that says whether a lease slot's holder counts: its pid, start
/// time, the board's identity, and the holders seen so far.
type Verify = fn(u32, u64, (u64, u64), &Holders) -> bool;

/// This process's board, once an importer asked for it.
pub(crate) struct Board {
    page: Page,
    /// The board's identity (device, inode), which every direct importer
    /// holds open.
    id: (u64, u64),
    /// Who a lease slot may name ([`holds_board`]; another rule in the
    /// unit tests, whose importer is this process).
    verify: Verify,
    /// Holders seen to hold the board.
    holders: Holders,
    /// The process that made it: a forked child never writes its parent's.
    pid: u32,
    /// The entry of each published registration (by serial), for the
    /// withdrawal.
    published: Mutex<HashMap<u64, u32>>,
}

impl fmt::Debug for Board {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Board").field("pid", &self.pid).finish()
    }
}

/// The name of the memfd of the board of process `pid`, as
/// `/proc/PID/fd` shows it (`/memfd:NAME (deleted)`): whose board a
/// descriptor or a mapping is.
pub(crate) fn name(pid: u32) -> String {
    format!("hal-broker-board.{pid}")
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
pub(super) fn activate(table: &mut HashMap<[u8; 16], Vec<Entry>>, serial: u64) -> Result<()> {
    let mut slot = lock(&BOARD);
    // `table` is this process's own broker's (a forked child starts a new
    // one, without the board).
    if table.contains_key(&BOARD_ID) {
        return Ok(());
    }
    let fd = os::memfd(&name(os::pid()), LEN as u64, None)?;
    os::add_seals(fd.as_fd(), os::EXPORT_SEALS)?;
    let page = Page::map(&fd)?;
    page.write_header(os::pid(), os::pid_namespace())?;
    let board = Arc::new(Board {
        page,
        id: {
            let st = os::fstat(fd.as_fd())?;
            (st.st_dev, st.st_ino)
        },
        verify: holds_board,
        holders: Mutex::new(Vec::new()),
        pid: os::pid(),
        published: Mutex::new(HashMap::new()),
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
        // The board's importers can take the exporter's descriptors
        // themselves (its user, or root): "anyone" of them.
        Policy::Anyone | Policy::OwnUsers => Some((ANYONE, 0, &[])),
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
        // Only memfds: the importer takes a descriptor without seals (a
        // vendor's shareable handle) with SCM_RIGHTS anyway.
        let located =
            if e.fds.len() <= MAX_FDS && e.fds.iter().all(|fd| os::seals(fd.as_fd()).is_ok()) {
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
            None => match self.page.free_entry(id) {
                Some(i) => i,
                None => return,
            },
        };
        let stated = Stated {
            id,
            generation: e.serial,
            flags: if e.leases.is_some() { COUNTS_LEASES } else { 0 },
            policy,
            uid,
            pids,
            fds: &fds,
        };
        if self.page.write(index, &stated).is_err() {
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
        self.page.withdraw(index);
    }
}

/// The leases importers hold on one published registration, counted by the
/// export's lease table with the broker's own.
///
/// Any process of the exporter's user can write a lease slot (see
/// [`binding`]) in the name of any live process: pid 1, which never
/// exits, or the exporter itself. So a held slot counts only for a process
/// that holds the board open, as every direct importer does while it holds
/// a lease (its view keeps the board's descriptor): [`holds_board`].
struct EntryLeases {
    board: Arc<Board>,
    index: u32,
    generation: u64,
}

/// Whether the live process `pid` (started at `start`) may hold a lease on
/// this process's board: it holds a descriptor of the board (device,
/// inode `board`), and it is not this process (which never imports its own
/// exports by the board). A process whose descriptors cannot be listed
/// counts only when it is of another user than this process (root
/// importing this user's export, say): one of this user's that this
/// process may not look at is not dumpable, and could not be reading the
/// board. A process seen to hold the board once is believed for its life
/// (`seen`).
fn holds_board(pid: u32, start: u64, board: (u64, u64), seen: &Holders) -> bool {
    if pid == os::pid() {
        return false;
    }
    if lock(seen).contains(&(pid, start)) {
        return true;
    }
    let holds = match os::holds_file(pid, board) {
        Some(h) => h,
        None => os::process_euid(pid).is_some_and(|uid| uid != nix::unistd::geteuid().as_raw()),
    };
    if holds {
        let mut seen = lock(seen);
        // A bound on what is kept: the oldest go first.
        if seen.len() >= 1024 {
            seen.remove(0);
        }
        seen.push((pid, start));
    }
    holds
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
        let board = &self.board;
        board
            .page
            .count(self.index, self.generation, &mut |pid, start| {
                (board.verify)(pid, start, board.id, &board.holders)
            })
    }

    fn closed(&self) -> bool {
        !self.board.page.still(self.index, self.generation)
    }
}

#[cfg(test)]
mod tests {
    use super::super::located::Located;
    use super::page::*;
    use super::*;
    use crate::lease::LeaseTable;
    use std::os::fd::OwnedFd;
    use std::sync::atomic::Ordering;

    fn board() -> Arc<Board> {
        let fd = os::memfd("hal-board-test", LEN as u64, None).unwrap();
        Arc::new(Board {
            page: Page::map(&fd).unwrap(),
            id: (0, 0),
            // This process is the importer of these tests.
            verify: |_, _, _, _| true,
            holders: Mutex::new(Vec::new()),
            pid: os::pid(),
            published: Mutex::new(HashMap::new()),
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
            Entry {
                fds: Arc::from(vec![OwnedFd::from(
                    std::fs::File::open("/dev/null").unwrap(),
                )]),
                ..entry(6, Policy::Anyone, 0, None)
            },
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
        assert_eq!(
            b.page.count(s.index, 12, &mut |_, _| true),
            0,
            "another generation"
        );
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
        assert_eq!(b.page.count(s.index, 11, &mut |_, _| true), 0);
        assert_eq!(word.load(Ordering::SeqCst), 0);
        // A live claimer's claim is left alone, and not counted.
        word.store((u64::from(me) << 32) | CLAIMING, Ordering::SeqCst);
        assert_eq!(b.page.count(s.index, 11, &mut |_, _| true), 0);
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

    fn stated<'a>(id: &'a [u8; 16], generation: u64, fds: &'a [Located]) -> Stated<'a> {
        Stated {
            id,
            generation,
            flags: 0,
            policy: ANYONE,
            uid: generation as u32,
            pids: &[],
            fds,
        }
    }

    #[test]
    fn colliding_ids_each_find_their_own_entry() {
        let b = board();
        // Four ids with one home entry (keys equal modulo the entries),
        // found by trying ids in turn: three exports and a stranger.
        let home = |id: &[u8; 16]| binding::key(id) % ENTRIES as u64;
        let with_home = |want: u64| {
            (0u64..)
                .map(|n| {
                    let mut id = [7u8; 16];
                    id[..8].copy_from_slice(&n.to_le_bytes());
                    id
                })
                .filter(move |id| home(id) == want)
        };
        let mut same = with_home(home(&[7u8; 16]));
        let ids: Vec<[u8; 16]> = same.by_ref().take(3).collect();
        for (g, id) in ids.iter().enumerate() {
            let i = b.page.free_entry(id).unwrap();
            b.page.write(i, &stated(id, g as u64 + 1, &[])).unwrap();
        }
        for (g, id) in ids.iter().enumerate() {
            assert_eq!(b.page.find(id).unwrap().generation, g as u64 + 1);
        }
        let stranger = same.next().unwrap();
        assert!(b.page.find(&stranger).is_none(), "same home, other id");
        // The first withdrawn: the others are still found past it, and its
        // entry is the one a new id of that home reuses.
        let first = b.page.find(&ids[0]).unwrap().index;
        b.page.withdraw(first);
        assert!(b.page.find(&ids[0]).is_none());
        assert_eq!(b.page.find(&ids[2]).unwrap().generation, 3);
        assert_eq!(b.page.free_entry(&stranger), Some(first));
    }

    #[test]
    fn many_exports_are_all_found() {
        let b = board();
        let ids: Vec<[u8; 16]> = (0..300).map(|_| os::random_id()).collect();
        for (g, id) in ids.iter().enumerate() {
            let i = b.page.free_entry(id).unwrap();
            b.page.write(i, &stated(id, g as u64 + 1, &[])).unwrap();
        }
        for (g, id) in ids.iter().enumerate() {
            assert_eq!(b.page.find(id).unwrap().generation, g as u64 + 1);
        }
    }

    #[test]
    fn every_field_is_read_back_as_written() {
        let b = board();
        let id = os::random_id();
        let fds: Vec<Located> = (0..MAX_FDS as u32)
            .map(|k| Located {
                fd: 10 + k,
                dev: 100 + u64::from(k),
                ino: 1000 + u64::from(k),
            })
            .collect();
        let pids: Vec<Allowed> = (0..MAX_PIDS as u32)
            .map(|k| Allowed {
                pid: 50 + k,
                start: 500 + u64::from(k),
            })
            .collect();
        let e = Stated {
            id: &id,
            generation: 77,
            flags: COUNTS_LEASES,
            policy: PIDS,
            uid: 1234,
            pids: &pids,
            fds: &fds,
        };
        let i = b.page.free_entry(&id).unwrap();
        b.page.write(i, &e).unwrap();
        let s = b.page.find(&id).unwrap();
        assert_eq!(
            (s.index, s.generation, s.flags, s.policy, s.uid),
            (i, 77, COUNTS_LEASES, PIDS, 1234)
        );
        assert_eq!((s.fds, s.pids), (fds, pids));
    }

    #[test]
    fn entries_whose_counts_are_out_of_bounds_are_not_read() {
        let b = board();
        for (field, bad) in [(E_NFDS, MAX_FDS as u32 + 1), (E_NPIDS, MAX_PIDS as u32 + 1)] {
            let id = os::random_id();
            let i = b.page.free_entry(&id).unwrap();
            b.page.write(i, &stated(&id, 1, &[])).unwrap();
            assert!(b.page.find(&id).is_some());
            // Whole (an even sequence word), but out of bounds.
            let at = Page::entry_at(i as usize, field);
            b.page.u32_at(at).unwrap().store(bad, Ordering::SeqCst);
            assert!(b.page.find(&id).is_none(), "field {field}");
            b.page.u32_at(at).unwrap().store(0, Ordering::SeqCst);
            assert!(b.page.find(&id).is_some());
        }
    }

    #[test]
    fn a_header_of_another_layout_is_refused() {
        let b = board();
        b.page.write_header(42, 99).unwrap();
        assert_eq!(b.page.header().unwrap(), (42, 99));
        for (at, wide) in [
            (H_MAGIC, true),
            (H_VERSION, false),
            (H_ENTRIES, false),
            (H_LEASES, false),
        ] {
            b.page.write_header(42, 99).unwrap();
            if wide {
                b.page.u64_at(at).unwrap().store(0xdead, Ordering::SeqCst);
            } else {
                b.page.u32_at(at).unwrap().store(0xdead, Ordering::SeqCst);
            }
            assert!(b.page.header().is_err(), "field at {at}");
        }
    }

    #[test]
    fn a_free_slot_is_found_wherever_it_is_and_claims_race_to_distinct_slots() {
        let b = board();
        let (me, start) = os::self_identity();
        let last = LEASES - 1;
        for slot in 0..LEASES {
            if slot != last {
                let w = b.page.u64_at(Page::lease_at(slot, L_WORD)).unwrap();
                w.store(u64::MAX, Ordering::Relaxed);
            }
        }
        assert_eq!(b.page.claim(me, start, 0, 1), Some(last as u32));
        let b = board();
        let slots: Vec<u32> = std::thread::scope(|sc| {
            let hands: Vec<_> = (0..4)
                .map(|_| {
                    sc.spawn(|| {
                        (0..512)
                            .filter_map(|_| b.page.claim(me, start, 0, 1))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hands.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let distinct: std::collections::HashSet<u32> = slots.iter().copied().collect();
        assert_eq!((slots.len(), distinct.len()), (2048, 2048));
        assert_eq!(b.page.count(0, 1, &mut |_, _| true), 2048);
    }

    #[test]
    fn slots_in_no_known_state_are_never_counted() {
        let b = board();
        let (me, start) = os::self_identity();
        let slot = b.page.claim(me, start, 3, 5).unwrap() as usize;
        assert_eq!(b.page.count(3, 5, &mut |_, _| true), 1);
        let w = b.page.u64_at(Page::lease_at(slot, L_WORD)).unwrap();
        // The holder's pid, the right entry and generation, a state of 3.
        w.store((u64::from(me) << 32) | 3, Ordering::SeqCst);
        assert_eq!(b.page.count(3, 5, &mut |_, _| true), 0);
        assert_ne!(w.load(Ordering::SeqCst), 0, "left alone");
    }

    #[test]
    fn readers_never_see_an_entry_half_written() {
        let b = board();
        let id = os::random_id();
        let i = b.page.free_entry(&id).unwrap();
        let version = |g: u64| {
            (0..MAX_FDS as u32)
                .map(|k| Located {
                    fd: g as u32,
                    dev: g,
                    ino: g + u64::from(k),
                })
                .collect::<Vec<_>>()
        };
        b.page.write(i, &stated(&id, 1, &version(1))).unwrap();
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|sc| {
            sc.spawn(|| {
                for n in 0..20_000u64 {
                    let g = 1 + n % 2;
                    b.page.write(i, &stated(&id, g, &version(g))).unwrap();
                }
                done.store(true, Ordering::SeqCst);
            });
            let mut seen = 0u64;
            while !done.load(Ordering::SeqCst) || seen == 0 {
                if let Some(s) = b.page.find(&id) {
                    let g = s.generation;
                    assert_eq!(u64::from(s.uid), g, "a torn entry was read");
                    assert_eq!(s.fds, version(g), "a torn entry was read");
                    seen += 1;
                }
            }
        });
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        assert_eq!(ENTRIES_AT, 4096);
        assert_eq!(LEASES_AT, 4096 + 4096 * 256);
        assert_eq!(LEN, 4096 + 4096 * 256 + 4096 * 32);
        assert_eq!(LEN % 4096, 0, "whole pages");
        assert_eq!(Page::entry_at(1, E_FDS), 4096 + 256 + 48);
        assert_eq!(Page::lease_at(2, L_START), LEASES_AT + 64 + 24);
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
