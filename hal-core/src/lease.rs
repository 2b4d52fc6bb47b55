//! Leases: the exporter counts the importers that hold a resource and waits
//! until none do. An importer whose process died counts as gone.
//!
//! The exporter owns its [`LeaseTable`]: it lives in the exporter's own
//! memory and only the exporter's process writes it. Importers never see
//! it. An importer's lease is registered by the exporter's descriptor broker
//! when it serves the importer ([`exchange`](crate::exchange)), under the pid
//! the broker reads from the kernel (`SO_PEERCRED`, the pid as the
//! *exporter's* pid namespace numbers the importer) and that process's start
//! time, as the exporter's `/proc` shows it. The importer gets back a
//! [`LeaseTicket`] (a slot and an unguessable token) and gives the lease back
//! by presenting the ticket to the broker, which frees the slot only when the
//! ticket and the sender's pid match what it recorded. So:
//!
//! - an importer in another pid namespace is counted under the pid the
//!   exporter sees, and counted as long as that process lives;
//! - a hostile importer cannot write slots: it can hold leases only by being
//!   a live process that the broker served, and every one of them is freed
//!   when it dies;
//! - a released or reclaimed slot is never freed again by a stale ticket: a
//!   release names the token of the registration it ends.
//!
//! A holder whose process died (or whose pid now belongs to a newer process:
//! the start time tells them apart) is not counted, and its slot is freed by
//! the next [`LeaseTable::count`] or reused by the next registration.
//!
//! One exception, opt-in: an importer on the direct `pidfd_getfd` path
//! (see [`exchange`](crate::exchange)) records its own lease on the
//! exporter's broker board, a shared page that only processes with ptrace
//! access to the exporter ever map (they could write the exporter's memory
//! anyway). The table counts those slots with its own, under the same
//! rules: the holder's pid and start time, dead holders not counted.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::kit::os;
use crate::kit::os::lock::lock;

/// Slots in a table made by [`LeaseTable::new`] with [`DEFAULT_SLOTS`].
pub const DEFAULT_SLOTS: u32 = 1024;
/// The most slots a table may have.
pub const MAX_SLOTS: u32 = 1 << 20;

/// What an importer holds to give its lease back: the slot and the token of
/// its registration. It travels in the broker's reply and in a release
/// request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseTicket {
    /// The id of the table (unique per table, random).
    pub table: [u8; 16],
    /// The slot.
    pub slot: u32,
    /// The registration's token (never 0).
    pub token: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// The holder's pid in this process's pid namespace (0: free).
    pid: u32,
    /// The holder's start time, 0 when it could not be read.
    start: u64,
    /// The registration's token (0: free).
    token: u64,
}

#[derive(Debug)]
struct Slots {
    slots: Vec<Slot>,
    next_token: u64,
}

/// Leases that importers record themselves, outside a table: the direct
/// imports of the exporter's broker board (see
/// [`exchange`](crate::exchange)). A table counts them with its own.
pub(crate) trait OutsideLeases: Send + Sync + std::fmt::Debug {
    /// How many live processes hold one; the slots of dead holders are
    /// freed.
    fn count_live(&self) -> usize;
    /// True once no lease can be added any more (the record was
    /// withdrawn): the table forgets it when it counts none.
    fn closed(&self) -> bool;
}

/// The importers of one exported resource, as the exporter counts them.
#[derive(Debug)]
#[must_use = "the table stops counting leases when this value drops"]
pub struct LeaseTable {
    id: [u8; 16],
    capacity: u32,
    slots: Mutex<Slots>,
    /// Leases recorded by importers themselves, counted with the slots.
    outside: Mutex<Vec<Arc<dyn OutsideLeases>>>,
    /// Notified when a lease is given back or a dead holder's slot is
    /// freed: what [`LeaseTable::wait_empty`] waits for.
    changed: Condvar,
}

/// The importers' leases of one exportable resource, made at its first
/// export: a resource never exported costs no table.
#[derive(Default)]
pub struct LazyLeases(OnceLock<Arc<LeaseTable>>);

impl LazyLeases {
    /// The table, made at the first call (the first export); of racing
    /// first calls, one table is kept and every caller gets it.
    pub fn table(&self) -> Result<Arc<LeaseTable>> {
        if let Some(t) = self.0.get() {
            return Ok(Arc::clone(t));
        }
        let _ = self.0.set(LeaseTable::new(DEFAULT_SLOTS)?);
        self.0
            .get()
            .cloned()
            .ok_or_else(|| Error::invalid("lease table vanished"))
    }

