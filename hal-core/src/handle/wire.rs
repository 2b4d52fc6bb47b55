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
//! | `0x8000..=0xFFFF` | out-of-tree backends ([`BackendId::External`]), chosen by their integrators |
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

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

use super::{FdSource, Handle, HandleFlags, HandleKind, PidKind};
use crate::error::HandleError;
use crate::types::{BackendId, Location};

/// The first four bytes of every binary handle.
pub const MAGIC: [u8; 4] = *b"\x89HAL";
/// The wire version this build writes, and the newest it reads.
pub const VERSION: u8 = 2;
/// The oldest wire version this build reads.
pub const OLDEST_VERSION: u8 = 1;
/// The start of every text handle.
pub const TEXT_PREFIX: &str = "hal1.";
/// The start of every tensor handle's text
/// ([`TensorHandle`](crate::dlpack::TensorHandle)): kept beside
/// [`TEXT_PREFIX`] so that each decoder tells the other's text apart.
pub const TENSOR_TEXT_PREFIX: &str = "hal1t.";
/// Most pids in an allow-list.
pub const MAX_PIDS: usize = 64;
/// Most bytes of vendor payload.
pub const MAX_PAYLOAD: usize = 256;
/// Longest broker socket name: a Unix socket path holds 108 bytes, and an
/// abstract name spends the first on its leading NUL.
pub const MAX_SOCKET_NAME: usize = 107;
/// Length of the fixed fields of version 2, magic to pid kind.
pub const FIXED_LEN: usize = FIXED_LEN_V1 + 8 + 1;
/// Length of the shortest version 2 encoding: no pids, no descriptors, no
/// payload.
pub const MIN_ENCODED_LEN: usize = FIXED_LEN + VARIABLE_MIN;
/// Length of the longest version 2 encoding: every variable field at its
/// bound. No encoding of any version this build reads is longer.
pub const MAX_ENCODED_LEN: usize = FIXED_LEN + VARIABLE_MAX;
/// Length of the fixed fields of version 1, magic to flags.
pub const FIXED_LEN_V1: usize = 89;
/// Length of the shortest version 1 encoding. No encoding of any version
/// this build reads is shorter.
pub const MIN_ENCODED_LEN_V1: usize = FIXED_LEN_V1 + VARIABLE_MIN;
/// Length of the longest version 1 encoding.
pub const MAX_ENCODED_LEN_V1: usize = FIXED_LEN_V1 + VARIABLE_MAX;
/// Length of the longest text form (of the longest encoding, version 2).
pub const MAX_TEXT_LEN: usize = TEXT_PREFIX.len() + base64_len(MAX_ENCODED_LEN);

/// Bytes after the fixed fields, at the least: pid count, fd tag, payload
/// length, checksum.
const VARIABLE_MIN: usize = 1 + 1 + 2 + 4;
/// Bytes after the fixed fields, at the most.
const VARIABLE_MAX: usize = 1 + 4 * MAX_PIDS + 3 + MAX_SOCKET_NAME + 2 + MAX_PAYLOAD + 4;

/// Fd tag: no descriptors.
const FD_NONE: u8 = 0;
/// Fd tag: descriptors travel beside the handle.
const FD_ATTACHED: u8 = 1;
/// Fd tag: descriptors are served by a broker socket.
const FD_BROKER: u8 = 2;

/// Characters of unpadded base64 for `n` bytes.
pub(crate) const fn base64_len(n: usize) -> usize {
    (n * 4).div_ceil(3)
}

