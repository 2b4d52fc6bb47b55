//! Leases: the exporter counts the importers that hold a resource and waits
//! until none do. An importer whose process died counts as gone.
//!
//! A [`LeaseTable`] lives in a small sealed memfd that travels with the
//! handle. Each importing process takes a slot holding its pid and its start
//! time (which tells a recycled pid apart); closing clears the slot and wakes
//! the exporter through a futex. A process killed while holding a slot leaves
//! it behind, and [`LeaseTable::count`] sees that the pid is gone (or belongs
//! to a newer process) and frees it. Nothing is left on the machine: the memfd
//! disappears with the last descriptor.
//!
//! Layout (little-endian, 64-byte header then 16-byte slots):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `HLSE` |
//! | 4 | 4 | version (1) |
//! | 8 | 4 | slot count |
//! | 12 | 4 | change counter (futex word) |
//! | 64 + 16·i | 4 | slot i: holder pid (0 = free) |
//! | 68 + 16·i | 4 | slot i: reserved |
//! | 72 + 16·i | 8 | slot i: holder start time (0 = being written) |

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::os::{self, Prot, SharedMap};

const MAGIC: u32 = u32::from_le_bytes(*b"HLSE");
const VERSION: u32 = 1;
const HEADER: usize = 64;
const SLOT: usize = 16;
/// Slots in a table made by [`LeaseTable::create`].
pub const DEFAULT_SLOTS: u32 = 1024;

/// A table of importer leases in shared memory.
#[derive(Debug)]
pub struct LeaseTable {
    map: SharedMap,
    slots: u32,
}

impl LeaseTable {
    fn bytes(slots: u32) -> u64 {
        (HEADER + SLOT * slots as usize) as u64
    }

    /// Create a table with `slots` slots. Returns it and a sealed descriptor
    /// to send to importers.
    pub fn create(slots: u32) -> Result<(Arc<LeaseTable>, OwnedFd)> {
        if slots == 0 || slots > 1 << 20 {
            return Err(Error::invalid("lease table slot count out of range"));
        }
        let len = Self::bytes(slots);
        let fd = os::memfd("hal-lease", len, None)?;
        os::add_seals(fd.as_fd(), os::EXPORT_SEALS)?;
        let map = SharedMap::map(fd.as_fd(), len, 0, Prot::ReadWrite, None)?;
        map.atomic_u32(0)?.store(MAGIC, Ordering::Relaxed);
        map.atomic_u32(4)?.store(VERSION, Ordering::Relaxed);
        map.atomic_u32(8)?.store(slots, Ordering::Release);
        Ok((Arc::new(LeaseTable { map, slots }), fd))
    }

    /// Open a table received from an exporter, verifying its seals, size and header.
    pub fn open(fd: &OwnedFd) -> Result<Arc<LeaseTable>> {
        let size = os::verify_sealed_memfd(fd.as_fd(), HEADER as u64)?;
        let map = SharedMap::map(fd.as_fd(), size, 0, Prot::ReadWrite, None)?;
        let magic = map.atomic_u32(0)?.load(Ordering::Acquire);
        let version = map.atomic_u32(4)?.load(Ordering::Acquire);
        let slots = map.atomic_u32(8)?.load(Ordering::Acquire);
        if magic != MAGIC || version != VERSION || Self::bytes(slots) != size {
            return Err(crate::HandleError::Descriptors(
                "the lease descriptor does not hold a lease table".into(),
            )
            .into());
        }
        Ok(Arc::new(LeaseTable { map, slots }))
    }

    fn slot_pid(&self, i: u32) -> &std::sync::atomic::AtomicU32 {
        // Offsets are in bounds and aligned by construction (checked in open).
        self.map
            .atomic_u32(HEADER + SLOT * i as usize)
            .expect("slot in bounds")
    }

    fn slot_start(&self, i: u32) -> &std::sync::atomic::AtomicU64 {
        self.map
            .atomic_u64(HEADER + SLOT * i as usize + 8)
            .expect("slot in bounds")
    }

    fn changes(&self) -> &std::sync::atomic::AtomicU32 {
        self.map.atomic_u32(12).expect("header in bounds")
    }

