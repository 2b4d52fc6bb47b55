//! The handle codec: round trips of every kind through both encodings, a
//! catalogue of malformed inputs with the error each gives (in every wire
//! version the decoder reads), and property tests that feed the decoders
//! well over 100,000 random and mutated inputs per run.

use std::cell::Cell;

use hal_core::handle::wire::{
    FIXED_LEN, FIXED_LEN_V1, MAGIC, MAX_ENCODED_LEN, MAX_ENCODED_LEN_V1, MAX_PAYLOAD, MAX_PIDS,
    MAX_SOCKET_NAME, MAX_TEXT_LEN, MIN_ENCODED_LEN, MIN_ENCODED_LEN_V1, OLDEST_VERSION,
    TEXT_PREFIX, VERSION,
};
use hal_core::{
    BackendId, FdSource, Handle, HandleError, HandleFlags, HandleKind, Location, PidKind,
};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

// Offsets of the fixed fields (see the table in `hal_core::handle::wire`).
const KIND_AT: usize = 5;
const BACKEND_AT: usize = 6;
const LOCATION_AT: usize = 28;
const LOCATION_ORDINAL_AT: usize = 29;
const SIZE_AT: usize = 33;
const OFFSET_AT: usize = 41;
const FLAGS_AT: usize = 85;
const PID_NS_AT: usize = 89;
const PID_KIND_AT: usize = 97;
const PID_COUNT_AT: usize = 98;
/// Version 1 has neither the pid namespace nor the pid kind.
const PID_COUNT_AT_V1: usize = 89;

/// Every version the decoder reads, newest first.
const VERSIONS: [u8; 2] = [2, 1];

/// The offset of the pid count in `version`; the fields after it follow.
fn pid_count_at(version: u8) -> usize {
    if version == 1 {
        PID_COUNT_AT_V1
    } else {
        PID_COUNT_AT
    }
}

/// A version 2 encoding rewritten as version 1 wrote it: without the pid
/// namespace and pid kind, checksum recomputed.
fn to_v1(v2: &[u8]) -> Vec<u8> {
    assert_eq!(v2[4], 2);
    let mut b = [&v2[..PID_NS_AT], &v2[PID_COUNT_AT..]].concat();
    b[4] = 1;
    reseal(&mut b);
    b
}

/// What the canonical-encoding promise says a version 1 encoding re-encodes
/// to: version 2, with a pid namespace of 0 and pid kind 0 at offset 89.
fn v1_to_v2(v1: &[u8]) -> Vec<u8> {
    let mut b = v1.to_vec();
    b[4] = 2;
    b.splice(PID_NS_AT..PID_NS_AT, [0u8; 9]);
    reseal(&mut b);
    b
}

/// `h` encoded in `version`.
fn encode_as(h: &Handle, version: u8) -> Vec<u8> {
    match version {
        2 => h.to_bytes(),
        1 => to_v1(&h.to_bytes()),
        v => panic!("no encoder for version {v}"),
    }
}

/// The handle `h` becomes after a trip through `version`.
fn through(h: &Handle, version: u8) -> Handle {
    let mut h = h.clone();
    if version == 1 {
        h.pid_kind = PidKind::Os;
        h.creator_pid_ns = 0;
    }
    h
}

/// What an accepted input re-encodes to, by the canonical-encoding promise.
fn canonical(input: &[u8]) -> Vec<u8> {
    if input.get(4) == Some(&1) {
        v1_to_v2(input)
    } else {
        input.to_vec()
    }
}

const KINDS: [HandleKind; 5] = [
    HandleKind::Memory,
    HandleKind::Event,
    HandleKind::Notify,
    HandleKind::Physical,
    HandleKind::Growable,
];

const BACKENDS: [BackendId; 8] = [
    BackendId::CpuShm,
    BackendId::Cuda,
    BackendId::CudaUvm,
    BackendId::Ascend,
    BackendId::MockCuda,
    BackendId::MockAscend,
    BackendId::External(0x8000),
    BackendId::External(0xFFFF),
];

fn fd_sources() -> Vec<FdSource> {
    vec![
        FdSource::None,
        FdSource::Attached { count: 1 },
        FdSource::Attached { count: 255 },
        FdSource::Broker {
            count: 2,
            name: format!("hal-broker-{}", std::process::id()),
        },
        FdSource::Broker {
            count: 1,
            name: "~".repeat(MAX_SOCKET_NAME),
        },
    ]
}

fn sample(kind: HandleKind, backend: BackendId, fds: FdSource) -> Handle {
    Handle {
        kind,
        backend,
        device: 3,
        device_uuid: *b"0123456789abcdef",
        location: Location::Device(3),
        size: 2 << 20,
        offset: 4096,
        address: 0x7f00_dead_0000,
        creator_pid: 4242,
        creator_start: 987_654_321,
        creator_pid_ns: 0xF000_0FFC,
        object_id: [0xA5; 16],
        flags: HandleFlags(HandleFlags::READ_ONLY.0 | HandleFlags::HAS_ADDRESS.0),
        pid_kind: PidKind::Vendor,
        allowed_pids: vec![1, 4242, u32::MAX],
        fds,
        payload: (0..64).collect(),
    }
}

fn simple() -> Handle {
    sample(
        HandleKind::Memory,
        BackendId::CpuShm,
        FdSource::Attached { count: 2 },
    )
}

/// Recompute the checksum of an encoding after editing it.
fn reseal(bytes: &mut [u8]) {
    if let Some(body_len) = bytes.len().checked_sub(4) {
        let crc = crc32fast::hash(&bytes[..body_len]);
        bytes[body_len..].copy_from_slice(&crc.to_le_bytes());
    }
}

/// `simple()` encoded, edited by `edit`, resealed.
fn edited(edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    edited_as(VERSION, edit)
}

/// `simple()` encoded in `version`, edited by `edit`, resealed.
fn edited_as(version: u8, edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut b = encode_as(&simple(), version);
    edit(&mut b);
    reseal(&mut b);
    b
}

