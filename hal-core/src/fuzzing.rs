//! The decoders of bytes another process wrote, for the fuzz targets
//! (`fuzz/`): each function here hands a byte slice to one of the crate's
//! own decoders, unchanged, and reports what it made of it. Built with the
//! feature `fuzzing` (and in this crate's tests); not part of the API.
//!
//! Every function is total: any bytes decode or give [`Refused`], never a
//! panic. A panic in one is a bug of the decoder it calls.
//!
//! | function | decoder | where the bytes come from |
//! | --- | --- | --- |
//! | [`channel_record`] | `channel::record::Record::decode` | a channel's name file |
//! | [`channel_region`] | `channel::layout::read_shape`, then `Control`'s readers | a channel's control region |
//! | [`group_record`] | `group::record::decode` | a group's name file |
//! | [`group_board`] | `group::layout::read_shape`, then `Board`'s readers | a group's board |
//! | [`broker_board`] | `Page::header`, `Page::find`, `Page::still` | an exporter's direct-import board |
//!
//! Tensor and memory handles need no wrapper: their decoders
//! ([`TensorHandle::from_bytes`](crate::dlpack::TensorHandle::from_bytes),
//! [`Handle::from_text`](crate::Handle::from_text), ...) are public.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;

use crate::channel::layout::{self as channel_layout, Control};
use crate::channel::record::Record;
use crate::exchange::broker::board::binding;
use crate::exchange::broker::board::page::{self, Page};
use crate::group::layout::{self as group_layout, Board};
use crate::group::record as group_record;
use crate::kit::os::{self, Prot, SharedMap};

/// Why a decoder refused its input, in its own words (or, for a decoder
/// that answers `None`, what it did not find).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl From<crate::Error> for Refused {
    fn from(e: crate::Error) -> Refused {
        Refused(e.to_string())
    }
}

/// The bytes of an in-memory file of `len` bytes holding `bytes` (cut to
/// `len`) and zeros after them, the way a peer's region would be.
fn region(name: &str, len: u64, bytes: &[u8]) -> Result<OwnedFd, Refused> {
    let fd = os::memfd(name, len, None)?;
    let file = File::from(fd);
    let take = bytes.len().min(usize::try_from(len).unwrap_or(usize::MAX));
    file.write_all_at(&bytes[..take], 0)
        .map_err(|e| Refused(format!("writing the region: {e}")))?;
    Ok(OwnedFd::from(file))
}

/// A channel's name file: `bytes` is the whole file. `Ok` holds the
/// record's encoding (what a publisher writes for the record decoded: the
/// input, save the bytes the record does not use, 60 to 64, as zeros).
pub fn channel_record(bytes: &[u8]) -> Result<Vec<u8>, Refused> {
    Record::decode(bytes)
        .map(|r| r.encode().to_vec())
        .ok_or_else(|| Refused("no channel record".into()))
}

/// The length of the region [`channel_region`] maps, at most: the longest
/// channel's (4,096 slots, or 256 stream-ordered ones) is under 300 KiB.
const MAX_REGION: u64 = 1 << 20;

