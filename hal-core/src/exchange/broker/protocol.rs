//! The broker's wire protocol: requests, replies, statuses (see the
//! [`exchange`](crate::exchange) documentation for the byte layout).

use super::located::{encode_located, parse_located, Located, LOCATED_LEN};
use crate::lease::LeaseTicket;

/// Magic of a request.
pub(crate) const REQUEST_MAGIC: [u8; 4] = *b"HALB";
/// Magic of a reply.
pub(crate) const REPLY_MAGIC: [u8; 4] = *b"HALR";
/// Protocol version.
pub(crate) const PROTOCOL_VERSION: u8 = 2;
/// Operation: fetch the descriptors of an object (and a lease, when its
/// exporter counts importers).
pub(crate) const OP_FETCH: u8 = 1;
/// Operation: a lease on an object whose descriptors came another way.
pub(crate) const OP_LEASE: u8 = 2;
/// Operation: give a lease back.
pub(crate) const OP_RELEASE: u8 = 3;
/// Operation: fetch the descriptors (and leases) of several objects.
pub(crate) const OP_FETCH_BATCH: u8 = 4;
/// Operation: lease and locate: decided as a fetch (the allow-list, the
/// lease), answered with where the descriptors are in the exporter
/// ([`Located`]) instead of the descriptors, for an importer that takes
/// them with `pidfd_getfd(2)`.
pub(crate) const OP_LOCATE: u8 = 5;
/// Operation: lease and locate several objects (a batch of [`OP_LOCATE`]).
pub(crate) const OP_LOCATE_BATCH: u8 = 6;
/// Most objects in one batch request.
pub(crate) const MAX_BATCH: usize = 64;
/// Most descriptors in one batch reply: under the kernel's bound on one
/// `SCM_RIGHTS` message (`SCM_MAX_FD`, 253).
pub(crate) const MAX_BATCH_FDS: usize = 240;
/// Length of a batch request's header (then 16 bytes per object).
pub(crate) const BATCH_HEADER: usize = 8;
/// Length of a batch reply's header (then [`BATCH_ENTRY`] bytes per object).
pub(crate) const BATCH_REPLY_HEADER: usize = 16;
/// Length of one object's entry in a batch reply.
pub(crate) const BATCH_ENTRY: usize = 32;
/// Longest message a broker reads.
pub(crate) const MAX_REQUEST: usize = BATCH_HEADER + 16 * MAX_BATCH;
/// Length of a request.
pub(crate) const REQUEST_LEN: usize = 40;
/// Length of a reply.
pub(crate) const REPLY_LEN: usize = 40;
/// Reply flag: a lease ticket follows.
pub(crate) const REPLY_LEASED: u8 = 1;
/// Reply flag: the descriptors' locations follow the reply (a plain reply:
/// one [`LOCATED_LEN`] record per descriptor after its 40 bytes; a batch
/// reply: after the entries, every object's in order).
pub(crate) const REPLY_LOCATED: u8 = 2;
/// Longest single reply: 40 bytes and the locations of
/// [`MAX_FDS`](crate::exchange::MAX_FDS) descriptors.
pub(crate) const MAX_LOCATED_REPLY: usize = REPLY_LEN + LOCATED_LEN * crate::exchange::MAX_FDS;

/// A reply's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Status {
    /// The descriptors follow.
    Ok = 0,
    /// The request is malformed.
    BadRequest = 1,
    /// The request's protocol version is not served.
    UnsupportedVersion = 2,
    /// No export of this process has the object id (or, for a release, no
    /// live registration has the ticket).
    NotFound = 3,
    /// The importer's pid is not on the export's allow-list.
    PidDenied = 4,
    /// The importer runs as another user.
    UidDenied = 5,
    /// The broker could not serve the request.
    Internal = 6,
    /// Every lease slot of the export is held by a live process.
    Busy = 7,
    /// The export counts its importers and the importer runs in a pid
    /// namespace the exporter cannot see (its pid reads 0), so its lease
    /// could never be told dead.
    Unseen = 8,
    /// A batch asks for more descriptors than one reply carries.
    TooMany = 9,
}