fn text_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    format!(
        "{TEXT_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

fn assert_round_trip(h: &Handle) {
    h.validate().unwrap();
    let bytes = h.to_bytes();
    assert!((MIN_ENCODED_LEN..=MAX_ENCODED_LEN).contains(&bytes.len()));
    assert_eq!(Handle::from_bytes(&bytes).as_ref(), Ok(h));
    assert_eq!(h.try_to_bytes().as_ref(), Ok(&bytes));
    let text = h.to_text();
    assert!(text.len() <= MAX_TEXT_LEN);
    assert!(text.starts_with(TEXT_PREFIX));
    assert!(text[TEXT_PREFIX.len()..]
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
    assert_eq!(Handle::from_text(&text).as_ref(), Ok(h));
    assert_eq!(text_of(&bytes), text);

    // The same handle as version 1 wrote it: the new fields at their
    // defaults, re-encoded as version 2.
    let v1 = to_v1(&bytes);
    assert!((MIN_ENCODED_LEN_V1..=MAX_ENCODED_LEN_V1).contains(&v1.len()));
    assert_eq!(v1.len() + FIXED_LEN - FIXED_LEN_V1, bytes.len());
    let old = Handle::from_bytes(&v1).unwrap();
    assert_eq!(old, through(h, 1));
    assert_eq!(old.to_bytes(), v1_to_v2(&v1));
    assert_eq!(Handle::from_text(&text_of(&v1)).as_ref(), Ok(&old));
}

#[test]
fn every_kind_backend_and_fd_source_round_trips() {
    let mut n = 0;
    for kind in KINDS {
        for backend in BACKENDS {
            for fds in fd_sources() {
                for location in [Location::Device(0), Location::Host, Location::Managed] {
                    for pid_kind in [PidKind::Os, PidKind::Vendor] {
                        let mut h = sample(kind, backend, fds.clone());
                        h.location = location;
                        h.pid_kind = pid_kind;
                        assert_round_trip(&h);
                        n += 1;
                    }
                }
            }
        }
    }
    assert_eq!(n, 5 * 8 * 5 * 3 * 2);
}

#[test]
fn every_field_at_its_extremes_round_trips() {
    let mut h = sample(
        HandleKind::Growable,
        BackendId::External(0xABCD),
        FdSource::Broker {
            count: u8::MAX,
            name: " !~"
                .repeat(MAX_SOCKET_NAME)
                .chars()
                .take(MAX_SOCKET_NAME)
                .collect(),
        },
    );
    h.device = u32::MAX;
    h.device_uuid = [0xFF; 16];
    h.location = Location::Device(u32::MAX);
    h.size = u64::MAX - 7;
    h.offset = 7;
    h.address = u64::MAX;
    h.creator_pid = u32::MAX;
    h.creator_start = u64::MAX;
    h.creator_pid_ns = u64::MAX;
    // Every flag but SAME_USER, which stands alone (no allow-list).
    h.flags = HandleFlags(HandleFlags::KNOWN.0 & !HandleFlags::SAME_USER.0);
    h.pid_kind = PidKind::Vendor;
    h.allowed_pids = (0..MAX_PIDS as u32).map(|i| u32::MAX - i).collect();
    h.payload = vec![0xEE; MAX_PAYLOAD];
    assert_round_trip(&h);
    assert_eq!(h.to_bytes().len(), MAX_ENCODED_LEN);
    assert_eq!(h.to_text().len(), MAX_TEXT_LEN);
    assert_eq!(to_v1(&h.to_bytes()).len(), MAX_ENCODED_LEN_V1);

    let mut h = sample(HandleKind::Event, BackendId::CpuShm, FdSource::None);
    h.location = Location::Host;
    h.size = 0;
    h.offset = 0;
    h.flags = HandleFlags::default();
    h.allowed_pids.clear();
    h.payload.clear();
    h.creator_pid_ns = 0;
    h.pid_kind = PidKind::Os;
    assert_round_trip(&h);
    assert_eq!(h.to_bytes().len(), MIN_ENCODED_LEN);
    assert_eq!(to_v1(&h.to_bytes()).len(), MIN_ENCODED_LEN_V1);
}

#[test]
fn layout_matches_the_documented_table() {
    let h = simple();
    let b = h.to_bytes();
    assert_eq!(b[..4], MAGIC);
    assert_eq!(b[4], VERSION);
    assert_eq!(b[KIND_AT], 1);
    assert_eq!(b[BACKEND_AT..BACKEND_AT + 2], [1, 0]);
    assert_eq!(b[8..12], 3u32.to_le_bytes());
    assert_eq!(b[12..28], *b"0123456789abcdef");
    assert_eq!(b[LOCATION_AT], 0);
    assert_eq!(b[LOCATION_ORDINAL_AT..SIZE_AT], 3u32.to_le_bytes());
    assert_eq!(b[SIZE_AT..OFFSET_AT], (2u64 << 20).to_le_bytes());
    assert_eq!(b[OFFSET_AT..49], 4096u64.to_le_bytes());
    assert_eq!(b[49..57], 0x7f00_dead_0000u64.to_le_bytes());
    assert_eq!(b[57..61], 4242u32.to_le_bytes());
    assert_eq!(b[61..69], 987_654_321u64.to_le_bytes());
    assert_eq!(b[69..85], [0xA5; 16]);
    assert_eq!(b[FLAGS_AT..PID_NS_AT], 5u32.to_le_bytes());
    assert_eq!(b[PID_NS_AT..PID_KIND_AT], 0xF000_0FFCu64.to_le_bytes());
    assert_eq!(b[PID_KIND_AT], 1);
    assert_eq!(PID_COUNT_AT, FIXED_LEN);
    assert_eq!(b[PID_COUNT_AT], 3);
    assert_eq!(b[PID_COUNT_AT + 1..PID_COUNT_AT + 5], 1u32.to_le_bytes());
    let fd_at = PID_COUNT_AT + 1 + 12;
    assert_eq!(b[fd_at..fd_at + 2], [1, 2]);
    assert_eq!(b[fd_at + 2..fd_at + 4], 64u16.to_le_bytes());
    assert_eq!(b[fd_at + 4..fd_at + 68], *(0..64).collect::<Vec<u8>>());
    let crc_at = b.len() - 4;
    assert_eq!(crc_at, fd_at + 68);
    assert_eq!(b[crc_at..], crc32fast::hash(&b[..crc_at]).to_le_bytes());
    // The pid kinds.
    let mut h = simple();
    h.pid_kind = PidKind::Os;
    assert_eq!(h.to_bytes()[PID_KIND_AT], 0);
    assert_eq!(PidKind::from_wire(0), Some(PidKind::Os));
    assert_eq!(PidKind::from_wire(1), Some(PidKind::Vendor));
    assert_eq!(PidKind::from_wire(2), None);
    assert_eq!(PidKind::default(), PidKind::Os);
}

/// Version 1, as the first release wrote it (byte for byte, by hand): the
/// layout of version 2 without the pid namespace and pid kind.
#[test]
fn version_1_layout_is_read_as_documented() {
    let mut b = Vec::new();
    b.extend_from_slice(&MAGIC);
    b.push(1); // version
    b.push(3); // notify
    b.extend_from_slice(&0x0101u16.to_le_bytes()); // mock-ascend
    b.extend_from_slice(&7u32.to_le_bytes());
    b.extend_from_slice(&[0x11; 16]);
    b.push(1); // host
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes()); // size
    b.extend_from_slice(&0u64.to_le_bytes()); // offset
    b.extend_from_slice(&0u64.to_le_bytes()); // address
    b.extend_from_slice(&321u32.to_le_bytes()); // creator pid
    b.extend_from_slice(&654u64.to_le_bytes()); // creator start
    b.extend_from_slice(&[0x22; 16]); // object id
    b.extend_from_slice(&0u32.to_le_bytes()); // flags
    assert_eq!(b.len(), FIXED_LEN_V1);
    assert_eq!(b.len(), PID_COUNT_AT_V1);
    b.push(2); // pid count
    b.extend_from_slice(&10u32.to_le_bytes());
    b.extend_from_slice(&20u32.to_le_bytes());
    b.push(0); // no descriptors
    b.extend_from_slice(&3u16.to_le_bytes());
    b.extend_from_slice(b"key");
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(b.len(), MIN_ENCODED_LEN_V1 + 8 + 3);

    let h = Handle::from_bytes(&b).unwrap();
    assert_eq!(
        h,
        Handle {
            kind: HandleKind::Notify,
            backend: BackendId::MockAscend,
            device: 7,
            device_uuid: [0x11; 16],
            location: Location::Host,
            size: 0,
            offset: 0,
            address: 0,
            creator_pid: 321,
            creator_start: 654,
            creator_pid_ns: 0,
            object_id: [0x22; 16],
            flags: HandleFlags::default(),
            pid_kind: PidKind::Os,
            allowed_pids: vec![10, 20],
            fds: FdSource::None,
            payload: b"key".to_vec(),
        }
    );
    assert_eq!(h.same_pid_namespace(), None);
    assert!(!h.is_own());
    // Re-encoded as version 2, the new fields at their defaults.
    let v2 = h.to_bytes();
    assert_eq!(v2, v1_to_v2(&b));
    assert_eq!(v2[4], 2);
    assert_eq!(v2[PID_NS_AT..PID_COUNT_AT], [0; 9]);
    assert_eq!(
        v2[PID_COUNT_AT..v2.len() - 4],
        b[PID_COUNT_AT_V1..b.len() - 4]
    );
    assert_eq!(to_v1(&v2), b);
    assert_eq!(Handle::from_text(&text_of(&b)), Ok(h));
}

#[test]
fn text_form_ignores_surrounding_whitespace() {
    let h = simple();
    let text = h.to_text();
    assert_eq!(Handle::from_text(&format!("{text}\n")).as_ref(), Ok(&h));
    assert_eq!(
        Handle::from_text(&format!(" \t{text}\r\n")).as_ref(),
        Ok(&h)
    );
    // Positions count characters of the text as given.
    let err = Handle::from_text(&format!("  {TEXT_PREFIX}AB+C")).unwrap_err();
    assert_eq!(
        err,
        HandleError::InvalidText {
            position: 2 + TEXT_PREFIX.len() + 2,
            ch: '+'
        }
    );
}

// --- the catalogue of malformed inputs ----------------------------------

#[test]
fn truncated_at_every_length() {
    for version in VERSIONS {
        for h in [
            simple(),
            sample(
                HandleKind::Notify,
                BackendId::Ascend,
                FdSource::Broker {
                    count: 2,
                    name: "hal-broker-x".into(),
                },
            ),
        ] {
            let b = encode_as(&h, version);
            for len in 0..b.len() {
                match Handle::from_bytes(&b[..len]) {
                    Err(HandleError::Truncated {
                        field,
                        offset,
                        needed,
                    }) => {
                        assert!(offset <= len && needed > 0, "{field} at {len}");
                    }
                    other => panic!("v{version} cut at {len} of {}: {other:?}", b.len()),
                }
            }
        }
        let b = encode_as(&simple(), version);
        let field_at = |len: usize| match Handle::from_bytes(&b[..len]) {
            Err(HandleError::Truncated { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field_at(0), "magic");
        assert_eq!(field_at(3), "magic");
        assert_eq!(field_at(4), "version");
        assert_eq!(field_at(KIND_AT), "kind");
        assert_eq!(field_at(SIZE_AT + 7), "size");
        assert_eq!(field_at(FLAGS_AT + 3), "flags");
        let pids_at = pid_count_at(version);
        if version >= 2 {
            assert_eq!(field_at(PID_NS_AT), "creator_pid_ns");
            assert_eq!(field_at(PID_NS_AT + 7), "creator_pid_ns");
            assert_eq!(field_at(PID_KIND_AT), "pid_kind");
        }
        assert_eq!(field_at(pids_at), "pid_count");
        assert_eq!(field_at(pids_at + 5), "allowed_pids");
        assert_eq!(field_at(pids_at + 13), "fd_tag");
        assert_eq!(field_at(b.len() - 1), "checksum");
    }
    assert_eq!(
        Handle::from_bytes(&[]),
        Err(HandleError::Truncated {
            field: "magic",
            offset: 0,
            needed: 4
        })
    );
}

#[test]
fn wrong_magic() {
    let mut b = simple().to_bytes();
    b[0] ^= 1;
    assert_eq!(Handle::from_bytes(&b), Err(HandleError::BadMagic));
    assert_eq!(Handle::from_bytes(b"x"), Err(HandleError::BadMagic));
    // The text form is not the binary form.
    assert_eq!(
        Handle::from_bytes(simple().to_text().as_bytes()),
        Err(HandleError::BadMagic)
    );
}

#[test]
fn unknown_version() {
    assert_eq!((OLDEST_VERSION, VERSION), (1, 2));
    for version in VERSIONS {
        for v in [0, VERSION + 1, 0xFF] {
            let b = edited_as(version, |b| b[4] = v);
            assert_eq!(
                Handle::from_bytes(&b),
                Err(HandleError::UnsupportedVersion {
                    found: v,
                    supported: VERSION
                })
            );
        }
    }
    // A version byte that does not match the layout after it is refused:
    // version 2 bytes read as version 1 find the pid namespace where the
    // pid count belongs, and version 1 bytes read as version 2 come up short.
    assert_eq!(
        Handle::from_bytes(&edited_as(2, |b| b[4] = 1)),
        Err(HandleError::OverBound {
            field: "allowed_pids",
            len: 0xFC,
            max: MAX_PIDS
        })
    );
    assert!(Handle::from_bytes(&edited_as(1, |b| b[4] = 2)).is_err());
}

#[test]
fn unknown_kind() {
    for version in VERSIONS {
        for k in [0, 6, 0xFF] {
            let b = edited_as(version, |b| b[KIND_AT] = k);
            assert_eq!(Handle::from_bytes(&b), Err(HandleError::UnknownKind(k)));
        }
    }
}

#[test]
fn unknown_backend() {
    for version in VERSIONS {
        for id in [0x0000u16, 0x0005, 0x00FF, 0x0102, 0x7FFF] {
            let b = edited_as(version, |b| {
                b[BACKEND_AT..BACKEND_AT + 2].copy_from_slice(&id.to_le_bytes())
            });
            assert_eq!(Handle::from_bytes(&b), Err(HandleError::UnknownBackend(id)));
        }
    }
    // The encoder refuses an external id outside the external range.
    let mut h = simple();
    h.backend = BackendId::External(0x0042);
    assert_eq!(h.validate(), Err(HandleError::UnknownBackend(0x0042)));
    h.backend = BackendId::External(0x0001);
    assert!(matches!(
        h.validate(),
        Err(HandleError::Malformed {
            field: "backend",
            ..
        })
    ));
    // ... and its bytes do not decode as cpu-shm.
    assert!(matches!(
        Handle::from_bytes(&h.to_bytes()),
        Err(HandleError::BadChecksum { .. })
    ));
}

#[test]
fn bad_checksum() {
    for version in VERSIONS {
        let mut b = encode_as(&simple(), version);
        b[SIZE_AT] ^= 0x10;
        let Err(HandleError::BadChecksum { stored, computed }) = Handle::from_bytes(&b) else {
            panic!("a flipped size bit must fail the checksum");
        };
        assert_ne!(stored, computed);
        let mut b = encode_as(&simple(), version);
        let last = b.len() - 1;
        b[last] ^= 0x80;
        assert!(matches!(
            Handle::from_bytes(&b),
            Err(HandleError::BadChecksum { .. })
        ));
    }
    // The new fields are covered by the checksum.
    for at in [PID_NS_AT, PID_NS_AT + 7, PID_KIND_AT] {
        let mut b = simple().to_bytes();
        b[at] ^= 0x01;
        assert!(matches!(
            Handle::from_bytes(&b),
            Err(HandleError::BadChecksum { .. })
        ));
    }
}

#[test]
fn overflowing_offset_plus_size() {
    let err = HandleError::LengthOverflow {
        field: "offset + size",
    };
    for version in VERSIONS {
        let b = edited_as(version, |b| {
            b[SIZE_AT..OFFSET_AT].copy_from_slice(&u64::MAX.to_le_bytes());
            b[OFFSET_AT..OFFSET_AT + 8].copy_from_slice(&1u64.to_le_bytes());
        });
        assert_eq!(Handle::from_bytes(&b), Err(err.clone()));
    }
    let mut h = simple();
    h.size = u64::MAX;
    h.offset = 1;
    assert_eq!(h.validate(), Err(err.clone()));
    assert_eq!(h.try_to_bytes(), Err(err));
    assert!(matches!(
        Handle::from_bytes(&h.to_bytes()),
        Err(HandleError::BadChecksum { .. })
    ));
}

#[test]
fn pids_over_the_bound() {
    let err = HandleError::OverBound {
        field: "allowed_pids",
        len: MAX_PIDS + 1,
        max: MAX_PIDS,
    };
    for version in VERSIONS {
        let at = pid_count_at(version);
        let b = edited_as(version, |b| b[at] = MAX_PIDS as u8 + 1);
        assert_eq!(Handle::from_bytes(&b), Err(err.clone()));
        let b = edited_as(version, |b| b[at] = 0xFF);
        assert!(matches!(
            Handle::from_bytes(&b),
            Err(HandleError::OverBound { len: 255, .. })
        ));
    }
    let mut h = simple();
    h.allowed_pids = (0..1000).collect();
    assert_eq!(
        h.validate(),
        Err(HandleError::OverBound {
            field: "allowed_pids",
            len: 1000,
            max: MAX_PIDS
        })
    );
    assert_eq!(Handle::from_bytes(&h.to_bytes()), Err(err.clone()));
    assert_eq!(Handle::from_text(&h.to_text()), Err(err));
    let b = edited(|b| b[PID_COUNT_AT] = 0xFF);
    assert!(matches!(
        Handle::from_bytes(&b),
        Err(HandleError::OverBound { len: 255, .. })
    ));
}

#[test]
fn payload_over_the_bound() {
    let mut h = simple();
    h.payload = vec![1; MAX_PAYLOAD + 1];
    let err = HandleError::OverBound {
        field: "payload",
        len: MAX_PAYLOAD + 1,
        max: MAX_PAYLOAD,
    };
    assert_eq!(h.validate(), Err(err.clone()));
    assert_eq!(h.try_to_text(), Err(err.clone()));
    for version in VERSIONS {
        assert_eq!(
            Handle::from_bytes(&encode_as(&h, version)),
            Err(err.clone())
        );
    }
    h.payload = vec![1; 70_000];
    for version in VERSIONS {
        assert_eq!(
            Handle::from_bytes(&encode_as(&h, version)),
            Err(err.clone())
        );
    }
    assert!(h.to_bytes().len() <= MAX_ENCODED_LEN + 8);
}

#[test]
fn socket_name_over_the_bound() {
    let h = sample(
        HandleKind::Memory,
        BackendId::CpuShm,
        FdSource::Broker {
            count: 2,
            name: "n".repeat(MAX_SOCKET_NAME + 1),
        },
    );
    let err = HandleError::OverBound {
        field: "socket_name",
        len: MAX_SOCKET_NAME + 1,
        max: MAX_SOCKET_NAME,
    };
    assert_eq!(h.validate(), Err(err.clone()));
    for version in VERSIONS {
        assert_eq!(
            Handle::from_bytes(&encode_as(&h, version)),
            Err(err.clone())
        );
    }
}

#[test]
fn trailing_bytes() {
    for (version, extra) in VERSIONS
        .into_iter()
        .flat_map(|v| [1usize, 3, 4, 10, 1000].map(|e| (v, e)))
    {
        let mut b = encode_as(&simple(), version);
        b.extend(std::iter::repeat_n(0u8, extra));
        assert_eq!(
            Handle::from_bytes(&b),
            Err(HandleError::TrailingBytes(extra))
        );
        assert_eq!(
            Handle::from_text(&text_of(&b)),
            if text_of(&b).len() > MAX_TEXT_LEN {
                Err(HandleError::OverBound {
                    field: "text",
                    len: text_of(&b).len(),
                    max: MAX_TEXT_LEN,
                })
            } else {
                Err(HandleError::TrailingBytes(extra))
            }
        );
    }
}

#[test]
fn invalid_text_characters() {
    let text = simple().to_text();
    let at = TEXT_PREFIX.len() + 10;
    for ch in ['+', '/', '=', ' ', '.', '\0', 'é', '☃'] {
        let mut t = text.clone();
        t.replace_range(at..at + 1, &ch.to_string());
        assert_eq!(
            Handle::from_text(&t),
            Err(HandleError::InvalidText { position: at, ch }),
            "{ch:?}"
        );
    }
    // Standard base64 with padding is not the text form.
    use base64::Engine as _;
    let padded = format!(
        "{TEXT_PREFIX}{}",
        base64::engine::general_purpose::STANDARD.encode(simple().to_bytes())
    );
    assert!(matches!(
        Handle::from_text(&padded),
        Err(HandleError::InvalidText { .. })
    ));
    // A last character with bits beyond the data.
    let mut h = simple();
    h.payload.truncate(62);
    let b = h.to_bytes();
    assert_eq!(
        b.len() % 3,
        1,
        "the text ends in two characters for one byte"
    );
    let mut t = text_of(&b);
    let last = t.len() - 1;
    t.replace_range(last.., "B");
    assert_eq!(
        Handle::from_text(&t),
        Err(HandleError::InvalidText {
            position: last,
            ch: 'B'
        })
    );
}

#[test]
fn bad_prefix() {
    let text = simple().to_text();
    let body = &text[TEXT_PREFIX.len()..];
    for t in [
        String::new(),
        "hal1".into(),
        format!("hal2.{body}"),
        format!("HAL1.{body}"),
        format!("hal1:{body}"),
        body.to_string(),
        "\u{feff}".to_string() + &text,
    ] {
        assert_eq!(
            Handle::from_text(&t),
            Err(HandleError::BadPrefix {
                expected: TEXT_PREFIX
            }),
            "{t:?}"
        );
    }
}

#[test]
fn text_longer_than_the_bound_is_refused_before_decoding() {
    let t = format!("{TEXT_PREFIX}{}", "A".repeat(MAX_TEXT_LEN));
    assert_eq!(
        Handle::from_text(&t),
        Err(HandleError::OverBound {
            field: "text",
            len: t.len(),
            max: MAX_TEXT_LEN
        })
    );
    // Even with characters that would be refused one by one.
    let t = format!("{TEXT_PREFIX}{}", "+".repeat(1 << 20));
    assert!(matches!(
        Handle::from_text(&t),
        Err(HandleError::OverBound { field: "text", .. })
    ));
}

#[test]
fn truncated_text() {
    let text = simple().to_text();
    // Cut anywhere, even inside a byte (the last character then holds bits
    // of a byte that is gone), the text says it is truncated, never that a
    // character is invalid.
    for len in TEXT_PREFIX.len() + 1..text.len() {
        match Handle::from_text(&text[..len]) {
            Err(e @ HandleError::Truncated { .. }) => {
                assert!(e.to_string().starts_with("truncated"), "{e}")
            }
            other => panic!("text cut at {len}: {other:?}"),
        }
    }
    // Five characters cannot be base64 of anything.
    assert_eq!(
        Handle::from_text(&format!("{TEXT_PREFIX}AAAAA")),
        Err(HandleError::Truncated {
            field: "text",
            offset: TEXT_PREFIX.len() + 5,
            needed: 1
        })
    );
}

#[test]
fn malformed_fields() {
    let malformed = |b: &[u8]| match Handle::from_bytes(b) {
        Err(HandleError::Malformed { field, detail }) => {
            assert!(!detail.is_empty());
            field
        }
        other => panic!("{other:?}"),
    };
    let broker = |name: &str, count: u8| {
        sample(
            HandleKind::Memory,
            BackendId::CpuShm,
            FdSource::Broker {
                count,
                name: name.into(),
            },
        )
    };
    for version in VERSIONS {
        let edited = |edit: &dyn Fn(&mut Vec<u8>)| edited_as(version, edit);
        // Unknown flag bits.
        assert_eq!(malformed(&edited(&|b| b[FLAGS_AT + 3] = 0x80)), "flags");
        // Unknown location tag, and an ordinal on host memory.
        assert_eq!(malformed(&edited(&|b| b[LOCATION_AT] = 3)), "location");
        assert_eq!(
            malformed(&edited(&|b| {
                b[LOCATION_AT] = 1;
                b[LOCATION_ORDINAL_AT] = 1;
            })),
            "location"
        );
        let fd_at = pid_count_at(version) + 1 + 4 * 3;
        // Unknown fd tag.
        assert_eq!(malformed(&edited(&|b| b[fd_at] = 3)), "fd_source");
        // Attached with a count of 0.
        assert_eq!(malformed(&edited(&|b| b[fd_at + 1] = 0)), "fd_source");

        let resealed = |h: Handle, edit: &dyn Fn(&mut Vec<u8>)| {
            let mut b = encode_as(&h, version);
            edit(&mut b);
            reseal(&mut b);
            b
        };
        // Broker with a count of 0, an empty name, a name that is not printable ASCII.
        assert_eq!(malformed(&resealed(broker("abc", 0), &|_| {})), "fd_source");
        assert_eq!(malformed(&resealed(broker("", 1), &|_| {})), "socket_name");
        let name_at = fd_at + 3;
        assert_eq!(
            malformed(&resealed(broker("abc", 1), &|b| b[name_at] = 0xC3)),
            "socket_name"
        );
        assert_eq!(
            malformed(&resealed(broker("abc", 1), &|b| b[name_at + 2] = b'\n')),
            "socket_name"
        );
    }
    // Unknown pid kinds (version 2 only; version 1 has none).
    for kind in [2, 3, 0x80, 0xFF] {
        assert_eq!(malformed(&edited(|b| b[PID_KIND_AT] = kind)), "pid_kind");
    }
    // Any pid namespace is a value.
    for ns in [0, 1, u64::MAX] {
        let b = edited(|b| b[PID_NS_AT..PID_KIND_AT].copy_from_slice(&ns.to_le_bytes()));
        assert_eq!(Handle::from_bytes(&b).unwrap().creator_pid_ns, ns);
    }
    // The encoder refuses the same.
    for h in [
        broker("abc", 0),
        broker("", 1),
        broker("é", 1),
        broker("a\0b", 1),
    ] {
        assert!(
            matches!(h.validate(), Err(HandleError::Malformed { .. })),
            "{h:?}"
        );
        assert!(Handle::from_bytes(&h.to_bytes()).is_err());
    }
    let mut h = simple();
    h.flags = HandleFlags(1 << 31);
    assert!(matches!(
        h.validate(),
        Err(HandleError::Malformed { field: "flags", .. })
    ));
    h.fds = FdSource::Attached { count: 0 };
    assert!(h.validate().is_err());
}

/// `SAME_USER` (any process of the exporter's user) round-trips in both
/// forms on its own, keeps its wire bit, and is refused beside
/// `ANY_IMPORTER`, an allow-list or vendor pids, by the decoder and the
/// encoder alike; a version 1 handle may carry it too (a flag bit, not a
/// field).
#[test]
fn same_user_stands_alone() {
    let mut h = simple();
    h.flags = HandleFlags(HandleFlags::READ_ONLY.0 | HandleFlags::SAME_USER.0);
    h.allowed_pids.clear();
    h.pid_kind = PidKind::Os;
    assert_round_trip(&h);
    assert_eq!(HandleFlags::SAME_USER.0, 0x20);
    let bytes = h.to_bytes();
    assert_eq!(bytes[FLAGS_AT], 0x21);
    let v1 = Handle::from_bytes(&to_v1(&bytes)).unwrap();
    assert!(v1.flags.contains(HandleFlags::SAME_USER) && v1.creator_pid_ns == 0);
    assert!(h.allows(12345), "the broker checks the user, not the pid");
    let refused = |h: &Handle| {
        assert!(
            matches!(
                h.validate(),
                Err(HandleError::Malformed { field: "flags", .. })
            ),
            "{h:?}"
        );
        // Written anyway (bypassing the encoder's check): the decoder refuses it.
        let mut ok = h.clone();
        ok.flags = HandleFlags(h.flags.0 & !HandleFlags::SAME_USER.0);
        let mut b = ok.to_bytes();
        b[FLAGS_AT] |= 0x20;
        reseal(&mut b);
        match Handle::from_bytes(&b) {
            Err(HandleError::Malformed {
                field: "flags",
                detail,
            }) => {
                assert!(detail.contains("SAME_USER"), "{detail}")
            }
            other => panic!("{other:?}"),
        }
    };
    let mut any = h.clone();
    any.flags.insert(HandleFlags::ANY_IMPORTER);
    refused(&any);
    let mut listed = h.clone();
    listed.allowed_pids = vec![7];
    refused(&listed);
    let mut vendor = h.clone();
    vendor.pid_kind = PidKind::Vendor;
    refused(&vendor);
}

#[test]
fn the_catalogue_gives_distinct_variants() {
    fn variant(e: &HandleError) -> &'static str {
        match e {
            HandleError::Truncated { .. } => "Truncated",
            HandleError::BadMagic => "BadMagic",
            HandleError::UnsupportedVersion { .. } => "UnsupportedVersion",
            HandleError::UnknownKind(_) => "UnknownKind",
            HandleError::UnknownBackend(_) => "UnknownBackend",
            HandleError::BadChecksum { .. } => "BadChecksum",
            HandleError::LengthOverflow { .. } => "LengthOverflow",
            HandleError::OverBound { .. } => "OverBound",
            HandleError::TrailingBytes(_) => "TrailingBytes",
            HandleError::InvalidText { .. } => "InvalidText",
            HandleError::BadPrefix { .. } => "BadPrefix",
            HandleError::Malformed { .. } => "Malformed",
            _ => "other",
        }
    }
    let good = simple().to_bytes();
    let mut flipped = good.clone();
    flipped[SIZE_AT] ^= 1;
    let mut long = good.clone();
    long.push(0);
    let mut pids = simple();
    pids.allowed_pids = vec![0; MAX_PIDS + 1];
    let cases: Vec<(&str, Result<Handle, HandleError>)> = vec![
        ("truncated", Handle::from_bytes(&good[..50])),
        ("wrong magic", Handle::from_bytes(&edited(|b| b[1] = 0))),
        ("unknown version", Handle::from_bytes(&edited(|b| b[4] = 9))),
        (
            "unknown kind",
            Handle::from_bytes(&edited(|b| b[KIND_AT] = 9)),
        ),
        (
            "unknown backend",
            Handle::from_bytes(&edited(|b| b[BACKEND_AT] = 9)),
        ),
        ("bad checksum", Handle::from_bytes(&flipped)),
        (
            "overflowing offset + size",
            Handle::from_bytes(&edited(|b| b[SIZE_AT..OFFSET_AT].fill(0xFF))),
        ),
        ("pids over the bound", Handle::from_bytes(&pids.to_bytes())),
        ("trailing bytes", Handle::from_bytes(&long)),
        ("invalid text", Handle::from_text("hal1.AA*A")),
        ("bad prefix", Handle::from_text("hal0.AAAA")),
        (
            "malformed",
            Handle::from_bytes(&edited(|b| b[LOCATION_AT] = 7)),
        ),
    ];
    let mut seen = std::collections::BTreeSet::new();
    for (name, result) in &cases {
        let err = result.as_ref().expect_err(name);
        assert!(
            seen.insert(variant(err)),
            "{name}: {err:?} repeats a variant"
        );
        assert!(!err.to_string().is_empty());
    }
    assert_eq!(seen.len(), cases.len());
    assert!(!seen.contains("other"));
}

// --- named regression inputs --------------------------------------------

/// Inputs that once pointed at a weak spot of the decoder, kept by name.
#[test]
fn regressions() {
    // A prefix of the magic is a truncation, not bad magic.
    assert!(matches!(
        Handle::from_bytes(&MAGIC[..2]),
        Err(HandleError::Truncated { field: "magic", .. })
    ));
    // A maximal pid count with no pids after it.
    let mut b = simple().to_bytes();
    b.truncate(PID_COUNT_AT);
    b.push(MAX_PIDS as u8);
    assert!(matches!(
        Handle::from_bytes(&b),
        Err(HandleError::Truncated {
            field: "allowed_pids",
            needed: 256,
            ..
        })
    ));
    // A payload length just past the bound, the bytes absent.
    let mut h = simple();
    h.payload.clear();
    let mut b = h.to_bytes();
    let at = b.len() - 6;
    b[at..at + 2].copy_from_slice(&(MAX_PAYLOAD as u16 + 1).to_le_bytes());
    assert!(matches!(
        Handle::from_bytes(&b),
        Err(HandleError::OverBound {
            field: "payload",
            ..
        })
    ));
    // A payload length of u16::MAX.
    b[at..at + 2].copy_from_slice(&u16::MAX.to_le_bytes());
    assert!(matches!(
        Handle::from_bytes(&b),
        Err(HandleError::OverBound { len: 65535, .. })
    ));
    // Only the checksum of a valid handle is missing: four bytes needed.
    let b = simple().to_bytes();
    assert_eq!(
        Handle::from_bytes(&b[..b.len() - 4]),
        Err(HandleError::Truncated {
            field: "checksum",
            offset: b.len() - 4,
            needed: 4
        })
    );
    // The empty text body decodes to no bytes.
    assert!(matches!(
        Handle::from_text(TEXT_PREFIX),
        Err(HandleError::Truncated { field: "magic", .. })
    ));
    // A non-ASCII character right after the prefix.
    assert_eq!(
        Handle::from_text("hal1.é"),
        Err(HandleError::InvalidText {
            position: 5,
            ch: 'é'
        })
    );
    // Whitespace alone.
    assert!(matches!(
        Handle::from_text(" \n"),
        Err(HandleError::BadPrefix { .. })
    ));
    // A location tag of 0 keeps its ordinal; tags 1 and 2 must have none.
    let b = edited(|b| {
        b[LOCATION_AT] = 2;
        b[LOCATION_ORDINAL_AT..SIZE_AT].fill(0);
    });
    assert_eq!(Handle::from_bytes(&b).unwrap().location, Location::Managed);
}

// --- property tests -----------------------------------------------------

fn arb_backend() -> impl Strategy<Value = BackendId> {
    prop_oneof![
        Just(BackendId::CpuShm),
        Just(BackendId::Cuda),
        Just(BackendId::CudaUvm),
        Just(BackendId::Ascend),
        Just(BackendId::MockCuda),
        Just(BackendId::MockAscend),
        (0x8000u16..=0xFFFF).prop_map(BackendId::External),
    ]
}

fn arb_location() -> impl Strategy<Value = Location> {
    prop_oneof![
        any::<u32>().prop_map(Location::Device),
        Just(Location::Host),
        Just(Location::Managed),
    ]
}

fn arb_fds() -> impl Strategy<Value = FdSource> {
    prop_oneof![
        Just(FdSource::None),
        (1u8..).prop_map(|count| FdSource::Attached { count }),
        (1u8.., "[ -~]{1,107}").prop_map(|(count, name)| FdSource::Broker { count, name }),
    ]
}

fn arb_handle() -> impl Strategy<Value = Handle> {
    let ids = (
        prop::sample::select(KINDS.to_vec()),
        arb_backend(),
        any::<u32>(),
        any::<[u8; 16]>(),
        arb_location(),
        prop_oneof![Just(0u64), any::<u64>()],
        prop::sample::select(vec![PidKind::Os, PidKind::Vendor]),
    );
    let range = any::<u64>().prop_flat_map(|size| (Just(size), 0..=u64::MAX - size));
    let rest = (
        range,
        any::<u64>(),
        any::<u32>(),
        any::<u64>(),
        any::<[u8; 16]>(),
        0..=HandleFlags::KNOWN.0,
        prop::collection::vec(any::<u32>(), 0..=MAX_PIDS),
        arb_fds(),
        prop::collection::vec(any::<u8>(), 0..=MAX_PAYLOAD),
    );
    (ids, rest).prop_map(
        |(
            (kind, backend, device, device_uuid, location, creator_pid_ns, pid_kind),
            (
                (size, offset),
                address,
                creator_pid,
                creator_start,
                object_id,
                flags,
                allowed_pids,
                fds,
                payload,
            ),
        )| {
            // SAME_USER stands alone: no ANY_IMPORTER, no pids, OS pid kind.
            let same_user = flags & HandleFlags::SAME_USER.0 != 0;
            Handle {
                kind,
                backend,
                device,
                device_uuid,
                location,
                size,
                offset,
                address,
                creator_pid,
                creator_start,
                creator_pid_ns,
                object_id,
                flags: HandleFlags(if same_user {
                    flags & !HandleFlags::ANY_IMPORTER.0
                } else {
                    flags
                }),
                pid_kind: if same_user { PidKind::Os } else { pid_kind },
                allowed_pids: if same_user { Vec::new() } else { allowed_pids },
                fds,
                payload,
            }
        },
    )
}

fn property_config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(property_config(512))]

    #[test]
    fn valid_handles_round_trip(h in arb_handle()) {
        prop_assert_eq!(h.validate(), Ok(()));
        let bytes = h.to_bytes();
        prop_assert_eq!(Handle::from_bytes(&bytes), Ok(h.clone()));
        prop_assert_eq!(Handle::from_text(&h.to_text()), Ok(h.clone()));
        let v1 = to_v1(&bytes);
        prop_assert_eq!(Handle::from_bytes(&v1), Ok(through(&h, 1)));
        prop_assert_eq!(through(&h, 1).to_bytes(), v1_to_v2(&v1));
    }
}

