//! The messages two nodes exchange over a connection, as UCX active
//! messages of one id ([`AM_ID`]): the challenge that proves each side
//! holds a remote handle's secret, the grant, the reads and writes the
//! exporter serves, and the signals. A message is an active message's
//! header; the bytes a read returns or a write carries are its data. The
//! bytes come from another host, so [`decode`] is total: any input decodes
//! or says why not, and nothing in it is trusted until the proof is
//! checked.
//!
//! Every message starts with [`MAGIC`] and its type:
//!
//! | type | message | body |
//! |---|---|---|
//! | 1 | hello (importer) | export id (8), kind (1), importer's nonce (16) |
//! | 2 | challenge (exporter) | exporter's nonce (16), exporter's proof (32) |
//! | 3 | proof (importer) | importer's proof (32) |
//! | 4 | grant (exporter) | none |
//! | 5 | denied (exporter) | reason (1) |
//! | 6 | signal (importer) | none |
//! | 7 | read (importer) | request (8), offset (8), length (8), flags (1: bit 0, send by rendezvous) |
//! | 8 | data (exporter) | request (8); the bytes are the message's data |
//! | 9 | write (importer) | request (8), offset (8); the bytes are the message's data |
//! | 10 | done (exporter) | request (8) |
//! | 11 | failed (exporter) | request (8), reason (1) |

use hal_core::handle::remote::RemoteKind;

/// The active message id hal's messages travel under.
pub(crate) const AM_ID: u32 = 0x4841;
/// The first two bytes of every message.
pub(crate) const MAGIC: [u8; 2] = *b"H1";

/// Why an exporter refused an importer, or one of its operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Denial {
    /// The proof did not match the export's secret.
    Secret,
    /// No export of that id and kind (never made, or dropped).
    Gone,
    /// The importer did not follow the protocol.
    Protocol,
    /// A range outside the export.
    Bounds,
    /// A write to a read-only export.
    ReadOnly,
}

impl Denial {
    fn code(self) -> u8 {
        match self {
            Denial::Secret => 1,
            Denial::Gone => 2,
            Denial::Protocol => 3,
            Denial::Bounds => 4,
            Denial::ReadOnly => 5,
        }
    }

    fn from_code(c: u8) -> Option<Denial> {
        Some(match c {
            1 => Denial::Secret,
            2 => Denial::Gone,
            3 => Denial::Protocol,
            4 => Denial::Bounds,
            5 => Denial::ReadOnly,
            _ => return None,
        })
    }
}

/// One message (an active message's header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Message {
    /// The importer names the export and its nonce.
    Hello {
        export_id: u64,
        kind: RemoteKind,
        nonce: [u8; 16],
    },
    /// The exporter's nonce and its proof over both nonces.
    Challenge { nonce: [u8; 16], proof: [u8; 32] },
    /// The importer's proof over both nonces.
    Proof { proof: [u8; 32] },
    /// Access granted.
    Grant,
    /// Refused: the connection ends.
    Denied(Denial),
    /// A notify's signal, or a memory export's "data is there".
    Signal,
    /// Read `len` bytes at `offset`; `rndv`: send them by rendezvous (the
    /// importer receives them straight into memory UCX must copy to, such
    /// as device memory).
    Read {
        req: u64,
        offset: u64,
        len: u64,
        rndv: bool,
    },
    /// The bytes of read `req` (in the message's data).
    Data { req: u64 },
    /// Write the message's data at `offset`.
    Write { req: u64, offset: u64 },
    /// Write `req` is in the exported memory.
    Done { req: u64 },
    /// Operation `req` was refused.
    Failed { req: u64, why: Denial },
}

/// Why bytes are not a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) String);

impl Message {
    /// The bytes of the message.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(&MAGIC);
        let u64s = |out: &mut Vec<u8>, vs: &[u64]| {
            for v in vs {
                out.extend_from_slice(&v.to_le_bytes());
            }
        };
        match self {
            Message::Hello {
                export_id,
                kind,
                nonce,
            } => {
                out.push(1);
                u64s(&mut out, &[*export_id]);
                out.push(match kind {
                    RemoteKind::Memory => 1,
                    RemoteKind::Notify => 2,
                    // Never sent: a channel's subscribers speak the
                    // channel's messages (`crate::channel::wire`), and a
                    // hello of this kind is refused.
                    RemoteKind::Channel => 3,
                });
                out.extend_from_slice(nonce);
            }
            Message::Challenge { nonce, proof } => {
                out.push(2);
                out.extend_from_slice(nonce);
                out.extend_from_slice(proof);
            }
            Message::Proof { proof } => {
                out.push(3);
                out.extend_from_slice(proof);
            }
            Message::Grant => out.push(4),
            Message::Denied(why) => {
                out.push(5);
                out.push(why.code());
            }
            Message::Signal => out.push(6),
            Message::Read {
                req,
                offset,
                len,
                rndv,
            } => {
                out.push(7);
                u64s(&mut out, &[*req, *offset, *len]);
                out.push(u8::from(*rndv));
            }
            Message::Data { req } => {
                out.push(8);
                u64s(&mut out, &[*req]);
            }
            Message::Write { req, offset } => {
                out.push(9);
                u64s(&mut out, &[*req, *offset]);
            }
            Message::Done { req } => {
                out.push(10);
                u64s(&mut out, &[*req]);
            }
            Message::Failed { req, why } => {
                out.push(11);
                u64s(&mut out, &[*req]);
                out.push(why.code());
            }
        }
        out
    }
}

