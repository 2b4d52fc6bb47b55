//! Envelopes: a handle's text sealed in a small memfd that this process's
//! descriptor broker serves, named by a few bytes that fit in a vendor's
//! fixed-size key.
//!
//! A stand-in vendor library mints the vendor's own handles (CUDA's 64
//! bytes, Ascend's 65-byte printable key) for objects it exported with the
//! simulator. The vendor handle is all the real backend transmits, so
//! another process's stand-in must find the object from those bytes alone:
//! it reads an [`EnvelopeRef`] out of them, fetches the envelope's
//! descriptor from the exporter's broker ([`open`]) and decodes the handle
//! text inside. The envelope is exported to anyone; the object inside keeps
//! its own allow-list, which the broker checks when the object's
//! descriptors are fetched.

use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt as _;

use crate::error::{Error, Result};
use crate::handle::{FdSource, Handle, HandleFlags, HandleKind, PidKind, SharedHandle};
use crate::kit::export::{new_handle, HandleSpec};
use crate::kit::os;
use crate::types::{BackendId, ExportOptions, Importers, Location};
use crate::Exported;

pub mod numbered;

/// The most bytes an envelope holds (a handle's text is far shorter).
pub const MAX_ENVELOPE: u64 = 4096;

/// What names an envelope: the exporter's identity, its broker and the
/// envelope's object id (44 bytes in [`EnvelopeRef::to_bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvelopeRef {
    /// The exporter's pid.
    pub pid: u32,
    /// The exporter's start time, clock ticks since boot.
    pub start: u64,
    /// The exporter's pid namespace (inode of `/proc/self/ns/pid`).
    pub pid_ns: u64,
    /// The broker's name is `hal-<pid>-<these 8 bytes in hex>`.
    pub broker: [u8; 8],
    /// The envelope's object id.
    pub object_id: [u8; 16],
}

impl EnvelopeRef {
    /// Bytes of [`EnvelopeRef::to_bytes`].
    pub const LEN: usize = 4 + 8 + 8 + 8 + 16;

    /// The fields, little-endian, in declaration order.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&self.pid.to_le_bytes());
        b[4..12].copy_from_slice(&self.start.to_le_bytes());
        b[12..20].copy_from_slice(&self.pid_ns.to_le_bytes());
        b[20..28].copy_from_slice(&self.broker);
        b[28..44].copy_from_slice(&self.object_id);
        b
    }

    /// The fields of [`EnvelopeRef::to_bytes`].
    pub fn from_bytes(b: &[u8; Self::LEN]) -> EnvelopeRef {
        let u64_at = |i: usize| {
            let mut v = [0u8; 8];
            v.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(v)
        };
        let mut pid = [0u8; 4];
        pid.copy_from_slice(&b[0..4]);
        let mut broker = [0u8; 8];
        broker.copy_from_slice(&b[20..28]);
        let mut object_id = [0u8; 16];
        object_id.copy_from_slice(&b[28..44]);
        EnvelopeRef {
            pid: u32::from_le_bytes(pid),
            start: u64_at(4),
            pid_ns: u64_at(12),
            broker,
            object_id,
        }
    }

    /// True when this process sealed the envelope.
    pub fn is_own(&self) -> bool {
        let (pid, start) = os::self_identity();
        (self.pid, self.start, self.pid_ns) == (pid, start, os::pid_namespace())
    }

    fn broker_name(&self) -> String {
        format!("hal-{}-{}", self.pid, os::hex(&self.broker))
    }

    /// The envelope's handle as the exporter's broker expects it.
    fn handle(&self, backend: BackendId) -> Handle {
        Handle {
            kind: HandleKind::Memory,
            backend,
            device: 0,
            device_uuid: [0; 16],
            location: Location::Host,
            size: 0,
            offset: 0,
            address: 0,
            creator_pid: self.pid,
            creator_start: self.start,
            creator_pid_ns: self.pid_ns,
            object_id: self.object_id,
            flags: HandleFlags::ANY_IMPORTER,
            pid_kind: PidKind::Os,
            allowed_pids: Vec::new(),
            fds: FdSource::Broker {
                count: 1,
                name: self.broker_name(),
            },
            payload: Vec::new(),
        }
    }
}

