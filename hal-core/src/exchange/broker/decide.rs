//! What the broker answers: the decision for each request of a peer, a
//! single request or a batch, and the bytes and descriptors that go back.

use std::cell::OnceCell;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::policy::uid_allowed;
use super::protocol::{
    encode_batch_reply, encode_reply, parse_batch, parse_request, BatchEntry, Request, Status,
    MAX_BATCH_FDS,
};
use super::registry::{lock, Table};
use crate::error::Error;
use crate::exchange::limits::MAX_FDS;
use crate::exchange::peer::PeerCred;
use crate::lease::{LeaseTable, LeaseTicket};
use crate::os;

/// What the broker answers to one request.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: Status,
    pub(crate) fds: Option<Arc<[OwnedFd]>>,
    pub(crate) lease: Option<LeaseTicket>,
}

impl Answer {
    fn status(status: Status) -> Answer {
        Answer {
            status,
            fds: None,
            lease: None,
        }
    }
}

/// Decide a request from `peer`.
pub(super) fn decide(
    request: &[u8],
    truncated: bool,
    peer: PeerCred,
    table: &Table,
    self_pid: u32,
) -> Answer {
    decide_with(request, truncated, peer, table, self_pid, &OnceCell::new())
}

/// [`decide`], with the peer's start time read at most once into `start`
/// (a connection keeps it for all its requests).
pub(super) fn decide_with(
    request: &[u8],
    truncated: bool,
    peer: PeerCred,
    table: &Table,
    self_pid: u32,
    start: &OnceCell<Option<u64>>,
) -> Answer {
    if !uid_allowed(peer.uid) {
        return Answer::status(Status::UidDenied);
    }
    let (id, want_fds) = match parse_request(request, truncated) {
        Ok(Request::Fetch(id)) => (id, true),
        Ok(Request::Lease(id)) => (id, false),
        Ok(Request::Release(ticket)) => {
            let released =
                LeaseTable::find(&ticket.table).is_some_and(|t| t.release(&ticket, peer.pid));
            return Answer::status(if released {
                Status::Ok
            } else {
                Status::NotFound
            });
        }
        Err(status) => return Answer::status(status),
    };
    decide_object(&id, want_fds, peer, table, self_pid, start, MAX_FDS)
}

/// What a batch request for `ids` gets: one answer per object, in order,
/// each decided as a single fetch would be (a refused object does not
/// spoil the others), and at most [`MAX_BATCH_FDS`] descriptors in all.
pub(super) fn decide_batch(
    ids: &[[u8; 16]],
    peer: PeerCred,
    table: &Table,
    self_pid: u32,
    start: &OnceCell<Option<u64>>,
) -> Vec<Answer> {
    let mut left = MAX_BATCH_FDS;
    ids.iter()
        .map(|id| {
            if !uid_allowed(peer.uid) {
                return Answer::status(Status::UidDenied);
            }
            let a = decide_object(id, true, peer, table, self_pid, start, left);
            left -= a.fds.as_ref().map_or(0, |f| f.len());
            a
        })
        .collect()
}

/// Serve the object `id` to `peer`: its allow-list, then a lease when it
/// counts importers; its descriptors when `want_fds` and they number at
/// most `fds_left`.
fn decide_object(
    id: &[u8; 16],
    want_fds: bool,
    peer: PeerCred,
    table: &Table,
    self_pid: u32,
    start_time: &OnceCell<Option<u64>>,
    fds_left: usize,
) -> Answer {
    // The peer's start time, read at most once and only when an allow-list
    // or a lease needs it: it pins both to this process, so that a recycled
    // pid inherits neither.
    let start = || *start_time.get_or_init(|| os::process_start_time(peer.pid));
    let mut table = lock(table);
    let Some(entries) = table.get_mut(id) else {
        return Answer::status(Status::NotFound);
    };
    let Some(at) = entries
        .iter_mut()
        .position(|e| peer.pid == self_pid || e.policy.admit(peer.pid, start))
    else {
        return Answer::status(Status::PidDenied);
    };
    let entry = &entries[at];
    if entry.fds.len() > MAX_FDS {
        return Answer::status(Status::Internal);
    }
    if want_fds && entry.fds.len() > fds_left {
        return Answer::status(Status::TooMany);
    }
    let lease = match &entry.leases {
        None => None,
        Some(_) if peer.pid == 0 => return Answer::status(Status::Unseen),
        Some(t) => match t.register(peer.pid, start().unwrap_or(0)) {
            Ok(ticket) => Some(ticket),
            Err(Error::Busy { .. }) => return Answer::status(Status::Busy),
            Err(_) => return Answer::status(Status::Internal),
        },
    };
    Answer {
        status: Status::Ok,
        fds: want_fds.then(|| Arc::clone(&entry.fds)),
        lease,
    }
}

/// What the broker sends back for one message, and whether the
/// conversation ends there (a malformed message, another user).
pub(super) struct Response {
    pub(super) bytes: Vec<u8>,
    pub(super) fds: Vec<Arc<[OwnedFd]>>,
    pub(super) end: bool,
}

