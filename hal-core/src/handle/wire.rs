//! The handle wire format: one versioned binary encoding for every kind of
//! handle of every backend, and a text form of it that is safe in files,
//! environment variables and command lines.
//!
//! # Binary form (version 2)
//!
//! Integers are little-endian. Fields follow each other with no padding, in
//! this order:
//!
//! | offset | size | field | meaning |
//! | ---: | ---: | --- | --- |
//! | 0 | 4 | magic | [`MAGIC`], the bytes `89 48 41 4C` (`\x89HAL`) |
//! | 4 | 1 | version | [`VERSION`] (2); version 1 is still read (see *Version 1* below) |
//! | 5 | 1 | kind | [`HandleKind`] tag: 1 memory, 2 event, 3 notify, 4 physical, 5 growable |
//! | 6 | 2 | backend | [`BackendId`] wire id (see *Backend ids* below) |
//! | 8 | 4 | device | the exporter's device ordinal |
//! | 12 | 16 | device uuid | the exporter's device UUID |
//! | 28 | 1 | location tag | 0 device, 1 host, 2 managed ([`Location`]) |
//! | 29 | 4 | location ordinal | device ordinal for tag 0; must be 0 for the others |
//! | 33 | 8 | size | bytes of the exported range |
//! | 41 | 8 | offset | offset of the range in the exporter's allocation; `offset + size` must not overflow |
//! | 49 | 8 | address | the exporter's mapping address (meaningful with [`HandleFlags::HAS_ADDRESS`]) |
//! | 57 | 4 | creator pid | pid of the exporting process, in its own pid namespace |
//! | 61 | 8 | creator start | start time of that process, in clock ticks since boot |
//! | 69 | 16 | object id | unique id of the exported object |
//! | 85 | 4 | flags | [`HandleFlags`]; bits outside [`HandleFlags::KNOWN`] are refused, and [`HandleFlags::SAME_USER`] (bit 5, `0x20`) with `ANY_IMPORTER`, a pid or pid kind 1 |
//! | 89 | 8 | creator pid ns | *version 2 only*: the exporting process's pid namespace, the inode of its `/proc/self/ns/pid`; 0 when unknown |
//! | 97 | 1 | pid kind | *version 2 only*: what the allowed pids are ([`PidKind`]): 0 OS pids in the creator's pid namespace, 1 the vendor's own process ids |
//! | 98 | 1 | pid count | `n`, at most [`MAX_PIDS`] (64) |
//! | 99 | 4·n | allowed pids | `n` ids of the kind the pid kind says, `u32` each |
//! | … | 1 | fd tag | 0 none, 1 attached, 2 broker ([`FdSource`]) |
//! | … | 1 | fd count | tags 1 and 2 only: how many descriptors, at least 1 |
//! | … | 1 | name length | tag 2 only: `m`, 1 to [`MAX_SOCKET_NAME`] (107) |
//! | … | m | socket name | tag 2 only: abstract socket name, printable ASCII (`0x20..=0x7E`) |
//! | … | 2 | payload length | `p`, at most [`MAX_PAYLOAD`] (256) |
//! | … | p | payload | backend-specific bytes |
//! | … | 4 | checksum | CRC-32 (IEEE, as zlib computes it) of every byte before it |
//!
//! A version 2 encoding is [`MIN_ENCODED_LEN`] (106) to [`MAX_ENCODED_LEN`]
//! (727) bytes long.
//!
//! ## What the identity fields decide
//!
//! - *Creator pid*, *creator start* and *creator pid ns* together name one
//!   process: [`Handle::is_own`] is true only in it. A pid and start time
//!   alone do not: two pid namespaces may each have had a process with that
//!   pid start in the same clock tick.
//! - *Creator pid ns* tells whether the pids of the handle mean the same
//!   process here as they did to the exporter
//!   ([`Handle::same_pid_namespace`]): the creator pid, and the allowed pids
//!   when the pid kind is 0. With 0 (unknown) it cannot be told.
//! - *Pid kind* says who checks the allow-list and against what: 0, the
//!   exporter's descriptor broker against the importer's `SO_PEERCRED` pid,
//!   as the exporter's namespace numbers it; 1, the vendor runtime, against
//!   its own process ids (Ascend's bare tgid, which is the host pid even
//!   inside a container).
//! - *Flags* `SAME_USER` ([`HandleFlags::SAME_USER`], bit 5) replaces the
//!   allow-list by a class: any process whose `SO_PEERCRED` uid is the
//!   exporter's effective uid, checked by the exporter's broker; there is
//!   no bound on how many. It comes with an empty allow-list of pid kind 0
//!   and without `ANY_IMPORTER`, and a reader that predates it refuses it
//!   as an unknown flag bit (it never reads it as "anyone"). An importer learns which id to send its exporter
//!   from [`Device::process_id`](crate::Device::process_id).
//!
//! ## Version 1
//!
//! Version 1 is the layout above without the two rows marked *version 2
//! only*: the pid count follows the flags at offset 89, and an encoding is
//! [`MIN_ENCODED_LEN_V1`] (97) to [`MAX_ENCODED_LEN_V1`] (718) bytes long.
//! Every other field has the same offset, meaning and bounds. A version 1
//! handle decodes with [`PidKind::Os`] (the only kind version 1 had) and
//! `creator_pid_ns` 0 (unknown).
//!
//! ## Canonical encoding
//!
//! - Version 2 bytes that decode re-encode to exactly themselves: every
//!   version 2 byte string the decoder accepts is what [`Handle::to_bytes`]
//!   writes for the handle it decodes to.
//! - Version 1 bytes decode to the handle whose version 2 encoding has the
//!   new fields at their defaults: [`Handle::to_bytes`] of it is the input
//!   with the version byte set to 2, the nine bytes `00 ×8` (creator pid ns
//!   0) and `00` (pid kind OS) inserted at offset 89, and the checksum
//!   recomputed. Two different accepted version 1 inputs decode to
//!   different handles.
//! - This build writes version 2 only.
//!
//! # Text form
//!
//! [`TEXT_PREFIX`] (`hal1.`) followed by the binary form in base64 with the
//! URL-safe alphabet (`A-Z a-z 0-9 - _`) and no padding, at most
//! [`MAX_TEXT_LEN`] characters in all. It contains no character a shell,
//! an environment variable or a file name treats specially. The decoder
//! ignores ASCII whitespace around it (the newline of a file), and positions
//! in its errors count characters of the text as given.
//!
//! # How the decoder checks
//!
//! [`Handle::from_bytes`] is total: every byte string either decodes or
//! returns a [`HandleError`] that names the problem. It never panics, never
//! reads past its input, and allocates at most the handle's own bounded
//! fields; [`Handle::from_text`] refuses a text longer than [`MAX_TEXT_LEN`]
//! before decoding any base64. The checks run in this order, and the first
//! that fails gives the error:
//!
//! 1. magic ([`HandleError::BadMagic`]; a short input that matches the start
//!    of the magic is [`HandleError::Truncated`]), then version
//!    ([`HandleError::UnsupportedVersion`]);
//! 2. structure: every field is present ([`HandleError::Truncated`], naming
//!    the field), counts and lengths are within their bounds
//!    ([`HandleError::OverBound`]), the fd tag is known (it decides which
//!    fields follow; [`HandleError::Malformed`]), and nothing follows the
//!    checksum ([`HandleError::TrailingBytes`]);
//! 3. the checksum ([`HandleError::BadChecksum`]);
//! 4. the values: kind ([`HandleError::UnknownKind`]), backend
//!    ([`HandleError::UnknownBackend`]), location, flags, pid kind,
//!    descriptor count and socket name ([`HandleError::Malformed`]),
//!    `offset + size` ([`HandleError::LengthOverflow`]).
//!
//! The checksum comes after the structure because the structure is what
//! locates it, and before the values so that random damage reads as a bad
//! checksum, while a well-formed handle with, say, an unknown kind (written
//! by a newer build) says exactly that.
//!
//! # Compatibility promise
//!
//! - Any change to the layout or meaning of an existing field, and any change
//!   of a bound, takes a new version number. Writers write the newest
//!   version they know; readers refuse versions newer than they know with
//!   [`HandleError::UnsupportedVersion`] and keep reading every older
//!   version that was ever released.
//! - New kinds, backend ids, flag bits, location tags, fd tags and pid
//!   kinds may be assigned within a version. Older readers refuse them with their
//!   specific error; they never misread them.
//! - Tags and ids are never reused or renumbered, even after their meaning
//!   is retired.
//! - The text prefix names the text scheme, not the binary version: `hal1.`
//!   stays as long as the text is base64 of the binary form, and a text
//!   handle of either version starts with it.
//! - Versions so far: 1 (the first release), 2 (adds the creator's pid
//!   namespace and the pid kind). A build that reads only version 1 refuses
//!   what this build writes with [`HandleError::UnsupportedVersion`].
//!
//! # Backend ids
//!
//! | range | use |
//! | --- | --- |
//! | `0x0000` | never assigned |
//! | `0x0001..=0x00FF` | in-tree vendor backends: `0x0001` cpu-shm, `0x0002` cuda, `0x0003` cuda-uvm, `0x0004` ascend |
//! | `0x0100..=0x01FF` | the simulator: `0x0100` mock-cuda, `0x0101` mock-ascend |
//! | `0x0200..=0x7FFF` | reserved for future in-tree backends |
//! | `0x8000..=0xFFFF` | out-of-tree backends ([`BackendId::External`]): `0x8000..=0xBFFF` claimed in docs/adding-a-backend.md, `0xC000..=0xFFFF` private |
//!
//! # Example
//!
//! ```
//! use hal_core::{BackendId, FdSource, Handle, HandleFlags, HandleKind, Location, PidKind};
//!
//! let handle = Handle {
//!     kind: HandleKind::Memory,
//!     backend: BackendId::CpuShm,
//!     device: 0,
//!     device_uuid: [0; 16],
//!     location: Location::Host,
//!     size: 4096,
//!     offset: 0,
//!     address: 0,
//!     creator_pid: 4242,
//!     creator_start: 1234,
//!     creator_pid_ns: 4026531836,
//!     object_id: [7; 16],
//!     flags: HandleFlags::ANY_IMPORTER,
//!     pid_kind: PidKind::Os,
//!     allowed_pids: Vec::new(),
//!     fds: FdSource::Broker { count: 2, name: "hal-broker-4242".into() },
//!     payload: Vec::new(),
//! };
//! handle.validate()?;
//! let text = handle.to_text();
//! assert!(text.starts_with("hal1."));
//! assert_eq!(Handle::from_text(&text)?, handle);
//! let bytes = handle.to_bytes();
//! assert_eq!(bytes[4], 2);
//! assert_eq!(Handle::from_bytes(&bytes)?, handle);
//!
//! // The same handle as version 1 wrote it: no namespace, no pid kind.
//! let mut v1 = [&bytes[..89], &bytes[98..bytes.len() - 4]].concat();
//! v1[4] = 1;
//! v1.extend_from_slice(&crc32fast::hash(&v1).to_le_bytes());
//! let old = Handle::from_bytes(&v1)?;
//! assert_eq!((old.pid_kind, old.creator_pid_ns), (PidKind::Os, 0));
//! assert_eq!(old, Handle { creator_pid_ns: 0, ..handle });
//! # Ok::<(), hal_core::HandleError>(())
//! ```

