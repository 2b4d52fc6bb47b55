//! The messages of a group's rendezvous, as UCX active messages of hal's
//! id: a fixed head (the active message's header) and a body of variable
//! length (its data, always sent eagerly). Heads start with [`MAGIC`],
//! which tells them from the messages of exports (`H1`). The bytes come
//! from other hosts, so [`decode`] is total: any input decodes or says why
//! not, every count and length is bounded ([`MAX_MEMBERS`],
//! [`MAX_PAYLOAD`], [`MAX_NAME`]) before anything is allocated, and what
//! decodes re-encodes to the same bytes.
//!
//! | type | message | head | body |
//! |---|---|---|---|
//! | 1 | hello (joiner) | size (4), payload limit (4), joiner's nonce (16) | the group's name |
//! | 2 | challenge (server) | server's nonce (16), server's proof (32) | none |
//! | 3 | proof (joiner) | joiner's proof (32), pid (4), address (19), host (16) | none |
//! | 4 | welcome (server) | rank (4) | none |
//! | 5 | denied (server) | reason (1), members joined (4) | the served group's name |
//! | 6 | formed (server) | members (4) | per member: pid (4), address (19), host (16) |
//! | 7 | post (member) | round (4) | the member's bytes |
//! | 8 | round (server) | round (4), members (4) | per member its length (4), then the bytes |
//! | 9 | gone (server) | rank (4), address (19) | none |
//!
//! An address is its family (1: 4 or 6), 16 bytes of address (an IPv4
//! one in the first 4, the rest zero) and the port (2); numbers are
//! little-endian.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The first two bytes of every group message's head.
pub(crate) const MAGIC: [u8; 2] = *b"G1";
/// The most members a group has.
pub const MAX_MEMBERS: usize = 1024;
/// The most bytes one member posts in one round.
pub const MAX_PAYLOAD: usize = 1 << 20;
/// The longest name of a group, in bytes.
pub const MAX_NAME: usize = 255;

/// Why a server refused a joiner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The joiner's proof did not match the group's secret.
    Secret,
    /// The server serves a group of another name.
    OtherGroup,
    /// The group has another size or payload limit.
    Shape,
    /// Every rank is taken.
    Full,
    /// The joiner did not follow the protocol.
    Protocol,
}

impl Refusal {
    fn code(self) -> u8 {
        match self {
            Refusal::Secret => 1,
            Refusal::OtherGroup => 2,
            Refusal::Shape => 3,
            Refusal::Full => 4,
            Refusal::Protocol => 5,
        }
    }

    fn from_code(c: u8) -> Option<Refusal> {
        Some(match c {
            1 => Refusal::Secret,
            2 => Refusal::OtherGroup,
            3 => Refusal::Shape,
            4 => Refusal::Full,
            5 => Refusal::Protocol,
            _ => return None,
        })
    }
}

/// A member as the server announces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) pid: u32,
    pub(crate) address: SocketAddr,
    /// Where the member runs, as far as hal's local objects reach
    /// ([`super::host::HostId`]).
    pub(crate) host: [u8; 16],
}

/// One message of the rendezvous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Message {
    /// A joiner names the group it joins and its nonce.
    Hello {
        size: u32,
        max_payload: u32,
        nonce: [u8; 16],
        name: String,
    },
    /// The server's nonce and its proof over both nonces.
    Challenge { nonce: [u8; 16], proof: [u8; 32] },
    /// The joiner's proof, its pid, its node's address and its host.
    Proof {
        proof: [u8; 32],
        pid: u32,
        address: SocketAddr,
        host: [u8; 16],
    },
    /// The joiner is a member, of this rank.
    Welcome { rank: u32 },
    /// Refused; `joined` and `served` say what the server serves.
    Denied {
        why: Refusal,
        joined: u32,
        served: String,
    },
    /// Every member joined: all of them, by rank.
    Formed { members: Vec<Entry> },
    /// A member's bytes for a round.
    Post { round: u32, data: Vec<u8> },
    /// Every member's bytes of a round, by rank.
    Round { round: u32, data: Vec<Vec<u8>> },
    /// A member is gone (it died, or it left).
    Gone { rank: u32, address: SocketAddr },
}

/// Why bytes are not a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) String);

/// True when `head` is a group message's (by its magic).
pub(crate) fn is_group(head: &[u8]) -> bool {
    head.starts_with(&MAGIC)
}

