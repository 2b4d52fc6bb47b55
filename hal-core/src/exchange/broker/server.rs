//! The broker's server: a thread accepting on an abstract `SOCK_SEQPACKET`
//! socket, and the decision for each request.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{self, AddressFamily, Backlog, SockFlag, SockType, UnixAddr};

use super::policy::{uid_allowed, Policy};
use super::protocol::{encode_reply, parse_request, Request, Status};
use super::registry::{
    lock, Broker, Entry, Registration, Table, BROKER, FORK_HOOK, LISTENER_FD, SERIAL,
};
use crate::error::{Error, Result};
use crate::exchange::limits::MAX_FDS;
use crate::exchange::peer::PeerCred;
use crate::exchange::sys;
use crate::lease::{LeaseTable, LeaseTicket};
use crate::os;

/// Longest a served connection may stay silent before the broker drops it.
const SERVE_TIMEOUT: Duration = Duration::from_secs(1);

/// Runs in a child right after `fork`: the child must not keep the parent's
/// listening socket (it would hold the abstract name after the parent exits,
/// and importers would then wait for a broker that never answers).
extern "C" fn close_listener_in_child() {
    let fd = LISTENER_FD.swap(-1, Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: right after fork the child's descriptor table is a copy of
        // the parent's, where `fd` is the broker's listening socket; the only
        // owner of that number in the child is the broker thread's state,
        // which did not survive the fork and is never dropped here. close(2)
        // is async-signal-safe, as a fork handler requires.
        unsafe { libc::close(fd) };
    }
}

/// Register `fds` under `object_id` with this process's broker, starting it
/// on first use (and again in a forked child).
pub(crate) fn register(
    object_id: [u8; 16],
    fds: Arc<[OwnedFd]>,
    policy: Policy,
    leases: Option<Arc<LeaseTable>>,
) -> Result<Registration> {
    let pid = os::pid();
    let (name, table) = {
        let mut slot = BROKER.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_some_and(|b| b.pid != pid) {
            // Inherited through fork: its thread did not come along and its
            // registrations are the parent's. Drop what can be dropped
            // without waiting on a lock a vanished thread may hold.
            if let Some(old) = slot.take() {
                if let Ok(mut t) = old.table.try_lock() {
                    t.clear();
                }
            }
        }
        if slot.is_none() {
            *slot = Some(start(pid)?);
        }
        let b = slot
            .as_ref()
            .ok_or_else(|| Error::invalid("descriptor broker state missing"))?;
        (b.name.clone(), Arc::clone(&b.table))
    };
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    lock(&table).entry(object_id).or_default().push(Entry {
        serial,
        fds,
        policy,
        leases,
    });
    Ok(Registration {
        pid,
        serial,
        object_id,
        name,
        table,
    })
}

pub(super) fn start(pid: u32) -> Result<Broker> {
    let name = format!("hal-{pid}-{}", os::hex(&os::random_id()[..8]));
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| Error::errno("creating the descriptor broker's socket", e))?;
    let addr = UnixAddr::new_abstract(name.as_bytes())
        .map_err(|e| Error::errno("naming the descriptor broker's socket", e))?;
    socket::bind(fd.as_raw_fd(), &addr).map_err(|e| {
        Error::errno(
            format!("binding the descriptor broker to the abstract socket `{name}`"),
            e,
        )
    })?;
    let backlog = Backlog::new(128).unwrap_or(Backlog::MAXCONN);
    socket::listen(&fd, backlog)
        .map_err(|e| Error::errno("listening on the descriptor broker's socket", e))?;
    FORK_HOOK.call_once(|| {
        // SAFETY: the handler only swaps an atomic and calls close(2), both
        // async-signal-safe, as handlers that run in a forked child must be.
        let r = unsafe { libc::pthread_atfork(None, None, Some(close_listener_in_child)) };
        if r != 0 {
            log::warn!(
                "pthread_atfork failed ({r}): forked children keep the descriptor broker's \
                 socket open until they exec or exit"
            );
        }
    });
    let table: Arc<Table> = Arc::new(Mutex::new(HashMap::new()));
    let served = Arc::clone(&table);
    LISTENER_FD.store(fd.as_raw_fd(), Ordering::SeqCst);
    let spawned = std::thread::Builder::new()
        .name("hal-broker".into())
        .spawn(move || serve_forever(fd, served, pid));
    if let Err(e) = spawned {
        LISTENER_FD.store(-1, Ordering::SeqCst);
        return Err(Error::io("starting the descriptor broker thread", e));
    }
    log::debug!("descriptor broker of pid {pid} listens on abstract socket `{name}`");
    Ok(Broker { pid, name, table })
}

