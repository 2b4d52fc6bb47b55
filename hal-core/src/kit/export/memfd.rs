//! Sealed memfds: the memory objects that memfd-backed backends export.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::error::Result;
use crate::kit::os::{self, Prot, SharedMap};

/// A new memfd of `len` bytes named `label` (seen in `/proc/PID/maps`), with
/// `seals` added: [`os::EXPORT_SEALS`] for an object whose descriptor is
/// exported as it is (an event's or a notify's page), [`os::SIZE_SEALS`]
/// for memory whose first export decides whether it is also sealed against
/// writes ([`os::seal_for_export`]).
pub fn sealed_memfd(label: &str, len: u64, seals: i32) -> Result<OwnedFd> {
    let fd = os::memfd(label, len, None)?;
    os::add_seals(fd.as_fd(), seals)?;
    Ok(fd)
}

/// A memfd sealed for export ([`os::EXPORT_SEALS`]: its size can never
/// change, nobody can add seals) and this process's read-write mapping of
/// all of it. An importer opens the exporter's descriptor with
/// [`SealedMemfd::open`], which checks the seals before mapping, so a peer
/// that could truncate the memory (and make this process die of `SIGBUS`)
/// is refused.
///
/// ```
/// use hal_core::kit::export::SealedMemfd;
///
/// let page = SealedMemfd::create("example", 4096)?;
/// page.map().write(0, b"hi")?;
/// let peer = SealedMemfd::open(page.dup_fd()?, 4096)?;
/// let mut got = [0u8; 2];
/// peer.map().read(0, &mut got)?;
/// assert_eq!(&got, b"hi");
/// # Ok::<(), hal_core::Error>(())
/// ```
#[derive(Debug)]
pub struct SealedMemfd {
    map: SharedMap,
    fd: OwnedFd,
}

impl SealedMemfd {
    /// A new zeroed memfd of `len` bytes named `label`, sealed and mapped.
    pub fn create(label: &str, len: u64) -> Result<SealedMemfd> {
        let fd = sealed_memfd(label, len, os::EXPORT_SEALS)?;
        SealedMemfd::mapped(fd, len)
    }

    /// Map the first `len` bytes of a received descriptor, after checking
    /// that it is a memfd sealed against shrinking and growing that holds
    /// them ([`os::verify_sealed_memfd`]; anything else is refused with
    /// [`HandleError::Descriptors`](crate::HandleError::Descriptors)).
    pub fn open(fd: OwnedFd, len: u64) -> Result<SealedMemfd> {
        os::verify_sealed_memfd(fd.as_fd(), len)?;
        SealedMemfd::mapped(fd, len)
    }

    /// Map a descriptor whose seals were already checked
    /// ([`take_sealed`](crate::exchange::sealed::take_sealed)).
    pub(crate) fn mapped(fd: OwnedFd, len: u64) -> Result<SealedMemfd> {
        let map = SharedMap::map(fd.as_fd(), len, 0, Prot::ReadWrite, None)?;
        Ok(SealedMemfd { map, fd })
    }

    /// This process's mapping.
    pub fn map(&self) -> &SharedMap {
        &self.map
    }

    /// The descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// A duplicate of the descriptor, for an export.
    pub fn dup_fd(&self) -> Result<OwnedFd> {
        os::dup(self.fd.as_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, HandleError};

    #[test]
    fn a_created_memfd_is_sealed_for_export() {
        let m = SealedMemfd::create("memfd-test", 8192).unwrap();
        let seals = os::seals(m.fd()).unwrap();
        assert_eq!(seals & os::EXPORT_SEALS, os::EXPORT_SEALS);
        assert_eq!(m.map().len(), 8192);
        assert!(os::set_len(m.fd(), 4096).is_err(), "its size cannot change");
    }

    #[test]
    fn an_unsealed_or_short_memfd_is_refused() {
        let unsealed = os::memfd("memfd-test", 4096, None).unwrap();
        let e = SealedMemfd::open(unsealed, 4096).unwrap_err();
        assert!(
            matches!(e, Error::InvalidHandle(HandleError::Descriptors(_))),
            "{e:?}"
        );
        let short = sealed_memfd("memfd-test", 4096, os::EXPORT_SEALS).unwrap();
        let e = SealedMemfd::open(short, 8192).unwrap_err();
        assert!(
            matches!(e, Error::InvalidHandle(HandleError::Descriptors(_))),
            "{e:?}"
        );
    }

    #[test]
    fn size_seals_leave_room_for_the_export_decision() {
        let fd = sealed_memfd("memfd-test", 4096, os::SIZE_SEALS).unwrap();
        os::seal_for_export(fd.as_fd(), true).unwrap();
        let seals = os::seals(fd.as_fd()).unwrap();
        assert_ne!(seals & os::FUTURE_WRITE_SEAL, 0);
    }
}