fn put_address(out: &mut Vec<u8>, a: &SocketAddr) {
    let mut ip = [0u8; 16];
    match a.ip() {
        IpAddr::V4(v4) => {
            out.push(4);
            ip[..4].copy_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            out.push(6);
            ip = v6.octets();
        }
    }
    out.extend_from_slice(&ip);
    out.extend_from_slice(&a.port().to_le_bytes());
}

impl Message {
    /// The head and the body of the message.
    pub(crate) fn encode(&self) -> (Vec<u8>, Vec<u8>) {
        let mut h = Vec::with_capacity(64);
        let mut b = Vec::new();
        h.extend_from_slice(&MAGIC);
        match self {
            Message::Hello {
                size,
                max_payload,
                nonce,
                name,
            } => {
                h.push(1);
                h.extend_from_slice(&size.to_le_bytes());
                h.extend_from_slice(&max_payload.to_le_bytes());
                h.extend_from_slice(nonce);
                b.extend_from_slice(name.as_bytes());
            }
            Message::Challenge { nonce, proof } => {
                h.push(2);
                h.extend_from_slice(nonce);
                h.extend_from_slice(proof);
            }
            Message::Proof {
                proof,
                pid,
                address,
                host,
            } => {
                h.push(3);
                h.extend_from_slice(proof);
                h.extend_from_slice(&pid.to_le_bytes());
                put_address(&mut h, address);
                h.extend_from_slice(host);
            }
            Message::Welcome { rank } => {
                h.push(4);
                h.extend_from_slice(&rank.to_le_bytes());
            }
            Message::Denied {
                why,
                joined,
                served,
            } => {
                h.push(5);
                h.push(why.code());
                h.extend_from_slice(&joined.to_le_bytes());
                b.extend_from_slice(served.as_bytes());
            }
            Message::Formed { members } => {
                h.push(6);
                h.extend_from_slice(&(members.len() as u32).to_le_bytes());
                for m in members {
                    b.extend_from_slice(&m.pid.to_le_bytes());
                    put_address(&mut b, &m.address);
                    b.extend_from_slice(&m.host);
                }
            }
            Message::Post { round, data } => {
                h.push(7);
                h.extend_from_slice(&round.to_le_bytes());
                b.extend_from_slice(data);
            }
            Message::Round { round, data } => {
                h.push(8);
                h.extend_from_slice(&round.to_le_bytes());
                h.extend_from_slice(&(data.len() as u32).to_le_bytes());
                for d in data {
                    b.extend_from_slice(&(d.len() as u32).to_le_bytes());
                }
                for d in data {
                    b.extend_from_slice(d);
                }
            }
            Message::Gone { rank, address } => {
                h.push(9);
                h.extend_from_slice(&rank.to_le_bytes());
                put_address(&mut h, address);
            }
        }
        (h, b)
    }
}

