//! The messages of a handle stream: their header, its checks, and the
//! limits of a message.
//!
//! # Framing
//!
//! Each message is a 12-byte header and a body:
//!
//! | offset | size | field |
//! | ---: | ---: | --- |
//! | 0 | 4 | magic `HALS` |
//! | 4 | 1 | version (1) |
//! | 5 | 1 | kind: 1 handle, 2 hello |
//! | 6 | 1 | descriptors attached, at most [`MAX_FDS`] |
//! | 7 | 1 | zero |
//! | 8 | 4 | body length (little-endian), at most [`MAX_FRAME`] |
//! | 12 | n | body: the handle's binary form (kind 1); empty (kind 2) |
//!
//! The descriptors ride on the message's first bytes. A receiver treats
//! descriptors dropped by the kernel (`MSG_CTRUNC`: the open-file limit, or
//! more than [`MAX_FDS`] sent) as an error, never as success, and closes every
//! descriptor of a message it refuses. After an error a stream may be out of
//! step: drop it.

use crate::error::{Error, HandleError, Result};
use crate::exchange::{PeerCred, MAX_FDS};
use crate::kit::os::discard::Untrusted;

/// Longest body of a message (a handle's binary form is under a kilobyte).
pub const MAX_FRAME: usize = 4096;

// Every handle that encodes fits in a frame, so a sender never has to
// refuse one that `Handle::from_bytes` accepts.
const _: () = assert!(crate::handle::wire::MAX_ENCODED_LEN <= MAX_FRAME);

const MAGIC: [u8; 4] = *b"HALS";
const VERSION: u8 = 1;
pub(super) const KIND_HANDLE: u8 = 1;
pub(super) const KIND_HELLO: u8 = 2;
pub(super) const HEADER_LEN: usize = 12;

/// A message received: its kind and body, and the descriptors and
/// credentials that came with it.
pub(super) struct Frame {
    pub(super) kind: u8,
    pub(super) body: Vec<u8>,
    pub(super) fds: Untrusted,
    pub(super) creds: Option<PeerCred>,
}

/// Check a received header; returns the message's kind, the number of
/// descriptors it announces and the length of its body.
pub(super) fn parse_header(header: &[u8; HEADER_LEN]) -> Result<(u8, usize, usize)> {
    if header[..4] != MAGIC {
        return Err(malformed("magic", "not a hal handle stream"));
    }
    if header[4] != VERSION {
        return Err(malformed(
            "version",
            format!(
                "message version {} (this build speaks {VERSION})",
                header[4]
            ),
        ));
    }
    let kind = header[5];
    if kind != KIND_HANDLE && kind != KIND_HELLO {
        return Err(malformed("kind", format!("unknown message kind {kind}")));
    }
    let announced = header[6] as usize;
    if header[7] != 0 {
        return Err(malformed("reserved", "a reserved byte is set"));
    }
    let len = u32::from_le_bytes([header[8], header[9], header[10], header[11]]) as usize;
    if len > MAX_FRAME {
        return Err(HandleError::OverBound {
            field: "frame",
            len,
            max: MAX_FRAME,
        }
        .into());
    }
    if announced > MAX_FDS {
        return Err(HandleError::OverBound {
            field: "descriptors",
            len: announced,
            max: MAX_FDS,
        }
        .into());
    }
    if kind == KIND_HELLO && (len != 0 || announced != 0) {
        return Err(malformed("hello", "a hello carries nothing"));
    }
    Ok((kind, announced, len))
}

pub(super) fn push_header(out: &mut Vec<u8>, kind: u8, fds: u8, len: u32) {
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(kind);
    out.push(fds);
    out.push(0);
    out.extend_from_slice(&len.to_le_bytes());
}

fn malformed(field: &'static str, detail: impl Into<String>) -> Error {
    HandleError::Malformed {
        field,
        detail: format!("handle stream {}", detail.into()),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: u8, fds: u8, len: u32) -> [u8; HEADER_LEN] {
        let mut out = Vec::new();
        push_header(&mut out, kind, fds, len);
        out.try_into().expect("a header is 12 bytes")
    }

    /// The field a refusal names, or "bound" for a length over its bound.
    fn refused(h: &[u8; HEADER_LEN]) -> String {
        match parse_header(h) {
            Ok(parsed) => panic!("{h:?} was accepted as {parsed:?}"),
            Err(Error::InvalidHandle(HandleError::Malformed { field, .. })) => field.to_owned(),
            Err(Error::InvalidHandle(HandleError::OverBound { field, len, max })) => {
                format!("{field} {len} > {max}")
            }
            Err(other) => panic!("{h:?}: an untyped refusal {other:?}"),
        }
    }

    #[test]
    fn a_header_reads_back_as_it_was_written() {
        let h = header(KIND_HANDLE, 3, 700);
        assert_eq!(&h[..4], b"HALS");
        assert_eq!(h[4], VERSION);
        assert_eq!(h[7], 0, "the reserved byte");
        assert_eq!(&h[8..], &700u32.to_le_bytes(), "little-endian length");
        assert_eq!(parse_header(&h).unwrap(), (KIND_HANDLE, 3, 700));
        assert_eq!(
            parse_header(&header(KIND_HANDLE, MAX_FDS as u8, MAX_FRAME as u32)).unwrap(),
            (KIND_HANDLE, MAX_FDS, MAX_FRAME),
            "both bounds are inclusive"
        );
        assert_eq!(
            parse_header(&header(KIND_HANDLE, 0, 0)).unwrap(),
            (KIND_HANDLE, 0, 0)
        );
        assert_eq!(
            parse_header(&header(KIND_HELLO, 0, 0)).unwrap(),
            (KIND_HELLO, 0, 0)
        );
    }

    #[test]
    fn each_bad_field_is_refused_by_name() {
        let good = header(KIND_HANDLE, 1, 10);
        let with = |at: usize, byte: u8| {
            let mut h = good;
            h[at] = byte;
            h
        };
        assert_eq!(refused(&with(0, b'X')), "magic");
        assert_eq!(refused(&with(3, b's')), "magic");
        assert_eq!(refused(&with(4, VERSION + 1)), "version");
        assert_eq!(refused(&with(4, 0)), "version");
        assert_eq!(refused(&with(5, 0)), "kind");
        assert_eq!(refused(&with(5, 3)), "kind");
        assert_eq!(refused(&with(7, 1)), "reserved");
        assert_eq!(
            refused(&header(KIND_HANDLE, 0, MAX_FRAME as u32 + 1)),
            format!("frame {} > {MAX_FRAME}", MAX_FRAME + 1)
        );
        assert_eq!(
            refused(&header(KIND_HANDLE, 0, u32::MAX)),
            format!("frame {} > {MAX_FRAME}", u32::MAX)
        );
        assert_eq!(
            refused(&header(KIND_HANDLE, MAX_FDS as u8 + 1, 0)),
            format!("descriptors {} > {MAX_FDS}", MAX_FDS + 1)
        );
        // A hello carries neither a body nor descriptors.
        assert_eq!(refused(&header(KIND_HELLO, 0, 1)), "hello");
        assert_eq!(refused(&header(KIND_HELLO, 1, 0)), "hello");
    }
}
