//! Remote handles: what an export to other hosts produces and a remote
//! import consumes (`hal1r.` text). Plain data, as [`Handle`](crate::Handle)
//! is: the exporter's listener address, which of its exports, the range's
//! address and size in the exporter's process, flags, and a 128-bit secret
//! the importer proves it holds before the exporter hands out access.
//!
//! The secret is in the text: a remote handle is a capability, to be passed
//! only to the processes meant to use it (as a memory handle's text is).
//! [`RemoteHandle`]'s `Debug` does not show it.
//!
//! # Binary layout (version 1, little-endian)
//!
//! | bytes | field | values |
//! |---|---|---|
//! | 4 | magic | [`REMOTE_MAGIC`], `89 48 52 4D` (`\x89HRM`) |
//! | 1 | version | [`REMOTE_VERSION`] |
//! | 1 | kind | 1 memory, 2 notify, 3 channel |
//! | 1 | flags | bit 0: read-only; other bits 0 |
//! | 1 | memory type | 0 host, 1 CUDA device, 2 CUDA managed |
//! | 1 | address family | 4 or 6 |
//! | 4 or 16 | listener address | IPv4 or IPv6, network order |
//! | 2 | listener port | not 0 |
//! | 8 | export id | |
//! | 8 | base | the range's address in the exporter's process |
//! | 8 | size | `base + size` does not overflow; 0 for a notify or a channel, as its base |
//! | 16 | secret | |
//! | 4 | checksum | CRC-32 of everything before it |
//!
//! The text is [`REMOTE_TEXT_PREFIX`] and the bytes in unpadded URL-safe
//! base64. The decoders are total: every input decodes or names its
//! problem ([`HandleError`]).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

use crate::error::HandleError;
use crate::handle::wire::{base64_len, decode_text, Cursor, TENSOR_TEXT_PREFIX, TEXT_PREFIX};

/// The first four bytes of every binary remote handle.
pub const REMOTE_MAGIC: [u8; 4] = [0x89, b'H', b'R', b'M'];
/// The version this build writes and reads.
pub const REMOTE_VERSION: u8 = 1;
/// The start of every remote handle's text.
pub const REMOTE_TEXT_PREFIX: &str = "hal1r.";
/// Length of the longest encoding (an IPv6 listener).
pub const MAX_REMOTE_ENCODED_LEN: usize = 4 + 1 + 1 + 1 + 1 + 1 + 16 + 2 + 8 + 8 + 8 + 16 + 4;
/// Length of the longest text.
pub const MAX_REMOTE_TEXT_LEN: usize =
    REMOTE_TEXT_PREFIX.len() + base64_len(MAX_REMOTE_ENCODED_LEN);

/// Flag bit: the export refuses writes.
const FLAG_READ_ONLY: u8 = 1;

/// What a remote handle names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RemoteKind {
    /// A range of memory, read and written from other hosts (wire 1).
    Memory,
    /// A notify, signalled from other hosts (wire 2).
    Notify,
    /// A channel offered to subscribers on other hosts (wire 3).
    Channel,
}

/// Where the exported bytes live, as the exporter registered them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RemoteMemoryType {
    /// Host memory (wire 0).
    Host,
    /// CUDA device memory (wire 1).
    Cuda,
    /// CUDA managed memory (wire 2).
    CudaManaged,
}

/// A remote handle (see the [module](self) for its layout).
#[derive(Clone, PartialEq, Eq)]
pub struct RemoteHandle {
    /// What it names.
    pub kind: RemoteKind,
    /// The exporter's listener.
    pub listener: SocketAddr,
    /// Which of the exporter's exports.
    pub export_id: u64,
    /// The range's address in the exporter's process (0 for a notify).
    pub base: u64,
    /// The range's size in bytes (0 for a notify).
    pub size: u64,
    /// Writes are refused.
    pub read_only: bool,
    /// Where the bytes live.
    pub memory_type: RemoteMemoryType,
    /// What the importer proves it holds.
    pub secret: [u8; 16],
}

impl fmt::Debug for RemoteHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteHandle")
            .field("kind", &self.kind)
            .field("listener", &self.listener)
            .field("export_id", &self.export_id)
            .field("base", &format_args!("{:#x}", self.base))
            .field("size", &self.size)
            .field("read_only", &self.read_only)
            .field("memory_type", &self.memory_type)
            .field("secret", &"(not shown)")
            .finish()
    }
}

impl RemoteHandle {
    /// The binary form.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAX_REMOTE_ENCODED_LEN);
        out.extend_from_slice(&REMOTE_MAGIC);
        out.push(REMOTE_VERSION);
        out.push(match self.kind {
            RemoteKind::Memory => 1,
            RemoteKind::Notify => 2,
            RemoteKind::Channel => 3,
        });
        out.push(if self.read_only { FLAG_READ_ONLY } else { 0 });
        out.push(match self.memory_type {
            RemoteMemoryType::Host => 0,
            RemoteMemoryType::Cuda => 1,
            RemoteMemoryType::CudaManaged => 2,
        });
        match self.listener.ip() {
            IpAddr::V4(a) => {
                out.push(4);
                out.extend_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                out.push(6);
                out.extend_from_slice(&a.octets());
            }
        }
        out.extend_from_slice(&self.listener.port().to_le_bytes());
        out.extend_from_slice(&self.export_id.to_le_bytes());
        out.extend_from_slice(&self.base.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.secret);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// The text form.
    pub fn to_text(&self) -> String {
        let bytes = self.to_bytes();
        let mut text = String::with_capacity(REMOTE_TEXT_PREFIX.len() + base64_len(bytes.len()));
        text.push_str(REMOTE_TEXT_PREFIX);
        URL_SAFE_NO_PAD.encode_string(&bytes, &mut text);
        text
    }

