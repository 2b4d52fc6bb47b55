//! What the broker answers: the decision for each request of a peer, a
//! single request or a batch, and the bytes and descriptors that go back.

use std::cell::OnceCell;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use std::sync::atomic::Ordering::Relaxed;

use super::board::{self, BOARD_ID};
use super::located::{locate, Located};
use super::policy::{uid_allowed, unmapped, Policy};
use super::protocol::{
    encode_batch_reply, encode_located_reply, encode_reply, parse_batch, parse_request, BatchEntry,
    Request, Status, MAX_BATCH_FDS,
};
use super::registry::{Table, SERIAL};
use crate::error::Error;
use crate::exchange::limits::MAX_FDS;
use crate::exchange::peer::PeerCred;
use crate::kit::os;
use crate::kit::os::lock::lock;
use crate::lease::{LeaseTable, LeaseTicket};

/// What the broker answers to one request.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: Status,
    pub(crate) fds: Option<Arc<[OwnedFd]>>,
    pub(crate) lease: Option<LeaseTicket>,
    /// The request asked for the descriptors' locations, not the
    /// descriptors (a locate request).
    pub(crate) located: bool,
}

impl Answer {
    fn status(status: Status) -> Answer {
        Answer {
            status,
            fds: None,
            lease: None,
            located: false,
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
    // Another user (not root, or the overflow uid) is served only what is
    // exported to anyone, by fetch or lease; whatever else it asks, and
    // whether the object exists or not, it is told the same refusal.
    let stranger = !uid_allowed(peer.uid, peer.pid);
    if stranger && (unmapped(peer.uid, peer.pid) || !stranger_request(request, truncated)) {
        return Answer::status(Status::UidDenied);
    }
    let (id, want_fds, located) = match parse_request(request, truncated) {
        // The board goes by location alone: only to a process that can
        // take the exporter's descriptors itself.
        Ok(Request::Fetch(id) | Request::Lease(id)) if id == BOARD_ID => {
            return Answer::status(Status::NotFound)
        }
        Ok(Request::Locate(id)) if id == BOARD_ID => {
            if let Err(e) = board::activate(&mut lock(table), SERIAL.fetch_add(1, Relaxed)) {
                log::debug!("making the broker's board: {e}");
                return Answer::status(Status::Internal);
            }
            (id, true, true)
        }
        Ok(Request::Fetch(id)) => (id, true, false),
        Ok(Request::Lease(id)) => (id, false, false),
        Ok(Request::Locate(id)) => (id, true, true),
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
    let mut answer = decide_object(&id, want_fds, peer, table, self_pid, start, MAX_FDS);
    answer.located = located;
    answer
}

/// Whether `request` is one another user may make: a fetch or a lease (of
/// an object exported to anyone), or the release of its own lease.
fn stranger_request(request: &[u8], truncated: bool) -> bool {
    match parse_request(request, truncated) {
        Ok(Request::Fetch(id) | Request::Lease(id)) => id != BOARD_ID,
        Ok(Request::Release(_)) => true,
        _ => false,
    }
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
            if unmapped(peer.uid, peer.pid) {
                return Answer::status(Status::UidDenied);
            }
            if *id == BOARD_ID {
                return Answer::status(Status::NotFound);
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
    // Another user learns nothing of what is not exported to anyone: not
    // even whether it exists.
    let stranger = !uid_allowed(peer.uid, peer.pid);
    let mut table = lock(table);
    let Some(entries) = table.get_mut(id) else {
        return Answer::status(if stranger {
            Status::UidDenied
        } else {
            Status::NotFound
        });
    };
    let Some(at) = entries.iter_mut().position(|e| {
        // Another user: what is exported to anyone, or to a list that
        // names its process.
        if stranger && !matches!(e.policy, Policy::Anyone | Policy::Pids(_)) {
            return false;
        }
        if peer.pid == self_pid {
            return true;
        }
        let unpinned = e.policy.unpinned();
        let admitted = e.policy.admit(peer.pid, peer.uid, start);
        if admitted && unpinned && !e.policy.unpinned() {
            // A pid pinned now: the board can state the export.
            if let Some(b) = board::active() {
                b.publish(id, e);
            }
        }
        admitted
    }) else {
        // An export to the exporter's user refuses by uid (root, when the
        // exporter is not root), not by pid.
        let by_user = stranger
            || entries
                .iter()
                .any(|e| matches!(e.policy, Policy::SameUser(_)));
        return Answer::status(if by_user {
            Status::UidDenied
        } else {
            Status::PidDenied
        });
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
        located: false,
    }
}

/// The locations of the descriptors of `answers` (all of them, in order);
/// `None` when one cannot be `fstat`ed.
fn locate_all(answers: &[Answer]) -> Option<Vec<Located>> {
    let mut all = Vec::new();
    for fds in answers.iter().filter_map(|a| a.fds.as_ref()) {
        all.extend(locate(fds)?);
    }
    Some(all)
}

/// Give back the lease of an answer that cannot be sent after all.
fn undo_lease(answer: &Answer, peer: PeerCred) {
    if let Some(t) = &answer.lease {
        undo_ticket(t, peer);
    }
}

/// Give back the lease `t`, registered for `peer`.
fn undo_ticket(t: &LeaseTicket, peer: PeerCred) {
    if let Some(table) = LeaseTable::find(&t.table) {
        table.release(t, peer.pid);
    }
}

/// What the broker sends back for one message, and whether the
/// conversation ends there (a malformed message, another user).
pub(super) struct Response {
    pub(super) bytes: Vec<u8>,
    pub(super) fds: Vec<Arc<[OwnedFd]>>,
    pub(super) end: bool,
    /// The leases registered for this response, given back by
    /// [`Response::undo`] when it is not delivered.
    pub(super) leases: Vec<LeaseTicket>,
}

impl Response {
    fn refusal(bytes: Vec<u8>, end: bool) -> Response {
        Response {
            bytes,
            fds: Vec::new(),
            end,
            leases: Vec::new(),
        }
    }

    /// Give back the leases of a response that `peer` never got (its send
    /// failed): the importer has no ticket to give them back with, and
    /// would stay counted as long as it lives.
    pub(super) fn undo(&self, peer: PeerCred) {
        for t in &self.leases {
            undo_ticket(t, peer);
        }
    }
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
    if !unmapped(peer.uid, peer.pid) {
        if let Some(parsed) = parse_batch(message, truncated) {
            let (answers, located) = match parsed {
                Ok((ids, located)) => (decide_batch(&ids, peer, table, self_pid, start), located),
                Err(status) => {
                    return Response::refusal(
                        encode_reply(status, 0, peer.pid, None).to_vec(),
                        true,
                    )
                }
            };
            let leases: Vec<LeaseTicket> = answers.iter().filter_map(|a| a.lease).collect();
            let entries: Vec<BatchEntry> = answers
                .iter()
                .map(|a| BatchEntry {
                    status: Some(a.status),
                    fds: a.fds.as_ref().map_or(0, |f| f.len()),
                    lease: a.lease,
                })
                .collect();
            if located {
                // The allow-list and the leases were decided above, exactly
                // as for a fetch: only the allowed objects are located.
                let Some(places) = locate_all(&answers) else {
                    answers.iter().for_each(|a| undo_lease(a, peer));
                    return Response::refusal(
                        encode_reply(Status::Internal, 0, peer.pid, None).to_vec(),
                        false,
                    );
                };
                return Response {
                    bytes: encode_batch_reply(peer.pid, &entries, Some(&places)),
                    fds: Vec::new(),
                    end: false,
                    leases,
                };
            }
            return Response {
                bytes: encode_batch_reply(peer.pid, &entries, None),
                fds: answers.into_iter().filter_map(|a| a.fds).collect(),
                end: false,
                leases,
            };
        }
    }
    let answer = decide_with(message, truncated, peer, table, self_pid, start);
    if answer.located && answer.status == Status::Ok {
        // Decided as a fetch (allow-list, lease); the descriptors' places
        // go back instead of the descriptors.
        let places = locate_all(std::slice::from_ref(&answer));
        return match places {
            Some(places) => Response {
                bytes: encode_located_reply(peer.pid, answer.lease, &places),
                fds: Vec::new(),
                end: false,
                leases: answer.lease.into_iter().collect(),
            },
            None => {
                undo_lease(&answer, peer);
                Response::refusal(
                    encode_reply(Status::Internal, 0, peer.pid, None).to_vec(),
                    false,
                )
            }
        };
    }
    let count = answer.fds.as_ref().map_or(0, |f| f.len()) as u8;
    let end = matches!(
        answer.status,
        Status::BadRequest | Status::UnsupportedVersion | Status::UidDenied
    );
    Response {
        bytes: encode_reply(answer.status, count, peer.pid, answer.lease).to_vec(),
        fds: answer.fds.into_iter().collect(),
        end,
        leases: answer.lease.into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::policy::{Allowed, Policy};
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

    /// The board is registered like an export (under `BOARD_ID`, to its
    /// user) but never passed: a fetch, a lease or a batch of it is
    /// refused, so only a process that can take the exporter's descriptors
    /// itself (by location) ever maps it.
    #[test]
    fn the_board_goes_by_location_alone() {
        let (me, _) = os::self_identity();
        let uid = nix::unistd::geteuid().as_raw();
        let t = table_with(BOARD_ID, Policy::SameUser(uid), None);
        for request in [Request::Fetch(BOARD_ID), Request::Lease(BOARD_ID)] {
            let a = decide(&encode_request(&request), false, cred(me + 1), &t, me);
            assert_eq!(a.status, Status::NotFound, "{request:?}");
            assert!(a.fds.is_none());
        }
        let start = OnceCell::new();
        let other = os::random_id();
        lock(&t).insert(
            other,
            vec![Entry {
                serial: 2,
                fds: vec![os::memfd("broker-test", 4096, None).unwrap()].into(),
                policy: Policy::Anyone,
                leases: None,
            }],
        );
        let answers = decide_batch(&[BOARD_ID, other], cred(me + 1), &t, me, &start);
        assert_eq!(answers[0].status, Status::NotFound);
        assert!(answers[0].fds.is_none());
        assert_eq!(answers[1].status, Status::Ok, "the others are served");
    }

    /// A batch whose objects together hold more descriptors than one reply
    /// carries (what a hostile client, or an older one that does not split
    /// its batches, may send): the objects are served in order while their
    /// descriptors fit in [`MAX_BATCH_FDS`], and every object after that is
    /// answered `TooMany`, with no descriptor and no lease, even one that
    /// alone would fit in what is left.
    #[test]
    fn a_batch_beyond_max_batch_fds_is_answered_too_many() {
        use super::super::protocol::{encode_batch, parse_batch_reply};
        let (me, _) = os::self_identity();
        // One set of MAX_FDS descriptors, shared by every big object.
        let big: Arc<[OwnedFd]> = (0..MAX_FDS)
            .map(|_| os::memfd("broker-test", 4096, None).unwrap())
            .collect::<Vec<_>>()
            .into();
        let fit = MAX_BATCH_FDS / MAX_FDS;
        assert!(fit * MAX_FDS <= MAX_BATCH_FDS && (fit + 1) * MAX_FDS > MAX_BATCH_FDS);
        let mut map = HashMap::new();
        let mut ids: Vec<[u8; 16]> = Vec::new();
        for serial in 0..fit + 2 {
            let id = os::random_id();
            map.insert(
                id,
                vec![Entry {
                    serial: serial as u64,
                    fds: Arc::clone(&big),
                    policy: Policy::Anyone,
                    leases: None,
                }],
            );
            ids.push(id);
        }
        // Last, a small object with a lease table: one descriptor, which
        // would fit in what a miscounted budget has left.
        let small = os::random_id();
        let leases = LeaseTable::new(4).unwrap();
        map.insert(
            small,
            vec![Entry {
                serial: 1000,
                fds: vec![os::memfd("broker-test", 4096, None).unwrap()].into(),
                policy: Policy::Anyone,
                leases: Some(Arc::clone(&leases)),
            }],
        );
        ids.push(small);
        let t: Table = Mutex::new(map);
        let start = OnceCell::new();

        let answers = decide_batch(&ids, cred(me), &t, 1, &start);
        assert_eq!(answers.len(), ids.len());
        let sent: usize = answers
            .iter()
            .filter_map(|a| a.fds.as_ref())
            .map(|f| f.len())
            .sum();
        assert_eq!(sent, fit * MAX_FDS);
        assert!(sent <= MAX_BATCH_FDS);
        for (i, a) in answers.iter().enumerate() {
            if i < fit {
                assert_eq!(a.status, Status::Ok, "object {i}");
                assert_eq!(a.fds.as_ref().map(|f| f.len()), Some(MAX_FDS), "object {i}");
            } else {
                assert_eq!(a.status, Status::TooMany, "object {i}");
                assert!(a.fds.is_none() && a.lease.is_none(), "object {i}");
            }
        }
        assert_eq!(leases.count(), 0, "no lease for an object not served");

        // The same over the wire: the reply's entries say so, and the
        // descriptors that go back number at most MAX_BATCH_FDS.
        let r = respond(&encode_batch(&ids, false), false, cred(me), &t, 1, &start);
        assert!(!r.end);
        let carried: usize = r.fds.iter().map(|f| f.len()).sum();
        assert_eq!(carried, fit * MAX_FDS);
        let (_, entries, places) = parse_batch_reply(&r.bytes, ids.len()).unwrap();
        assert!(places.is_none());
        assert_eq!(entries.iter().map(|e| e.fds).sum::<usize>(), carried);
        for (i, e) in entries.iter().enumerate() {
            let (status, fds) = if i < fit {
                (Status::Ok, MAX_FDS)
            } else {
                (Status::TooMany, 0)
            };
            assert_eq!((e.status, e.fds), (Some(status), fds), "object {i}");
            assert!(e.lease.is_none(), "object {i}");
        }
        assert!(r.leases.is_empty());
        assert_eq!(leases.count(), 0);
    }

    /// Another user (not root) is served what is exported to anyone or to
    /// a list of pids that names its process, and nothing else; of an
    /// object it may not have it learns nothing, not
    /// even whether it exists, and it may not ask for locations or the
    /// board.
    #[test]
    fn another_user_gets_what_is_exported_to_anyone_and_learns_nothing_else() {
        let (me, _) = os::self_identity();
        let mut stranger = cred(me);
        stranger.uid = nix::unistd::geteuid().as_raw().wrapping_add(4242);
        let open = os::random_id();
        let t = table_with(open, Policy::Anyone, None);
        let fetch = |id| encode_request(&Request::Fetch(id));
        let a = decide(&fetch(open), false, stranger, &t, 1);
        assert_eq!(a.status, Status::Ok, "exported to anyone");
        assert_eq!(a.fds.as_ref().map(|f| f.len()), Some(1));
        let locate = encode_request(&Request::Locate(open));
        assert_eq!(
            decide(&locate, false, stranger, &t, 1).status,
            Status::UidDenied
        );
        let board = encode_request(&Request::Locate(BOARD_ID));
        assert_eq!(
            decide(&board, false, stranger, &t, 1).status,
            Status::UidDenied
        );
        let missing = decide(&fetch(os::random_id()), false, stranger, &t, 1);
        assert_eq!(
            missing.status,
            Status::UidDenied,
            "the same answer as a refusal"
        );
        // A list that names its process serves it too.
        let listed = os::random_id();
        let pinned = super::super::policy::Allowed { pid: me, start: 0 };
        let t = table_with(listed, Policy::Pids(vec![pinned]), None);
        assert_eq!(
            decide(&fetch(listed), false, stranger, &t, 1).status,
            Status::Ok
        );
        for policy in [
            Policy::SameUser(nix::unistd::geteuid().as_raw()),
            Policy::OwnUsers,
            Policy::Pids(vec![super::super::policy::Allowed {
                pid: me + 1,
                start: 0,
            }]),
        ] {
            let id = os::random_id();
            let t = table_with(id, policy.clone(), None);
            let a = decide(&fetch(id), false, stranger, &t, 1);
            assert_eq!(a.status, Status::UidDenied, "{policy:?}");
            assert!(a.fds.is_none(), "{policy:?}");
        }
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
        // A peer that stands for unmapped users (the overflow uid, its pid
        // out of sight) is refused even what is exported to anyone.
        let mut unmapped_peer = cred(0);
        unmapped_peer.uid = super::super::policy::overflow_uid();
        assert_eq!(
            decide(&fetch, false, unmapped_peer, &t, 1).status,
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

    #[test]
    fn a_locate_request_reveals_nothing_to_a_refused_importer() {
        use super::super::protocol::{
            encode_batch, parse_batch_reply, parse_located_reply, REPLY_LEN,
        };
        let (me, _) = os::self_identity();
        let id = os::random_id();
        let leases = LeaseTable::new(4).unwrap();
        let t = table_with(
            id,
            Policy::Pids(vec![Allowed { pid: 1, start: 0 }]),
            Some(Arc::clone(&leases)),
        );
        let start = OnceCell::new();
        let locate = encode_request(&Request::Locate(id));
        // A pid not on the allow-list: the fetch's refusal, a plain reply,
        // no location, no descriptor, no lease.
        let r = respond(&locate, false, cred(me), &t, 1, &start);
        assert_eq!(r.bytes.len(), REPLY_LEN);
        let (status, _, lease, places) = parse_located_reply(&r.bytes, false).unwrap();
        assert_eq!(status, Some(Status::PidDenied));
        assert!(lease.is_none() && places.is_none() && r.fds.is_empty());
        let batch = encode_batch(&[id, id], true);
        let r = respond(&batch, false, cred(me), &t, 1, &start);
        let (_, entries, places) = parse_batch_reply(&r.bytes, 2).unwrap();
        assert!(entries.iter().all(|e| e.status == Some(Status::PidDenied)));
        assert_eq!(places, Some(Vec::new()));
        assert!(r.fds.is_empty());
        assert_eq!(leases.count(), 0);
        // The exporter itself: located, leased, and still no descriptor sent.
        let r = respond(&locate, false, cred(me), &t, me, &start);
        let (status, _, lease, places) = parse_located_reply(&r.bytes, false).unwrap();
        assert_eq!(status, Some(Status::Ok));
        assert!(lease.is_some() && r.fds.is_empty());
        let places = places.unwrap();
        assert_eq!(places.len(), 1);
        let fds = lock(&t).get(&id).unwrap()[0].fds.clone();
        assert_eq!(
            places[0].fd,
            std::os::fd::AsRawFd::as_raw_fd(&fds[0]) as u32
        );
    }
}
