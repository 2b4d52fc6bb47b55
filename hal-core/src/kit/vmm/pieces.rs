//! What a backend keeps of a VMM reservation's mappings: the mapped
//! pieces, sorted and not overlapping, each part of one map call and with
//! the access this process gave it. A backend whose runtime keeps no such
//! list it can query (or answers access questions nobody can check before
//! a copy faults) keeps this one beside the vendor calls.

use std::ops::Range;
use std::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::kit::os::lock::lock;
use crate::vmm::{AccessGrant, AccessTarget};
use crate::Access;

/// One mapped part: part of the map call `map_id`, holding `held` (the
/// physical allocation, kept alive as long as it is mapped).
#[derive(Debug, Clone)]
pub struct Piece<T> {
    /// Its first byte in the reservation.
    pub offset: u64,
    /// Its length.
    pub len: u64,
    /// The map call that mapped it.
    pub map_id: u64,
    /// What the piece holds (the physical allocation).
    pub held: T,
    /// The access given to it; a target not listed has none.
    pub grants: Vec<AccessGrant>,
}

impl<T> Piece<T> {
    /// One past its last byte.
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }

    /// The access `target` has to it.
    pub fn access_of(&self, target: AccessTarget) -> Access {
        self.grants
            .iter()
            .find(|g| g.target == target)
            .map_or(Access::None, |g| g.access)
    }
}

/// The mapped pieces of one reservation.
#[derive(Debug)]
pub struct Pieces<T> {
    next_id: u64,
    /// Sorted by offset, not overlapping.
    pub list: Vec<Piece<T>>,
}

impl<T> Default for Pieces<T> {
    fn default() -> Self {
        Pieces {
            next_id: 0,
            list: Vec::new(),
        }
    }
}

/// The mapped pieces of one reservation, behind a lock that a panic
/// elsewhere does not poison; its `Debug` is how many are mapped.
pub struct Mapped<T>(Mutex<Pieces<T>>);

impl<T> Default for Mapped<T> {
    fn default() -> Self {
        Mapped(Mutex::new(Pieces::default()))
    }
}

impl<T> std::fmt::Debug for Mapped<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.lock().list.len(), f)
    }
}

impl<T> Mapped<T> {
    /// The pieces, locked.
    pub fn lock(&self) -> MutexGuard<'_, Pieces<T>> {
        lock(&self.0)
    }

    /// Every piece, taken out (a dropped reservation's teardown gets them).
    pub fn take(&self) -> Pieces<T> {
        std::mem::take(&mut *self.lock())
    }
}

impl<T: Clone> Pieces<T> {
    /// Refuse `offset..offset + len` when it overlaps a mapping
    /// ([`Error::AlreadyExists`]).
    pub fn check_free(&self, offset: u64, len: u64) -> Result<()> {
        match self
            .list
            .iter()
            .find(|q| q.offset < offset + len && offset < q.end())
        {
            Some(q) => Err(Error::AlreadyExists {
                what: format!(
                    "a mapping at {:#x}+{:#x} of the reservation overlaps {offset:#x}+{len:#x}; \
                     unmap it first",
                    q.offset, q.len
                ),
            }),
            None => Ok(()),
        }
    }

    /// Record a new mapping of `len` bytes at `offset` holding `held`, with
    /// no access (the caller checked [`Pieces::check_free`]).
    pub fn insert(&mut self, offset: u64, len: u64, held: T) {
        self.next_id += 1;
        let at = self.list.partition_point(|q| q.offset < offset);
        self.list.insert(
            at,
            Piece {
                offset,
                len,
                map_id: self.next_id,
                held,
                grants: Vec::new(),
            },
        );
    }

    /// The access `target` has to the byte at `offset`, or an error when
    /// nothing is mapped there.
    pub fn access_at(&self, offset: u64, target: AccessTarget) -> Result<Access> {
        let range = self.covering(offset, 1)?;
        Ok(self.list[range.start].access_of(target))
    }

    /// The indices of the pieces that cover `offset..offset + len` with no
    /// hole, or an error naming the first byte not mapped.
    pub fn covering(&self, offset: u64, len: u64) -> Result<Range<usize>> {
        let end = offset + len;
        let begin = self.list.partition_point(|p| p.end() <= offset);
        let mut at = offset;
        let mut i = begin;
        while at < end {
            match self.list.get(i) {
                Some(p) if p.offset <= at => {
                    at = p.end();
                    i += 1;
                }
                _ => {
                    return Err(Error::invalid(format!(
                        "nothing is mapped at offset {at:#x} of the reservation: map a physical \
                         allocation there first"
                    )))
                }
            }
        }
        Ok(begin..i)
    }