    /// How many importers hold a lease now (0 before the first export).
    /// Importers whose process died are not counted.
    pub fn count(&self) -> usize {
        self.0.get().map_or(0, |t| t.count())
    }

    /// The table while an importer holds a lease: what a release that
    /// waits for its importers waits on.
    pub fn held(&self) -> Option<Arc<LeaseTable>> {
        self.0.get().filter(|t| t.count() > 0).cloned()
    }

    /// Block until no importer holds a lease, or `timeout` passes
    /// ([`Error::Timeout`]); at once before the first export.
    pub fn wait_empty(&self, timeout: Option<Duration>) -> Result<()> {
        self.0.get().map_or(Ok(()), |t| t.wait_empty(timeout))
    }

    /// Run `release` once no importer holds a lease: at once when none
    /// does, otherwise on a thread of its own named `thread`, which waits
    /// until every lease is given back (importers whose process died are
    /// not waited for). The vendors make using a resource after its
    /// exporter released it undefined, so when no thread can be started
    /// `release` is forgotten, never run, and what it would release stays
    /// alive for the life of the process (logged, naming `what()`, which
    /// is asked only then and while waiting).
    pub fn release_when_unleased<F>(&self, thread: &str, what: impl FnOnce() -> String, release: F)
    where
        F: FnOnce() + Send + 'static,
    {
        let Some(table) = self.held() else {
            release();
            return;
        };
        let what = what();
        // The thread takes `release` out of the slot; when the thread
        // cannot start, the slot gives it back here to be forgotten.
        let slot = Arc::new(Mutex::new(Some(release)));
        let theirs = Arc::clone(&slot);
        let waited = what.clone();
        let spawned = os::thread::spawn(thread, move || {
            if let Err(e) = table.wait_empty(None) {
                log::warn!("waiting for the importers of {waited}: {e}");
            }
            if let Some(release) = lock(&theirs).take() {
                release();
            }
        });
        if let Err(e) = spawned {
            log::warn!(
                "{what} is still imported and no thread could wait for its importers ({e}); \
                 it is left alive"
            );
            if let Some(release) = lock(&slot).take() {
                std::mem::forget(release);
            }
        }
    }
}

impl std::fmt::Debug for LazyLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyLeases")
            .field("made", &self.0.get().is_some())
            .field("count", &self.count())
            .finish()
    }
}

type Registry = Mutex<HashMap<[u8; 16], Weak<LeaseTable>>>;

/// This process's tables by id, so that the broker can find the table of a
/// release request after the export that registered the lease is gone (the
/// table lives as long as its allocation).
fn registry() -> &'static Registry {
    static TABLES: OnceLock<Registry> = OnceLock::new();
    TABLES.get_or_init(|| Mutex::new(HashMap::new()))
}

impl LeaseTable {
    /// A table with room for `capacity` live importers (1 to [`MAX_SLOTS`]).
    pub fn new(capacity: u32) -> Result<Arc<LeaseTable>> {
        if capacity == 0 || capacity > MAX_SLOTS {
            return Err(Error::invalid(format!(
                "lease table of {capacity} slots: between 1 and {MAX_SLOTS}"
            )));
        }
        let seed = os::unique_id();
        let mut token = [0u8; 8];
        token.copy_from_slice(&seed[..8]);
        let table = Arc::new(LeaseTable {
            id: os::unique_id(),
            capacity,
            slots: Mutex::new(Slots {
                slots: Vec::new(),
                next_token: u64::from_le_bytes(token),
            }),
            changed: Condvar::new(),
            outside: Mutex::new(Vec::new()),
        });
        // A table leaves the registry when it is dropped (see `Drop`).
        lock(registry()).insert(table.id, Arc::downgrade(&table));
        Ok(table)
    }

    /// The table of this process with id `id`, while it lives.
    pub fn find(id: &[u8; 16]) -> Option<Arc<LeaseTable>> {
        lock(registry()).get(id).and_then(Weak::upgrade)
    }

    /// The table's id.
    pub fn id(&self) -> [u8; 16] {
        self.id
    }

