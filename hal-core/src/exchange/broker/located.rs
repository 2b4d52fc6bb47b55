//! Where an export's descriptors are in the exporter: what the broker
//! answers to a "lease and locate" request instead of passing the
//! descriptors, for an importer that takes them itself with
//! `pidfd_getfd(2)`. Each descriptor is told as its number in the exporter
//! and its file's identity (`st_dev`, `st_ino`), which the importer checks
//! on what it took: the exporter may have closed the number, and reused it,
//! between the reply and the take.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use crate::kit::os;

/// Length of one descriptor's location on the wire: its number (`u32`),
/// four zero bytes, `st_dev` (`u64`), `st_ino` (`u64`), little-endian.
pub(crate) const LOCATED_LEN: usize = 24;

/// One descriptor of the exporter: its number there and its file's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Located {
    pub(crate) fd: u32,
    pub(crate) dev: u64,
    pub(crate) ino: u64,
}

/// The identity of the file of `fd`: `(st_dev, st_ino)`.
pub(crate) fn identity(fd: BorrowedFd<'_>) -> Option<(u64, u64)> {
    os::fstat(fd).ok().map(|st| (st.st_dev, st.st_ino))
}

/// The locations of `fds` (descriptors of this process); `None` when one
/// of them cannot be `fstat`ed.
pub(crate) fn locate(fds: &[OwnedFd]) -> Option<Vec<Located>> {
    fds.iter()
        .map(|fd| {
            let (dev, ino) = identity(fd.as_fd())?;
            Some(Located {
                fd: fd.as_raw_fd() as u32,
                dev,
                ino,
            })
        })
        .collect()
}

/// Append the wire form of `located` to `out`.
pub(crate) fn encode_located(out: &mut Vec<u8>, located: &[Located]) {
    for l in located {
        out.extend_from_slice(&l.fd.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&l.dev.to_le_bytes());
        out.extend_from_slice(&l.ino.to_le_bytes());
    }
}

/// The locations in `bytes`, which must hold exactly whole ones with zero
/// padding; `None` otherwise.
pub(crate) fn parse_located(bytes: &[u8]) -> Option<Vec<Located>> {
    if bytes.len() % LOCATED_LEN != 0 {
        return None;
    }
    bytes
        .chunks_exact(LOCATED_LEN)
        .map(|c| {
            if c[4..8] != [0; 4] {
                return None;
            }
            let word = |at: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&c[at..at + 8]);
                u64::from_le_bytes(b)
            };
            Some(Located {
                fd: u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                dev: word(8),
                ino: word(16),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_round_trip_and_garbage() {
        let fds = vec![
            os::memfd("hal-located-a", 4096, None).unwrap(),
            os::memfd("hal-located-b", 4096, None).unwrap(),
        ];
        let located = locate(&fds).unwrap();
        assert_eq!(located[0].fd, fds[0].as_raw_fd() as u32);
        assert_ne!(located[0].ino, located[1].ino, "two files, two identities");
        let mut bytes = Vec::new();
        encode_located(&mut bytes, &located);
        assert_eq!(bytes.len(), 2 * LOCATED_LEN);
        assert_eq!(parse_located(&bytes), Some(located));
        assert_eq!(
            parse_located(&bytes[..LOCATED_LEN + 1]),
            None,
            "a partial one"
        );
        bytes[5] = 1;
        assert_eq!(parse_located(&bytes), None, "padding that is not zero");
        assert_eq!(parse_located(&[]), Some(Vec::new()));
    }
}