impl Handle {
    /// Check that the handle can be encoded: allow-list, payload and socket
    /// name within their bounds, a printable ASCII socket name, at least one
    /// descriptor where descriptors are announced, only known flags,
    /// `offset + size` without overflow, and an external backend id in
    /// `0x8000..=0xFFFF`.
    pub fn validate(&self) -> Result<(), HandleError> {
        let wire = self.backend.to_wire();
        match BackendId::from_wire(wire) {
            None => return Err(HandleError::UnknownBackend(wire)),
            Some(b) if b != self.backend => {
                return Err(HandleError::Malformed {
                    field: "backend",
                    detail: format!(
                        "external backend id {wire:#06x} is outside 0x8000..=0xffff \
                         (it is the id of `{}`)",
                        b.name()
                    ),
                })
            }
            Some(_) => {}
        }
        check_flags(self.flags.0)?;
        check_importer_class(self.flags.0, self.allowed_pids.len(), self.pid_kind)?;
        check_range(self.offset, self.size)?;
        if self.allowed_pids.len() > MAX_PIDS {
            return Err(HandleError::OverBound {
                field: "allowed_pids",
                len: self.allowed_pids.len(),
                max: MAX_PIDS,
            });
        }
        if self.payload.len() > MAX_PAYLOAD {
            return Err(HandleError::OverBound {
                field: "payload",
                len: self.payload.len(),
                max: MAX_PAYLOAD,
            });
        }
        match &self.fds {
            FdSource::None => Ok(()),
            FdSource::Attached { count } => check_fd_count(*count),
            FdSource::Broker { count, name } => {
                check_fd_count(*count)?;
                if name.len() > MAX_SOCKET_NAME {
                    return Err(HandleError::OverBound {
                        field: "socket_name",
                        len: name.len(),
                        max: MAX_SOCKET_NAME,
                    });
                }
                check_socket_name(name.as_bytes())
            }
        }
    }

    /// The binary form, after [`Handle::validate`].
    pub fn try_to_bytes(&self) -> Result<Vec<u8>, HandleError> {
        self.validate()?;
        Ok(self.to_bytes())
    }

    /// The text form, after [`Handle::validate`].
    pub fn try_to_text(&self) -> Result<String, HandleError> {
        self.validate()?;
        Ok(self.to_text())
    }

    /// The binary form, version [`VERSION`] (see the
    /// [module documentation](self)).
    ///
    /// Encoding cannot fail. A handle that [`Handle::validate`] refuses
    /// (a field over its bound, an unknown flag, ...) still encodes, but to
    /// bytes that [`Handle::from_bytes`] refuses: an over-bound field is
    /// written one past its bound, and the checksum of an invalid handle is
    /// inverted. Use [`Handle::try_to_bytes`] to learn the problem at once.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAX_ENCODED_LEN + 8);
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(self.kind.to_wire());
        out.extend_from_slice(&self.backend.to_wire().to_le_bytes());
        out.extend_from_slice(&self.device.to_le_bytes());
        out.extend_from_slice(&self.device_uuid);
        let (loc_tag, loc_ordinal) = self.location.to_wire();
        out.push(loc_tag);
        out.extend_from_slice(&loc_ordinal.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.address.to_le_bytes());
        out.extend_from_slice(&self.creator_pid.to_le_bytes());
        out.extend_from_slice(&self.creator_start.to_le_bytes());
        out.extend_from_slice(&self.object_id);
        out.extend_from_slice(&self.flags.0.to_le_bytes());
        out.extend_from_slice(&self.creator_pid_ns.to_le_bytes());
        out.push(self.pid_kind.to_wire());

        let pids = clamp(&self.allowed_pids, MAX_PIDS + 1);
        out.push(pids.len() as u8);
        for pid in pids {
            out.extend_from_slice(&pid.to_le_bytes());
        }

        match &self.fds {
            FdSource::None => out.push(FD_NONE),
            FdSource::Attached { count } => {
                out.push(FD_ATTACHED);
                out.push(*count);
            }
            FdSource::Broker { count, name } => {
                out.push(FD_BROKER);
                out.push(*count);
                let name = clamp(name.as_bytes(), MAX_SOCKET_NAME + 1);
                out.push(name.len() as u8);
                out.extend_from_slice(name);
            }
        }

        let payload = clamp(&self.payload, MAX_PAYLOAD + 1);
        out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
        out.extend_from_slice(payload);

        let mut crc = crc32fast::hash(&out);
        if self.validate().is_err() {
            crc = !crc;
        }
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// The text form: [`TEXT_PREFIX`] and the binary form in unpadded
    /// URL-safe base64. Like [`Handle::to_bytes`], an invalid handle gives a
    /// text the decoder refuses.
    pub fn to_text(&self) -> String {
        let bytes = self.to_bytes();
        let mut text = String::with_capacity(TEXT_PREFIX.len() + base64_len(bytes.len()));
        text.push_str(TEXT_PREFIX);
        URL_SAFE_NO_PAD.encode_string(&bytes, &mut text);
        text
    }

