//! A mapped byte range, possibly inside a larger reservation (for alignment).

use std::os::fd::BorrowedFd;

use hal_core::device::check_bounds;
use hal_core::kit::os::{self, Prot, SharedMap};
use hal_core::{Error, Result};

/// A mapping of `len` bytes.
#[derive(Debug)]
pub(crate) struct View {
    map: SharedMap,
    len: u64,
    /// The process that mapped it: a child forked from it is refused the
    /// bytes (the memory is its parent's allocation or import).
    origin: hal_core::kit::os::Origin,
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
        let map = if at.is_some() || align <= natural {
            SharedMap::map(fd, len, file_offset, prot, at)
        } else {
            SharedMap::map_aligned(fd, len, file_offset, align, prot)
        }
        .map_err(access_error)?;
        // A view's protection never changes: copies in and out skip the
        // lock that guards changes.
        map.pin_protection();
        Ok(View {
            map,
            len,
            origin: hal_core::kit::os::Origin::here(),
        })
    }

    /// The address of the first byte.
    pub(crate) fn addr(&self) -> u64 {
        self.map.as_ptr() as u64
    }

    /// A pointer to the first byte.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// [`Error::Forked`](hal_core::Error::Forked) in a child forked after
    /// the view was mapped.
    pub(crate) fn check_origin(&self) -> Result<()> {
        self.origin.check("cpu-shm memory")
    }

    /// Copy out.
    pub(crate) fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        check_bounds(offset, dst.len() as u64, self.len)?;
        self.map.read(offset, dst)
    }

    /// Copy in.
    pub(crate) fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        check_bounds(offset, src.len() as u64, self.len)?;
        self.map.write(offset, src)
    }

    /// `madvise` a part.
    pub(crate) fn advise(&self, offset: u64, len: u64, advice: i32) -> Result<()> {
        check_bounds(offset, len, self.len)?;
        self.map.advise(offset, len, advice)
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