/// A channel's control region: the first 8 bytes of `bytes` are the
/// region's length (`u64`, little-endian, as `fstat` would give it), the
/// rest its first bytes (zeros follow to its length). The head is checked
/// as a subscriber checks it (`read_shape`); a region whose head states a
/// channel is then mapped and read whole as a subscriber reads it: the
/// slots' handle text, the publisher, every slot's sample word, length
/// and event handle, every subscriber entry. `Ok` says what it read.
pub fn channel_region(bytes: &[u8]) -> Result<String, Refused> {
    let (len, body) = bytes.split_at(bytes.len().min(8));
    let mut word = [0u8; 8];
    word[..len.len()].copy_from_slice(len);
    let file_len = u64::from_le_bytes(word);
    let mut head = [0u8; channel_layout::HEAD_READ];
    let take = body.len().min(head.len());
    head[..take].copy_from_slice(&body[..take]);
    let shape = channel_layout::read_shape(&head, file_len)
        .ok_or_else(|| Refused("no channel's head".into()))?;
    if file_len > MAX_REGION {
        return Err(Refused(format!(
            "a channel's region of {file_len} bytes, over the longest"
        )));
    }
    let fd = region("hal-fuzz-channel", file_len, body)?;
    let map = SharedMap::map(fd.as_fd(), file_len, 0, Prot::ReadWrite, None)?;
    let control = Control::new(map, shape)?;
    let mut out = format!(
        "{shape:?} handle {:?} publisher {:?}",
        control.handle_text(),
        control.publisher()?
    );
    for slot in 0..control.slots() {
        let word = control
            .sample_word(slot)?
            .load(std::sync::atomic::Ordering::Acquire);
        out += &format!(
            " slot {slot}: {word:#x} {:?} {:?}",
            control.sample_len(slot),
            control.event_text(slot)
        );
    }
    for i in 0..channel_layout::MAX_SUBSCRIBERS {
        out += &format!(" subscriber {i}: {:?}", control.subscriber(i)?);
    }
    Ok(out)
}

/// A group's name file: `bytes` is the whole file. `Ok` holds the name's
/// encoding (what members write for the name decoded: the input, save the
/// bytes the name does not use as zeros, and an entry of pid 0 as zeros).
pub fn group_record(bytes: &[u8]) -> Result<Vec<u8>, Refused> {
    let names = group_record::decode(bytes).ok_or_else(|| Refused("no group's name".into()))?;
    let founder = group_record::Holder {
        pid: 0,
        fd: 0,
        start: 0,
    };
    let mut out = group_record::encode(names.shape, (names.dev, names.ino), founder);
    for (i, holder) in names.holders.iter().enumerate() {
        let at = group_record::entry_at(i) as usize;
        out[at..at + group_record::ENTRY_LEN].copy_from_slice(&group_record::encode_entry(*holder));
    }
    Ok(out)
}

/// A group's board: `bytes` are its first bytes (zeros follow to the
/// length of the shape its header states). The header is checked as a
/// joiner checks it (`read_shape`); a board of at most 1 MiB is then
/// mapped and read as members read it: every slot's member, state, round
/// and the payloads of its last two rounds. `Ok` says what it read.
pub fn group_board(bytes: &[u8]) -> Result<String, Refused> {
    let mut head = [0u8; 16];
    let take = bytes.len().min(head.len());
    head[..take].copy_from_slice(&bytes[..take]);
    let shape =
        group_layout::read_shape(&head).ok_or_else(|| Refused("no group's board".into()))?;
    let len = shape.board_len();
    if len > MAX_REGION {
        // A shape in range, of more members or a larger capacity than
        // this wrapper maps for each input.
        return Ok(format!("{shape:?}, not mapped"));
    }
    let fd = region("hal-fuzz-group", len, bytes)?;
    let map = SharedMap::map(fd.as_fd(), len, 0, Prot::ReadWrite, None)?;
    let board = Board::new(map, shape)?;
    let mut out = format!("{shape:?}");
    for i in 0..board.members() {
        let round = board.round(i)?;
        out += &format!(
            " member {i}: {:?} {:?} round {round} {:?} {:?}",
            board.member(i)?,
            board.state(i)?,
            board.payload(i, round),
            board.payload(i, round.wrapping_add(1)),
        );
    }
    Ok(out)
}

/// Bytes of the object id and of the header at the start of
/// [`broker_board`]'s input.
const BOARD_ID_LEN: usize = 16;
const BOARD_HEADER_LEN: usize = 32;