    /// The whole mappings (offset, length) that make up exactly
    /// `offset..offset + len`, in order; an error when the range has a hole
    /// or cuts a mapping.
    pub fn whole_mappings(&self, offset: u64, len: u64) -> Result<Vec<(u64, u64)>> {
        let range = self.covering(offset, len)?;
        let end = offset + len;
        let whole = self.list[range.clone()].iter().all(|p| {
            self.list
                .iter()
                .filter(|q| q.map_id == p.map_id)
                .all(|q| q.offset >= offset && q.end() <= end)
        });
        if !whole {
            return Err(Error::invalid(format!(
                "{offset:#x}+{len:#x} is not a set of whole mappings: unmap what each map call \
                 mapped"
            )));
        }
        Ok(runs(&self.list[range]))
    }

    /// Forget the pieces inside `offset..offset + len` (after an unmap).
    pub fn remove(&mut self, offset: u64, len: u64) {
        self.list
            .retain(|p| !(p.offset >= offset && p.end() <= offset + len));
    }

    /// Every mapping (offset, length), in order.
    pub fn mappings(&self) -> Vec<(u64, u64)> {
        runs(&self.list)
    }

    /// Give `grants` to `offset..offset + len` (the caller checked that it
    /// is mapped), splitting the pieces at its ends.
    pub fn grant(&mut self, offset: u64, len: u64, grants: &[AccessGrant]) {
        self.split_at(offset);
        self.split_at(offset + len);
        for p in self
            .list
            .iter_mut()
            .filter(|p| p.offset >= offset && p.end() <= offset + len)
        {
            for g in grants {
                match p.grants.iter_mut().find(|h| h.target == g.target) {
                    Some(h) => h.access = g.access,
                    None => p.grants.push(*g),
                }
            }
        }
    }

    /// Refuse a copy of `len` bytes at `offset` ([`Error::PermissionDenied`])
    /// unless every byte is mapped with the access it needs for `me`.
    pub fn check_access(&self, offset: u64, len: u64, me: AccessTarget, write: bool) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        for p in &self.list[self.covering(offset, len)?] {
            let access = p.access_of(me);
            let ok = match access {
                Access::ReadWrite => true,
                Access::Read => !write,
                Access::None => false,
            };
            if !ok {
                return Err(Error::PermissionDenied {
                    pid: None,
                    reason: format!(
                        "offset {:#x} of the reservation is mapped with {access:?} access for \
                         {me:?}; {} it needs more (set_access first)",
                        p.offset,
                        if write { "writing" } else { "reading" }
                    ),
                });
            }
        }
        Ok(())
    }

    fn split_at(&mut self, at: u64) {
        if let Some(i) = self.list.iter().position(|p| p.offset < at && at < p.end()) {
            let mut tail = self.list[i].clone();
            tail.len = self.list[i].end() - at;
            tail.offset = at;
            self.list[i].len = at - self.list[i].offset;
            self.list.insert(i + 1, tail);
        }
    }
}

/// The map calls (offset, length) that `pieces` (sorted) are parts of.
fn runs<T>(pieces: &[Piece<T>]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64, u64)> = Vec::new();
    for p in pieces {
        match out.last_mut() {
            Some(r) if r.2 == p.map_id => r.1 += p.len,
            _ => out.push((p.offset, p.len, p.map_id)),
        }
    }
    out.into_iter().map(|(o, l, _)| (o, l)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_grant_and_unmap_whole() {
        let mut p: Pieces<u8> = Pieces::default();
        p.insert(0, 4, 1);
        p.insert(4, 4, 2);
        assert!(p.check_free(2, 4).is_err());
        assert!(p.check_free(8, 4).is_ok());
        let me = AccessTarget::Device(0);
        assert!(p.check_access(0, 1, me, false).is_err(), "no access yet");
        p.grant(2, 4, &[AccessGrant::device(0, Access::ReadWrite)]);
        assert!(p.check_access(2, 4, me, true).is_ok());
        assert!(p.check_access(0, 4, me, false).is_err());
        assert_eq!(
            p.mappings(),
            vec![(0, 4), (4, 4)],
            "splits keep the map calls"
        );
        assert!(p.whole_mappings(0, 6).is_err(), "cuts a mapping");
        assert!(p.covering(6, 4).is_err(), "a hole");
        assert_eq!(p.whole_mappings(0, 8).unwrap(), vec![(0, 4), (4, 4)]);
        p.remove(0, 4);
        assert_eq!(p.mappings(), vec![(4, 4)]);
    }
}
