//! The importer's batch fetch: the descriptors (and leases) of many objects
//! of one exporter in one round trip.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use super::client::{
    self, closed_by_exit, creator_may_be, hung_up, impostor, recv_failure, release, send_failure,
    status_error, with_connection, Served,
};
use super::direct;
use super::fetch::fetch;
use super::getfd::{self, Took};
use super::locate::give_back;
use super::located::LOCATED_LEN;
use super::protocol::{
    encode_batch, parse_batch_reply, parse_reply, Status, BATCH_ENTRY, BATCH_REPLY_HEADER,
    MAX_BATCH, MAX_BATCH_FDS,
};
use super::server::own_table;
use crate::error::{Error, HandleError, Result};
use crate::exchange::limits::dropped_descriptors;
use crate::exchange::peer::PeerCred;
use crate::exchange::sys;
use crate::handle::Handle;
use crate::kit::os;
use crate::kit::os::discard::Untrusted;
use crate::lease::LeaseTicket;

/// Fetch the descriptors of every handle in `handles`, all served by the
/// broker `name`, each with `counts[i]` descriptors: one request per
/// [`MAX_BATCH`] handles (and [`MAX_BATCH_FDS`] descriptors). One result per
/// handle, in order: the broker decides each object on its own, so a
/// refused handle does not spoil the others. A batch the broker does not
/// take as a whole (an older broker, a connection lost) is fetched handle
/// by handle, so that each gets its own answer.
pub(crate) fn fetch_batch(
    handles: &[&Handle],
    counts: &[usize],
    name: &str,
) -> Vec<Result<Served>> {
    if !getfd::wanted(name) || own_table(name).is_some() {
        return fetch_asking(handles, counts, name);
    }
    // Each handle the exporter's board states is imported without asking;
    // the others go to the broker together.
    let mut out: Vec<Option<Result<Served>>> = handles
        .iter()
        .zip(counts)
        .map(|(h, &c)| direct::fetch(h, name, c).map(Ok))
        .collect();
    let direct = out.iter().filter(|r| r.is_some()).count();
    for _ in 0..direct {
        getfd::note_direct();
    }
    let left: Vec<usize> = (0..handles.len()).filter(|&i| out[i].is_none()).collect();
    if !left.is_empty() {
        let hs: Vec<&Handle> = left.iter().map(|&i| handles[i]).collect();
        let cs: Vec<usize> = left.iter().map(|&i| counts[i]).collect();
        for (&i, r) in left.iter().zip(fetch_asking(&hs, &cs, name)) {
            out[i] = Some(r);
        }
    }
    out.into_iter()
        .map(|r| r.unwrap_or_else(|| Err(Error::invalid("an object of the batch was not fetched"))))
        .collect()
}

/// [`fetch_batch`] through the broker: one request per chunk.
fn fetch_asking(handles: &[&Handle], counts: &[usize], name: &str) -> Vec<Result<Served>> {
    let single = |i: usize| fetch(handles[i], name, counts[i]);
    if handles.len() < 2 || own_table(name).is_some() {
        return (0..handles.len()).map(single).collect();
    }
    let mut out = Vec::with_capacity(handles.len());
    let mut i = 0;
    while i < handles.len() {
        let mut j = i;
        let mut fds = 0;
        while j < handles.len() && j - i < MAX_BATCH && fds + counts[j] <= MAX_BATCH_FDS {
            fds += counts[j];
            j += 1;
        }
        if j - i < 2 {
            out.push(single(i));
            i += 1;
            continue;
        }
        let chunk = &handles[i..j];
        let first = chunk[0];
        if getfd::located_wanted(name) {
            if let Some(results) = locate_batch(chunk, &counts[i..j], name) {
                out.extend(results);
                i = j;
                continue;
            }
        }
        let got = with_connection(Some(first), name, first.creator_pid, |conn| {
            exchange_batch(
                conn.fd.as_fd(),
                &conn.server,
                None,
                name,
                chunk,
                &counts[i..j],
            )
        })
        .map_err(|e| closed_by_exit(e, first, name));
        match got {
            Ok(results) => out.extend(results.into_iter().map(|r| {
                r.and_then(|g| match g {
                    Got::Served(s) => Ok(s),
                    Got::Again(_) => Err(Error::invalid("a fetched object was not served")),
                })
            })),
            Err(e) => {
                log::debug!("batch fetch at `{name}` failed as a whole ({e}); one by one");
                out.extend((i..j).map(single));
            }
        }
        i = j;
    }
    out
}

/// The batch `chunk` by `pidfd_getfd`: one locate request, then each
/// object's descriptors taken from the exporter; an object whose take
/// fails is fetched on its own with `SCM_RIGHTS`. `None` when the whole
/// chunk must be fetched with `SCM_RIGHTS` (the path is not possible with
/// this broker, or the broker did not take the batch).
fn locate_batch(chunk: &[&Handle], counts: &[usize], name: &str) -> Option<Vec<Result<Served>>> {
    let first = chunk[0];
    let got = with_connection(Some(first), name, first.creator_pid, |conn| {
        if !getfd::ensure_pidfd(conn, first, name) {
            return Ok(None);
        }
        let pidfd = conn.pidfd();
        exchange_batch(conn.fd.as_fd(), &conn.server, pidfd, name, chunk, counts).map(Some)
    })
    .map_err(|e| closed_by_exit(e, first, name));
    let results = match got {
        Ok(Some(results)) => results,
        Ok(None) => {
            getfd::note_fell_back();
            return None;
        }
        Err(e) => {
            log::debug!("batch locate at `{name}` failed as a whole ({e}); fetching it");
            return None;
        }
    };
    Some(
        results
            .into_iter()
            .enumerate()
            .map(|(k, r)| match r? {
                Got::Served(s) => {
                    getfd::note_taken();
                    Ok(s)
                }
                Got::Again(lease) => {
                    give_back(name, lease);
                    client::fetch(chunk[k], name, counts[k])
                }
            })
            .collect(),
    )
}