    /// The most live importers the table holds.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Register a lease for the process `pid` (as this process's pid
    /// namespace numbers it) that started at `start` (0: unknown; the pid
    /// alone is then trusted). Free slots go first; the slots of dead
    /// holders are reclaimed only when none is free, since telling a dead
    /// holder from a live one reads `/proc`.
    ///
    /// [`Error::Busy`] when every slot is held by a live process;
    /// [`Error::InvalidArgument`] for pid 0 (a process this namespace cannot
    /// see: it could never be told dead).
    pub fn register(&self, pid: u32, start: u64) -> Result<LeaseTicket> {
        if pid == 0 {
            return Err(Error::invalid(
                "a lease for pid 0: the importer runs in a pid namespace the exporter cannot \
                 see, so its death could not be noticed",
            ));
        }
        let mut s = lock(&self.slots);
        let token = s.next_token.max(1);
        s.next_token = token.wrapping_add(1);
        let slot = Slot { pid, start, token };
        let index = match s.slots.iter().position(|x| x.token == 0) {
            Some(i) => i,
            None if s.slots.len() < self.capacity as usize => {
                s.slots.push(Slot::default());
                s.slots.len() - 1
            }
            None => match s
                .slots
                .iter()
                .position(|x| !os::process_alive(x.pid, x.start))
            {
                Some(i) => i,
                None => {
                    return Err(Error::Busy {
                        what: format!("lease table ({} slots)", self.capacity),
                        holders: self.capacity as usize,
                    })
                }
            },
        };
        s.slots[index] = slot;
        drop(s);
        // No notify: `changed` wakes waiters for the table to empty, and a
        // registration never empties it (it spared a futex call per import
        // in the broker).
        Ok(LeaseTicket {
            table: self.id,
            slot: index as u32,
            token,
        })
    }

    /// End the registration of `ticket`, presented by the process `pid`.
    /// True when it was live and held by `pid`; a stale, forged or foreign
    /// ticket changes nothing and gives false.
    pub fn release(&self, ticket: &LeaseTicket, pid: u32) -> bool {
        if ticket.table != self.id || ticket.token == 0 {
            return false;
        }
        let mut s = lock(&self.slots);
        let Some(slot) = s.slots.get_mut(ticket.slot as usize) else {
            return false;
        };
        if slot.token != ticket.token || slot.pid != pid {
            return false;
        }
        *slot = Slot::default();
        drop(s);
        self.changed.notify_all();
        true
    }

    /// Count, with the table's own, the leases `outside` records (importers
    /// that record their own).
    pub(crate) fn add_outside(&self, outside: Arc<dyn OutsideLeases>) {
        lock(&self.outside).push(outside);
    }

    /// How many live processes hold a lease. Slots of dead holders are freed.
    pub fn count(&self) -> usize {
        self.count_own() + self.count_outside()
    }

    #[cfg(test)]
    pub(crate) fn outside_for_test(&self) -> &Mutex<Vec<Arc<dyn OutsideLeases>>> {
        &self.outside
    }

    /// The leases recorded outside the table; records that are closed and
    /// hold none are forgotten.
    fn count_outside(&self) -> usize {
        let mut outside = lock(&self.outside);
        if outside.is_empty() {
            return 0;
        }
        let mut n = 0;
        outside.retain(|o| {
            // Closed first: a record closed after its count could still
            // have gained a lease between the two.
            let closed = o.closed();
            let here = o.count_live();
            n += here;
            here > 0 || !closed
        });
        n
    }

    fn count_own(&self) -> usize {
        let mut s = lock(&self.slots);
        let mut n = 0;
        let mut freed = false;
        for slot in s.slots.iter_mut().filter(|x| x.token != 0) {
            if os::process_alive(slot.pid, slot.start) {
                n += 1;
            } else {
                *slot = Slot::default();
                freed = true;
            }
        }
        drop(s);
        if freed {
            self.changed.notify_all();
        }
        n
    }

    /// Block until no live process holds a lease, or `timeout` passes
    /// ([`Error::Timeout`]). Importers that die without giving their lease
    /// back are noticed within 20 ms.
    pub fn wait_empty(&self, timeout: Option<Duration>) -> Result<()> {
        let start = Instant::now();
        loop {
            let n = self.count();
            if n == 0 {
                return Ok(());
            }
            let mut nap = Duration::from_millis(20);
            // (`Some(r)` with `r` zero, exactly at the deadline, would nap
            // for no time and come back here to time out: refusing it at
            // once only saves that turn.)
            if let Some(t) = timeout {
                match t.checked_sub(start.elapsed()) {
                    Some(r) if !r.is_zero() => nap = nap.min(r),
                    _ => {
                        return Err(Error::Timeout {
                            after: t,
                            what: format!("{n} importer(s) to close"),
                        })
                    }
                }
            }
            let s = lock(&self.slots);
            // A release between `count` and here notified nobody; the nap
            // bounds the wait for it.
            let _unused = crate::kit::os::lock::wait_timeout(&self.changed, s, nap);
        }
    }

