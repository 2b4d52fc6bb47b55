//! Host memory this library did not map: a range of the process's address
//! space that a caller vouches for ([`HostRange`]), as registration of
//! existing host memory needs it.

use crate::bounds::check_bounds;
use crate::error::{Error, Result};
use crate::kit::os::lock::lock;

/// A page-aligned range of host memory mapped by someone else (a
/// PostgreSQL dynamic shared memory segment, a framework's buffer), copied
/// from and to without faulting on bytes outside it.
#[derive(Debug)]
pub struct HostRange {
    ptr: usize,
    len: u64,
}

impl HostRange {
    /// Take `ptr..ptr + len` after checking that it is whole pages and
    /// mapped in this process ([`Error::Misaligned`], [`Error::InvalidArgument`]).
    ///
    /// # Safety
    ///
    /// The range must stay mapped, readable and writable, as long as the
    /// returned value lives; other users of the bytes are the caller's to
    /// order against reads and writes made through it.
    pub unsafe fn new(ptr: *mut u8, len: u64) -> Result<HostRange> {
        let page = super::page::page_size();
        let addr = ptr as u64;
        if len == 0 || addr % page != 0 || len % page != 0 {
            return Err(Error::Misaligned {
                offset: addr % page,
                len,
                page_size: page,
            });
        }
        if !is_mapped(addr, len) {
            return Err(Error::invalid(format!(
                "host range {addr:#x}+{len:#x} is not mapped in this process"
            )));
        }
        Ok(HostRange {
            ptr: ptr as usize,
            len,
        })
    }

    /// The first byte's address.
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// The first byte.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when the length is zero (never: [`HostRange::new`] refuses it).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copy `dst.len()` bytes at `offset` into `dst`.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        check_bounds(offset, dst.len() as u64, self.len)?;
        // SAFETY: the range is in bounds of memory the creator vouched
        // stays mapped and readable (`new`'s contract); `dst` is a distinct
        // Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr().add(offset as usize),
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
        Ok(())
    }

    /// Copy `src` in at `offset`.
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        check_bounds(offset, src.len() as u64, self.len)?;
        // SAFETY: as for `read`, with the range writable by `new`'s contract.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr().add(offset as usize), src.len())
        };
        Ok(())
    }
}

/// The host ranges registered with one device (or one backend): a range
/// that overlaps one of them is refused, as `cuMemHostRegister` refuses it.
#[derive(Debug, Default)]
pub struct HostRegistry {
    ranges: std::sync::Mutex<Vec<(u64, u64)>>,
}

impl HostRegistry {
    /// An empty registry.
    pub const fn new() -> HostRegistry {
        HostRegistry {
            ranges: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Note `range` as registered, or give back the registered range
    /// `(start, len)` it overlaps.
    pub fn claim(&self, range: &HostRange) -> std::result::Result<(), (u64, u64)> {
        let (start, end) = (range.addr(), range.addr() + range.len());
        let mut ranges = lock(&self.ranges);
        if let Some(&hit) = ranges.iter().find(|(s, l)| *s < end && start < s + l) {
            return Err(hit);
        }
        ranges.push((start, range.len()));
        Ok(())
    }

    /// True when `addr..addr + len` lies inside one registered range.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        let ranges = lock(&self.ranges);
        ranges
            .iter()
            .any(|(s, l)| *s <= addr && addr.checked_add(len).is_some_and(|end| end <= s + l))
    }

    /// Forget `range` (its registration ended).
    pub fn release(&self, range: &HostRange) {
        let key = (range.addr(), range.len());
        lock(&self.ranges).retain(|r| *r != key);
    }
}

/// True when every page of `addr..addr + len` (page-aligned) is mapped in
/// this process (`mincore` answers `ENOMEM` for an unmapped page).
pub fn is_mapped(addr: u64, len: u64) -> bool {
    let page = super::page::page_size();
    let pages = len.div_ceil(page) as usize;
    let mut residency = vec![0u8; pages];
    // SAFETY: mincore only reads the page tables of the range and writes
    // one byte per page into `residency`, which holds `pages` bytes.
    let r = unsafe {
        libc::mincore(
            addr as usize as *mut libc::c_void,
            len as usize,
            residency.as_mut_ptr(),
        )
    };
    r == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::os::{Prot, SharedMap};

    #[test]
    fn a_mapped_range_is_read_and_written_and_others_are_refused() {
        let page = crate::kit::os::page_size();
        let map = SharedMap::reserve(2 * page, None).unwrap();
        map.protect(0, 2 * page, Prot::ReadWrite).unwrap();
        // SAFETY: `map` outlives `range` in this test.
        let range = unsafe { HostRange::new(map.as_ptr(), 2 * page) }.unwrap();
        range.write(page - 2, b"abcd").unwrap();
        let mut got = [0u8; 4];
        range.read(page - 2, &mut got).unwrap();
        assert_eq!(&got, b"abcd");
        assert!(range.read(2 * page - 1, &mut got).is_err(), "past the end");
        // SAFETY: refused before use.
        let odd = unsafe { HostRange::new(map.as_ptr().wrapping_add(1), page) };
        assert!(matches!(odd, Err(Error::Misaligned { .. })));
        assert!(is_mapped(map.as_ptr() as u64, 2 * page));
        let registry = HostRegistry::new();
        registry.claim(&range).unwrap();
        // SAFETY: `map` outlives the value; it is only compared.
        let half =
            unsafe { HostRange::new(map.as_ptr().wrapping_add(page as usize), page) }.unwrap();
        assert_eq!(registry.claim(&half), Err((range.addr(), range.len())));
        assert!(registry.contains(range.addr() + 8, 4));
        assert!(
            !registry.contains(range.addr() + 2 * page - 2, 4),
            "runs past the end"
        );
        registry.release(&range);
        assert!(!registry.contains(range.addr() + 8, 4));
        registry.claim(&half).unwrap();
        assert!(!is_mapped(0, page), "the zero page is never mapped");
    }
}