/// One object's answer in a batch.
enum Got {
    /// Its descriptors (and lease).
    Served(Served),
    /// Located, but not taken: fetch it again after giving this lease back.
    Again(Option<LeaseTicket>),
}

/// One batch request for `chunk` on a connection to `server`, and its
/// reply split per handle. With `pidfd` (the server's), the request asks
/// for locations and each object's descriptors are taken through it. An
/// error when the reply as a whole is not a batch reply.
fn exchange_batch(
    fd: BorrowedFd<'_>,
    server: &PeerCred,
    pidfd: Option<BorrowedFd<'_>>,
    name: &str,
    chunk: &[&Handle],
    counts: &[usize],
) -> Result<Vec<Result<Got>>> {
    // Handles whose creator cannot be this server are not asked for.
    let asked: Vec<usize> = (0..chunk.len())
        .filter(|&k| creator_may_be(chunk[k], server.pid))
        .collect();
    let exporter = chunk[0].creator_pid;
    let ids: Vec<[u8; 16]> = asked.iter().map(|&k| chunk[k].object_id).collect();
    let mut results: Vec<Option<Result<Got>>> = (0..chunk.len()).map(|_| None).collect();
    if !ids.is_empty() {
        sys::send_msg(fd, &encode_batch(&ids, pidfd.is_some()), &[])
            .map_err(|e| send_failure(e, name, exporter))?;
        let mut buf =
            [0u8; BATCH_REPLY_HEADER + BATCH_ENTRY * MAX_BATCH + LOCATED_LEN * MAX_BATCH_FDS];
        let got = sys::recv_msg(fd, &mut buf, MAX_BATCH_FDS)
            .map_err(|e| recv_failure(e, name, exporter))?;
        if got.ctrunc {
            return Err(dropped_descriptors(got.fds.len(), None));
        }
        if got.bytes == 0 {
            return Err(hung_up(name, exporter));
        }
        let reply = &buf[..got.bytes.min(buf.len())];
        let malformed = || {
            Error::io(
                format!("reading the batch reply of the broker `{name}`"),
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    "not a batch reply: the exporter runs an older hal version, or refused the \
                     batch as a whole",
                ),
            )
        };
        if got.trunc {
            return Err(malformed());
        }
        if pidfd.is_some() {
            if let Some((Some(Status::BadRequest | Status::UnsupportedVersion), ..)) =
                parse_reply(reply, false)
            {
                // An older broker, which does not know the request.
                getfd::turn_off(name);
                return Err(malformed());
            }
        }
        let (seen_pid, entries, places) =
            parse_batch_reply(reply, ids.len()).ok_or_else(malformed)?;
        if pidfd.is_some() != places.is_some() || (pidfd.is_some() && !got.fds.is_empty()) {
            return Err(malformed());
        }
        let mut places = places.unwrap_or_default().into_iter();
        if pidfd.is_none() && entries.iter().map(|e| e.fds).sum::<usize>() != got.fds.len() {
            return Err(HandleError::Descriptors(format!(
                "the broker `{name}` sent {} descriptor(s) for a batch that announced others",
                got.fds.len()
            ))
            .into());
        }
        let mut fds = got.fds.accept().into_iter();
        for (&k, e) in asked.iter().zip(entries) {
            // Refused unless the entry is served whole.
            let mut mine = Untrusted::new(fds.by_ref().take(e.fds).collect());
            // What was read of descriptors taken by pidfd_getfd: the
            // import's checks use it rather than read it again.
            let mut facts = None;
            let h = chunk[k];
            if let (Some(pidfd), Some(Status::Ok)) = (pidfd, e.status) {
                let at: Vec<_> = places.by_ref().take(e.fds).collect();
                if at.len() != counts[k] || !getfd::wanted(name) {
                    results[k] = Some(Ok(Got::Again(e.lease)));
                    continue;
                }
                match getfd::take(pidfd, server.pid, &at, name) {
                    Took::Fds(fds, read) => {
                        mine = Untrusted::new(fds);
                        facts = Some(read);
                    }
                    Took::Fallback => {
                        results[k] = Some(Ok(Got::Again(e.lease)));
                        continue;
                    }
                }
            }
            let what = format!(
                "object {} at the descriptor broker `{name}` of pid {}",
                os::hex(&h.object_id),
                h.creator_pid
            );
            let r = match e.status {
                Some(Status::Ok) if mine.len() == counts[k] => Ok(Got::Served(Served {
                    fds: mine.accept(),
                    lease: e.lease,
                    board: None,
                    facts,
                })),
                Some(Status::Ok) => {
                    if let Some(t) = e.lease {
                        let _ = release(name, &t);
                    }
                    Err(HandleError::Descriptors(format!(
                        "the broker `{name}` sent {} descriptor(s) for {what}, and the handle \
                         describes {}",
                        mine.len(),
                        counts[k]
                    ))
                    .into())
                }
                Some(status) if mine.is_empty() => {
                    Err(status_error(status, &what, h.creator_pid, Some(seen_pid)))
                }
                Some(_) => Err(HandleError::Descriptors(format!(
                    "the broker `{name}` refused {what} and sent descriptors anyway"
                ))
                .into()),
                None => Err(Error::io(
                    what,
                    io::Error::other("the broker answered with an unknown status"),
                )),
            };
            results[k] = Some(r);
        }
    }
    Ok(results
        .into_iter()
        .enumerate()
        .map(|(k, r)| r.unwrap_or_else(|| Err(impostor(name, server.pid, chunk[k]))))
        .collect())
}