pub(super) fn serve_forever(listener: OwnedFd, table: Arc<Table>, pid: u32) {
    let mut warned = false;
    loop {
        match socket::accept4(listener.as_raw_fd(), SockFlag::SOCK_CLOEXEC) {
            Ok(raw) => {
                // SAFETY: accept4 returned a new descriptor that nothing else owns.
                let conn = unsafe { OwnedFd::from_raw_fd(raw) };
                dispatch(conn, &table, pid);
            }
            Err(Errno::EINTR | Errno::ECONNABORTED | Errno::EPROTO) => {}
            Err(e) => {
                if !warned {
                    log::warn!(
                        "descriptor broker of pid {pid}: accept failed ({e}); importers may time out \
                         until it recovers (at the open-file limit, close descriptors or raise it)"
                    );
                    warned = true;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Connections served at once on their own threads; past this, a
/// connection is served on the accepting thread.
pub(super) const MAX_CONCURRENT: usize = 32;

pub(super) static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Serve an accepted connection without letting one slow or silent peer
/// hold up the others: a request is read and answered on a thread of its own
/// (up to [`MAX_CONCURRENT`] at a time), so the accepting thread goes back to
/// `accept` at once; another user's connection gets a much shorter time to
/// send its request before it is refused.
pub(super) fn dispatch(conn: OwnedFd, table: &Arc<Table>, self_pid: u32) {
    let peer = match sys::peer_cred(conn.as_fd()) {
        Ok(p) => p,
        Err(e) => {
            log::debug!("descriptor broker: SO_PEERCRED failed: {e}");
            return;
        }
    };
    // An importer sends its request right after connecting, so the request
    // is usually waiting by the time the connection is accepted; it is then
    // answered here, where nothing can block: the request is read at once
    // and the 12-byte reply fits in the new socket's buffer. Starting a
    // thread for every import cost more than the rest of the import
    // (`halctl bench`, import-first: about 95 us against 40 us). A
    // connection whose request has not arrived goes to a thread of its own.
    if request_waiting(conn.as_fd()) {
        serve_guarded(conn.as_fd(), peer, table, self_pid);
        return;
    }
    if IN_FLIGHT.fetch_add(1, Ordering::AcqRel) < MAX_CONCURRENT {
        let table = Arc::clone(table);
        let spawned = std::thread::Builder::new()
            .name("hal-broker-conn".into())
            .spawn(move || {
                serve_guarded(conn.as_fd(), peer, &table, self_pid);
                IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_ok() {
            return;
        }
        // The closure (and the connection with it) is gone; the peer sees
        // the connection closed and reports the broker's failure.
        IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
        log::warn!("descriptor broker: no thread for a connection; it was closed");
        return;
    }
    IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    serve_guarded(conn.as_fd(), peer, table, self_pid);
}

/// True when a message (or the peer's hang-up) is waiting on `conn`.
pub(super) fn request_waiting(conn: BorrowedFd<'_>) -> bool {
    let mut fds = [PollFd::new(conn, PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
}

pub(super) fn serve_guarded(conn: BorrowedFd<'_>, peer: PeerCred, table: &Table, self_pid: u32) {
    let served = catch_unwind(AssertUnwindSafe(|| serve_one(conn, peer, table, self_pid)));
    if served.is_err() {
        log::error!("descriptor broker: a request handler panicked; the broker goes on");
    }
}

/// Serve one connection: read one request, answer it, close.
pub(super) fn serve_one(conn: BorrowedFd<'_>, peer: PeerCred, table: &Table, self_pid: u32) {
    // Another user is refused whatever it sends: read its request (so that
    // the refusal reaches it rather than a reset) but do not wait for long.
    let wait = if uid_allowed(peer.uid) {
        SERVE_TIMEOUT
    } else {
        Duration::from_millis(50)
    };
    if let Err(e) = sys::set_timeouts(conn, Some(wait)) {
        log::debug!("descriptor broker: setting timeouts failed: {e}");
        return;
    }
    let mut buf = [0u8; 64];
    // Descriptors a peer attaches are taken and closed at once.
    let got = match sys::recv_msg(conn, &mut buf, 0) {
        Ok(got) => got,
        Err(e) => {
            log::debug!("descriptor broker: no request from pid {}: {e}", peer.pid);
            return;
        }
    };
    if got.bytes == 0 && !got.trunc {
        return;
    }
    let answer = decide(
        &buf[..got.bytes.min(buf.len())],
        got.trunc,
        peer,
        table,
        self_pid,
    );
    reply(conn, peer, &answer);
}

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

pub(super) fn reply(conn: BorrowedFd<'_>, peer: PeerCred, answer: &Answer) {
    let raw: Vec<RawFd> = answer
        .fds
        .as_deref()
        .map(|f| f.iter().map(|fd| fd.as_raw_fd()).collect())
        .unwrap_or_default();
    let bytes = encode_reply(answer.status, raw.len() as u8, peer.pid, answer.lease);
    if let Err(e) = sys::send_msg(conn, &bytes, &raw) {
        log::debug!(
            "descriptor broker: replying to pid {} failed: {e}",
            peer.pid
        );
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
    // The peer's start time, read at most once and only when an allow-list
    // or a lease needs it: it pins both to this process, so that a recycled
    // pid inherits neither.
    let start_time = std::cell::OnceCell::new();
    let start = || *start_time.get_or_init(|| os::process_start_time(peer.pid));
    let mut table = lock(table);
    let Some(entries) = table.get_mut(&id) else {
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

/// This process's own broker table when `name` is its broker: a request to
/// it is decided in place, without a socket.
pub(super) fn own_table(name: &str) -> Option<Arc<Table>> {
    let slot = BROKER.lock().unwrap_or_else(|e| e.into_inner());
    slot.as_ref()
        .filter(|b| b.pid == os::pid() && b.name == name)
        .map(|b| Arc::clone(&b.table))
}

/// True when `name` is this process's own broker and `fds` are the files
/// (device and inode) it registered for `object_id`, in order.
pub(crate) fn registered_here(name: &str, object_id: &[u8; 16], fds: &[OwnedFd]) -> bool {
    let Some(table) = own_table(name) else {
        return false;
    };
    // F_GET_SEALS first: it answers at once for any descriptor, where
    // fstat on a peer's FUSE-backed descriptor could stall. Registered
    // descriptors are memfds.
    let file = |fd: BorrowedFd<'_>| {
        os::seals(fd).ok()?;
        os::fstat(fd).ok().map(|st| (st.st_dev, st.st_ino))
    };
    let table = lock(&table);
    table.get(object_id).is_some_and(|entries| {
        entries.iter().any(|e| {
            e.fds.len() == fds.len()
                && e.fds
                    .iter()
                    .zip(fds)
                    .all(|(a, b)| file(a.as_fd()).is_some_and(|x| Some(x) == file(b.as_fd())))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::super::policy::{overflow_uid, Allowed};
    use super::super::protocol::encode_request;
    use super::*;
    use std::collections::HashMap;

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