    /// Decode the text form, ignoring ASCII whitespace around it. The text
    /// of a handle for this machine (`hal1.`, `hal1t.`) is
    /// [`HandleError::WrongKind`].
    pub fn from_text(text: &str) -> Result<RemoteHandle, HandleError> {
        let t = text.trim_start();
        if t.starts_with(TEXT_PREFIX) || t.starts_with(TENSOR_TEXT_PREFIX) {
            return Err(HandleError::WrongKind {
                expected: "remote",
                found: "this machine's",
            });
        }
        decode_text(
            text,
            REMOTE_TEXT_PREFIX,
            MAX_REMOTE_TEXT_LEN,
            RemoteHandle::from_bytes,
        )
    }

    /// Decode the binary form.
    pub fn from_bytes(bytes: &[u8]) -> Result<RemoteHandle, HandleError> {
        if bytes.len() > MAX_REMOTE_ENCODED_LEN {
            return Err(HandleError::OverBound {
                field: "remote handle",
                len: bytes.len(),
                max: MAX_REMOTE_ENCODED_LEN,
            });
        }
        let magic_len = bytes.len().min(REMOTE_MAGIC.len());
        if bytes[..magic_len] != REMOTE_MAGIC[..magic_len] {
            return Err(HandleError::BadMagic);
        }
        let mut c = Cursor::new(bytes);
        c.take(REMOTE_MAGIC.len(), "magic")?;
        let version = c.u8("version")?;
        if version != REMOTE_VERSION {
            return Err(HandleError::UnsupportedVersion {
                found: version,
                supported: REMOTE_VERSION,
            });
        }
        let kind = match c.u8("kind")? {
            1 => RemoteKind::Memory,
            2 => RemoteKind::Notify,
            3 => RemoteKind::Channel,
            k => {
                return Err(malformed(
                    "kind",
                    format!("{k} is not 1 (memory), 2 (notify) or 3 (channel)"),
                ))
            }
        };
        let flags = c.u8("flags")?;
        if flags & !FLAG_READ_ONLY != 0 {
            return Err(malformed("flags", format!("unknown bits {flags:#04x}")));
        }
        let memory_type = match c.u8("memory type")? {
            0 => RemoteMemoryType::Host,
            1 => RemoteMemoryType::Cuda,
            2 => RemoteMemoryType::CudaManaged,
            t => return Err(malformed("memory type", format!("{t} is not 0, 1 or 2"))),
        };
        let ip = match c.u8("address family")? {
            4 => {
                let b = c.take(4, "listener address")?;
                IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
            }
            6 => {
                let b = c.take(16, "listener address")?;
                let mut a = [0u8; 16];
                a.copy_from_slice(b);
                IpAddr::V6(Ipv6Addr::from(a))
            }
            f => {
                return Err(malformed(
                    "address family",
                    format!("{f} is neither 4 nor 6"),
                ))
            }
        };
        let port = c.u16("listener port")?;
        let export_id = c.u64("export id")?;
        let base = c.u64("base")?;
        let size = c.u64("size")?;
        let mut secret = [0u8; 16];
        secret.copy_from_slice(c.take(16, "secret")?);
        let body_len = bytes.len() - c.remaining();
        let stored = c.u32("checksum")?;
        if c.remaining() != 0 {
            return Err(HandleError::TrailingBytes(c.remaining()));
        }
        let computed = crc32fast::hash(&bytes[..body_len]);
        if stored != computed {
            return Err(HandleError::BadChecksum { stored, computed });
        }
        if port == 0 {
            return Err(malformed("listener port", "0 is no listener".into()));
        }
        if base.checked_add(size).is_none() {
            return Err(malformed(
                "size",
                format!("{base:#x} + {size:#x} overflows the address space"),
            ));
        }
        if kind != RemoteKind::Memory && (base != 0 || size != 0) {
            return Err(malformed("size", "only memory has a range".into()));
        }
        Ok(RemoteHandle {
            kind,
            listener: SocketAddr::new(ip, port),
            export_id,
            base,
            size,
            read_only: flags & FLAG_READ_ONLY != 0,
            memory_type,
            secret,
        })
    }
}