/// Reads fields off the front of the bytes.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N], Malformed> {
        if self.0.len() < N {
            return Err(Malformed(format!(
                "{field} needs {N} bytes, {} left",
                self.0.len()
            )));
        }
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        let mut a = [0u8; N];
        a.copy_from_slice(head);
        Ok(a)
    }

    fn u8(&mut self, field: &str) -> Result<u8, Malformed> {
        Ok(self.array::<1>(field)?[0])
    }

    fn u64(&mut self, field: &str) -> Result<u64, Malformed> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    fn denial(&mut self) -> Result<Denial, Malformed> {
        let c = self.u8("reason")?;
        Denial::from_code(c).ok_or_else(|| Malformed(format!("reason {c}")))
    }

    fn end(self) -> Result<(), Malformed> {
        match self.0.len() {
            0 => Ok(()),
            n => Err(Malformed(format!("{n} bytes after the message"))),
        }
    }
}

/// The message `bytes` hold.
pub(crate) fn decode(bytes: &[u8]) -> Result<Message, Malformed> {
    let mut r = Reader(bytes);
    if r.array::<2>("magic")? != MAGIC {
        return Err(Malformed("not a hal message (magic)".into()));
    }
    let m = match r.u8("type")? {
        1 => {
            let export_id = r.u64("export id")?;
            let kind = match r.u8("kind")? {
                1 => RemoteKind::Memory,
                2 => RemoteKind::Notify,
                k => return Err(Malformed(format!("kind {k}"))),
            };
            Message::Hello {
                export_id,
                kind,
                nonce: r.array("nonce")?,
            }
        }
        2 => Message::Challenge {
            nonce: r.array("nonce")?,
            proof: r.array("proof")?,
        },
        3 => Message::Proof {
            proof: r.array("proof")?,
        },
        4 => Message::Grant,
        5 => Message::Denied(r.denial()?),
        6 => Message::Signal,
        7 => {
            let (req, offset, len) = (r.u64("request")?, r.u64("offset")?, r.u64("length")?);
            let rndv = match r.u8("flags")? {
                0 => false,
                1 => true,
                f => return Err(Malformed(format!("read flags {f:#04x}"))),
            };
            Message::Read {
                req,
                offset,
                len,
                rndv,
            }
        }
        8 => Message::Data {
            req: r.u64("request")?,
        },
        9 => Message::Write {
            req: r.u64("request")?,
            offset: r.u64("offset")?,
        },
        10 => Message::Done {
            req: r.u64("request")?,
        },
        11 => Message::Failed {
            req: r.u64("request")?,
            why: r.denial()?,
        },
        t => return Err(Malformed(format!("type {t}"))),
    };
    r.end()?;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Message> {
        vec![
            Message::Hello {
                export_id: 0x0102_0304_0506_0708,
                kind: RemoteKind::Notify,
                nonce: [7; 16],
            },
            Message::Challenge {
                nonce: [1; 16],
                proof: [2; 32],
            },
            Message::Proof { proof: [3; 32] },
            Message::Grant,
            Message::Denied(Denial::Secret),
            Message::Denied(Denial::Gone),
            Message::Denied(Denial::Protocol),
            Message::Signal,
            Message::Read {
                req: 5,
                offset: 6,
                len: 7,
                rndv: true,
            },
            Message::Read {
                req: u64::MAX,
                offset: 0,
                len: 0,
                rndv: false,
            },
            Message::Data { req: 9 },
            Message::Write { req: 1, offset: 2 },
            Message::Done { req: 3 },
            Message::Failed {
                req: 4,
                why: Denial::Bounds,
            },
            Message::Failed {
                req: 4,
                why: Denial::ReadOnly,
            },
        ]
    }

    #[test]
    fn every_message_round_trips_and_every_cut_or_extension_is_refused() {
        for m in all() {
            let b = m.encode();
            assert_eq!(decode(&b), Ok(m.clone()));
            for n in 0..b.len() {
                assert!(decode(&b[..n]).is_err(), "{m:?} cut at {n}");
            }
            let mut longer = b.clone();
            longer.push(0);
            assert!(decode(&longer).is_err(), "{m:?} extended");
        }
    }

    #[test]
    fn unknown_values_are_refused() {
        assert!(decode(b"H1\x0c").is_err());
        assert!(decode(b"H2\x06").is_err());
        assert!(decode(b"H1\x05\x06").is_err());
        let mut hello = all()[0].encode();
        hello[11] = 3;
        assert!(decode(&hello).is_err());
        let mut read = all()[8].encode();
        *read.last_mut().unwrap() = 2;
        assert!(decode(&read).is_err());
    }
}
