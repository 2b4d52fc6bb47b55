//! The messages between a channel's publisher side and a remote
//! subscriber, as UCX active messages of hal's id: each is an active
//! message's header; a sample's bytes are its data (sent by rendezvous).
//! Headers start with [`MAGIC`], which tells them from the messages of
//! exports (`H1`) and groups (`G1`). The bytes come from other hosts, so
//! [`decode`] is total: any input decodes or says why not, every count is
//! bounded, and what decodes re-encodes to the same bytes.
//!
//! | type | message | header after the magic and the type |
//! |---|---|---|
//! | 1 | hello (subscriber) | offer id (8), most slots it holds (4, 0: as many as the channel has), nonce (16) |
//! | 2 | challenge (publisher) | publisher's nonce (16), publisher's proof (32) |
//! | 3 | proof (subscriber) | subscriber's proof (32) |
//! | 4 | welcome (publisher) | slots (4), slot size (8), mode (1: 0 broadcast, 1 queue) |
//! | 5 | denied (publisher) | reason (1) |
//! | 6 | ready (subscriber) | none: its slots are allocated |
//! | 7 | sample (publisher) | sequence (8), slot (4), length (8); the bytes are the data |
//! | 8 | release (subscriber) | slot (4) |
//! | 9 | end (publisher) | how (1: 0 closed, 1 died, 2 no longer offered) |
//!
//! Numbers are little-endian.

use hal_core::channel::{Mode, MAX_SLOTS};

/// The first two bytes of every channel message.
pub(crate) const MAGIC: [u8; 2] = *b"C1";

/// Why the publisher's side refused a subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The proof did not match the offer's secret.
    Secret,
    /// No such offer (never made, or dropped).
    Gone,
    /// The subscriber did not follow the protocol.
    Protocol,
    /// The channel has all the subscribers it can take.
    Busy,
    /// The channel's publisher is gone.
    Closed,
}

impl Refusal {
    fn code(self) -> u8 {
        match self {
            Refusal::Secret => 1,
            Refusal::Gone => 2,
            Refusal::Protocol => 3,
            Refusal::Busy => 4,
            Refusal::Closed => 5,
        }
    }

    fn from_code(c: u8) -> Option<Refusal> {
        Some(match c {
            1 => Refusal::Secret,
            2 => Refusal::Gone,
            3 => Refusal::Protocol,
            4 => Refusal::Busy,
            5 => Refusal::Closed,
            _ => return None,
        })
    }
}

/// How a channel ended for its remote subscribers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Its publisher closed it.
    Closed,
    /// Its publisher died.
    Died,
    /// Its offer was dropped.
    Withdrawn,
}

/// One message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Message {
    /// A subscriber names the offer, how many slots it holds at most, and
    /// its nonce.
    Hello {
        offer: u64,
        slots: u32,
        nonce: [u8; 16],
    },
    /// The publisher's side's nonce and its proof over both nonces.
    Challenge { nonce: [u8; 16], proof: [u8; 32] },
    /// The subscriber's proof.
    Proof { proof: [u8; 32] },
    /// Subscribed: the subscriber's ring has `slots` slots of `slot_size`.
    Welcome {
        slots: u32,
        slot_size: u64,
        mode: Mode,
    },
    /// Refused.
    Denied(Refusal),
    /// The subscriber's ring is allocated: samples may come.
    Ready,
    /// A sample into the subscriber's `slot` (its bytes are the data).
    Sample { seq: u64, slot: u32, len: u64 },
    /// The subscriber released `slot`.
    Release { slot: u32 },
    /// No sample comes after this one.
    End(End),
}

/// Why bytes are not a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) String);

/// True when `head` is a channel message's (by its magic).
pub(crate) fn is_channel(head: &[u8]) -> bool {
    head.starts_with(&MAGIC)
}

