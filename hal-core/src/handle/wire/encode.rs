//! The encoder: a handle's binary and text forms, and the checks made before writing them.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

use super::check::{
    check_fd_count, check_flags, check_importer_class, check_range, check_socket_name,
};
use super::layout::*;
use crate::error::HandleError;
use crate::handle::{FdSource, Handle};
use crate::types::BackendId;

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
    /// [module documentation](super)).
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
}
