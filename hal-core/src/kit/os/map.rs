//! Shared mappings: `mmap` of a descriptor or an address reservation, with
//! the protection of every byte kept so that no access from safe code can
//! fault.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{RwLock, RwLockReadGuard};

use crate::error::{Error, Result};

/// Protection of a shared mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prot {
    /// Read only.
    Read,
    /// Read and write.
    ReadWrite,
    /// No access (a reservation).
    None,
}

impl Prot {
    fn bits(self) -> i32 {
        match self {
            Prot::Read => libc::PROT_READ,
            Prot::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
            Prot::None => libc::PROT_NONE,
        }
    }

    /// True when loads are allowed.
    pub fn readable(self) -> bool {
        matches!(self, Prot::Read | Prot::ReadWrite)
    }

    /// True when stores are allowed.
    pub fn writable(self) -> bool {
        self == Prot::ReadWrite
    }
}

/// The protection of every byte of a mapping: pieces `(start, prot)`, sorted
/// by start, the first at 0; each runs to the next one's start (the last to
/// the end of the mapping).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pieces(Vec<(usize, Prot)>);

impl Pieces {
    fn new(prot: Prot) -> Pieces {
        Pieces(vec![(0, prot)])
    }

    /// Index of the piece that holds byte `at`.
    fn index_of(&self, at: usize) -> usize {
        self.0.partition_point(|&(start, _)| start <= at) - 1
    }

    /// Set the protection of `start..end` (in bounds, non-empty) of a
    /// mapping of `len` bytes.
    fn set(&mut self, start: usize, end: usize, len: usize, prot: Prot) {
        let after = (end < len).then(|| self.0[self.index_of(end)].1);
        self.0.retain(|&(s, _)| s < start || s > end);
        let at = self.0.partition_point(|&(s, _)| s < start);
        self.0.insert(at, (start, prot));
        if let Some(p) = after {
            self.0.insert(at + 1, (end, p));
        }
        self.0.dedup_by(|next, prev| next.1 == prev.1);
    }

    /// True when every byte of `start..end` (in bounds) allows `want`.
    fn allow(&self, start: usize, end: usize, want: fn(Prot) -> bool) -> bool {
        self.0[self.index_of(start)..]
            .iter()
            .take_while(|&&(s, _)| s < end)
            .all(|&(_, p)| want(p))
    }
}

/// A `MAP_SHARED` mapping of a descriptor (or an anonymous `PROT_NONE`
/// reservation), unmapped on drop.
///
/// It keeps the protection of each of its bytes, so that its safe accessors
/// ([`SharedMap::read`], [`SharedMap::write`], [`SharedMap::atomic_u32`],
/// [`SharedMap::atomic_u64`]) refuse an access the protection forbids with
/// [`Error::PermissionDenied`] instead of faulting. Protection changes
/// ([`SharedMap::map_over`], [`SharedMap::protect`],
/// [`SharedMap::unmap_part`]) wait for copies in progress, and are refused
/// once an atomic reference has been handed out (it could outlive any
/// check) or the protection was pinned ([`SharedMap::pin_protection`]).
#[derive(Debug)]
#[must_use = "the mapping is unmapped when this value drops"]
pub struct SharedMap {
    ptr: NonNull<u8>,
    len: usize,
    prot: RwLock<Pieces>,
    /// Set when an atomic reference into the mapping was handed out, or
    /// the protection pinned.
    pinned: AtomicBool,
    /// Set when the mapping was pinned while all of it was read-write: its
    /// protection can no longer change, so atomics and copies need no look
    /// at it.
    pinned_writable: AtomicBool,
}