    /// Register a lease for this process and hold it until the returned
    /// [`LocalLease`] is dropped: the lease of an import in the exporting
    /// process itself.
    pub fn hold_here(self: &Arc<Self>) -> Result<LocalLease> {
        let (pid, start) = os::self_identity();
        let ticket = self.register(pid, start)?;
        Ok(LocalLease {
            table: Arc::clone(self),
            ticket,
            pid,
        })
    }
}

impl Drop for LeaseTable {
    fn drop(&mut self) {
        let mut reg = lock(registry());
        if reg.get(&self.id).is_some_and(|w| w.strong_count() == 0) {
            reg.remove(&self.id);
        }
    }
}

/// A lease held by the exporting process itself; released on drop.
#[derive(Debug)]
#[must_use = "the lease is released when this value drops"]
pub struct LocalLease {
    table: Arc<LeaseTable>,
    ticket: LeaseTicket,
    pid: u32,
}

impl LocalLease {
    /// The registration's ticket.
    pub fn ticket(&self) -> &LeaseTicket {
        &self.ticket
    }
}

impl Drop for LocalLease {
    fn drop(&mut self) {
        // In a forked child the pid differs and the parent's lease stays.
        self.table.release(&self.ticket, self.pid);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lazy_leases_make_one_table_at_the_first_export() {
        let lazy = LazyLeases::default();
        assert_eq!(lazy.count(), 0);
        assert!(lazy.held().is_none());
        lazy.wait_empty(Some(Duration::ZERO)).unwrap();
        let t = lazy.table().unwrap();
        assert!(Arc::ptr_eq(&t, &lazy.table().unwrap()));
        assert!(lazy.held().is_none(), "a table nobody holds is not held");
        let lease = t.hold_here().unwrap();
        assert_eq!(lazy.count(), 1);
        let shown = format!("{lazy:?}");
        assert!(shown.contains("made: true, count: 1"), "{shown}");
        assert!(Arc::ptr_eq(&lazy.held().unwrap(), &t));
        assert!(matches!(
            lazy.wait_empty(Some(Duration::from_millis(1))),
            Err(Error::Timeout { .. })
        ));
        drop(lease);
        assert!(lazy.held().is_none());
        lazy.wait_empty(Some(Duration::ZERO)).unwrap();
    }

    #[test]
    fn a_release_waits_for_the_importers_leases() {
        let (tx, rx) = std::sync::mpsc::channel();
        let never = LazyLeases::default();
        let now = tx.clone();
        never.release_when_unleased(
            "hal-test-release",
            || "a resource".into(),
            move || now.send("never exported").unwrap(),
        );
        assert_eq!(rx.try_recv(), Ok("never exported"), "released at once");

        let lazy = LazyLeases::default();
        let lease = lazy.table().unwrap().hold_here().unwrap();
        let later = tx.clone();
        lazy.release_when_unleased(
            "hal-test-release",
            || "a resource".into(),
            move || later.send("held").unwrap(),
        );
        assert!(
            rx.recv_timeout(Duration::from_millis(50)).is_err(),
            "released while an importer held it"
        );
        drop(lease);
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("held"));
    }

    use super::*;

    /// A pid that no process can have (above the kernel's limit of 2^22).
    const NO_SUCH_PID: u32 = 0x7fff_fff0;

    fn me() -> (u32, u64) {
        os::self_identity()
    }