    /// Decode the binary form, of version [`OLDEST_VERSION`] to
    /// [`VERSION`]. Total: see the [module documentation](self) for the
    /// order of the checks and the error each gives, and for what a version
    /// 1 input decodes to.
    pub fn from_bytes(bytes: &[u8]) -> Result<Handle, HandleError> {
        let raw = parse(bytes)?;
        raw.into_handle()
    }

    /// Decode the text form, ignoring ASCII whitespace around it.
    pub fn from_text(text: &str) -> Result<Handle, HandleError> {
        if text.trim_start().starts_with(TENSOR_TEXT_PREFIX) {
            return Err(HandleError::WrongKind {
                expected: "memory, event or notify",
                found: "tensor (`hal1t.`; import it as a tensor)",
            });
        }
        let bytes = decode_text(text, TEXT_PREFIX, MAX_TEXT_LEN)?;
        Handle::from_bytes(&bytes)
    }
}

/// The bytes of a text form: `prefix` and unpadded URL-safe base64, at most
/// `max_len` characters without the ASCII whitespace around it, which is
/// ignored. Positions in its errors count characters of `text` as given.
pub(crate) fn decode_text(
    text: &str,
    prefix: &'static str,
    max_len: usize,
) -> Result<Vec<u8>, HandleError> {
    let body = text.trim_start_matches(|c: char| c.is_ascii_whitespace());
    let lead = text.len() - body.len();
    let body = body.trim_end_matches(|c: char| c.is_ascii_whitespace());
    let Some(b64) = body.strip_prefix(prefix) else {
        return Err(HandleError::BadPrefix { expected: prefix });
    };
    if body.len() > max_len {
        return Err(HandleError::OverBound {
            field: "text",
            len: body.len(),
            max: max_len,
        });
    }
    let start = lead + prefix.len();
    if let Some((i, ch)) = b64
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
    {
        return Err(HandleError::InvalidText {
            position: start + i,
            ch,
        });
    }
    URL_SAFE_NO_PAD.decode(b64).map_err(|e| match e {
        base64::DecodeError::InvalidByte(i, b) | base64::DecodeError::InvalidLastSymbol(i, b) => {
            HandleError::InvalidText {
                position: start + i,
                ch: char::from(b),
            }
        }
        // Four characters carry three bytes; a body of 4k+1 characters
        // lost at least one character at its end.
        base64::DecodeError::InvalidLength(_) => HandleError::Truncated {
            field: "text",
            offset: start + b64.len(),
            needed: 1,
        },
        base64::DecodeError::InvalidPadding => HandleError::Malformed {
            field: "text",
            detail: "padding is not allowed".into(),
        },
    })
}

/// At most `max` leading items of `items`.
fn clamp<T>(items: &[T], max: usize) -> &[T] {
    items.get(..max).unwrap_or(items)
}

fn check_flags(bits: u32) -> Result<(), HandleError> {
    let unknown = bits & !HandleFlags::KNOWN.0;
    if unknown != 0 {
        return Err(HandleError::Malformed {
            field: "flags",
            detail: format!(
                "unknown flag bits {unknown:#x} (this build knows {:#x})",
                HandleFlags::KNOWN.0
            ),
        });
    }
    Ok(())
}

/// `SAME_USER` is a class of importers of its own: never with
/// `ANY_IMPORTER`, an allow-list, or vendor pids.
fn check_importer_class(bits: u32, pids: usize, pid_kind: PidKind) -> Result<(), HandleError> {
    let flags = HandleFlags(bits);
    if !flags.contains(HandleFlags::SAME_USER) {
        return Ok(());
    }
    let with = if flags.contains(HandleFlags::ANY_IMPORTER) {
        "ANY_IMPORTER"
    } else if pids > 0 {
        "an allow-list of pids"
    } else if pid_kind != PidKind::Os {
        "vendor pids"
    } else {
        return Ok(());
    };
    Err(HandleError::Malformed {
        field: "flags",
        detail: format!("SAME_USER together with {with}"),
    })
}

fn check_range(offset: u64, size: u64) -> Result<(), HandleError> {
    match offset.checked_add(size) {
        Some(_) => Ok(()),
        None => Err(HandleError::LengthOverflow {
            field: "offset + size",
        }),
    }
}