// SAFETY: the mapping is plain memory owned by this value; concurrent access
// from several threads is governed by the users of the bytes (atomics or
// copies), exactly as for memory shared with another process.
unsafe impl Send for SharedMap {}
// SAFETY: see `Send`; `&SharedMap` only hands out raw pointers, atomics and
// copies, and its protection record is behind a lock.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// Map `len` bytes of `fd` at `offset`.
    ///
    /// With `at`, the mapping goes exactly there (`MAP_FIXED_NOREPLACE`) and
    /// fails with [`Error::AlreadyExists`] when that range is taken.
    pub fn map(
        fd: BorrowedFd<'_>,
        len: u64,
        offset: u64,
        prot: Prot,
        at: Option<u64>,
    ) -> Result<SharedMap> {
        Self::mmap(Some(fd), len, offset, prot, at, 0)
    }

    /// Reserve `len` bytes of address space with no access and no memory.
    pub fn reserve(len: u64, at: Option<u64>) -> Result<SharedMap> {
        Self::mmap(None, len, 0, Prot::None, at, libc::MAP_NORESERVE)
    }

    /// Reserve `len` bytes of address space at an `align`-aligned address
    /// (`align` a power of two, or 0 for any). Race-free: when the kernel's
    /// first choice is not aligned, it reserves `len + align` bytes and
    /// gives back the unaligned head and tail, so the aligned range is never
    /// free for another thread to take in between.
    pub fn reserve_aligned(len: u64, align: u64) -> Result<SharedMap> {
        if align != 0 && !align.is_power_of_two() {
            return Err(Error::invalid(format!(
                "alignment {align:#x} is not a power of two"
            )));
        }
        let plain = Self::reserve(len, None)?;
        if align == 0 || plain.ptr.as_ptr() as u64 % align == 0 {
            return Ok(plain);
        }
        drop(plain);
        let total = len
            .checked_add(align)
            .ok_or_else(|| Error::invalid("size plus alignment overflows"))?;
        let whole = Self::reserve(total, None)?;
        let base = whole.ptr.as_ptr() as usize;
        let align_us = align as usize;
        let start = base.next_multiple_of(align_us);
        let head = start - base;
        let len_us = len as usize;
        let tail = whole.len - head - len_us;
        // The aligned part is now owned by the value made below; the head
        // and the tail go back to the kernel.
        std::mem::forget(whole);
        if head > 0 {
            // SAFETY: `base..start` is the head of the reservation made
            // above, which nothing else refers to.
            unsafe { libc::munmap(base as *mut libc::c_void, head) };
        }
        if tail > 0 {
            // SAFETY: as for the head: the tail past `start + len` of the
            // same reservation.
            unsafe { libc::munmap((start + len_us) as *mut libc::c_void, tail) };
        }
        Ok(SharedMap::owned(
            start as *mut libc::c_void,
            len_us,
            Prot::None,
        ))
    }

    /// Map `len` bytes of `fd` at `offset` at an `align`-aligned address: a
    /// [`SharedMap::reserve_aligned`] range with the descriptor mapped over
    /// all of it, so the placement is race-free too.
    pub fn map_aligned(
        fd: BorrowedFd<'_>,
        len: u64,
        offset: u64,
        align: u64,
        prot: Prot,
    ) -> Result<SharedMap> {
        let plain = Self::map(fd, len, offset, prot, None)?;
        if align == 0 || plain.ptr.as_ptr() as u64 % align == 0 {
            return Ok(plain);
        }
        drop(plain);
        let map = Self::reserve_aligned(len, align)?;
        map.map_over(0, fd, offset, len, prot)?;
        Ok(map)
    }

    /// Own the mapping of `len` bytes at `p` (non-null: `mmap` succeeded).
    fn owned(p: *mut libc::c_void, len: usize, prot: Prot) -> SharedMap {
        SharedMap {
            // SAFETY: mmap succeeded, so p is non-null.
            ptr: unsafe { NonNull::new_unchecked(p.cast()) },
            len,
            prot: RwLock::new(Pieces::new(prot)),
            pinned: AtomicBool::new(false),
            pinned_writable: AtomicBool::new(false),
        }
    }

    fn mmap(
        fd: Option<BorrowedFd<'_>>,
        len: u64,
        offset: u64,
        prot: Prot,
        at: Option<u64>,
        extra: i32,
    ) -> Result<SharedMap> {
        let len_us = usize::try_from(len).map_err(|_| Error::invalid("mapping too large"))?;
        if len_us == 0 {
            return Err(Error::invalid("cannot map zero bytes"));
        }
        let off = libc::off_t::try_from(offset).map_err(|_| Error::invalid("offset too large"))?;
        let mut flags = extra
            | if fd.is_some() {
                libc::MAP_SHARED
            } else {
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS
            };
        if at.is_some() {
            flags |= libc::MAP_FIXED_NOREPLACE;
        }
        let hint = at.unwrap_or(0) as usize as *mut libc::c_void;
        let raw = fd.map_or(-1, |f| f.as_raw_fd());
        // SAFETY: a fresh mapping: with MAP_FIXED_NOREPLACE the kernel refuses
        // to replace existing mappings, so no memory of this process changes
        // under anyone's feet.
        let p = unsafe { libc::mmap(hint, len_us, prot.bits(), flags, raw, off) };
        if p == libc::MAP_FAILED {
            let err = std::io::Error::last_os_error();
            if at.is_some() && err.raw_os_error() == Some(libc::EEXIST) {
                return Err(Error::AlreadyExists {
                    what: format!(
                        "address range {:#x}+{len:#x} is already mapped in this process",
                        at.unwrap_or(0)
                    ),
                });
            }
            if err.raw_os_error() == Some(libc::ENOMEM) {
                return Err(Error::OutOfMemory {
                    requested: len,
                    detail: format!("mmap: {err}"),
                });
            }
            return Err(Error::io("mmap", err));
        }
        if let Some(want) = at {
            if p as u64 != want {
                // Kernels before 4.17 ignore MAP_FIXED_NOREPLACE and treat it as a hint.
                drop(SharedMap::owned(p, len_us, prot));
                return Err(Error::AlreadyExists {
                    what: format!("address {want:#x} is not free in this process"),
                });
            }
        }
        Ok(SharedMap::owned(p, len_us, prot))
    }

    /// Map `len` bytes of `fd` over part of this mapping (`MAP_FIXED`), for
    /// VMM-style reservations. `offset` is relative to this mapping.
    pub fn map_over(
        &self,
        offset: u64,
        fd: BorrowedFd<'_>,
        fd_offset: u64,
        len: u64,
        prot: Prot,
    ) -> Result<()> {
        let off =
            libc::off_t::try_from(fd_offset).map_err(|_| Error::invalid("offset too large"))?;
        self.reprotect(offset, len, prot, "mmap(MAP_FIXED)", |at| {
            // SAFETY: the target range lies inside this mapping, which this
            // value owns; MAP_FIXED replaces only those pages.
            let p = unsafe {
                libc::mmap(
                    at.cast(),
                    len as usize,
                    prot.bits(),
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    fd.as_raw_fd(),
                    off,
                )
            };
            p != libc::MAP_FAILED
        })
    }

    /// Return part of this mapping to a no-access reservation.
    pub fn unmap_part(&self, offset: u64, len: u64) -> Result<()> {
        self.reprotect(offset, len, Prot::None, "mmap(MAP_FIXED) to unmap", |at| {
            // SAFETY: the range lies inside this mapping, which this value owns.
            let p = unsafe {
                libc::mmap(
                    at.cast(),
                    len as usize,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            p != libc::MAP_FAILED
        })
    }

    /// Change the protection of part of this mapping.
    pub fn protect(&self, offset: u64, len: u64, prot: Prot) -> Result<()> {
        self.reprotect(offset, len, prot, "mprotect", |at| {
            // SAFETY: the range lies inside this mapping, which this value owns.
            unsafe { libc::mprotect(at.cast(), len as usize, prot.bits()) == 0 }
        })
    }

    /// Change the protection of `offset..offset + len` with `call` (given
    /// the range's first byte; true on success, `errno` set otherwise), and
    /// record it. The record's lock is held across the call, so that no copy
    /// runs on pages whose protection changes under it.
    fn reprotect(
        &self,
        offset: u64,
        len: u64,
        prot: Prot,
        what: &str,
        call: impl FnOnce(*mut u8) -> bool,
    ) -> Result<()> {
        self.check_sub(offset, len)?;
        let mut pieces = crate::kit::os::lock::write(&self.prot);
        if self.pinned.load(Ordering::Acquire) {
            return Err(Error::invalid(
                "the mapping has handed out atomic references, so its protection can no \
                 longer change; use a mapping of its own for atomics",
            ));
        }
        if len == 0 {
            return Ok(());
        }
        // SAFETY: check_sub put offset..offset + len inside this mapping.
        let at = unsafe { self.ptr.as_ptr().add(offset as usize) };
        if !call(at) {
            return Err(Error::last_os(what));
        }
        let start = offset as usize;
        pieces.set(start, start + len as usize, self.len, prot);
        Ok(())
    }

    fn check_sub(&self, offset: u64, len: u64) -> Result<()> {
        crate::bounds::check_bounds(offset, len, self.len as u64)
    }

    /// Check that `offset..offset + len` is in bounds and that its
    /// protection allows `want` (`what` names the access for the error), and
    /// hold the protection record until the access is done.
    fn access(
        &self,
        offset: u64,
        len: u64,
        want: fn(Prot) -> bool,
        what: &str,
    ) -> Result<RwLockReadGuard<'_, Pieces>> {
        self.check_sub(offset, len)?;
        let pieces = crate::kit::os::lock::read(&self.prot);
        let start = offset as usize;
        if len > 0 && !pieces.allow(start, start + len as usize, want) {
            return Err(Error::PermissionDenied {
                pid: None,
                reason: format!(
                    "{what} of bytes {offset:#x}+{len:#x}: the mapping's protection there does \
                     not allow it (mapped read-only, or not mapped at all); refused rather than \
                     faulting"
                ),
            });
        }
        Ok(pieces)
    }

    /// [`SharedMap::access`] for a copy: without the lock where the mapping
    /// is pinned read-write throughout (its protection can no longer
    /// change, and allows every access).
    #[inline]
    fn hold(
        &self,
        offset: u64,
        len: u64,
        want: fn(Prot) -> bool,
        what: &str,
    ) -> Result<Option<RwLockReadGuard<'_, Pieces>>> {
        if self.pinned_writable.load(Ordering::Acquire) {
            self.check_sub(offset, len)?;
            return Ok(None);
        }
        self.access(offset, len, want, what).map(Some)
    }

    /// The protection of the byte at `offset` (`None` when out of bounds).
    pub fn protection_at(&self, offset: u64) -> Option<Prot> {
        let at = usize::try_from(offset).ok().filter(|&o| o < self.len)?;
        let pieces = crate::kit::os::lock::read(&self.prot);
        Some(pieces.0[pieces.index_of(at)].1)
    }

    /// First byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty (never, for a successful map).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of an atomic of `size` bytes at `offset`: aligned, in
    /// bounds, and read-write (a store through it must not fault). Pins the
    /// mapping's protection (see [`SharedMap`]).
    #[inline]
    fn atomic_at(&self, offset: usize, size: usize) -> Result<*mut u8> {
        debug_assert!(size.is_power_of_two());
        // A mask, not `%`: the sizes are powers of two, and a division
        // costs more than the rest of the check on a hot path.
        if offset & (size - 1) != 0 || offset.checked_add(size).is_none_or(|e| e > self.len) {
            return Err(atomic_outside(offset));
        }
        if !self.pinned_writable.load(Ordering::Acquire) {
            self.pin_for_atomics(offset, size)?;
        }
        // SAFETY: in bounds (checked above).
        Ok(unsafe { self.ptr.as_ptr().add(offset) })
    }

    /// The first atomic at `offset` (or one while part of the mapping is
    /// not read-write): check its protection and pin the mapping's. Out of
    /// line, so that the checks above stay small enough to inline.
    #[cold]
    #[inline(never)]
    fn pin_for_atomics(&self, offset: usize, size: usize) -> Result<()> {
        let pieces = self.access(offset as u64, size as u64, Prot::writable, "an atomic")?;
        self.pin_under(&pieces);
        Ok(())
    }

    /// Fix this mapping's protection for good, as its first atomic does:
    /// later changes ([`SharedMap::protect`], [`SharedMap::map_over`],
    /// [`SharedMap::unmap_part`]) are refused. For a mapping whose
    /// protection nothing is to change (an allocation's, an import's):
    /// copies in and out of one that is read-write throughout then skip the
    /// lock that keeps a change from running under a copy.
    pub fn pin_protection(&self) {
        self.pin_under(&crate::kit::os::lock::read(&self.prot));
    }

    /// Pin, with the protection record held (a change waits for it, and
    /// sees the pin).
    fn pin_under(&self, pieces: &Pieces) {
        self.pinned.store(true, Ordering::Release);
        // Pinned, the protection never changes again: a mapping read-write
        // throughout now stays so, and later atomics and copies skip the
        // lock.
        if pieces.allow(0, self.len, Prot::writable) {
            self.pinned_writable.store(true, Ordering::Release);
        }
    }

    /// A reference to a `u32` atomic at `offset` (4-byte aligned, in bounds,
    /// in a read-write part of the mapping: [`Error::PermissionDenied`]
    /// otherwise, since an atomic may be stored to).
    #[inline]
    pub fn atomic_u32(&self, offset: usize) -> Result<&AtomicU32> {
        let p = self.atomic_at(offset, 4)?;
        // SAFETY: in bounds and aligned (page-aligned base + multiple of 4),
        // writable for as long as `self` lives (protection changes are
        // refused from now on); AtomicU32 has the layout of u32 and the
        // memory lives as long as `self`.
        Ok(unsafe { &*p.cast::<AtomicU32>() })
    }

    /// A reference to a `u64` atomic at `offset` (8-byte aligned, in bounds,
    /// read-write; see [`SharedMap::atomic_u32`]).
    #[inline]
    pub fn atomic_u64(&self, offset: usize) -> Result<&std::sync::atomic::AtomicU64> {
        let p = self.atomic_at(offset, 8)?;
        // SAFETY: in bounds, aligned and writable for the life of `self`, as
        // for atomic_u32; AtomicU64 has the layout of u64.
        Ok(unsafe { &*p.cast() })
    }

    /// Copy out of the mapping. [`Error::PermissionDenied`] where the
    /// mapping may not be read (`PROT_NONE`).
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        let _held = self.hold(offset, dst.len() as u64, Prot::readable, "a read")?;
        // SAFETY: the source range is inside the mapping and readable, and
        // stays so while `_held` is held (for good where the mapping is
        // pinned read-write throughout); `dst` is a distinct exclusive
        // buffer. Another process may write concurrently: the bytes read are
        // then some mix, never undefined behaviour for plain u8 data copied
        // without references into the shared region.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset as usize),
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
        Ok(())
    }

    /// Copy into the mapping. [`Error::PermissionDenied`] where the mapping
    /// may not be written (`PROT_READ`, `PROT_NONE`).
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        let _held = self.hold(offset, src.len() as u64, Prot::writable, "a write")?;
        // SAFETY: the destination range is inside the mapping and writable,
        // and stays so while `_held` is held (for good where the mapping is
        // pinned read-write throughout); `src` does not overlap it (it
        // is a Rust slice borrowed elsewhere).
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.ptr.as_ptr().add(offset as usize),
                src.len(),
            )
        };
        Ok(())
    }

    /// `madvise` part of the mapping.
    pub fn advise(&self, offset: u64, len: u64, advice: i32) -> Result<()> {
        self.check_sub(offset, len)?;
        // SAFETY: the range is inside this mapping; madvise does not change
        // memory contents for the advices backends use (HUGEPAGE, WILLNEED,
        // POPULATE_WRITE).
        let r = unsafe {
            libc::madvise(
                self.ptr.as_ptr().add(offset as usize).cast(),
                len as usize,
                advice,
            )
        };
        if r != 0 {
            return Err(Error::last_os("madvise"));
        }
        Ok(())
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: the range was mapped by this value and nothing borrows it
        // any more (borrows are tied to `&self`).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// The error of an atomic out of alignment or out of bounds (out of line:
/// it is never on a hot path).
#[cold]
#[inline(never)]
fn atomic_outside(offset: usize) -> Error {
    Error::invalid(format!("atomic at {offset} outside the mapping"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn atomics_are_aligned_and_in_bounds_or_refused() {
        let len = 4096u64;
        let fd = crate::kit::os::memfd("hal-map-atomics-test", len, None).unwrap();
        let map = SharedMap::map(fd.as_fd(), len, 0, Prot::ReadWrite, None).unwrap();
        for at in [0, 4, 8, 4092] {
            assert!(map.atomic_u32(at).is_ok(), "u32 at {at}");
        }
        for at in [0, 8, 4088] {
            assert!(map.atomic_u64(at).is_ok(), "u64 at {at}");
        }
        for at in [1, 2, 3, 5, 4093, 4096, usize::MAX - 3] {
            assert!(map.atomic_u32(at).is_err(), "u32 at {at}");
        }
        for at in [1, 4, 6, 12, 4092, 4096, usize::MAX - 7] {
            assert!(map.atomic_u64(at).is_err(), "u64 at {at}");
        }
    }

    #[test]
    fn pinned_protection_holds_and_copies_keep_their_checks() {
        let len = 2 * 4096u64;
        let fd = crate::kit::os::memfd("hal-map-pin-test", len, None).unwrap();
        let map = SharedMap::map(fd.as_fd(), len, 0, Prot::ReadWrite, None).unwrap();
        map.pin_protection();
        assert!(map.pinned_writable.load(Ordering::Acquire));
        // Copies work, and stay inside the mapping without the lock.
        map.write(4090, &[1, 2, 3, 4, 5, 6]).unwrap();
        let mut back = [0u8; 6];
        map.read(4090, &mut back).unwrap();
        assert_eq!(back, [1, 2, 3, 4, 5, 6]);
        assert!(map.write(len - 2, &[0; 3]).is_err(), "past the end");
        assert!(map.read(len, &mut [0u8; 1]).is_err(), "past the end");
        assert!(
            map.write(u64::MAX, &[0; 1]).is_err(),
            "an overflowing offset"
        );
        // No change of protection any more.
        assert!(map.protect(0, 4096, Prot::Read).is_err());
        assert!(map.unmap_part(4096, 4096).is_err());
        assert!(map.map_over(0, fd.as_fd(), 0, 4096, Prot::Read).is_err());
        map.write(0, &[9]).unwrap();

        // Pinned while part of it is read-only: that part still refuses
        // writes, the rest takes them.
        let map = SharedMap::map(fd.as_fd(), len, 0, Prot::ReadWrite, None).unwrap();
        map.protect(4096, 4096, Prot::Read).unwrap();
        map.pin_protection();
        assert!(!map.pinned_writable.load(Ordering::Acquire));
        assert!(matches!(
            map.write(4096, &[1]),
            Err(Error::PermissionDenied { .. })
        ));
        map.write(0, &[1]).unwrap();
        map.read(4096, &mut [0u8; 1]).unwrap();
        assert!(map.protect(0, 4096, Prot::Read).is_err());
    }

    #[test]
    fn pieces_split_and_merge() {
        let mut p = Pieces::new(Prot::None);
        p.set(10, 20, 100, Prot::Read);
        assert_eq!(p.0, [(0, Prot::None), (10, Prot::Read), (20, Prot::None)]);
        p.set(15, 100, 100, Prot::ReadWrite);
        assert_eq!(
            p.0,
            [(0, Prot::None), (10, Prot::Read), (15, Prot::ReadWrite)]
        );
        p.set(0, 15, 100, Prot::ReadWrite);
        assert_eq!(p.0, [(0, Prot::ReadWrite)]);
        p.set(20, 30, 100, Prot::Read);
        p.set(40, 50, 100, Prot::None);
        p.set(25, 45, 100, Prot::Read);
        assert_eq!(
            p.0,
            [
                (0, Prot::ReadWrite),
                (20, Prot::Read),
                (45, Prot::None),
                (50, Prot::ReadWrite)
            ]
        );
        assert!(p.allow(20, 45, Prot::readable));
        assert!(!p.allow(20, 46, Prot::readable));
        assert!(!p.allow(19, 45, Prot::writable));
        assert!(p.allow(0, 20, Prot::writable));
        assert!(p.allow(50, 100, Prot::writable));
        assert!(!p.allow(44, 51, Prot::readable));
    }

    #[test]
    fn aligned_reservations_are_aligned_and_give_back_the_rest() {
        let align = 1u64 << 21;
        let len = 3 * 4096;
        let map = SharedMap::reserve_aligned(len, align).unwrap();
        let base = map.as_ptr() as usize;
        assert_eq!(base % align as usize, 0);
        assert_eq!(map.len(), len as usize);
        assert_eq!(map.protection_at(0), Some(Prot::None));
        assert!(
            map.read(0, &mut [0u8; 1]).is_err(),
            "a reservation has no access"
        );
        assert!(
            SharedMap::reserve_aligned(4096, 3 * 4096).is_err(),
            "not a power of two"
        );
    }

    #[test]
    fn aligned_mappings_hold_the_descriptor() {
        let fd = crate::kit::os::memfd("aligned-map", 8192, None).unwrap();
        let map = SharedMap::map_aligned(fd.as_fd(), 8192, 0, 1 << 21, Prot::ReadWrite).unwrap();
        assert_eq!(map.as_ptr() as usize % (1 << 21), 0);
        map.write(8190, b"hi").unwrap();
        let other = SharedMap::map(fd.as_fd(), 8192, 0, Prot::Read, None).unwrap();
        let mut got = [0u8; 2];
        other.read(8190, &mut got).unwrap();
        assert_eq!(&got, b"hi");
    }
}