impl Message {
    /// The message's header.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut h = Vec::with_capacity(64);
        h.extend_from_slice(&MAGIC);
        match self {
            Message::Hello {
                offer,
                slots,
                nonce,
            } => {
                h.push(1);
                h.extend_from_slice(&offer.to_le_bytes());
                h.extend_from_slice(&slots.to_le_bytes());
                h.extend_from_slice(nonce);
            }
            Message::Challenge { nonce, proof } => {
                h.push(2);
                h.extend_from_slice(nonce);
                h.extend_from_slice(proof);
            }
            Message::Proof { proof } => {
                h.push(3);
                h.extend_from_slice(proof);
            }
            Message::Welcome {
                slots,
                slot_size,
                mode,
            } => {
                h.push(4);
                h.extend_from_slice(&slots.to_le_bytes());
                h.extend_from_slice(&slot_size.to_le_bytes());
                h.push(match mode {
                    Mode::Broadcast => 0,
                    Mode::Queue => 1,
                });
            }
            Message::Denied(why) => {
                h.push(5);
                h.push(why.code());
            }
            Message::Ready => h.push(6),
            Message::Sample { seq, slot, len } => {
                h.push(7);
                h.extend_from_slice(&seq.to_le_bytes());
                h.extend_from_slice(&slot.to_le_bytes());
                h.extend_from_slice(&len.to_le_bytes());
            }
            Message::Release { slot } => {
                h.push(8);
                h.extend_from_slice(&slot.to_le_bytes());
            }
            Message::End(how) => {
                h.push(9);
                h.push(match how {
                    End::Closed => 0,
                    End::Died => 1,
                    End::Withdrawn => 2,
                });
            }
        }
        h
    }
}

/// Reads fields off the front of the bytes.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
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

    fn u32(&mut self, field: &str) -> Result<u32, Malformed> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &str) -> Result<u64, Malformed> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    /// A slot count or index of at most `max`.
    fn slots(&mut self, field: &str, max: usize) -> Result<u32, Malformed> {
        let n = self.u32(field)?;
        if n as usize > max {
            return Err(Malformed(format!("{field} {n} is over the most, {max}")));
        }
        Ok(n)
    }
}