/// An exporter's direct-import board. `bytes` is an object id (16 bytes),
/// the board's header (32 bytes) and then entries (256 bytes each),
/// written at the home entry of the id's key and the ones after it, as the exporter
/// would have placed them; the rest of the board is zeros. The board is
/// read as an importer reads it: the header, the id's entry, and whether
/// that entry is still live. `Ok` says what it read.
pub fn broker_board(bytes: &[u8]) -> Result<String, Refused> {
    let mut id = [0u8; BOARD_ID_LEN];
    let take = bytes.len().min(BOARD_ID_LEN);
    id[..take].copy_from_slice(&bytes[..take]);
    let rest = &bytes[take..];
    let (header, entries) = rest.split_at(rest.len().min(BOARD_HEADER_LEN));
    let fd = region("hal-fuzz-board", page::LEN as u64, header)?;
    let file = File::from(fd);
    // The entries from the id's home on (the id's key modulo the entries,
    // as the board places them), wrapping at the end.
    let home = (binding::key(&id) % page::ENTRIES as u64) as usize;
    let table = page::ENTRIES * page::ENTRY_LEN;
    let mut at = home * page::ENTRY_LEN;
    for chunk in entries.chunks(page::ENTRY_LEN).take(page::PROBES) {
        file.write_all_at(chunk, (page::ENTRIES_AT + at) as u64)
            .map_err(|e| Refused(format!("writing the board: {e}")))?;
        at = (at + page::ENTRY_LEN) % table;
    }
    let board = Page::map(&OwnedFd::from(file))?;
    let (pid, pid_ns) = board.header()?;
    let found = board.find(&id);
    let still = found.as_ref().map(|s| board.still(s.index, s.generation));
    Ok(format!("pid {pid} ns {pid_ns}: {found:?}, still {still:?}"))
}

#[cfg(test)]
mod tests {
    //! The seed inputs of the fuzz targets (`fuzz/seeds/TARGET/`), made by
    //! the real encoders where the crate has one, and checked to decode.
    //! `HAL_FUZZ_WRITE_SEEDS=1 cargo test -p hal-core --lib fuzzing` writes
    //! them again after a change of a layout.

    use std::path::PathBuf;

    use super::*;
    use crate::channel::layout::Shape as ChannelShape;
    use crate::channel::Mode;
    use crate::group::layout::Shape as GroupShape;
    use crate::group::record::Holder;

    fn channel_record_seeds() -> Seeds {
        let record = |slots, slot_size, mode, ordered| {
            Record {
                pid: 4242,
                fd: 7,
                start: 123_456,
                dev: 0x1f,
                ino: 99,
                shape: ChannelShape {
                    slots,
                    slot_size,
                    mode,
                    ordered,
                },
            }
            .encode()
            .to_vec()
        };
        vec![
            ("queue-ordered.bin", record(8, 4096, Mode::Queue, true)),
            (
                "broadcast-most.bin",
                record(4096, 1, Mode::Broadcast, false),
            ),
        ]
    }

    fn channel_region_seeds() -> Seeds {
        let head = |slots, mode, ordered| {
            let shape = ChannelShape {
                slots,
                slot_size: 64,
                mode,
                ordered,
            };
            let events: Vec<String> = (0..if ordered { slots } else { 0 })
                .map(|i| format!("hal1.event-of-slot-{i}"))
                .collect();
            let head = channel_layout::new_head(shape, 4242, 123_456, "hal1.slots", &events)
                .expect("a channel's head");
            [&shape.file_len().to_le_bytes()[..], &head].concat()
        };
        vec![
            ("broadcast-2-slots.bin", head(2, Mode::Broadcast, false)),
            ("queue-ordered-3-slots.bin", head(3, Mode::Queue, true)),
        ]
    }

    fn group_record_seeds() -> Seeds {
        let founder = Holder {
            pid: 4242,
            fd: 7,
            start: 9_000_000_001,
        };
        let one = GroupShape {
            members: 1,
            capacity: 0,
        };
        let three = GroupShape {
            members: 3,
            capacity: 100,
        };
        let mut joined = group_record::encode(three, (5, 6), founder);
        let at = group_record::entry_at(2) as usize;
        joined[at..at + group_record::ENTRY_LEN].copy_from_slice(&group_record::encode_entry(
            Some(Holder {
                pid: 4243,
                fd: 8,
                start: 3,
            }),
        ));
        vec![
            (
                "founder-alone.bin",
                group_record::encode(one, (5, 6), founder),
            ),
            ("two-of-three.bin", joined),
        ]
    }