/// Reads fields off the front of the bytes.
struct Reader<'a>(&'a [u8], &'static str);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8], Malformed> {
        if self.0.len() < n {
            return Err(Malformed(format!(
                "{field} needs {n} bytes, {} left in the {}",
                self.0.len(),
                self.1
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

    fn u8(&mut self, field: &str) -> Result<u8, Malformed> {
        Ok(self.array::<1>(field)?[0])
    }

    fn u32(&mut self, field: &str) -> Result<u32, Malformed> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    /// A count or length of at most `max`.
    fn bounded(&mut self, field: &str, max: usize) -> Result<usize, Malformed> {
        let n = self.u32(field)? as usize;
        if n > max {
            return Err(Malformed(format!("{field} {n} is over the most, {max}")));
        }
        Ok(n)
    }

    fn address(&mut self) -> Result<SocketAddr, Malformed> {
        let family = self.u8("address family")?;
        let ip: [u8; 16] = self.array("address")?;
        let port = u16::from_le_bytes(self.array("port")?);
        let ip = match family {
            4 if ip[4..].iter().all(|b| *b == 0) => {
                IpAddr::V4(Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3]))
            }
            4 => return Err(Malformed("an IPv4 address with bytes past its 4".into())),
            6 => IpAddr::V6(Ipv6Addr::from(ip)),
            f => return Err(Malformed(format!("address family {f}"))),
        };
        Ok(SocketAddr::new(ip, port))
    }

    fn name(self, field: &str) -> Result<String, Malformed> {
        if self.0.len() > MAX_NAME {
            return Err(Malformed(format!(
                "{field} of {} bytes is over the most, {MAX_NAME}",
                self.0.len()
            )));
        }
        std::str::from_utf8(self.0)
            .map(str::to_string)
            .map_err(|_| Malformed(format!("{field} is not UTF-8")))
    }

    fn end(self) -> Result<(), Malformed> {
        match self.0.len() {
            0 => Ok(()),
            n => Err(Malformed(format!("{n} bytes after the {}", self.1))),
        }
    }
}

/// The message `head` and `body` hold.
pub(crate) fn decode(head: &[u8], body: &[u8]) -> Result<Message, Malformed> {
    let mut h = Reader(head, "head");
    let mut b = Reader(body, "body");
    if h.array::<2>("magic")? != MAGIC {
        return Err(Malformed("not a group message (magic)".into()));
    }
    let m = match h.u8("type")? {
        1 => {
            let size = h.u32("size")?;
            let max_payload = h.u32("payload limit")?;
            let nonce = h.array("nonce")?;
            let name = b.name("the name")?;
            return h.end().map(|()| Message::Hello {
                size,
                max_payload,
                nonce,
                name,
            });
        }
        2 => Message::Challenge {
            nonce: h.array("nonce")?,
            proof: h.array("proof")?,
        },
        3 => Message::Proof {
            proof: h.array("proof")?,
            pid: h.u32("pid")?,
            address: h.address()?,
            host: h.array("host")?,
        },
        4 => Message::Welcome {
            rank: h.u32("rank")?,
        },
        5 => {
            let c = h.u8("reason")?;
            let why = Refusal::from_code(c).ok_or_else(|| Malformed(format!("reason {c}")))?;
            let joined = h.u32("members joined")?;
            let served = b.name("the served name")?;
            return h.end().map(|()| Message::Denied {
                why,
                joined,
                served,
            });
        }
        6 => {
            let n = h.bounded("members", MAX_MEMBERS)?;
            let mut members = Vec::with_capacity(n);
            for _ in 0..n {
                members.push(Entry {
                    pid: b.u32("pid")?,
                    address: b.address()?,
                    host: b.array("host")?,
                });
            }
            Message::Formed { members }
        }
        7 => {
            let round = h.u32("round")?;
            if body.len() > MAX_PAYLOAD {
                return Err(Malformed(format!(
                    "a post of {} bytes is over the most, {MAX_PAYLOAD}",
                    body.len()
                )));
            }
            b = Reader(&[], "body");
            Message::Post {
                round,
                data: body.to_vec(),
            }
        }
        8 => {
            let round = h.u32("round")?;
            let n = h.bounded("members", MAX_MEMBERS)?;
            let mut lens = Vec::with_capacity(n);
            for _ in 0..n {
                lens.push(b.bounded("a member's length", MAX_PAYLOAD)?);
            }
            let mut data = Vec::with_capacity(n);
            for len in lens {
                data.push(b.take(len, "a member's bytes")?.to_vec());
            }
            Message::Round { round, data }
        }
        9 => Message::Gone {
            rank: h.u32("rank")?,
            address: h.address()?,
        },
        t => return Err(Malformed(format!("type {t}"))),
    };
    h.end()?;
    b.end()?;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Message> {
        let v4: SocketAddr = "192.0.2.1:4000".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::7]:65535".parse().unwrap();
        vec![
            Message::Hello {
                size: 8,
                max_payload: 4096,
                nonce: [7; 16],
                name: "shards".into(),
            },
            Message::Challenge {
                nonce: [1; 16],
                proof: [2; 32],
            },
            Message::Proof {
                proof: [3; 32],
                pid: 77,
                address: v4,
                host: [9; 16],
            },
            Message::Proof {
                proof: [3; 32],
                pid: 0,
                address: v6,
                host: [0; 16],
            },
            Message::Welcome { rank: 3 },
            Message::Denied {
                why: Refusal::OtherGroup,
                joined: 2,
                served: "other".into(),
            },
            Message::Denied {
                why: Refusal::Secret,
                joined: 0,
                served: String::new(),
            },
            Message::Formed {
                members: vec![
                    Entry {
                        pid: 1,
                        address: v4,
                        host: [1; 16],
                    },
                    Entry {
                        pid: 2,
                        address: v6,
                        host: [2; 16],
                    },
                ],
            },
            Message::Post {
                round: 1,
                data: b"abc".to_vec(),
            },
            Message::Post {
                round: 2,
                data: vec![],
            },
            Message::Round {
                round: 5,
                data: vec![b"x".to_vec(), vec![], b"yz".to_vec()],
            },
            Message::Gone {
                rank: 4,
                address: v6,
            },
        ]
    }

    #[test]
    fn every_message_round_trips_and_every_cut_or_extension_is_refused() {
        for m in all() {
            let (h, b) = m.encode();
            assert_eq!(decode(&h, &b), Ok(m.clone()));
            for n in 0..h.len() {
                assert!(decode(&h[..n], &b).is_err(), "{m:?}'s head cut at {n}");
            }
            let mut longer = h.clone();
            longer.push(0);
            assert!(decode(&longer, &b).is_err(), "{m:?}'s head extended");
            // A body cut or extended is refused where its length is known
            // (a post's and a name's are the whole body).
            let open = matches!(
                m,
                Message::Post { .. } | Message::Hello { .. } | Message::Denied { .. }
            );
            if !open {
                let mut longer = b.clone();
                longer.push(0);
                assert!(decode(&h, &longer).is_err(), "{m:?}'s body extended");
                if !b.is_empty() {
                    assert!(decode(&h, &b[..b.len() - 1]).is_err(), "{m:?}'s body cut");
                }
            }
        }
    }

    /// The input of the `group_message` fuzz target: the head's length
    /// (one byte), the head, the body.
    fn fuzz_input(m: &Message) -> Vec<u8> {
        let (h, b) = m.encode();
        [&[h.len() as u8][..], &h, &b].concat()
    }

    /// The fuzz target's seeds (`fuzz/seeds/group_message/`) are what the
    /// encoder writes, and decode as the target reads them.
    /// `HAL_FUZZ_WRITE_SEEDS=1 cargo test -p hal-ucx --lib group::wire`
    /// writes them again after a change of the messages.
    #[test]
    fn the_fuzz_seeds_are_the_encoders_and_decode() {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/seeds/group_message");
        let write = std::env::var_os("HAL_FUZZ_WRITE_SEEDS").is_some();
        if write {
            std::fs::create_dir_all(&dir).unwrap();
        }
        for (i, m) in all().iter().enumerate() {
            let bytes = fuzz_input(m);
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
            let (n, rest) = bytes.split_first().unwrap();
            let (h, b) = rest.split_at(*n as usize);
            assert_eq!(decode(h, b).as_ref(), Ok(m));
            crate::fuzzing::check_group_message(&bytes);
        }
    }

    #[test]
    fn bounds_and_unknown_values_are_refused() {
        assert!(decode(b"G1\x0a", b"").is_err());
        assert!(decode(b"H1\x04", b"").is_err());
        assert!(decode(b"G1\x05\x09\0\0\0\0", b"").is_err());
        let name = vec![b'a'; MAX_NAME + 1];
        let hello = all()[0].encode().0;
        assert!(decode(&hello, &name).is_err());
        assert!(decode(&hello, &[0xff, 0xfe]).is_err());
        // Counts past the most are refused before anything is read.
        let many = ((MAX_MEMBERS + 1) as u32).to_le_bytes();
        let formed = [&b"G1\x06"[..], &many].concat();
        assert!(decode(&formed, b"").is_err());
        let round = [&b"G1\x08\x01\0\0\0"[..], &many].concat();
        assert!(decode(&round, b"").is_err());
        let huge = ((MAX_PAYLOAD + 1) as u32).to_le_bytes();
        let one = [&b"G1\x08\x01\0\0\0\x01\0\0\0"[..]].concat();
        assert!(decode(&one, &huge).is_err());
        assert!(decode(b"G1\x07\x01\0\0\0", &vec![0; MAX_PAYLOAD + 1]).is_err());
        // An IPv4 address with bytes past its four, and an unknown family.
        let (mut gone, _) = all()[11].encode();
        gone[7] = 4;
        assert!(decode(&gone, b"").is_err());
        gone[7] = 5;
        assert!(decode(&gone, b"").is_err());
        let mut v4 = all()[2].encode().0;
        v4[39 + 1 + 5] = 1;
        assert!(decode(&v4, b"").is_err());
    }
}