impl Status {
    pub(crate) fn from_wire(b: u8) -> Option<Status> {
        Some(match b {
            0 => Status::Ok,
            1 => Status::BadRequest,
            2 => Status::UnsupportedVersion,
            3 => Status::NotFound,
            4 => Status::PidDenied,
            5 => Status::UidDenied,
            6 => Status::Internal,
            7 => Status::Busy,
            8 => Status::Unseen,
            9 => Status::TooMany,
            _ => return None,
        })
    }
}

/// A reply: `HALR`, version, status, descriptor count, flags, the
/// importer's pid as the broker sees it, then a lease ticket (slot, token,
/// table id) when the flags say so.
pub(crate) fn encode_reply(
    status: Status,
    fds: u8,
    seen_pid: u32,
    lease: Option<LeaseTicket>,
) -> [u8; REPLY_LEN] {
    let mut r = [0u8; REPLY_LEN];
    r[..4].copy_from_slice(&REPLY_MAGIC);
    r[4] = PROTOCOL_VERSION;
    r[5] = status as u8;
    r[6] = fds;
    r[8..12].copy_from_slice(&seen_pid.to_le_bytes());
    if let Some(t) = lease {
        r[7] = REPLY_LEASED;
        r[12..16].copy_from_slice(&t.slot.to_le_bytes());
        r[16..24].copy_from_slice(&t.token.to_le_bytes());
        r[24..40].copy_from_slice(&t.table);
    }
    r
}

/// A reply to a locate request: [`encode_reply`] with [`REPLY_LOCATED`]
/// set in the flags and the locations after its 40 bytes.
pub(crate) fn encode_located_reply(
    seen_pid: u32,
    lease: Option<LeaseTicket>,
    located: &[Located],
) -> Vec<u8> {
    let mut r = encode_reply(Status::Ok, located.len() as u8, seen_pid, lease).to_vec();
    r[7] |= REPLY_LOCATED;
    encode_located(&mut r, located);
    r
}

/// A reply to a locate request: as [`parse_reply`], and the locations when
/// the flags say they follow (exactly as many as the descriptor count).
/// `None` for a malformed reply.
#[allow(clippy::type_complexity)]
pub(crate) fn parse_located_reply(
    reply: &[u8],
    truncated: bool,
) -> Option<(
    Option<Status>,
    u32,
    Option<LeaseTicket>,
    Option<Vec<Located>>,
)> {
    if reply.len() < REPLY_LEN {
        return None;
    }
    let mut head = [0u8; REPLY_LEN];
    head.copy_from_slice(&reply[..REPLY_LEN]);
    let located = head[7] & REPLY_LOCATED != 0;
    head[7] &= !REPLY_LOCATED;
    if !located && reply.len() != REPLY_LEN {
        return None;
    }
    let (status, count, pid, lease) = parse_reply(&head, truncated)?;
    let located = match located {
        true => {
            let l = parse_located(&reply[REPLY_LEN..])?;
            if l.len() != count {
                return None;
            }
            Some(l)
        }
        false => None,
    };
    Some((status, pid, lease, located))
}

/// A parsed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    /// The descriptors of an object, and a lease when it counts importers.
    Fetch([u8; 16]),
    /// A lease on an object.
    Lease([u8; 16]),
    /// A fetch answered with the descriptors' locations.
    Locate([u8; 16]),
    /// End a lease.
    Release(LeaseTicket),
}

/// One object's answer in a batch reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchEntry {
    /// The object's status (`None` in a parsed reply: unknown to this
    /// version).
    pub(crate) status: Option<Status>,
    /// How many of the reply's descriptors are this object's (they follow
    /// those of the entries before it).
    pub(crate) fds: usize,
    /// The object's lease ticket.
    pub(crate) lease: Option<LeaseTicket>,
}

/// The object ids of a batch request: `HALB`, version, operation 4 (or 6:
/// locate), the count (`u16`), then each 16-byte id; and whether it asks
/// for locations. `None` when `request` is not a well-formed batch (it may
/// be another request).
#[allow(clippy::type_complexity)]
pub(crate) fn parse_batch(
    request: &[u8],
    truncated: bool,
) -> Option<std::result::Result<(Vec<[u8; 16]>, bool), Status>> {
    if request.len() < BATCH_HEADER
        || request[..4] != REQUEST_MAGIC
        || request[4] != PROTOCOL_VERSION
        || !matches!(request[5], OP_FETCH_BATCH | OP_LOCATE_BATCH)
    {
        return None;
    }
    let located = request[5] == OP_LOCATE_BATCH;
    let count = u16::from_le_bytes([request[6], request[7]]) as usize;
    if truncated || count == 0 || count > MAX_BATCH || request.len() != BATCH_HEADER + 16 * count {
        return Some(Err(Status::BadRequest));
    }
    let ids = request[BATCH_HEADER..]
        .chunks_exact(16)
        .map(|c| {
            let mut id = [0u8; 16];
            id.copy_from_slice(c);
            id
        })
        .collect();
    Some(Ok((ids, located)))
}