fn malformed(field: &'static str, detail: String) -> HandleError {
    HandleError::Malformed { field, detail }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(listener: &str) -> RemoteHandle {
        RemoteHandle {
            kind: RemoteKind::Memory,
            listener: listener.parse().unwrap(),
            export_id: 7,
            base: 0x7f00_0000_1000,
            size: 1 << 20,
            read_only: true,
            memory_type: RemoteMemoryType::Host,
            secret: [0xA5; 16],
        }
    }

    #[test]
    fn both_forms_round_trip_for_both_families() {
        for l in ["192.0.2.1:4242", "[2001:db8::1]:80"] {
            let h = sample(l);
            assert_eq!(RemoteHandle::from_bytes(&h.to_bytes()).unwrap(), h);
            let text = h.to_text();
            assert!(text.starts_with("hal1r."));
            assert!(text.len() <= MAX_REMOTE_TEXT_LEN);
            assert_eq!(RemoteHandle::from_text(&format!("  {text}\n")).unwrap(), h);
        }
        assert_eq!(sample("[::1]:1").to_bytes().len(), MAX_REMOTE_ENCODED_LEN);
    }

    #[test]
    fn the_secret_is_not_shown() {
        let shown = format!("{:?}", sample("192.0.2.1:1"));
        assert!(
            !shown.contains("165") && !shown.to_lowercase().contains("a5"),
            "{shown}"
        );
    }

    #[test]
    fn every_change_of_a_byte_is_refused() {
        let bytes = sample("192.0.2.1:4242").to_bytes();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x10;
            assert!(RemoteHandle::from_bytes(&b).is_err(), "byte {i}");
        }
        for n in 0..bytes.len() {
            assert!(RemoteHandle::from_bytes(&bytes[..n]).is_err(), "cut at {n}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            RemoteHandle::from_bytes(&longer),
            Err(HandleError::TrailingBytes(1))
        ));
    }

    /// `bytes` with the checksum made right again after an edit.
    fn resealed(mut b: Vec<u8>) -> Vec<u8> {
        let n = b.len() - 4;
        let crc = crc32fast::hash(&b[..n]);
        b[n..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn values_are_checked_after_the_checksum() {
        let good = sample("192.0.2.1:4242").to_bytes();
        let field = |at: usize, v: u8| {
            let mut b = good.clone();
            b[at] = v;
            RemoteHandle::from_bytes(&resealed(b)).unwrap_err()
        };
        assert!(matches!(
            field(5, 4),
            HandleError::Malformed { field: "kind", .. }
        ));
        assert!(matches!(
            field(6, 2),
            HandleError::Malformed { field: "flags", .. }
        ));
        assert!(matches!(
            field(7, 3),
            HandleError::Malformed {
                field: "memory type",
                ..
            }
        ));
        assert!(matches!(
            field(4, 2),
            HandleError::UnsupportedVersion { .. }
        ));
        let mut h = sample("192.0.2.1:4242");
        h.size = u64::MAX;
        assert!(matches!(
            RemoteHandle::from_bytes(&h.to_bytes()),
            Err(HandleError::Malformed { field: "size", .. })
        ));
        h = sample("192.0.2.1:4242");
        h.kind = RemoteKind::Notify;
        assert!(RemoteHandle::from_bytes(&h.to_bytes()).is_err());
        h.base = 0;
        h.size = 0;
        assert_eq!(RemoteHandle::from_bytes(&h.to_bytes()).unwrap(), h);
        // A channel offer has no range either.
        h = sample("192.0.2.1:4242");
        h.kind = RemoteKind::Channel;
        assert!(RemoteHandle::from_bytes(&h.to_bytes()).is_err());
        h.base = 0;
        h.size = 0;
        assert_eq!(RemoteHandle::from_bytes(&h.to_bytes()).unwrap(), h);
        assert_eq!(RemoteHandle::from_text(&h.to_text()).unwrap(), h);
        // The fuzz target's seed of a channel offer decodes as one.
        let seed = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/seeds/decode_remote_handle/channel_v4");
        let seed = std::fs::read(&seed).unwrap_or_else(|e| panic!("{}: {e}", seed.display()));
        assert_eq!(
            RemoteHandle::from_bytes(&seed).unwrap().kind,
            RemoteKind::Channel
        );
        let mut p = sample("192.0.2.1:1");
        p.listener.set_port(0);
        assert!(matches!(
            RemoteHandle::from_bytes(&p.to_bytes()),
            Err(HandleError::Malformed {
                field: "listener port",
                ..
            })
        ));
    }

    #[test]
    fn other_texts_are_told_apart() {
        assert!(matches!(
            RemoteHandle::from_text("hal1.AAAA"),
            Err(HandleError::WrongKind { .. })
        ));
        assert!(matches!(
            RemoteHandle::from_text("hal1t.AAAA"),
            Err(HandleError::WrongKind { .. })
        ));
        assert!(matches!(
            RemoteHandle::from_text("hal2r.AAAA"),
            Err(HandleError::BadPrefix { .. })
        ));
        let long = format!("hal1r.{}", "A".repeat(MAX_REMOTE_TEXT_LEN));
        assert!(matches!(
            RemoteHandle::from_text(&long),
            Err(HandleError::OverBound { field: "text", .. })
        ));
        // A remote text is refused by this machine's decoder.
        let t = sample("192.0.2.1:1").to_text();
        assert!(crate::Handle::from_text(&t).is_err());
    }
}
