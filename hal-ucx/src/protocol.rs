//! The messages two nodes exchange over a connection, as UCX active
//! messages of one id ([`AM_ID`]): the challenge that proves each side
//! holds a remote handle's secret, the grant of access, and the signals.
//! The bytes come from another host, so [`decode`] is total: any input
//! decodes or says why not, and nothing in it is trusted until the proof
//! is checked.
//!
//! Every message starts with [`MAGIC`] and its type:
//!
//! | type | message | body |
//! |---|---|---|
//! | 1 | hello (importer) | export id (8), kind (1), importer's nonce (16) |
//! | 2 | challenge (exporter) | exporter's nonce (16), exporter's proof (32) |
//! | 3 | proof (importer) | importer's proof (32) |
//! | 4 | grant (exporter) | packed rkey length (2), packed rkey (≤ [`MAX_RKEY`]) |
//! | 5 | denied (exporter) | reason (1) |
//! | 6 | signal (importer) | none |

use hal_core::handle::remote::RemoteKind;

/// The active message id hal's messages travel under.
pub(crate) const AM_ID: u32 = 0x4841;
/// The first two bytes of every message.
pub(crate) const MAGIC: [u8; 2] = *b"H1";
/// Most bytes of a packed rkey (UCX's are tens to a few hundred bytes).
pub(crate) const MAX_RKEY: usize = 4096;

/// Why an exporter refused an importer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Denial {
    /// The proof did not match the export's secret.
    Secret,
    /// No export of that id and kind (never made, or dropped).
    Gone,
    /// The importer did not follow the protocol.
    Protocol,
}

/// One message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Message {
    /// The importer names the export and its nonce.
    Hello {
        /// The export.
        export_id: u64,
        /// Its kind, as the importer's handle says.
        kind: RemoteKind,
        /// The importer's nonce.
        nonce: [u8; 16],
    },
    /// The exporter's nonce and its proof over both nonces.
    Challenge {
        /// The exporter's nonce.
        nonce: [u8; 16],
        /// The exporter's proof.
        proof: [u8; 32],
    },
    /// The importer's proof over both nonces.
    Proof {
        /// The importer's proof.
        proof: [u8; 32],
    },
    /// Access: the packed rkey of a memory export (empty for a notify).
    Grant {
        /// `ucp_rkey_pack`'s bytes.
        rkey: Vec<u8>,
    },
    /// Refused.
    Denied(Denial),
    /// A notify's signal, or a memory export's "data is there".
    Signal,
}

/// Why bytes are not a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) String);

impl Message {
    /// The bytes of the message.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(&MAGIC);
        match self {
            Message::Hello {
                export_id,
                kind,
                nonce,
            } => {
                out.push(1);
                out.extend_from_slice(&export_id.to_le_bytes());
                out.push(match kind {
                    RemoteKind::Memory => 1,
                    RemoteKind::Notify => 2,
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
            Message::Grant { rkey } => {
                out.push(4);
                let n = u16::try_from(rkey.len()).unwrap_or(u16::MAX);
                out.extend_from_slice(&n.to_le_bytes());
                out.extend_from_slice(&rkey[..usize::from(n)]);
            }
            Message::Denied(why) => {
                out.push(5);
                out.push(match why {
                    Denial::Secret => 1,
                    Denial::Gone => 2,
                    Denial::Protocol => 3,
                });
            }
            Message::Signal => out.push(6),
        }
        out
    }
}

/// Reads fields off the front of the bytes.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8], Malformed> {
        if self.0.len() < n {
            return Err(Malformed(format!(
                "{field} needs {n} bytes, {} left",
                self.0.len()
            )));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N], Malformed> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
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
    let m = match r.array::<1>("type")?[0] {
        1 => {
            let export_id = u64::from_le_bytes(r.array("export id")?);
            let kind = match r.array::<1>("kind")?[0] {
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
        4 => {
            let n = usize::from(u16::from_le_bytes(r.array("rkey length")?));
            if n > MAX_RKEY {
                return Err(Malformed(format!("an rkey of {n} bytes (most {MAX_RKEY})")));
            }
            Message::Grant {
                rkey: r.take(n, "rkey")?.to_vec(),
            }
        }
        5 => Message::Denied(match r.array::<1>("reason")?[0] {
            1 => Denial::Secret,
            2 => Denial::Gone,
            3 => Denial::Protocol,
            x => return Err(Malformed(format!("reason {x}"))),
        }),
        6 => Message::Signal,
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
            Message::Grant { rkey: vec![9; 100] },
            Message::Grant { rkey: vec![] },
            Message::Denied(Denial::Secret),
            Message::Denied(Denial::Gone),
            Message::Denied(Denial::Protocol),
            Message::Signal,
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
        assert!(decode(b"H1\x07").is_err());
        assert!(decode(b"H2\x06").is_err());
        assert!(decode(b"H1\x05\x04").is_err());
        let mut hello = all()[0].encode();
        hello[11] = 3;
        assert!(decode(&hello).is_err());
        let mut big = b"H1\x04".to_vec();
        big.extend_from_slice(&((MAX_RKEY + 1) as u16).to_le_bytes());
        big.resize(big.len() + MAX_RKEY + 1, 0);
        assert!(decode(&big).is_err());
    }
}