/// A small deterministic generator for the mutations (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn byte(&mut self) -> u8 {
        const INTERESTING: [u8; 10] = [0, 1, 2, 3, 0x40, 0x41, 0x7F, 0x80, 0xFE, 0xFF];
        if self.below(2) == 0 {
            INTERESTING[self.below(INTERESTING.len())]
        } else {
            self.next() as u8
        }
    }
}

/// One mutant of `a` (with `b` as splice material).
fn mutate(rng: &mut Rng, a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut m = a.to_vec();
    let rounds = 1 + rng.below(3);
    for _ in 0..rounds {
        match rng.below(9) {
            0 => {
                for _ in 0..1 + rng.below(4) {
                    let i = rng.below(m.len());
                    if let Some(x) = m.get_mut(i) {
                        *x ^= 1 << rng.below(8);
                    }
                }
            }
            1 => {
                let i = rng.below(m.len());
                if let Some(x) = m.get_mut(i) {
                    *x = rng.byte();
                }
            }
            2 => m.truncate(rng.below(m.len() + 1)),
            3 => {
                let i = rng.below(m.len() + 1);
                let j = rng.below(b.len() + 1);
                m.truncate(i);
                m.extend_from_slice(&b[j..]);
            }
            4 => {
                let i = rng.below(m.len() + 1);
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.byte()).collect();
                m.splice(i..i, bytes);
            }
            5 => {
                let i = rng.below(m.len() + 1);
                let j = (i + 1 + rng.below(16)).min(m.len());
                m.drain(i..j);
            }
            6 => {
                // A field of the fixed part set to an interesting value.
                let at = [
                    4,
                    KIND_AT,
                    BACKEND_AT,
                    BACKEND_AT + 1,
                    LOCATION_AT,
                    FLAGS_AT,
                    PID_NS_AT,
                    PID_KIND_AT,
                    PID_COUNT_AT,
                    PID_COUNT_AT_V1,
                ];
                let i = at[rng.below(at.len())];
                if let Some(x) = m.get_mut(i) {
                    *x = rng.byte();
                }
            }
            7 => {
                let n = rng.below(MAX_ENCODED_LEN + 64);
                m = (0..n).map(|_| rng.next() as u8).collect();
                if rng.below(2) == 0 && m.len() >= 5 {
                    m[..4].copy_from_slice(&MAGIC);
                    m[4] = VERSIONS[rng.below(VERSIONS.len())];
                }
            }
            _ => {
                let n = rng.below(m.len() + 1);
                let i = rng.below(m.len() + 1);
                let chunk: Vec<u8> = m[i..].iter().take(n).copied().collect();
                m.splice(i..i, chunk);
            }
        }
    }
    // Half the mutants get a correct checksum, so the checks after it run too.
    if rng.below(2) == 0 {
        reseal(&mut m);
    }
    m
}