fn check_fd_count(count: u8) -> Result<(), HandleError> {
    if count == 0 {
        return Err(HandleError::Malformed {
            field: "fd_source",
            detail: "a descriptor count of 0 (a handle without descriptors uses FdSource::None)"
                .into(),
        });
    }
    Ok(())
}

fn check_socket_name(name: &[u8]) -> Result<(), HandleError> {
    if name.is_empty() {
        return Err(HandleError::Malformed {
            field: "socket_name",
            detail: "empty broker socket name".into(),
        });
    }
    if let Some(pos) = name.iter().position(|b| !(0x20..=0x7e).contains(b)) {
        let byte = name.get(pos).copied().unwrap_or_default();
        return Err(HandleError::Malformed {
            field: "socket_name",
            detail: format!("byte {byte:#04x} at {pos} is not printable ASCII"),
        });
    }
    Ok(())
}

/// A bounds-checked reader over the input: every read either returns the
/// bytes asked for or a [`HandleError::Truncated`] naming the field.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A reader at the start of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    pub(crate) fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], HandleError> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        match rest.get(..n) {
            Some(bytes) => {
                self.pos += n;
                Ok(bytes)
            }
            None => Err(HandleError::Truncated {
                field,
                offset: self.pos,
                needed: n - rest.len(),
            }),
        }
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], HandleError> {
        let offset = self.pos;
        let bytes = self.take(N, field)?;
        bytes.try_into().map_err(|_| HandleError::Truncated {
            field,
            offset,
            needed: N,
        })
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, HandleError> {
        self.array::<1>(field).map(|[b]| b)
    }

    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, HandleError> {
        self.array(field).map(u16::from_le_bytes)
    }

    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, HandleError> {
        self.array(field).map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, HandleError> {
        self.array(field).map(u64::from_le_bytes)
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }
}

/// The fields as read, before their values are checked.
struct Raw<'a> {
    kind: u8,
    backend: u16,
    device: u32,
    device_uuid: [u8; 16],
    location_tag: u8,
    location_ordinal: u32,
    size: u64,
    offset: u64,
    address: u64,
    creator_pid: u32,
    creator_start: u64,
    object_id: [u8; 16],
    flags: u32,
    creator_pid_ns: u64,
    pid_kind: u8,
    pids: &'a [u8],
    fd_tag: u8,
    fd_count: u8,
    socket_name: &'a [u8],
    payload: &'a [u8],
}

/// Steps 1 to 3 of the decoder: magic, version, structure, checksum.
fn parse(bytes: &[u8]) -> Result<Raw<'_>, HandleError> {
    let head = clamp(bytes, MAGIC.len());
    if MAGIC.get(..head.len()) != Some(head) {
        return Err(HandleError::BadMagic);
    }
    let mut c = Cursor { buf: bytes, pos: 0 };
    c.take(MAGIC.len(), "magic")?;
    let version = c.u8("version")?;
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(HandleError::UnsupportedVersion {
            found: version,
            supported: VERSION,
        });
    }
    let kind = c.u8("kind")?;
    let backend = c.u16("backend")?;
    let device = c.u32("device")?;
    let device_uuid = c.array("device_uuid")?;
    let location_tag = c.u8("location")?;
    let location_ordinal = c.u32("location_ordinal")?;
    let size = c.u64("size")?;
    let offset = c.u64("offset")?;
    let address = c.u64("address")?;
    let creator_pid = c.u32("creator_pid")?;
    let creator_start = c.u64("creator_start")?;
    let object_id = c.array("object_id")?;
    let flags = c.u32("flags")?;
    // Version 1 had neither field: its handles are of unknown namespace
    // and list OS pids.
    let (creator_pid_ns, pid_kind) = if version >= 2 {
        (c.u64("creator_pid_ns")?, c.u8("pid_kind")?)
    } else {
        (0, PidKind::Os.to_wire())
    };

    let pid_count = usize::from(c.u8("pid_count")?);
    if pid_count > MAX_PIDS {
        return Err(HandleError::OverBound {
            field: "allowed_pids",
            len: pid_count,
            max: MAX_PIDS,
        });
    }
    let pids = c.take(pid_count * 4, "allowed_pids")?;

    let fd_tag = c.u8("fd_tag")?;
    let (fd_count, socket_name) = match fd_tag {
        FD_NONE => (0, &[][..]),
        FD_ATTACHED => (c.u8("fd_count")?, &[][..]),
        FD_BROKER => {
            let count = c.u8("fd_count")?;
            let len = usize::from(c.u8("socket_name_len")?);
            if len > MAX_SOCKET_NAME {
                return Err(HandleError::OverBound {
                    field: "socket_name",
                    len,
                    max: MAX_SOCKET_NAME,
                });
            }
            (count, c.take(len, "socket_name")?)
        }
        other => {
            return Err(HandleError::Malformed {
                field: "fd_source",
                detail: format!("unknown fd tag {other} (this build knows 0, 1 and 2)"),
            })
        }
    };

    let payload_len = usize::from(c.u16("payload_len")?);
    if payload_len > MAX_PAYLOAD {
        return Err(HandleError::OverBound {
            field: "payload",
            len: payload_len,
            max: MAX_PAYLOAD,
        });
    }
    let payload = c.take(payload_len, "payload")?;

    let body = clamp(bytes, c.pos);
    let stored = c.u32("checksum")?;
    let trailing = c.remaining();
    if trailing != 0 {
        return Err(HandleError::TrailingBytes(trailing));
    }
    let computed = crc32fast::hash(body);
    if stored != computed {
        return Err(HandleError::BadChecksum { stored, computed });
    }

    Ok(Raw {
        kind,
        backend,
        device,
        device_uuid,
        location_tag,
        location_ordinal,
        size,
        offset,
        address,
        creator_pid,
        creator_start,
        object_id,
        flags,
        creator_pid_ns,
        pid_kind,
        pids,
        fd_tag,
        fd_count,
        socket_name,
        payload,
    })
}

