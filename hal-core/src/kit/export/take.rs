//! The importer's side of a memfd-backed export, once the descriptors are
//! taken: exactly as many as the backend's handles carry, each checked for
//! its seals before anything maps it. Taking them from a shared handle (or
//! from the exporter's broker) is the exchange's
//! ([`exchange::take_sealed`](crate::exchange::sealed::take_sealed)).

use std::os::fd::{AsFd, OwnedFd};

use crate::error::{Error, HandleError, Result};
use crate::kit::os;

/// What an import requires of the sealed descriptors it takes (see
/// [`take_sealed`](crate::exchange::sealed::take_sealed)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect<'a> {
    /// The handle, as errors name it: "a CPU memory handle (the data
    /// memfd)", "a notify handle of `hal-mock-cuda`".
    pub what: &'a str,
    /// The fewest bytes every memfd must hold (what the import maps).
    pub min_size: u64,
    /// The handle is read-only: every memfd must also be sealed against
    /// writes ([`os::verify_read_only_memfd`]).
    pub read_only: bool,
    /// Ask for the importer's lease when the exporter counts its importers
    /// ([`exchange::take_fds_leased`](crate::exchange::take_fds_leased)); without,
    /// [`exchange::take_fds`](crate::exchange::take_fds).
    pub leased: bool,
}

/// `fds` as exactly `N` memfds checked against `expect`; `facts` holds what
/// the taker already read of each (its seals, then its fstat), checked as
/// it stands without reading it again.
pub fn check_memfds<const N: usize>(
    fds: Vec<OwnedFd>,
    facts: &[Option<os::FileFacts>],
    expect: &Expect<'_>,
) -> Result<[OwnedFd; N]> {
    // Refused descriptors may be anyone's files: discarded, never closed
    // here (see `kit::os::discard`).
    let held = crate::kit::os::discard::Untrusted::new(fds);
    check_fd_count(expect.what, N, held.len())?;
    for (i, fd) in held.as_slice().iter().enumerate() {
        match facts.get(i).copied().flatten() {
            Some(f) => os::verify_memfd_facts(&f, expect.min_size, expect.read_only)?,
            None if expect.read_only => os::verify_read_only_memfd(fd.as_fd(), expect.min_size)?,
            None => os::verify_sealed_memfd(fd.as_fd(), expect.min_size)?,
        };
    }
    fd_array::<N>(held.accept(), expect.what)
}

/// The descriptors of a handle as exactly `N`; another number is refused
/// with [`HandleError::Descriptors`] naming `what` (see [`check_fd_count`]).
pub fn fd_array<const N: usize>(fds: Vec<OwnedFd>, what: &str) -> Result<[OwnedFd; N]> {
    let came = fds.len();
    <[OwnedFd; N]>::try_from(fds).map_err(|_| count_error(what, N, came))
}

/// Refuse `came` descriptors for a handle that carries `expected`:
/// [`HandleError::Descriptors`] saying "`what` takes `expected`
/// descriptor(s), `came` came".
pub fn check_fd_count(what: &str, expected: usize, came: usize) -> Result<()> {
    if came != expected {
        return Err(count_error(what, expected, came));
    }
    Ok(())
}

fn count_error(what: &str, expected: usize, came: usize) -> Error {
    HandleError::Descriptors(format!(
        "{what} takes {expected} descriptor(s), {came} came"
    ))
    .into()
}
