//! The broker's wire protocol: requests, replies, statuses (see the
//! [`exchange`](crate::exchange) documentation for the byte layout).

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
/// Length of a request.
pub(crate) const REQUEST_LEN: usize = 40;
/// Length of a reply.
pub(crate) const REPLY_LEN: usize = 40;
/// Reply flag: a lease ticket follows.
pub(crate) const REPLY_LEASED: u8 = 1;

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

/// A parsed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    /// The descriptors of an object, and a lease when it counts importers.
    Fetch([u8; 16]),
    /// A lease on an object.
    Lease([u8; 16]),
    /// End a lease.
    Release(LeaseTicket),
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
    use crate::os;

    #[test]
    fn request_round_trip_and_garbage() {
        let id = os::random_id();
        for r in [
            Request::Fetch(id),
            Request::Lease(id),
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
                None => assert!(b > 8),
            }
        }
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
}