    /// Take a slot for this process. Dropping the [`Lease`] gives it back.
    pub fn acquire(self: &Arc<Self>) -> Result<Lease> {
        let (pid, start) = os::self_identity();
        // Free slots first; the slots of dead holders only when none is
        // free. Telling a dead holder from a live one reads
        // /proc/PID/stat (three system calls), so looking at every held
        // slot on the way to a free one made each import cost that much per
        // importer already holding the region (`halctl bench`, scaling with
        // 32 importers). `count` frees dead holders' slots too.
        for reclaim in [false, true] {
            for i in 0..self.slots {
                let p = self.slot_pid(i);
                let cur = p.load(Ordering::Acquire);
                let mut free = cur == 0;
                if reclaim && cur != 0 && cur != pid {
                    // A slot of a dead holder is free. A start time of 0 (a
                    // holder killed between its two stores in `acquire` or
                    // in `Lease::drop`) is judged on the pid alone.
                    let s = self.slot_start(i).load(Ordering::Acquire);
                    if !os::process_alive(cur, s) {
                        // Clear the dead holder's start time before the pid
                        // changes hands, so that no reader ever sees this
                        // process's pid with the dead holder's start time
                        // (which reads as a dead holder and would free the
                        // new lease).
                        free = self
                            .slot_start(i)
                            .compare_exchange(s, 0, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok();
                    }
                }
                if free
                    && p.compare_exchange(cur, pid, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                {
                    self.slot_start(i).store(start.max(1), Ordering::Release);
                    return Ok(Lease {
                        table: Arc::clone(self),
                        slot: i,
                    });
                }
            }
        }
        Err(Error::Busy {
            what: format!("lease table ({} slots)", self.slots),
            holders: self.slots as usize,
        })
    }

    /// How many live processes hold a lease. Slots of dead holders are freed.
    pub fn count(&self) -> usize {
        let mut n = 0;
        for i in 0..self.slots {
            let p = self.slot_pid(i).load(Ordering::Acquire);
            if p == 0 {
                continue;
            }
            let s = self.slot_start(i).load(Ordering::Acquire);
            // A start time of 0 means the holder is between its two stores
            // (taking or giving back the slot): it counts while its pid is
            // alive, and not once that process is dead (killed right there),
            // so that such a slot is not counted forever.
            if os::process_alive(p, s) {
                n += 1;
            } else if self
                .slot_pid(i)
                .compare_exchange(p, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.slot_start(i).store(0, Ordering::Release);
                self.changes().fetch_add(1, Ordering::AcqRel);
            }
        }
        n
    }

    /// Block until no live process holds a lease, or `timeout` passes.
    pub fn wait_empty(&self, timeout: Option<Duration>) -> Result<()> {
        let start = Instant::now();
        loop {
            let seen = self.changes().load(Ordering::Acquire);
            let n = self.count();
            if n == 0 {
                return Ok(());
            }
            // Wake at least every 20 ms to notice importers that died without closing.
            let mut nap = Duration::from_millis(20);
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
            os::futex_wait(self.changes(), seen, Some(nap));
        }
    }
}

/// One importer's lease; released on drop.
#[derive(Debug)]
pub struct Lease {
    table: Arc<LeaseTable>,
    slot: u32,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.table.slot_start(self.slot).store(0, Ordering::Release);
        self.table.slot_pid(self.slot).store(0, Ordering::Release);
        self.table.changes().fetch_add(1, Ordering::AcqRel);
        os::futex_wake(self.table.changes(), u32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_count_release_wait() {
        let (t, fd) = LeaseTable::create(4).unwrap();
        let t2 = LeaseTable::open(&fd).unwrap();
        assert_eq!(t.count(), 0);
        let l1 = t2.acquire().unwrap();
        let l2 = t2.acquire().unwrap();
        assert_eq!(t.count(), 2);
        assert!(t
            .wait_empty(Some(Duration::from_millis(10)))
            .unwrap_err()
            .is_timeout());
        drop(l1);
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            drop(l2);
        });
        t.wait_empty(Some(Duration::from_secs(5))).unwrap();
        h.join().unwrap();
    }

    #[test]
    fn dead_holder_is_not_counted() {
        let (t, _fd) = LeaseTable::create(2).unwrap();
        // A slot claimed by a process that cannot exist (pid 0x7fff_fff0).
        t.slot_pid(0).store(0x7fff_fff0, Ordering::Release);
        t.slot_start(0).store(12345, Ordering::Release);
        assert_eq!(t.count(), 0);
        assert_eq!(t.slot_pid(0).load(Ordering::Acquire), 0);
    }

    #[test]
    fn holder_killed_between_its_two_stores_is_not_counted() {
        let (t, _fd) = LeaseTable::create(2).unwrap();
        // A pid and no start time: a holder killed inside acquire or drop.
        t.slot_pid(0).store(0x7fff_fff0, Ordering::Release);
        t.slot_start(0).store(0, Ordering::Release);
        assert_eq!(t.count(), 0);
        assert!(t.wait_empty(Some(Duration::from_secs(5))).is_ok());
        // The same state for a live process counts, and its slot is not taken.
        let (me, _) = os::self_identity();
        t.slot_pid(1).store(me, Ordering::Release);
        t.slot_start(1).store(0, Ordering::Release);
        assert_eq!(t.count(), 1);
        // A dead holder's slot (with or without start time) is reused.
        t.slot_pid(0).store(0x7fff_fff0, Ordering::Release);
        let l = t.acquire().unwrap();
        assert_eq!(l.slot, 0);
    }

    #[test]
    fn free_slots_go_before_dead_holders_slots() {
        let (t, _fd) = LeaseTable::create(2).unwrap();
        t.slot_pid(0).store(0x7fff_fff0, Ordering::Release);
        t.slot_start(0).store(12345, Ordering::Release);
        let first = t.acquire().unwrap();
        assert_eq!(first.slot, 1, "a free slot is taken first");
        let second = t.acquire().unwrap();
        assert_eq!(second.slot, 0, "then the dead holder's slot is reclaimed");
        assert_eq!(t.count(), 2);
    }

    #[test]
    fn full_table_is_busy_and_bad_fd_refused() {
        let (t, _fd) = LeaseTable::create(1).unwrap();
        let _l = t.acquire().unwrap();
        assert!(matches!(t.acquire(), Err(Error::Busy { .. })));
        let other = os::memfd("x", 4096, None).unwrap();
        assert!(LeaseTable::open(&other).is_err());
    }
}
