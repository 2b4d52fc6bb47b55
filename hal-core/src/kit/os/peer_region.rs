//! A region of shared memory that lives in a memfd of one process and that
//! others reach through `/proc/PID/fd/N` ([`open_peer_fd`]): how a
//! channel's control region and a group's board are shared.
//!
//! The memfd is sealed against shrinking and growing (and against further
//! seals), so that no process can truncate it under the others' mappings,
//! through which they work with atomics and futexes: they would die of
//! `SIGBUS`. Whoever opens it checks that it is the object it was told of
//! (device and inode) and that it carries those seals before it maps it.

use std::os::fd::{AsFd, OwnedFd};

use super::{add_seals, Prot, SharedMap, SIZE_SEALS};
use super::{file_facts, fstat, memfd, open_peer_fd, verify_memfd_facts};
#[cfg(doc)]
use crate::Error;
use crate::Result;

/// Where a region is: a process that holds it, its descriptor number
/// there, and the region's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerRegion {
    /// The holding process.
    pub pid: u32,
    /// That process's start time (clock ticks since boot), so that a reused
    /// pid is never taken for it.
    pub start: u64,
    /// The region's descriptor number in that process.
    pub fd: u32,
    /// The region's device.
    pub dev: u64,
    /// The region's inode.
    pub ino: u64,
}

/// A new region of `len` bytes (a memfd named `name`), sealed against
/// shrinking, growing and further seals, and mapped read-write. Answers
/// its descriptor, which must stay open while others may reach it through
/// this process, its mapping, and its identity (device, inode).
pub fn new_sealed_region(name: &str, len: u64) -> Result<(OwnedFd, SharedMap, (u64, u64))> {
    let fd = memfd(name, len, None)?;
    add_seals(fd.as_fd(), SIZE_SEALS | libc::F_SEAL_SEAL)?;
    let map = SharedMap::map(fd.as_fd(), len, 0, Prot::ReadWrite, None)?;
    let stat = fstat(fd.as_fd())?;
    Ok((fd, map, (stat.st_dev, stat.st_ino)))
}

/// Open the region `at` names and map its first `len` bytes read-write,
/// after checking that the descriptor is that region (its identity) and
/// that it is sealed against shrinking and growing at `len` bytes or more.
/// `what` names what told of the region ("a channel's name"), for the
/// errors.
///
/// Errors: [`Error::Closed`] when the process or its descriptor is gone;
/// [`Error::PermissionDenied`] when the kernel refuses the open;
/// [`Error::InvalidArgument`] when the descriptor is no memfd or another
/// object; the errors of [`verify_memfd_facts`] when it is not sealed or
/// shorter than `len`.
pub fn map_peer_region(at: &PeerRegion, len: u64, what: &str) -> Result<(OwnedFd, SharedMap)> {
    let fd = open_peer_fd(at.pid, at.start, at.fd, (at.dev, at.ino), what)?;
    // A memfd of the named identity: its seals and size are read at once.
    let facts = file_facts(fd.as_fd())?;
    verify_memfd_facts(&facts, len, false)?;
    // Sealed at no less than `len` bytes: the mapping cannot fault.
    let map = SharedMap::map(fd.as_fd(), len, 0, Prot::ReadWrite, None)?;
    Ok((fd, map))
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;
    use crate::kit::os::self_identity;
    use crate::Error;

    fn here(fd: &OwnedFd, (dev, ino): (u64, u64)) -> PeerRegion {
        let (pid, start) = self_identity();
        PeerRegion {
            pid,
            start,
            fd: fd.as_raw_fd() as u32,
            dev,
            ino,
        }
    }

    #[test]
    fn a_region_maps_again_through_its_holder_and_cannot_be_resized() {
        let (fd, map, id) = new_sealed_region("peer-region-test", 8192).unwrap();
        map.write(100, b"seen").unwrap();
        let (again, map2) = map_peer_region(&here(&fd, id), 8192, "a test").unwrap();
        let mut b = [0u8; 4];
        map2.read(100, &mut b).unwrap();
        assert_eq!(&b, b"seen");
        let file = std::fs::File::from(again);
        let err = file.set_len(0).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
        assert_eq!(
            file.set_len(1 << 20).unwrap_err().raw_os_error(),
            Some(libc::EPERM)
        );
    }

    #[test]
    fn another_object_an_unsealed_one_and_a_longer_length_are_refused() {
        let (fd, _map, (dev, ino)) = new_sealed_region("peer-region-test", 4096).unwrap();
        let err = map_peer_region(&here(&fd, (dev, ino + 1)), 4096, "a test").unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        assert!(err.to_string().contains("another object"), "{err}");
        let err = map_peer_region(&here(&fd, (dev, ino)), 8192, "a test").unwrap_err();
        assert!(err.to_string().contains("fewer than the 8192"), "{err}");
        let plain = memfd("peer-region-test", 4096, None).unwrap();
        let st = fstat(plain.as_fd()).unwrap();
        let err =
            map_peer_region(&here(&plain, (st.st_dev, st.st_ino)), 4096, "a test").unwrap_err();
        assert!(err.to_string().contains("not sealed"), "{err}");
        let stat_file = std::fs::File::open("/proc/self/stat").unwrap();
        let st = fstat(stat_file.as_fd()).unwrap();
        let err = map_peer_region(
            &PeerRegion {
                fd: stat_file.as_raw_fd() as u32,
                ..here(&fd, (st.st_dev, st.st_ino))
            },
            4096,
            "a test",
        )
        .unwrap_err();
        assert!(err.to_string().contains("no memfd"), "{err}");
    }
}
