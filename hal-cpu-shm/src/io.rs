//! Copies through the descriptor (`pread`/`pwrite`) for regions another
//! process can truncate (named and file-backed regions).
//!
//! A truncated region makes loads and stores through its mapping raise
//! `SIGBUS`; a `pread` or `pwrite` on the descriptor instead returns short or
//! succeeds, and the page cache it reads and writes is the very memory the
//! mapping shows. So the library's own accesses never fault.

use std::os::fd::BorrowedFd;

use hal_core::kit::os;
use hal_core::{Error, Result};
use nix::errno::Errno;

fn off(v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::invalid("offset over i64::MAX"))
}

fn truncated(what: &str, need: u64, size: u64) -> Error {
    Error::Closed {
        what: format!(
            "{what} was truncated by another process to {size} bytes; the access needs {need} \
             bytes (its mapping would fault there)"
        ),
    }
}

/// Fill `dst` from `fd` at `at`.
pub(crate) fn read_at(fd: BorrowedFd<'_>, at: u64, dst: &mut [u8], what: &str) -> Result<()> {
    let mut done = 0usize;
    while done < dst.len() {
        match nix::sys::uio::pread(fd, &mut dst[done..], off(at + done as u64)?) {
            Ok(0) => {
                let size = os::fstat(fd).map(|s| s.st_size as u64).unwrap_or(0);
                return Err(truncated(what, at + dst.len() as u64, size));
            }
            Ok(n) => done += n,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(Error::errno(format!("reading {what}"), e)),
        }
    }
    Ok(())
}

/// Write `src` to `fd` at `at`, refusing when the object is now shorter than
/// `at + src.len()` (a write there would grow it back with zeros).
pub(crate) fn write_at(fd: BorrowedFd<'_>, at: u64, src: &[u8], what: &str) -> Result<()> {
    let need = at + src.len() as u64;
    let size = os::fstat(fd)?.st_size as u64;
    if size < need {
        return Err(truncated(what, need, size));
    }
    let mut done = 0usize;
    while done < src.len() {
        match nix::sys::uio::pwrite(fd, &src[done..], off(at + done as u64)?) {
            Ok(0) => return Err(truncated(what, need, size)),
            Ok(n) => done += n,
            Err(Errno::EINTR) => {}
            Err(Errno::EBADF) => {
                return Err(Error::PermissionDenied {
                    pid: None,
                    reason: format!("{what} was opened read-only"),
                })
            }
            Err(e) => return Err(Error::errno(format!("writing {what}"), e)),
        }
    }
    Ok(())
}