fn check_error(e: &HandleError, input_len: usize) {
    match e {
        HandleError::Truncated { offset, needed, .. } => {
            assert!(*offset <= input_len && *needed > 0, "{e:?} of {input_len}");
        }
        HandleError::TrailingBytes(n) => assert!(*n > 0 && *n < input_len, "{e:?}"),
        HandleError::BadChecksum { stored, computed } => assert_ne!(stored, computed),
        HandleError::WrongKind { .. }
        | HandleError::WrongBackend { .. }
        | HandleError::Descriptors(_) => panic!("the decoder gave an import error: {e:?}"),
        _ => {}
    }
    assert!(!e.to_string().is_empty());
}

/// Decode `input`; an accepted input must be canonical: version 2
/// re-encodes to itself, version 1 to its version 2 form.
fn check_bytes(input: &[u8]) {
    match Handle::from_bytes(input) {
        Ok(h) => {
            assert_eq!(h.validate(), Ok(()));
            if input[4] == 1 {
                assert_eq!((h.pid_kind, h.creator_pid_ns), (PidKind::Os, 0));
            }
            assert_eq!(
                h.to_bytes(),
                canonical(input),
                "an accepted input is not canonical"
            );
        }
        Err(e) => check_error(&e, input.len()),
    }
}

fn check_text(input: &str) {
    match Handle::from_text(input) {
        Ok(h) => {
            use base64::Engine as _;
            let trimmed = input.trim_matches(|c: char| c.is_ascii_whitespace());
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(&trimmed[TEXT_PREFIX.len()..])
                .unwrap();
            assert_eq!(
                h.to_text(),
                text_of(&canonical(&bytes)),
                "an accepted text is not canonical"
            );
        }
        Err(HandleError::InvalidText { position, ch }) => {
            assert!(
                input.get(position..).is_some_and(|s| s.starts_with(ch)),
                "{ch:?} is not at {position} of {input:?}"
            );
        }
        Err(e) => check_error(&e, usize::MAX),
    }
}