    #[test]
    fn register_count_release_wait() {
        let t = LeaseTable::new(4).unwrap();
        assert_eq!(t.count(), 0);
        let (pid, start) = me();
        let a = t.register(pid, start).unwrap();
        let b = t.register(pid, start).unwrap();
        assert_ne!(a.token, b.token);
        assert_eq!(t.count(), 2);
        assert!(t
            .wait_empty(Some(Duration::from_millis(10)))
            .unwrap_err()
            .is_timeout());
        assert!(t.release(&a, pid));
        assert!(!t.release(&a, pid), "a ticket ends its registration once");
        assert_eq!(t.count(), 1);
        let t2 = Arc::clone(&t);
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            assert!(t2.release(&b, pid));
        });
        t.wait_empty(Some(Duration::from_secs(5))).unwrap();
        h.join().unwrap();
    }

    #[test]
    fn release_needs_the_holders_pid_and_token() {
        let t = LeaseTable::new(2).unwrap();
        let (pid, start) = me();
        let ticket = t.register(pid, start).unwrap();
        assert!(!t.release(&ticket, pid + 1), "another pid");
        let forged = LeaseTicket {
            token: ticket.token ^ 1,
            ..ticket
        };
        assert!(!t.release(&forged, pid), "another token");
        let zero = LeaseTicket { token: 0, ..ticket };
        assert!(!t.release(&zero, pid), "token 0 names no registration");
        let elsewhere = LeaseTicket { slot: 7, ..ticket };
        assert!(!t.release(&elsewhere, pid), "a slot out of range");
        let other = LeaseTable::new(2).unwrap();
        assert!(!other.release(&ticket, pid), "another table");
        let elsewhere = LeaseTicket {
            table: other.id(),
            ..ticket
        };
        assert!(
            !t.release(&elsewhere, pid),
            "a ticket of another table names no slot here"
        );
        assert_eq!(t.count(), 1);
        assert!(t.release(&ticket, pid));
        assert_eq!(t.count(), 0);
    }

    #[test]
    fn a_stale_ticket_never_frees_a_reused_slot() {
        let t = LeaseTable::new(1).unwrap();
        let (pid, start) = me();
        let old = t.register(pid, start).unwrap();
        assert!(t.release(&old, pid));
        let new = t.register(pid, start).unwrap();
        assert_eq!(old.slot, new.slot);
        assert!(!t.release(&old, pid));
        assert_eq!(t.count(), 1);
    }

    #[test]
    fn dead_holders_are_not_counted_and_their_slots_are_reused() {
        let t = LeaseTable::new(2).unwrap();
        let (pid, start) = me();
        t.register(NO_SUCH_PID, 12345).unwrap();
        // A live pid with another start time is a recycled pid: dead.
        t.register(pid, start + 1).unwrap();
        assert_eq!(t.count(), 0);
        // Both slots were freed by count; a full table of dead holders is
        // reclaimed by register.
        t.register(NO_SUCH_PID, 1).unwrap();
        t.register(NO_SUCH_PID, 2).unwrap();
        let live = t.register(pid, start).unwrap();
        assert_eq!(t.count(), 1);
        assert!(t.release(&live, pid));
    }

    #[test]
    fn free_slots_go_before_dead_holders_slots() {
        let t = LeaseTable::new(2).unwrap();
        let (pid, start) = me();
        let dead = t.register(NO_SUCH_PID, 1).unwrap();
        let first = t.register(pid, start).unwrap();
        assert_eq!(first.slot, 1, "a free slot is taken first");
        let second = t.register(pid, start).unwrap();
        assert_eq!(second.slot, dead.slot, "then the dead holder's slot");
        assert_eq!(t.count(), 2);
    }

    #[test]
    fn full_table_of_live_holders_is_busy() {
        let t = LeaseTable::new(1).unwrap();
        let (pid, start) = me();
        let _held = t.register(pid, start).unwrap();
        assert!(matches!(t.register(pid, start), Err(Error::Busy { .. })));
        // An unknown start time trusts the pid: still live.
        let u = LeaseTable::new(1).unwrap();
        u.register(pid, 0).unwrap();
        assert_eq!(u.count(), 1);
    }

    #[test]
    fn bounds_and_pid_zero_are_refused() {
        assert!(LeaseTable::new(0).is_err());
        assert!(LeaseTable::new(MAX_SLOTS + 1).is_err());
        assert!(LeaseTable::new(MAX_SLOTS).is_ok());
        let t = LeaseTable::new(1).unwrap();
        assert!(t.register(0, 1).is_err());
        assert_eq!(t.capacity(), 1);
        assert_eq!(LeaseTable::new(3).unwrap().capacity(), 3);
    }

    #[test]
    fn tables_are_found_by_id_while_they_live() {
        let t = LeaseTable::new(1).unwrap();
        let id = t.id();
        assert!(Arc::ptr_eq(&LeaseTable::find(&id).unwrap(), &t));
        drop(t);
        assert!(LeaseTable::find(&id).is_none());
        assert!(
            !lock(registry()).contains_key(&id),
            "a dropped table leaves the registry at once"
        );
    }

    #[test]
    fn a_local_lease_counts_until_dropped() {
        let t = LeaseTable::new(2).unwrap();
        let l = t.hold_here().unwrap();
        assert_eq!(l.ticket().table, t.id());
        assert_eq!(t.count(), 1);
        drop(l);
        assert_eq!(t.count(), 0);
    }
}