    fn group_board_seeds() -> Seeds {
        let board = |shape: GroupShape, posts: &[(usize, u32, &[u8])]| {
            let len = shape.board_len();
            let fd = os::memfd("hal-fuzz-seed", len, None).unwrap();
            let map = SharedMap::map(fd.as_fd(), len, 0, Prot::ReadWrite, None).unwrap();
            map.write(0, &group_layout::new_header(shape)).unwrap();
            let board = Board::new(map, shape).unwrap();
            for &(i, round, data) in posts {
                if round == 0 {
                    assert!(board.claim(i, 4242 + i as u32, 77).unwrap());
                }
                board.post(i, round, data).unwrap();
            }
            let mut bytes = vec![0u8; len as usize];
            File::from(fd).read_exact_at(&mut bytes, 0).unwrap();
            bytes
        };
        let two = GroupShape {
            members: 2,
            capacity: 64,
        };
        vec![
            ("fresh.bin", board(two, &[])),
            (
                "posted.bin",
                board(two, &[(0, 0, b"round 0"), (1, 0, b"zero"), (1, 1, b"one")]),
            ),
        ]
    }

    /// The board's header and entries by hand, at the offsets of
    /// `exchange/broker/board/page.rs` (`H_*`, `E_*`): the exporter's
    /// writer needs a broker's registrations to run.
    fn broker_board_seeds() -> Seeds {
        let id = *b"fuzz-seed-object";
        let mut header = [0u8; BOARD_HEADER_LEN];
        header[0..8].copy_from_slice(b"HALBOARD"); // magic
        header[8..12].copy_from_slice(&page::VERSION.to_le_bytes());
        header[12..16].copy_from_slice(&(page::ENTRIES as u32).to_le_bytes());
        header[16..20].copy_from_slice(&(page::LEASES as u32).to_le_bytes());
        header[20..24].copy_from_slice(&4242u32.to_le_bytes()); // exporter's pid
        header[24..32].copy_from_slice(&4_026_531_836u64.to_le_bytes()); // its pid namespace
        let entry = |id: &[u8; 16], policy: u32| {
            let mut e = [0u8; page::ENTRY_LEN];
            let mut put = |at: usize, bytes: &[u8]| e[at..at + bytes.len()].copy_from_slice(bytes);
            put(0, &2u32.to_le_bytes()); // sequence word, even: written whole
            put(4, &1u32.to_le_bytes()); // state: live
            put(8, &7u64.to_le_bytes()); // generation
                                         // The id's key and the tag over the descriptors below.
            let located: Vec<crate::exchange::broker::located::Located> = [99u64, 100]
                .iter()
                .zip([5u32, 6])
                .map(|(&ino, fd)| crate::exchange::broker::located::Located { fd, dev: 0x1f, ino })
                .collect();
            put(16, &binding::key(id).to_le_bytes());
            put(24, &binding::tag(id, &located).to_le_bytes());
            put(32, &page::COUNTS_LEASES.to_le_bytes());
            put(36, &policy.to_le_bytes());
            put(40, &1000u32.to_le_bytes()); // uid
            put(44, &2u32.to_le_bytes()); // descriptors
            for (i, (fd, ino)) in [(5u32, 99u64), (6, 100)].into_iter().enumerate() {
                put(48 + 24 * i, &fd.to_le_bytes());
                put(48 + 24 * i + 8, &0x1fu64.to_le_bytes());
                put(48 + 24 * i + 16, &ino.to_le_bytes());
            }
            put(144, &1u32.to_le_bytes()); // allowed pids
            put(152, &4243u32.to_le_bytes());
            put(160, &55u64.to_le_bytes());
            e
        };
        vec![
            ("header-only.bin", [&id[..], &header].concat()),
            (
                "live-entry.bin",
                [&id[..], &header, &entry(&id, page::PIDS)].concat(),
            ),
            (
                "after-another-id.bin",
                [
                    &id[..],
                    &header,
                    &entry(b"another-object!!", page::ANYONE),
                    &entry(&id, page::SAME_USER),
                ]
                .concat(),
            ),
        ]
    }