/// The bytes of a batch request for `ids` (1 to [`MAX_BATCH`]); `located`
/// asks for locations instead of descriptors.
pub(crate) fn encode_batch(ids: &[[u8; 16]], located: bool) -> Vec<u8> {
    let mut r = Vec::with_capacity(BATCH_HEADER + 16 * ids.len());
    r.extend_from_slice(&REQUEST_MAGIC);
    r.push(PROTOCOL_VERSION);
    r.push(if located {
        OP_LOCATE_BATCH
    } else {
        OP_FETCH_BATCH
    });
    r.extend_from_slice(&(ids.len() as u16).to_le_bytes());
    for id in ids {
        r.extend_from_slice(id);
    }
    r
}

/// A batch reply: `HALR`, version, status 0, the number of descriptors, a
/// zero byte, the importer's pid as the broker sees it, the count (`u16`),
/// two zero bytes, then per object: status, descriptor count, flags (1: a
/// lease ticket), a zero byte, then the ticket (slot, token, table id).
/// With `located`, the header's zero byte is [`REPLY_LOCATED`] and the
/// locations of every object's descriptors follow the entries.
pub(crate) fn encode_batch_reply(
    seen_pid: u32,
    entries: &[BatchEntry],
    located: Option<&[Located]>,
) -> Vec<u8> {
    let mut r = vec![0u8; BATCH_REPLY_HEADER + BATCH_ENTRY * entries.len()];
    r[..4].copy_from_slice(&REPLY_MAGIC);
    r[4] = PROTOCOL_VERSION;
    r[5] = Status::Ok as u8;
    r[6] = entries.iter().map(|e| e.fds).sum::<usize>().min(255) as u8;
    r[8..12].copy_from_slice(&seen_pid.to_le_bytes());
    r[12..14].copy_from_slice(&(entries.len() as u16).to_le_bytes());
    for (i, e) in entries.iter().enumerate() {
        let at = BATCH_REPLY_HEADER + BATCH_ENTRY * i;
        let x = &mut r[at..at + BATCH_ENTRY];
        x[0] = e.status.unwrap_or(Status::Internal) as u8;
        x[1] = e.fds as u8;
        if let Some(t) = e.lease {
            x[2] = REPLY_LEASED;
            x[4..8].copy_from_slice(&t.slot.to_le_bytes());
            x[8..16].copy_from_slice(&t.token.to_le_bytes());
            x[16..32].copy_from_slice(&t.table);
        }
    }
    if let Some(l) = located {
        r[7] = REPLY_LOCATED;
        encode_located(&mut r, l);
    }
    r
}