/// The message `head` holds.
pub(crate) fn decode(head: &[u8]) -> Result<Message, Malformed> {
    let mut r = Reader(head);
    if r.array::<2>("magic")? != MAGIC {
        return Err(Malformed("not a channel message (magic)".into()));
    }
    let m = match r.u8("type")? {
        1 => Message::Hello {
            offer: r.u64("offer id")?,
            slots: r.slots("slots", MAX_SLOTS)?,
            nonce: r.array("nonce")?,
        },
        2 => Message::Challenge {
            nonce: r.array("nonce")?,
            proof: r.array("proof")?,
        },
        3 => Message::Proof {
            proof: r.array("proof")?,
        },
        4 => {
            let slots = r.slots("slots", MAX_SLOTS)?;
            if slots == 0 {
                return Err(Malformed("a channel of 0 slots".into()));
            }
            let slot_size = r.u64("slot size")?;
            if slot_size.checked_mul(u64::from(slots)).is_none() {
                return Err(Malformed(format!(
                    "{slots} slots of {slot_size} bytes overflow"
                )));
            }
            let mode = match r.u8("mode")? {
                0 => Mode::Broadcast,
                1 => Mode::Queue,
                m => return Err(Malformed(format!("mode {m}"))),
            };
            Message::Welcome {
                slots,
                slot_size,
                mode,
            }
        }
        5 => {
            let c = r.u8("reason")?;
            Message::Denied(Refusal::from_code(c).ok_or_else(|| Malformed(format!("reason {c}")))?)
        }
        6 => Message::Ready,
        7 => Message::Sample {
            seq: r.u64("sequence")?,
            slot: r.slots("slot", MAX_SLOTS - 1)?,
            len: r.u64("length")?,
        },
        8 => Message::Release {
            slot: r.slots("slot", MAX_SLOTS - 1)?,
        },
        9 => Message::End(match r.u8("how")? {
            0 => End::Closed,
            1 => End::Died,
            2 => End::Withdrawn,
            h => return Err(Malformed(format!("end {h}"))),
        }),
        t => return Err(Malformed(format!("type {t}"))),
    };
    match r.0.len() {
        0 => Ok(m),
        n => Err(Malformed(format!("{n} bytes after the message"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Message> {
        vec![
            Message::Hello {
                offer: 7,
                slots: 0,
                nonce: [3; 16],
            },
            Message::Hello {
                offer: u64::MAX,
                slots: MAX_SLOTS as u32,
                nonce: [4; 16],
            },
            Message::Challenge {
                nonce: [1; 16],
                proof: [2; 32],
            },
            Message::Proof { proof: [5; 32] },
            Message::Welcome {
                slots: 8,
                slot_size: 1 << 20,
                mode: Mode::Broadcast,
            },
            Message::Welcome {
                slots: 1,
                slot_size: 0,
                mode: Mode::Queue,
            },
            Message::Denied(Refusal::Secret),
            Message::Denied(Refusal::Gone),
            Message::Denied(Refusal::Protocol),
            Message::Denied(Refusal::Busy),
            Message::Denied(Refusal::Closed),
            Message::Ready,
            Message::Sample {
                seq: 99,
                slot: 3,
                len: 1 << 20,
            },
            Message::Release { slot: 4095 },
            Message::End(End::Closed),
            Message::End(End::Died),
            Message::End(End::Withdrawn),
        ]
    }

    #[test]
    fn every_message_round_trips_and_every_cut_or_extension_is_refused() {
        for m in all() {
            let h = m.encode();
            assert!(is_channel(&h));
            assert_eq!(decode(&h).as_ref(), Ok(&m));
            for n in 0..h.len() {
                assert!(decode(&h[..n]).is_err(), "{m:?} cut at {n}");
            }
            let mut longer = h.clone();
            longer.push(0);
            assert!(decode(&longer).is_err(), "{m:?} extended");
        }
    }

    #[test]
    fn bounds_and_unknown_values_are_refused() {
        assert!(decode(b"C1\x0a").is_err());
        assert!(decode(b"G1\x06").is_err());
        assert!(decode(b"C1\x05\x06").is_err());
        assert!(decode(b"C1\x09\x03").is_err());
        let over = ((MAX_SLOTS + 1) as u32).to_le_bytes();
        let hello = [&b"C1\x01"[..], &[0; 8], &over, &[0; 16]].concat();
        assert!(decode(&hello).is_err());
        let welcome = |slots: u32, size: u64, mode: u8| {
            [
                &b"C1\x04"[..],
                &slots.to_le_bytes(),
                &size.to_le_bytes(),
                &[mode],
            ]
            .concat()
        };
        assert!(decode(&welcome(8, 64, 0)).is_ok());
        assert!(decode(&welcome(0, 64, 0)).is_err());
        assert!(decode(&welcome(8, 64, 2)).is_err());
        assert!(decode(&welcome(8, u64::MAX, 0)).is_err());
        let slot = (MAX_SLOTS as u32).to_le_bytes();
        assert!(decode(&[&b"C1\x08"[..], &slot].concat()).is_err());
        let sample = [&b"C1\x07"[..], &[0; 8], &slot, &[0; 8]].concat();
        assert!(decode(&sample).is_err());
    }

    /// The fuzz target's seeds (`fuzz/seeds/channel_message/`) are what the
    /// encoder writes, and decode as the target reads them.
    /// `HAL_FUZZ_WRITE_SEEDS=1 cargo test -p hal-ucx --lib channel::wire`
    /// writes them again after a change of the messages.
    #[test]
    fn the_fuzz_seeds_are_the_encoders_and_decode() {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/seeds/channel_message");
        let write = std::env::var_os("HAL_FUZZ_WRITE_SEEDS").is_some();
        if write {
            std::fs::create_dir_all(&dir).unwrap();
        }
        for (i, m) in all().iter().enumerate() {
            let bytes = m.encode();
            let path = dir.join(format!("{i:02}"));
            if write {
                std::fs::write(&path, &bytes).unwrap();
            }
            let stored = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(
                stored == bytes,
                "{} is not what the encoder writes now",
                path.display()
            );
            assert_eq!(decode(&bytes).as_ref(), Ok(m));
            crate::fuzzing::check_channel_message(&bytes);
        }
    }
}