    type Decoder = fn(&[u8]) -> Result<String, Refused>;
    /// A target's seeds: file name and bytes.
    type Seeds = Vec<(&'static str, Vec<u8>)>;

    fn targets() -> Vec<(&'static str, Seeds, Decoder)> {
        vec![
            ("channel_record", channel_record_seeds(), |b| {
                channel_record(b).map(|c| format!("{c:?}"))
            }),
            ("channel_region", channel_region_seeds(), channel_region),
            ("group_record", group_record_seeds(), |b| {
                group_record(b).map(|c| format!("{c:?}"))
            }),
            ("group_board", group_board_seeds(), group_board),
            ("broker_board", broker_board_seeds(), broker_board),
        ]
    }

    #[test]
    fn the_seeds_are_the_encoders_and_decode() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds");
        let write = std::env::var_os("HAL_FUZZ_WRITE_SEEDS").is_some();
        for (target, seeds, decode) in targets() {
            let dir = root.join(target);
            if write {
                std::fs::create_dir_all(&dir).unwrap();
            }
            for (name, bytes) in seeds {
                let path = dir.join(name);
                if write {
                    std::fs::write(&path, &bytes).unwrap();
                }
                let stored =
                    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert!(
                    stored == bytes,
                    "{} is not what the encoder writes now",
                    path.display()
                );
                let decoded = decode(&bytes);
                assert!(decoded.is_ok(), "{target}/{name}: {decoded:?}");
            }
        }
    }

    #[test]
    fn the_seeds_decode_to_what_they_state() {
        let record = channel_record_seeds().remove(0).1;
        assert_eq!(channel_record(&record), Ok(record));
        let name = group_record_seeds().remove(1).1;
        assert_eq!(group_record(&name), Ok(name));
        let region = channel_region(&channel_region_seeds().remove(1).1).unwrap();
        assert!(region.contains("Ok(\"hal1.slots\")"), "{region}");
        assert!(region.contains("Ok(\"hal1.event-of-slot-2\")"), "{region}");
        let board = group_board(&group_board_seeds().remove(1).1).unwrap();
        assert!(
            board.contains("round 1 Ok([111, 110, 101]) Ok([122, 101, 114, 111])"),
            "{board}"
        );
        let seeds = broker_board_seeds();
        assert!(broker_board(&seeds[0].1)
            .unwrap()
            .ends_with("None, still None"));
        for (_, seed) in &seeds[1..] {
            let read = broker_board(seed).unwrap();
            assert!(
                read.starts_with("pid 4242 ns 4026531836: Some(Snapshot"),
                "{read}"
            );
            assert!(
                read.contains("generation: 7") && read.ends_with("still Some(true)"),
                "{read}"
            );
        }
    }

    #[test]
    fn short_and_odd_inputs_are_refused_not_panics() {
        for (_, seeds, decode) in targets() {
            assert!(decode(&[]).is_err());
            for (_, seed) in seeds {
                for cut in [1, 7, 8, 9, 15, 16, 47, 48, seed.len() - 1] {
                    let _ = decode(&seed[..cut.min(seed.len())]);
                }
                let mut long = seed.clone();
                long.extend_from_slice(&[0xff; 300]);
                let _ = decode(&long);
            }
        }
        // A channel's head over the longest region, and a group's board
        // too long to map, stated by otherwise good headers.
        let mut region = channel_region_seeds().remove(0).1;
        region[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(channel_region(&region).is_err());
        let mut board = group_board_seeds().remove(0).1;
        board[8..12].copy_from_slice(&4096u32.to_le_bytes());
        board[12..16].copy_from_slice(&(group_layout::MAX_PAYLOAD as u32).to_le_bytes());
        assert_eq!(
            group_board(&board),
            Ok("Shape { members: 4096, capacity: 1048576 }, not mapped".into())
        );
    }
}