// Names the documentation above links to.
#[cfg(doc)]
use super::{FdSource, Handle, HandleFlags, HandleKind, PidKind};
#[cfg(doc)]
use crate::error::HandleError;
#[cfg(doc)]
use crate::types::{BackendId, Location};

mod check;
mod cursor;
mod decode;
mod encode;
mod layout;

pub(crate) use cursor::Cursor;
pub(crate) use decode::decode_text;
pub(crate) use layout::base64_len;
pub use layout::{
    FIXED_LEN, FIXED_LEN_V1, MAGIC, MAX_ENCODED_LEN, MAX_ENCODED_LEN_V1, MAX_PAYLOAD, MAX_PIDS,
    MAX_SOCKET_NAME, MAX_TEXT_LEN, MIN_ENCODED_LEN, MIN_ENCODED_LEN_V1, OLDEST_VERSION,
    TENSOR_TEXT_PREFIX, TEXT_PREFIX, VERSION,
};

#[cfg(test)]
mod tests {
    use super::layout::*;
    use super::*;
    use crate::error::HandleError;

    #[test]
    fn constants_agree_with_the_layout() {
        assert_eq!(
            FIXED_LEN_V1,
            4 + 1 + 1 + 2 + 4 + 16 + 1 + 4 + 8 + 8 + 8 + 4 + 8 + 16 + 4
        );
        assert_eq!(FIXED_LEN, FIXED_LEN_V1 + 8 + 1);
        assert_eq!(MIN_ENCODED_LEN, 106);
        assert_eq!(MAX_ENCODED_LEN, 727);
        assert_eq!(MIN_ENCODED_LEN_V1, 97);
        assert_eq!(MAX_ENCODED_LEN_V1, 718);
        assert_eq!(MAX_TEXT_LEN, TEXT_PREFIX.len() + 970);
    }

    #[test]
    fn cursor_reports_the_missing_bytes() {
        let mut c = Cursor {
            buf: &[1, 2, 3],
            pos: 0,
        };
        assert_eq!(c.u16("a"), Ok(0x0201));
        assert_eq!(
            c.u32("b"),
            Err(HandleError::Truncated {
                field: "b",
                offset: 2,
                needed: 3
            })
        );
        assert_eq!(c.remaining(), 1);
    }
}