/// The entries of a batch reply for `count` objects, the pid the broker
/// saw, and the locations when the reply carries them; `None` for a
/// malformed reply. A batch the broker refused as a whole comes as a plain
/// reply (see [`parse_reply`]).
#[allow(clippy::type_complexity)]
pub(crate) fn parse_batch_reply(
    reply: &[u8],
    count: usize,
) -> Option<(u32, Vec<BatchEntry>, Option<Vec<Located>>)> {
    let entries_end = BATCH_REPLY_HEADER + BATCH_ENTRY * count;
    let located = match reply.get(7) {
        Some(&0) => false,
        Some(&REPLY_LOCATED) => true,
        _ => return None,
    };
    let total = reply[6] as usize;
    let len = entries_end + if located { LOCATED_LEN * total } else { 0 };
    if reply.len() != len
        || reply[..4] != REPLY_MAGIC
        || reply[4] != PROTOCOL_VERSION
        || reply[5] != Status::Ok as u8
        || u16::from_le_bytes([reply[12], reply[13]]) as usize != count
    {
        return None;
    }
    let seen_pid = u32::from_le_bytes([reply[8], reply[9], reply[10], reply[11]]);
    let mut entries = Vec::with_capacity(count);
    for x in reply[BATCH_REPLY_HEADER..entries_end].chunks_exact(BATCH_ENTRY) {
        let lease = match x[2] {
            0 => None,
            REPLY_LEASED => {
                let slot = u32::from_le_bytes([x[4], x[5], x[6], x[7]]);
                let mut token = [0u8; 8];
                token.copy_from_slice(&x[8..16]);
                let mut table = [0u8; 16];
                table.copy_from_slice(&x[16..32]);
                let token = u64::from_le_bytes(token);
                if token == 0 {
                    return None;
                }
                Some(LeaseTicket { table, slot, token })
            }
            _ => return None,
        };
        entries.push(BatchEntry {
            status: Status::from_wire(x[0]),
            fds: x[1] as usize,
            lease,
        });
    }
    if entries.iter().map(|e| e.fds).sum::<usize>() != total {
        return None;
    }
    let located = match located {
        true => Some(parse_located(&reply[entries_end..])?),
        false => None,
    };
    Some((seen_pid, entries, located))
}

/// A well-formed request.
pub(crate) fn parse_request(
    request: &[u8],
    truncated: bool,
) -> std::result::Result<Request, Status> {
    if truncated || request.len() != REQUEST_LEN || request[..4] != REQUEST_MAGIC {
        return Err(Status::BadRequest);
    }
    if request[4] != PROTOCOL_VERSION {
        return Err(Status::UnsupportedVersion);
    }
    if request[6] != 0 || request[7] != 0 || request[28..32] != [0; 4] {
        return Err(Status::BadRequest);
    }
    let mut id = [0u8; 16];
    id.copy_from_slice(&request[8..24]);
    let slot = u32::from_le_bytes([request[24], request[25], request[26], request[27]]);
    let mut token = [0u8; 8];
    token.copy_from_slice(&request[32..40]);
    let token = u64::from_le_bytes(token);
    match (request[5], slot, token) {
        (OP_FETCH, 0, 0) => Ok(Request::Fetch(id)),
        (OP_LEASE, 0, 0) => Ok(Request::Lease(id)),
        (OP_LOCATE, 0, 0) => Ok(Request::Locate(id)),
        (OP_RELEASE, slot, token) if token != 0 => Ok(Request::Release(LeaseTicket {
            table: id,
            slot,
            token,
        })),
        _ => Err(Status::BadRequest),
    }
}

/// The bytes of `request`: `HALB`, version, operation, two zero bytes, an
/// id (the object's, or for a release the lease table's), the slot, four
/// zero bytes, the token.
pub(crate) fn encode_request(request: &Request) -> [u8; REQUEST_LEN] {
    let mut r = [0u8; REQUEST_LEN];
    r[..4].copy_from_slice(&REQUEST_MAGIC);
    r[4] = PROTOCOL_VERSION;
    let (op, id, slot, token) = match *request {
        Request::Fetch(id) => (OP_FETCH, id, 0, 0),
        Request::Lease(id) => (OP_LEASE, id, 0, 0),
        Request::Locate(id) => (OP_LOCATE, id, 0, 0),
        Request::Release(t) => (OP_RELEASE, t.table, t.slot, t.token),
    };
    r[5] = op;
    r[8..24].copy_from_slice(&id);
    r[24..28].copy_from_slice(&slot.to_le_bytes());
    r[32..40].copy_from_slice(&token.to_le_bytes());
    r
}

