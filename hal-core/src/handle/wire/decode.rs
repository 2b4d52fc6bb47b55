//! The decoder: a handle from its binary or text form, every field checked.

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, URL_SAFE_NO_PAD};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;

use super::check::{
    check_fd_count, check_flags, check_importer_class, check_range, check_socket_name,
};
use super::cursor::Cursor;
use super::layout::*;
use crate::error::HandleError;
use crate::handle::{FdSource, Handle, HandleFlags, HandleKind, PidKind};
use crate::types::{BackendId, Location};

impl Handle {
    /// Decode the binary form, of version [`OLDEST_VERSION`] to
    /// [`VERSION`]. Total: see the [module documentation](super) for the
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
                found: "tensor",
            });
        }
        decode_text(text, TEXT_PREFIX, MAX_TEXT_LEN, Handle::from_bytes)
    }
}

/// Decode a text form with `parse`, the decoder of its binary form: the
/// bytes of `prefix` and unpadded URL-safe base64, at most `max_len`
/// characters without the ASCII whitespace around it, which is ignored.
/// Positions in its errors count characters of `text` as given.
///
/// A text cut short most often ends inside a byte, its last character
/// holding bits of a byte that was cut off: such a text is read without
/// those bits, and when `parse` finds the bytes truncated it is refused as
/// truncated ([`HandleError::Truncated`]), not for its last character.
pub(crate) fn decode_text<T>(
    text: &str,
    prefix: &'static str,
    max_len: usize,
    parse: impl Fn(&[u8]) -> Result<T, HandleError>,
) -> Result<T, HandleError> {
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
    match URL_SAFE_NO_PAD.decode(b64) {
        Ok(bytes) => parse(&bytes),
        Err(base64::DecodeError::InvalidLastSymbol(i, b)) => {
            let invalid = HandleError::InvalidText {
                position: start + i,
                ch: char::from(b),
            };
            match CUT_SHORT.decode(b64).map(|bytes| parse(&bytes)) {
                Ok(Err(cut @ HandleError::Truncated { .. })) => Err(cut),
                _ => Err(invalid),
            }
        }
        Err(base64::DecodeError::InvalidByte(i, b)) => Err(HandleError::InvalidText {
            position: start + i,
            ch: char::from(b),
        }),
        // Four characters carry three bytes; a body of 4k+1 characters
        // lost at least one character at its end.
        Err(base64::DecodeError::InvalidLength(_)) => Err(HandleError::Truncated {
            field: "text",
            offset: start + b64.len(),
            needed: 1,
        }),
        Err(base64::DecodeError::InvalidPadding) => Err(HandleError::Malformed {
            field: "text",
            detail: "padding is not allowed".into(),
        }),
    }
}

/// The text form's base64, read with the bits of a byte cut off after the
/// last character dropped: how a text that ends inside a byte is read to
/// tell whether it was cut short.
const CUT_SHORT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true),
);

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