const MUTANTS_PER_CASE: usize = 50;
const CASES: u32 = 2_000;
const MIN_INPUTS: usize = 100_000;

#[test]
fn random_and_mutated_bytes_never_panic() {
    let mut runner = TestRunner::new(property_config(CASES));
    let fed = Cell::new(0usize);
    runner
        .run(
            &(arb_handle(), arb_handle(), any::<u64>()),
            |(a, b, seed)| {
                let (mut a, mut b) = (a.to_bytes(), b.to_bytes());
                // A quarter of the cases start from version 1 encodings.
                if seed % 4 == 0 {
                    a = to_v1(&a);
                }
                if seed % 8 < 2 {
                    b = to_v1(&b);
                }
                let mut rng = Rng(seed | 1);
                check_bytes(&a);
                for _ in 0..MUTANTS_PER_CASE - 1 {
                    check_bytes(&mutate(&mut rng, &a, &b));
                }
                fed.set(fed.get() + MUTANTS_PER_CASE);
                Ok(())
            },
        )
        .unwrap();
    assert!(fed.get() >= MIN_INPUTS, "fed only {}", fed.get());
}

#[test]
fn random_and_mutated_texts_never_panic() {
    const CHARS: [char; 16] = [
        'A', 'z', '0', '-', '_', '+', '/', '=', '.', ' ', '\n', '\0', 'é', '☃', 'h', '1',
    ];
    let mut runner = TestRunner::new(property_config(CASES));
    let fed = Cell::new(0usize);
    runner
        .run(
            &(arb_handle(), arb_handle(), any::<u64>()),
            |(a, b, seed)| {
                let (mut ba, bb) = (a.to_bytes(), b.to_bytes());
                if seed % 4 == 0 {
                    ba = to_v1(&ba);
                }
                let (ta, tb) = (text_of(&ba), b.to_text());
                let mut rng = Rng(seed | 1);
                check_text(&ta);
                for _ in 0..MUTANTS_PER_CASE - 1 {
                    let t = match rng.below(4) {
                        // Base64 of a mutated encoding: reaches the binary checks.
                        0 | 1 => text_of(&mutate(&mut rng, &ba, &bb)),
                        // Character edits of the text itself.
                        2 => {
                            let mut chars: Vec<char> = ta.chars().collect();
                            for _ in 0..1 + rng.below(3) {
                                let i = rng.below(chars.len() + 1);
                                let c = CHARS[rng.below(CHARS.len())];
                                match rng.below(3) {
                                    0 if i < chars.len() => chars[i] = c,
                                    1 => chars.insert(i, c),
                                    _ => chars.truncate(i),
                                }
                            }
                            chars.into_iter().collect()
                        }
                        // Splices of two texts at character boundaries.
                        _ => {
                            let i = rng.below(ta.len() + 1);
                            let j = rng.below(tb.len() + 1);
                            format!("{}{}", &ta[..i], &tb[j..])
                        }
                    };
                    check_text(&t);
                }
                fed.set(fed.get() + MUTANTS_PER_CASE);
                Ok(())
            },
        )
        .unwrap();
    assert!(fed.get() >= MIN_INPUTS, "fed only {}", fed.get());
}