/// The fields of a reply: status (`None`: unknown), descriptor count, the
/// pid the broker saw, the lease ticket. `None` for a malformed reply.
#[allow(clippy::type_complexity)]
pub(crate) fn parse_reply(
    reply: &[u8],
    truncated: bool,
) -> Option<(Option<Status>, usize, u32, Option<LeaseTicket>)> {
    if truncated
        || reply.len() != REPLY_LEN
        || reply[..4] != REPLY_MAGIC
        || reply[4] != PROTOCOL_VERSION
    {
        return None;
    }
    let seen_pid = u32::from_le_bytes([reply[8], reply[9], reply[10], reply[11]]);
    let lease = match reply[7] {
        0 => None,
        REPLY_LEASED => {
            let slot = u32::from_le_bytes([reply[12], reply[13], reply[14], reply[15]]);
            let mut token = [0u8; 8];
            token.copy_from_slice(&reply[16..24]);
            let mut table = [0u8; 16];
            table.copy_from_slice(&reply[24..40]);
            let token = u64::from_le_bytes(token);
            if token == 0 {
                return None;
            }
            Some(LeaseTicket { table, slot, token })
        }
        _ => return None,
    };
    Some((
        Status::from_wire(reply[5]),
        reply[6] as usize,
        seen_pid,
        lease,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::os;

    #[test]
    fn request_round_trip_and_garbage() {
        let id = os::random_id();
        for r in [
            Request::Fetch(id),
            Request::Lease(id),
            Request::Locate(id),
            Request::Release(LeaseTicket {
                table: id,
                slot: 3,
                token: 77,
            }),
        ] {
            assert_eq!(parse_request(&encode_request(&r), false), Ok(r));
            assert_eq!(
                parse_request(&encode_request(&r), true),
                Err(Status::BadRequest)
            );
        }
        let fetch = encode_request(&Request::Fetch(id));
        assert_eq!(parse_request(&[], false), Err(Status::BadRequest));
        assert_eq!(parse_request(&[0xff; 40], false), Err(Status::BadRequest));
        for (at, value, want) in [
            (0, b'X', Status::BadRequest),
            (3, b'X', Status::BadRequest),
            (4, 9, Status::UnsupportedVersion),
            (5, 4, Status::BadRequest),
            (5, 7, Status::BadRequest),
            (5, 0, Status::BadRequest),
            (6, 1, Status::BadRequest),
            (7, 1, Status::BadRequest),
            (24, 1, Status::BadRequest),
            (28, 1, Status::BadRequest),
            (31, 1, Status::BadRequest),
            (32, 1, Status::BadRequest),
            (39, 1, Status::BadRequest),
        ] {
            let mut r = fetch;
            r[at] = value;
            assert_eq!(parse_request(&r, false), Err(want), "byte {at} = {value}");
        }
        let mut release = encode_request(&Request::Release(LeaseTicket {
            table: id,
            slot: 0,
            token: 1,
        }));
        release[32] = 0;
        assert_eq!(
            parse_request(&release, false),
            Err(Status::BadRequest),
            "a release without a token"
        );
        let mut long = fetch.to_vec();
        long.push(0);
        assert_eq!(parse_request(&long, false), Err(Status::BadRequest));
        assert_eq!(
            parse_request(&fetch[..REQUEST_LEN - 1], false),
            Err(Status::BadRequest)
        );
    }

    #[test]
    fn statuses_round_trip() {
        for b in 0..=255u8 {
            match Status::from_wire(b) {
                Some(s) => assert_eq!(s as u8, b),
                None => assert!(b > 9),
            }
        }
    }

    #[test]
    fn batches_round_trip_and_garbage() {
        let ids = [os::random_id(), os::random_id()];
        let r = encode_batch(&ids, false);
        assert_eq!(parse_batch(&r, false), Some(Ok((ids.to_vec(), false))));
        let l = encode_batch(&ids, true);
        assert_eq!(parse_batch(&l, false), Some(Ok((ids.to_vec(), true))));
        assert_eq!(parse_batch(&r, true), Some(Err(Status::BadRequest)));
        assert_eq!(
            parse_batch(&r[..r.len() - 1], false),
            Some(Err(Status::BadRequest))
        );
        let mut zero = r.clone();
        zero[6] = 0;
        zero.truncate(BATCH_HEADER);
        assert_eq!(parse_batch(&zero, false), Some(Err(Status::BadRequest)));
        let many: Vec<[u8; 16]> = (0..=MAX_BATCH).map(|_| [1; 16]).collect();
        assert_eq!(
            parse_batch(&encode_batch(&many, false), false),
            Some(Err(Status::BadRequest))
        );
        // A single request is no batch.
        assert_eq!(
            parse_batch(&encode_request(&Request::Fetch(ids[0])), false),
            None
        );
        let ticket = LeaseTicket {
            table: os::random_id(),
            slot: 4,
            token: 9,
        };
        let entries = [
            BatchEntry {
                status: Some(Status::Ok),
                fds: 2,
                lease: Some(ticket),
            },
            BatchEntry {
                status: Some(Status::PidDenied),
                fds: 0,
                lease: None,
            },
        ];
        let reply = encode_batch_reply(77, &entries, None);
        assert_eq!(
            parse_batch_reply(&reply, 2),
            Some((77, entries.to_vec(), None))
        );
        let places = [
            Located {
                fd: 5,
                dev: 1,
                ino: 2,
            },
            Located {
                fd: 6,
                dev: 1,
                ino: 3,
            },
        ];
        let located = encode_batch_reply(77, &entries, Some(&places));
        assert_eq!(
            parse_batch_reply(&located, 2),
            Some((77, entries.to_vec(), Some(places.to_vec())))
        );
        assert_eq!(
            parse_batch_reply(&located[..located.len() - LOCATED_LEN], 2),
            None,
            "a location short"
        );
        let mut no_flag = located.clone();
        no_flag[7] = 0;
        assert_eq!(
            parse_batch_reply(&no_flag, 2),
            None,
            "locations unannounced"
        );
        assert_eq!(parse_batch_reply(&reply, 1), None, "another count");
        let mut lying = reply.clone();
        lying[6] = 3;
        assert_eq!(parse_batch_reply(&lying, 2), None, "a wrong total");
        let mut flags = reply;
        flags[BATCH_REPLY_HEADER + 2] = 7;
        assert_eq!(parse_batch_reply(&flags, 2), None, "unknown flags");
    }

    #[test]
    fn replies_round_trip_and_garbage() {
        let ticket = LeaseTicket {
            table: os::random_id(),
            slot: 9,
            token: 0x0102_0304_0506_0708,
        };
        let r = encode_reply(Status::Ok, 2, 4242, Some(ticket));
        assert_eq!(
            parse_reply(&r, false),
            Some((Some(Status::Ok), 2, 4242, Some(ticket)))
        );
        let plain = encode_reply(Status::PidDenied, 0, 7, None);
        assert_eq!(
            parse_reply(&plain, false),
            Some((Some(Status::PidDenied), 0, 7, None))
        );
        assert_eq!(parse_reply(&r, true), None, "truncated");
        assert_eq!(parse_reply(&r[..REPLY_LEN - 1], false), None, "short");
        for at in [0, 3, 4] {
            let mut bad = r;
            bad[at] ^= 0xff;
            assert_eq!(parse_reply(&bad, false), None, "byte {at}");
        }
        let mut flags = r;
        flags[7] = 2;
        assert_eq!(parse_reply(&flags, false), None, "unknown flags");
        let mut zero = r;
        zero[16..24].fill(0);
        assert_eq!(parse_reply(&zero, false), None, "a ticket without a token");
        let mut unknown = plain;
        unknown[5] = 200;
        assert_eq!(parse_reply(&unknown, false), Some((None, 0, 7, None)));
    }

    #[test]
    fn located_replies_round_trip_and_garbage() {
        let ticket = LeaseTicket {
            table: os::random_id(),
            slot: 1,
            token: 5,
        };
        let places = [Located {
            fd: 9,
            dev: 10,
            ino: 11,
        }];
        let r = encode_located_reply(33, Some(ticket), &places);
        assert_eq!(r.len(), REPLY_LEN + LOCATED_LEN);
        assert_eq!(
            parse_located_reply(&r, false),
            Some((Some(Status::Ok), 33, Some(ticket), Some(places.to_vec())))
        );
        assert_eq!(parse_reply(&r, false), None, "not a plain reply");
        // A refusal is a plain reply.
        let refused = encode_reply(Status::PidDenied, 0, 33, None);
        assert_eq!(
            parse_located_reply(&refused, false),
            Some((Some(Status::PidDenied), 33, None, None))
        );
        assert_eq!(parse_located_reply(&r[..REPLY_LEN], false), None, "short");
        let mut extra = r.clone();
        extra.extend_from_slice(&[0; LOCATED_LEN]);
        assert_eq!(parse_located_reply(&extra, false), None, "one too many");
        let mut plain_long = refused.to_vec();
        plain_long.push(0);
        assert_eq!(parse_located_reply(&plain_long, false), None);
        assert_eq!(parse_located_reply(&r, true), None, "truncated");
    }
}
