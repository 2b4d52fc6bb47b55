//! A mapped byte range, possibly inside a larger reservation (for alignment).

use std::os::fd::BorrowedFd;

use hal_core::device::check_bounds;
use hal_core::os::{self, Prot, SharedMap};
use hal_core::{Error, Result};

/// `len` bytes at `start` inside `map`.
#[derive(Debug)]
pub(crate) struct View {
    map: SharedMap,
    start: u64,
    len: u64,
}

impl View {
    /// Map `len` bytes of `fd` at `file_offset`, at an address aligned to
    /// `align` (0 or at most `natural` = the mapping's own alignment), or
    /// exactly at `at`.
    pub(crate) fn map(
        fd: BorrowedFd<'_>,
        len: u64,
        file_offset: u64,
        prot: Prot,
        align: u64,
        natural: u64,
        at: Option<u64>,
    ) -> Result<View> {
        if align != 0 && !align.is_power_of_two() {
            return Err(Error::invalid(format!(
                "alignment {align:#x} is not a power of two"
            )));
        }
        if at.is_some() || align <= natural {
            let map = SharedMap::map(fd, len, file_offset, prot, at).map_err(access_error)?;
            return Ok(View { map, start: 0, len });
        }
        // Reserve enough to find an aligned start, then map the descriptor over it.
        let total = len
            .checked_add(align)
            .ok_or_else(|| Error::invalid("size plus alignment overflows"))?;
        let map = SharedMap::reserve(total, None)?;
        let base = map.as_ptr() as u64;
        let aligned = (base + align - 1) & !(align - 1);
        let start = aligned - base;
        map.map_over(start, fd, file_offset, len, prot)
            .map_err(access_error)?;
        Ok(View { map, start, len })
    }

    /// The address of the first byte.
    pub(crate) fn addr(&self) -> u64 {
        self.map.as_ptr() as u64 + self.start
    }

    /// A pointer to the first byte.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.map.as_ptr().wrapping_add(self.start as usize)
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Copy out.
    pub(crate) fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        check_bounds(offset, dst.len() as u64, self.len)?;
        self.map.read(self.start + offset, dst)
    }

    /// Copy in.
    pub(crate) fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        check_bounds(offset, src.len() as u64, self.len)?;
        self.map.write(self.start + offset, src)
    }

    /// `madvise` a part.
    pub(crate) fn advise(&self, offset: u64, len: u64, advice: i32) -> Result<()> {
        check_bounds(offset, len, self.len)?;
        self.map.advise(self.start + offset, len, advice)
    }

    /// Round `len` up to whole pages of `page` bytes.
    pub(crate) fn round_up(len: u64, page: u64) -> Result<u64> {
        len.checked_next_multiple_of(page)
            .ok_or_else(|| Error::invalid(format!("size {len:#x} overflows when rounded up")))
    }

    /// The machine's page size.
    pub(crate) fn page() -> u64 {
        os::page_size()
    }
}

/// An `EACCES` from mmap means the descriptor's open mode forbids the access.
pub(crate) fn access_error(e: Error) -> Error {
    match &e {
        Error::Io { source, .. } if source.raw_os_error() == Some(libc::EACCES) => {
            Error::PermissionDenied {
                pid: None,
                reason: "the descriptor does not allow this access (a read-only descriptor \
                         mapped for writing?); import read-only"
                    .into(),
            }
        }
        _ => e,
    }
}