/// The corpus a 10-minute run of the `decode_handle` fuzz target kept (the
/// inputs that reached new decoder paths), replayed on every test run: each
/// input decodes or gives a typed error, whatever decodes round-trips, and
/// the corpus still reaches many distinct refusals.
#[test]
fn fuzz_corpus_replays_without_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/decode_handle");
    let mut n = 0;
    let mut refusals = std::collections::BTreeSet::new();
    let mut note = |e: HandleError| {
        let name = format!("{e:?}");
        let end = name.find([' ', '(']).unwrap_or(name.len());
        refusals.insert(name[..end].to_string());
    };
    for entry in std::fs::read_dir(&dir).expect("the corpus directory is part of the repository") {
        let bytes = std::fs::read(entry.expect("readable corpus entry").path())
            .expect("readable corpus file");
        match Handle::from_bytes(&bytes) {
            Ok(h) => assert_eq!(Handle::from_bytes(&h.to_bytes()).as_ref(), Ok(&h)),
            Err(e) => note(e),
        }
        if let Ok(t) = hal_core::dlpack::TensorHandle::from_bytes(&bytes) {
            let again = hal_core::dlpack::TensorHandle::from_bytes(&t.to_bytes());
            assert_eq!(again.as_ref(), Ok(&t));
        }
        if let Ok(text) = std::str::from_utf8(&bytes) {
            match Handle::from_text(text) {
                Ok(h) => assert_eq!(Handle::from_text(&h.to_text()).as_ref(), Ok(&h)),
                Err(e) => note(e),
            }
        }
        n += 1;
    }
    assert!(n > 100, "the corpus holds {n} inputs");
    assert!(refusals.len() >= 6, "the corpus reaches only {refusals:?}");
}