/// The 8 bytes of a broker name `hal-<pid>-<16 hex digits>`.
pub(super) fn broker_suffix(name: &str, pid: u32) -> Option<[u8; 8]> {
    let hex = name.strip_prefix(&format!("hal-{pid}-"))?;
    if hex.len() != 16 {
        return None;
    }
    let mut out = [0u8; 8];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Seal `text` into an envelope registered with this process's broker,
/// open to anyone: the envelope (keep it as long as the object) and what
/// names it. [`Error::Unsupported`] where no broker can run (sockets
/// forbidden): the envelope could not be fetched.
pub fn seal(text: &str, backend: BackendId) -> Result<(Exported, EnvelopeRef)> {
    seal_as(text, backend, None)
}

/// [`seal`], with the object id `object_id` when given (else a fresh one).
pub(super) fn seal_as(
    text: &str,
    backend: BackendId,
    object_id: Option<[u8; 16]>,
) -> Result<(Exported, EnvelopeRef)> {
    if text.len() as u64 > MAX_ENVELOPE {
        return Err(Error::invalid("the text is too long for an envelope"));
    }
    let spec = HandleSpec {
        kind: HandleKind::Memory,
        backend,
        device: 0,
        device_uuid: [0; 16],
        location: Location::Host,
        default_allow_list: false,
    };
    let opts = ExportOptions {
        importers: Importers::Anyone,
        ..ExportOptions::default()
    };
    let mut handle = new_handle(&spec, &opts)?;
    handle.size = text.len() as u64;
    if let Some(id) = object_id {
        handle.object_id = id;
    }
    let fd = os::memfd("hal-envelope", 0, None)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(text.as_bytes())
        .map_err(|e| Error::io("writing an envelope", e))?;
    let fd = OwnedFd::from(file);
    os::add_seals(
        fd.as_fd(),
        libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE,
    )?;
    let envelope = Exported::new(handle, vec![fd])?;
    let h = envelope.handle();
    let no_broker = || {
        Error::unsupported(
            backend.name(),
            "an envelope",
            "this process has no descriptor broker (sockets are forbidden here)",
        )
    };
    let FdSource::Broker { name, .. } = &h.fds else {
        return Err(no_broker());
    };
    let broker = broker_suffix(name, h.creator_pid).ok_or_else(no_broker)?;
    let named = EnvelopeRef {
        pid: h.creator_pid,
        start: h.creator_start,
        pid_ns: h.creator_pid_ns,
        broker,
        object_id: h.object_id,
    };
    Ok((envelope, named))
}

/// The text inside the envelope `r` names, fetched from its broker.
pub fn open(r: &EnvelopeRef, backend: BackendId) -> Result<String> {
    let mut shared = SharedHandle::from(r.handle(backend));
    let fd = crate::exchange::take_fds(&mut shared)?
        .into_iter()
        .next()
        .ok_or_else(|| Error::invalid("the envelope came without its descriptor"))?;
    let file = std::fs::File::from(fd);
    let len = file
        .metadata()
        .map_err(|e| Error::io("reading an envelope", e))?
        .len();
    if len > MAX_ENVELOPE {
        return Err(Error::invalid("an envelope longer than any handle text"));
    }
    let mut buf = vec![0u8; len as usize];
    file.read_exact_at(&mut buf, 0)
        .map_err(|e| Error::io("reading an envelope", e))?;
    String::from_utf8(buf).map_err(|_| Error::invalid("an envelope that is not text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_envelope_opens_to_its_text() {
        let (_kept, r) = seal("some handle text", BackendId::MockAscend).unwrap();
        assert!(r.is_own());
        assert_eq!(EnvelopeRef::from_bytes(&r.to_bytes()), r);
        assert_eq!(open(&r, BackendId::MockAscend).unwrap(), "some handle text");
        let mut other = r;
        other.object_id[0] ^= 1;
        assert!(open(&other, BackendId::MockAscend).is_err());
    }

    #[test]
    fn the_broker_name_round_trips() {
        let r = EnvelopeRef {
            pid: 4242,
            start: 1,
            pid_ns: 2,
            broker: [1, 2, 3, 4, 5, 6, 7, 0xab],
            object_id: [0; 16],
        };
        assert_eq!(r.broker_name(), "hal-4242-01020304050607ab");
        assert_eq!(broker_suffix(&r.broker_name(), 4242), Some(r.broker));
        assert_eq!(broker_suffix("hal-4242-0102", 4242), None);
        assert_eq!(broker_suffix(&r.broker_name(), 4243), None);
    }
}