/// The response to one message from `peer`: a single request or a batch.
pub(super) fn respond(
    message: &[u8],
    truncated: bool,
    peer: PeerCred,
    table: &Table,
    self_pid: u32,
    start: &OnceCell<Option<u64>>,
) -> Response {
    if uid_allowed(peer.uid) {
        if let Some(parsed) = parse_batch(message, truncated) {
            let answers = match parsed {
                Ok(ids) => decide_batch(&ids, peer, table, self_pid, start),
                Err(status) => {
                    return Response {
                        bytes: encode_reply(status, 0, peer.pid, None).to_vec(),
                        fds: Vec::new(),
                        end: true,
                    }
                }
            };
            let entries: Vec<BatchEntry> = answers
                .iter()
                .map(|a| BatchEntry {
                    status: Some(a.status),
                    fds: a.fds.as_ref().map_or(0, |f| f.len()),
                    lease: a.lease,
                })
                .collect();
            return Response {
                bytes: encode_batch_reply(peer.pid, &entries),
                fds: answers.into_iter().filter_map(|a| a.fds).collect(),
                end: false,
            };
        }
    }
    let answer = decide_with(message, truncated, peer, table, self_pid, start);
    let count = answer.fds.as_ref().map_or(0, |f| f.len()) as u8;
    let end = matches!(
        answer.status,
        Status::BadRequest | Status::UnsupportedVersion | Status::UidDenied
    );
    Response {
        bytes: encode_reply(answer.status, count, peer.pid, answer.lease).to_vec(),
        fds: answer.fds.into_iter().collect(),
        end,
    }
}

#[cfg(test)]
mod tests {
    use super::super::policy::{overflow_uid, Allowed, Policy};
    use super::super::protocol::encode_request;
    use super::super::registry::Entry;
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;

    fn cred(pid: u32) -> super::PeerCred {
        super::PeerCred {
            pid,
            uid: nix::unistd::geteuid().as_raw(),
            gid: 0,
        }
    }

    fn table_with(id: [u8; 16], policy: Policy, leases: Option<Arc<LeaseTable>>) -> Table {
        let fd = os::memfd("broker-test", 4096, None).unwrap();
        let mut map = HashMap::new();
        map.insert(
            id,
            vec![Entry {
                serial: 1,
                fds: vec![fd].into(),
                policy,
                leases,
            }],
        );
        Mutex::new(map)
    }

    #[test]
    fn decide_serves_leases_and_refuses_what_it_must() {
        let (me, _) = os::self_identity();
        let id = os::random_id();
        let leases = LeaseTable::new(1).unwrap();
        let t = table_with(id, Policy::Anyone, Some(Arc::clone(&leases)));
        let fetch = encode_request(&Request::Fetch(id));
        let a = decide(&fetch, false, cred(me), &t, 1);
        assert_eq!(a.status, Status::Ok);
        assert_eq!(a.fds.as_ref().map(|f| f.len()), Some(1));
        let ticket = a.lease.expect("a lease with the descriptors");
        assert_eq!(leases.count(), 1);
        // The table is full: a second importer is told so.
        let b = decide(&fetch, false, cred(me), &t, 1);
        assert_eq!(b.status, Status::Busy);
        // A release from another pid changes nothing; the holder's works once.
        let release = encode_request(&Request::Release(ticket));
        let other = decide(&release, false, cred(me + 1), &t, 1);
        assert_eq!(other.status, Status::NotFound);
        assert_eq!(leases.count(), 1);
        assert_eq!(decide(&release, false, cred(me), &t, 1).status, Status::Ok);
        assert_eq!(
            decide(&release, false, cred(me), &t, 1).status,
            Status::NotFound
        );
        assert_eq!(leases.count(), 0);
        // A lease alone carries no descriptors.
        let lease = decide(&encode_request(&Request::Lease(id)), false, cred(me), &t, 1);
        assert_eq!(lease.status, Status::Ok);
        assert!(lease.fds.is_none() && lease.lease.is_some());
        // An importer the exporter cannot see could never be told dead.
        let unseen = decide(&fetch, false, cred(0), &t, 1);
        assert_eq!(unseen.status, Status::Unseen);
        // Unknown objects, other users, garbage.
        let missing = encode_request(&Request::Fetch(os::random_id()));
        assert_eq!(
            decide(&missing, false, cred(me), &t, 1).status,
            Status::NotFound
        );
        let mut stranger = cred(me);
        stranger.uid = overflow_uid();
        assert_eq!(
            decide(&fetch, false, stranger, &t, 1).status,
            Status::UidDenied
        );
        assert_eq!(
            decide(&fetch[..10], false, cred(me), &t, 1).status,
            Status::BadRequest
        );
    }

    #[test]
    fn decide_applies_the_allow_list_except_to_the_exporter_itself() {
        let (me, start) = os::self_identity();
        let id = os::random_id();
        let t = table_with(
            id,
            Policy::Pids(vec![Allowed {
                pid: me,
                start: start + 1,
            }]),
            None,
        );
        let fetch = encode_request(&Request::Fetch(id));
        // Listed, but pinned to another process of the same pid.
        assert_eq!(
            decide(&fetch, false, cred(me), &t, 1).status,
            Status::PidDenied
        );
        // The exporting process itself is always served; no lease table.
        let a = decide(&fetch, false, cred(me), &t, me);
        assert_eq!(a.status, Status::Ok);
        assert!(a.lease.is_none());
    }
}