/// The fuzz target's seed inputs (`fuzz/seeds/decode_handle`): handles of
/// both versions and tensor handles, binary and text; each decodes, its text to the same handle,
/// and re-encodes as the canonical-encoding promise says.
#[test]
fn fuzz_seeds_decode_in_both_versions() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/decode_handle");
    let mut versions = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("the seed directory is part of the repository") {
        let path = entry.expect("readable seed entry").path();
        if path.extension().is_none_or(|e| e != "bin") {
            continue;
        }
        let bytes = std::fs::read(&path).expect("readable seed");
        let text = std::fs::read_to_string(path.with_extension("txt")).expect("its text form");
        if bytes.starts_with(&hal_core::dlpack::TENSOR_MAGIC) {
            let t = hal_core::dlpack::TensorHandle::from_bytes(&bytes)
                .unwrap_or_else(|e| panic!("{path:?}: {e}"));
            assert_eq!(t.to_bytes(), bytes, "{path:?}");
            assert_eq!(
                hal_core::dlpack::TensorHandle::from_text(&text).as_ref(),
                Ok(&t),
                "{path:?}"
            );
            *versions.entry(b't').or_insert(0) += 1;
            continue;
        }
        let h = Handle::from_bytes(&bytes).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        assert_eq!(h.to_bytes(), canonical(&bytes), "{path:?}");
        assert_eq!(Handle::from_text(&text).as_ref(), Ok(&h), "{path:?}");
        *versions.entry(bytes[4]).or_insert(0) += 1;
    }
    assert!(
        versions.get(&1) >= Some(&5)
            && versions.get(&2) >= Some(&5)
            && versions.get(&b't') >= Some(&3),
        "{versions:?}"
    );
}