impl Raw<'_> {
    /// Step 4 of the decoder: check the values and build the handle.
    fn into_handle(self) -> Result<Handle, HandleError> {
        let kind = HandleKind::from_wire(self.kind).ok_or(HandleError::UnknownKind(self.kind))?;
        let backend =
            BackendId::from_wire(self.backend).ok_or(HandleError::UnknownBackend(self.backend))?;
        let location =
            Location::from_wire(self.location_tag, self.location_ordinal).ok_or_else(|| {
                HandleError::Malformed {
                    field: "location",
                    detail: format!(
                        "unknown location tag {} (this build knows 0, 1 and 2)",
                        self.location_tag
                    ),
                }
            })?;
        if !matches!(location, Location::Device(_)) && self.location_ordinal != 0 {
            return Err(HandleError::Malformed {
                field: "location",
                detail: format!(
                    "ordinal {} given for host or managed memory, which has none",
                    self.location_ordinal
                ),
            });
        }
        check_range(self.offset, self.size)?;
        check_flags(self.flags)?;
        let pid_kind = PidKind::from_wire(self.pid_kind).ok_or_else(|| HandleError::Malformed {
            field: "pid_kind",
            detail: format!(
                "unknown pid kind {} (this build knows 0 and 1)",
                self.pid_kind
            ),
        })?;
        check_importer_class(self.flags, self.pids.len() / 4, pid_kind)?;
        let allowed_pids = self
            .pids
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        let fds = match self.fd_tag {
            FD_ATTACHED => {
                check_fd_count(self.fd_count)?;
                FdSource::Attached {
                    count: self.fd_count,
                }
            }
            FD_BROKER => {
                check_fd_count(self.fd_count)?;
                check_socket_name(self.socket_name)?;
                let name = String::from_utf8(self.socket_name.to_vec()).map_err(|_| {
                    HandleError::Malformed {
                        field: "socket_name",
                        detail: "not ASCII".into(),
                    }
                })?;
                FdSource::Broker {
                    count: self.fd_count,
                    name,
                }
            }
            _ => FdSource::None,
        };
        Ok(Handle {
            kind,
            backend,
            device: self.device,
            device_uuid: self.device_uuid,
            location,
            size: self.size,
            offset: self.offset,
            address: self.address,
            creator_pid: self.creator_pid,
            creator_start: self.creator_start,
            creator_pid_ns: self.creator_pid_ns,
            object_id: self.object_id,
            flags: HandleFlags(self.flags),
            pid_kind,
            allowed_pids,
            fds,
            payload: self.payload.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
