//! The descriptor broker: one per process, serving the descriptors of this
//! process's exports to importers that present only the handle text.
//!
//! The protocol is described in the [module documentation](super) of
//! `exchange`; this file holds the server (a thread accepting on an abstract
//! `SOCK_SEQPACKET` socket) and the client ([`fetch`]).

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, OnceLock};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{self, AddressFamily, Backlog, SockFlag, SockType, UnixAddr};

use super::{sys, BROKER_TIMEOUT, MAX_FDS};
use crate::error::{Error, HandleError, Result};
use crate::handle::Handle;
use crate::lease::{LeaseTable, LeaseTicket};
use crate::os;

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
/// Longest a served connection may stay silent before the broker drops it.
const SERVE_TIMEOUT: Duration = Duration::from_secs(1);

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

/// Who may fetch an export's descriptors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Policy {
    /// Any process of an allowed user.
    Anyone,
    /// Only these processes (pids as this process's pid namespace numbers
    /// them).
    Pids(Vec<Allowed>),
}

/// One allowed importer: a pid, pinned to the process that had it when it
/// was allowed, so that a recycled pid inherits nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Allowed {
    pub(crate) pid: u32,
    /// The start time of the allowed process; 0 when no process had the pid
    /// when it was allowed: the first process served under it pins it.
    pub(crate) start: u64,
}

impl Policy {
    /// The policy a handle states. Each pid is pinned to the process that
    /// has it now; `old` keeps the pins of pids it already held, so that
    /// allowing more importers never re-pins a pid to a newer process.
    pub(crate) fn of(handle: &Handle, old: Option<&Policy>) -> Policy {
        if handle
            .flags
            .contains(crate::handle::HandleFlags::ANY_IMPORTER)
        {
            return Policy::Anyone;
        }
        let kept = |pid: u32| match old {
            Some(Policy::Pids(list)) => list.iter().find(|a| a.pid == pid).copied(),
            _ => None,
        };
        Policy::Pids(
            handle
                .allowed_pids
                .iter()
                .map(|&pid| {
                    kept(pid).unwrap_or(Allowed {
                        pid,
                        start: os::process_start_time(pid).unwrap_or(0),
                    })
                })
                .collect(),
        )
    }

    /// Whether the process `pid` that started at `start` may import; pins
    /// an unpinned pid to it.
    fn admit(&mut self, pid: u32, start: Option<u64>) -> bool {
        match self {
            Policy::Anyone => true,
            Policy::Pids(list) => {
                let Some(a) = list.iter_mut().find(|a| pid != 0 && a.pid == pid) else {
                    return false;
                };
                match (a.start, start) {
                    (0, Some(now)) => {
                        a.start = now;
                        true
                    }
                    (pinned, Some(now)) => pinned == now,
                    // The process vanished while being served.
                    (_, None) => false,
                }
            }
        }
    }
}

/// The overflow uid of this machine (`/proc/sys/kernel/overflowuid`): the
/// uid the kernel reports for a user that is not mapped into the reader's
/// user namespace.
pub(crate) fn overflow_uid() -> u32 {
    static UID: OnceLock<u32> = OnceLock::new();
    *UID.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/overflowuid")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(65534)
    })
}

/// True when a process of `uid` may talk to a broker of this user (and a
/// broker of `uid` may serve us): the same effective uid, or root. The
/// overflow uid never matches: it stands for *any* user that is not mapped
/// into this user namespace, so a process running as it would otherwise
/// serve (or trust) every such user.
pub(crate) fn uid_allowed(uid: u32) -> bool {
    uid_matches(uid, nix::unistd::geteuid().as_raw(), overflow_uid())
}

fn uid_matches(peer: u32, me: u32, overflow: u32) -> bool {
    peer != overflow && (peer == 0 || peer == me)
}

struct Entry {
    serial: u64,
    fds: Arc<[OwnedFd]>,
    policy: Policy,
    leases: Option<Arc<LeaseTable>>,
}

type Table = Mutex<HashMap<[u8; 16], Vec<Entry>>>;

fn lock(table: &Table) -> MutexGuard<'_, HashMap<[u8; 16], Vec<Entry>>> {
    // The table stays consistent even if a holder panicked: every update is
    // a single insert, remove or field store.
    table.lock().unwrap_or_else(|e| e.into_inner())
}

/// This process's broker.
struct Broker {
    /// The process that started it; a forked child sees another pid here.
    pid: u32,
    name: String,
    table: Arc<Table>,
}

static BROKER: Mutex<Option<Broker>> = Mutex::new(None);
static SERIAL: AtomicU64 = AtomicU64::new(1);
/// The listening descriptor, for the fork handler to close in a child.
static LISTENER_FD: AtomicI32 = AtomicI32::new(-1);
static FORK_HOOK: Once = Once::new();

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

/// An export's registration with the broker; dropping it unregisters.
pub(crate) struct Registration {
    pid: u32,
    serial: u64,
    object_id: [u8; 16],
    name: String,
    table: Arc<Table>,
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("broker", &self.name)
            .field("pid", &self.pid)
            .field("object_id", &os::hex(&self.object_id))
            .finish()
    }
}

impl Registration {
    /// The broker's abstract socket name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// True in the process that registered (false in a forked child).
    fn here(&self) -> bool {
        self.pid == os::pid()
    }

    /// Replace the export's policy with the one `handle` states, keeping
    /// the pins of pids that stay allowed.
    pub(crate) fn set_policy_of(&self, handle: &Handle) {
        if !self.here() {
            return;
        }
        if let Some(entries) = lock(&self.table).get_mut(&self.object_id) {
            for e in entries.iter_mut().filter(|e| e.serial == self.serial) {
                e.policy = Policy::of(handle, Some(&e.policy));
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if !self.here() {
            // A forked child's copy: the registration belongs to the parent.
            return;
        }
        let mut table = lock(&self.table);
        if let Some(entries) = table.get_mut(&self.object_id) {
            entries.retain(|e| e.serial != self.serial);
            if entries.is_empty() {
                table.remove(&self.object_id);
            }
        }
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

fn start(pid: u32) -> Result<Broker> {
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

fn serve_forever(listener: OwnedFd, table: Arc<Table>, pid: u32) {
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
const MAX_CONCURRENT: usize = 32;

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Serve an accepted connection without letting one slow or silent peer
/// hold up the others: a request is read and answered on a thread of its own
/// (up to [`MAX_CONCURRENT`] at a time), so the accepting thread goes back to
/// `accept` at once; another user's connection gets a much shorter time to
/// send its request before it is refused.
fn dispatch(conn: OwnedFd, table: &Arc<Table>, self_pid: u32) {
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
fn request_waiting(conn: BorrowedFd<'_>) -> bool {
    let mut fds = [PollFd::new(conn, PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
}

fn serve_guarded(conn: BorrowedFd<'_>, peer: super::PeerCred, table: &Table, self_pid: u32) {
    let served = catch_unwind(AssertUnwindSafe(|| serve_one(conn, peer, table, self_pid)));
    if served.is_err() {
        log::error!("descriptor broker: a request handler panicked; the broker goes on");
    }
}

/// Serve one connection: read one request, answer it, close.
fn serve_one(conn: BorrowedFd<'_>, peer: super::PeerCred, table: &Table, self_pid: u32) {
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

fn reply(conn: BorrowedFd<'_>, peer: super::PeerCred, answer: &Answer) {
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

/// Decide a request from `peer`.
fn decide(
    request: &[u8],
    truncated: bool,
    peer: super::PeerCred,
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
    // The peer's start time, read once: it pins allow-list entries and
    // leases to this process, so that a recycled pid inherits neither.
    let start = os::process_start_time(peer.pid);
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
        Some(t) => match t.register(peer.pid, start.unwrap_or(0)) {
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

/// This process's own broker table when `name` is its broker: a request to
/// it is decided in place, without a socket.
fn own_table(name: &str) -> Option<Arc<Table>> {
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

/// What an importer gets from a broker: descriptors and a lease ticket.
pub(crate) struct Served {
    pub(crate) fds: Vec<OwnedFd>,
    pub(crate) lease: Option<LeaseTicket>,
}

/// Fetch the `count` descriptors of `handle` (and a lease, when the export
/// counts importers) from the broker `name`.
pub(crate) fn fetch(handle: &Handle, name: &str, count: usize) -> Result<Served> {
    call(handle, name, Request::Fetch(handle.object_id), count)
}

/// Take a lease on `handle`'s object from the broker `name`, for
/// descriptors that came another way. `None` when the export does not count
/// importers.
pub(crate) fn lease(handle: &Handle, name: &str) -> Result<Option<LeaseTicket>> {
    Ok(call(handle, name, Request::Lease(handle.object_id), 0)?.lease)
}

/// Give the lease `ticket` back to the broker `name`. Errors mean that the
/// broker is gone (its exporter exited: nothing counts the lease any more)
/// or refused the ticket.
pub(crate) fn release(name: &str, ticket: &LeaseTicket) -> Result<()> {
    let request = Request::Release(*ticket);
    if let Some(table) = own_table(name) {
        let (pid, _) = os::self_identity();
        let me = super::PeerCred {
            pid,
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
        };
        let answer = decide(&encode_request(&request), false, me, &table, pid);
        return match answer.status {
            Status::Ok => Ok(()),
            s => Err(status_error(
                s,
                &format!("lease release at `{name}`"),
                pid,
                None,
            )),
        };
    }
    let fd = connect(name, 0)?;
    let server =
        sys::peer_cred(fd.as_fd()).map_err(|e| Error::io("reading the broker's credentials", e))?;
    if !uid_allowed(server.uid) {
        return Err(Error::PermissionDenied {
            pid: Some(server.pid),
            reason: format!("the socket `{name}` is served by uid {}", server.uid),
        });
    }
    exchange(
        fd.as_fd(),
        name,
        server.pid,
        &request,
        0,
        &format!("lease release at `{name}`"),
    )
    .map(drop)
}

fn call(handle: &Handle, name: &str, request: Request, count: usize) -> Result<Served> {
    let exporter = handle.creator_pid;
    let object = os::hex(&handle.object_id);
    let what = format!("object {object} at the descriptor broker `{name}` of pid {exporter}");
    if let Some(table) = own_table(name) {
        // An import in the exporting process itself: the same decision,
        // with duplicates of the registered descriptors. A handle that
        // names another creator is refused as `check_server` refuses a
        // broker that is not its creator's.
        let (pid, _) = os::self_identity();
        if !creator_may_be(handle, pid) {
            return Err(impostor(name, pid, handle));
        }
        let me = super::PeerCred {
            pid,
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
        };
        let answer = decide(&encode_request(&request), false, me, &table, pid);
        if answer.status != Status::Ok {
            return Err(status_error(answer.status, &what, pid, None));
        }
        let fds = match answer.fds {
            Some(fds) => fds
                .iter()
                .map(|fd| os::dup(fd.as_fd()))
                .collect::<Result<Vec<_>>>()?,
            None => Vec::new(),
        };
        if fds.len() != count {
            return Err(HandleError::Descriptors(format!(
                "the export has {} descriptor(s) and the handle describes {count}",
                fds.len()
            ))
            .into());
        }
        return Ok(Served {
            fds,
            lease: answer.lease,
        });
    }
    let fd = connect(name, exporter).map_err(|e| match e {
        Error::NotFound { .. } => gone(handle, name),
        e => e,
    })?;
    check_server(fd.as_fd(), handle, name)?;
    let (lease, fds) =
        exchange(fd.as_fd(), name, exporter, &request, count, &what).map_err(|e| match e {
            Error::Closed { .. } if !os::process_alive(exporter, handle.creator_start) => {
                gone(handle, name)
            }
            e => e,
        })?;
    Ok(Served { fds, lease })
}

fn connect(name: &str, exporter: u32) -> Result<OwnedFd> {
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| Error::errno("creating a socket to the exporter's descriptor broker", e))?;
    sys::set_timeouts(fd.as_fd(), Some(BROKER_TIMEOUT))
        .map_err(|e| Error::io("setting the broker socket's timeouts", e))?;
    let addr = UnixAddr::new_abstract(name.as_bytes())
        .map_err(|e| Error::errno(format!("naming the broker socket `{name}`"), e))?;
    loop {
        match socket::connect(fd.as_raw_fd(), &addr) {
            Ok(()) => return Ok(fd),
            Err(Errno::EINTR) => continue,
            Err(Errno::ECONNREFUSED | Errno::ENOENT) => {
                return Err(Error::NotFound {
                    what: format!("no descriptor broker listens on `{name}`"),
                })
            }
            Err(Errno::EAGAIN) => return Err(timeout(name, exporter, "to accept the connection")),
            Err(e) => {
                return Err(Error::errno(
                    format!("connecting to the descriptor broker `{name}` of pid {exporter}"),
                    e,
                ))
            }
        }
    }
}

/// Send `request` on a connected socket and read and validate the reply:
/// its length, magic, version and status, the descriptors against the
/// announced count and `count`, and the lease ticket.
fn exchange(
    fd: BorrowedFd<'_>,
    name: &str,
    exporter: u32,
    request: &Request,
    count: usize,
    what: &str,
) -> Result<(Option<LeaseTicket>, Vec<OwnedFd>)> {
    match sys::send_msg(fd, &encode_request(request), &[]) {
        Ok(_) => {}
        Err(e) if sys::is_timeout(&e) => {
            return Err(timeout(name, exporter, "to take the request"))
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPIPE | libc::ECONNRESET)) => {
            return Err(hung_up(name, exporter))
        }
        Err(e) => {
            return Err(Error::io(
                format!("sending a request to the broker `{name}`"),
                e,
            ))
        }
    }
    let mut buf = [0u8; 64];
    let got = match sys::recv_msg(fd, &mut buf, MAX_FDS) {
        Ok(got) => got,
        Err(e) if sys::is_timeout(&e) => return Err(timeout(name, exporter, "to answer")),
        Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) => {
            return Err(hung_up(name, exporter))
        }
        Err(e) => {
            return Err(Error::io(
                format!("receiving the reply of the broker `{name}`"),
                e,
            ))
        }
    };
    // `got.fds` owns whatever arrived: every error return below closes it.
    if got.ctrunc {
        return Err(super::dropped_descriptors(got.fds.len(), Some(count)));
    }
    if got.bytes == 0 {
        return Err(hung_up(name, exporter));
    }
    let reply = &buf[..got.bytes.min(buf.len())];
    let (status, announced, seen_pid, lease) = parse_reply(reply, got.trunc).ok_or_else(|| {
        Error::io(
            format!("reading the reply of the broker `{name}`"),
            io::Error::new(
                io::ErrorKind::InvalidData,
                "malformed reply: the exporter runs an incompatible hal version, or the socket \
                 is not a hal broker",
            ),
        )
    })?;
    let Some(status) = status else {
        return Err(Error::io(
            format!("fetching descriptors from the broker `{name}` of pid {exporter}"),
            io::Error::other(format!("the broker answered with status {}", reply[5])),
        ));
    };
    if status != Status::Ok {
        if !got.fds.is_empty() {
            return Err(HandleError::Descriptors(format!(
                "the broker `{name}` refused the request and sent {} descriptor(s) anyway",
                got.fds.len()
            ))
            .into());
        }
        return Err(status_error(status, what, exporter, Some(seen_pid)));
    }
    if got.fds.len() != announced || announced != count {
        return Err(HandleError::Descriptors(format!(
            "the broker `{name}` sent {} descriptor(s) and announced {announced}, and the \
             handle describes {count}",
            got.fds.len()
        ))
        .into());
    }
    Ok((lease, got.fds))
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

/// The error for a refusal `status` of a request about `what`; `seen_pid`
/// is this process's pid as the broker saw it, when it said.
fn status_error(status: Status, what: &str, exporter: u32, seen_pid: Option<u32>) -> Error {
    let own = os::pid();
    let seen_pid = seen_pid.unwrap_or(own);
    match status {
        Status::Ok => Error::invalid(format!("{what}: no error")),
        Status::NotFound => Error::NotFound {
            what: format!(
                "{what}: the export was dropped, or the handle is from another run; ask the \
                 exporter for a fresh handle"
            ),
        },
        Status::PidDenied => {
            let pid = if seen_pid != 0 { seen_pid } else { own };
            let view = if seen_pid == own {
                String::new()
            } else if seen_pid == 0 {
                format!(
                    " (the exporter cannot see this process, pid {own} here: it runs in another \
                     pid namespace, so only an export to anyone can reach it)"
                )
            } else {
                format!(" (pid {own} in this process's own pid namespace)")
            };
            Error::PermissionDenied {
                pid: Some(pid),
                reason: format!(
                    "the exporter (pid {exporter}) has not allowed pid {pid}{view} to import \
                     ({what}); it must add the pid (Exported::add_importers, \
                     Device::allow_importers) or export to anyone"
                ),
            }
        }
        Status::UidDenied => Error::PermissionDenied {
            pid: Some(if seen_pid != 0 { seen_pid } else { own }),
            reason: format!(
                "the exporter (pid {exporter}) runs as another user, or as the overflow uid \
                 ({}): its broker serves only processes of its own uid, and root",
                overflow_uid()
            ),
        },
        Status::Busy => Error::Busy {
            what: format!("the exporter's lease table ({what}): every slot is held"),
            holders: 0,
        },
        Status::Unseen => Error::PermissionDenied {
            pid: Some(own),
            reason: format!(
                "{what}: the exporter (pid {exporter}) counts its importers and cannot see this \
                 process (it runs in a pid namespace the exporter cannot see), so it could \
                 never tell when this process is gone; import from a process the exporter can \
                 see, or pass the descriptors over a Unix socket"
            ),
        },
        Status::BadRequest | Status::UnsupportedVersion => Error::io(
            what.to_string(),
            io::Error::new(
                io::ErrorKind::InvalidData,
                "the broker refused the request as malformed or of an unknown protocol version: \
                 the exporter runs an incompatible hal version",
            ),
        ),
        Status::Internal => Error::io(
            what.to_string(),
            io::Error::other("the broker could not serve the request"),
        ),
    }
}

fn hung_up(name: &str, exporter: u32) -> Error {
    Error::Closed {
        what: format!(
            "the descriptor broker `{name}` of pid {exporter} hung up without answering (the \
             exporter may be exiting); export again"
        ),
    }
}

/// Refuse a broker socket served by a process that cannot be the exporter:
/// another user (other than root) or the overflow uid; another pid than the
/// creator when the handle names no start time (`creator_start == 0`: the
/// server's pid must then be the creator's); or, when the creator is alive
/// in this pid namespace, another pid.
fn check_server(fd: BorrowedFd<'_>, handle: &Handle, name: &str) -> Result<()> {
    let server =
        sys::peer_cred(fd).map_err(|e| Error::io("reading the broker socket's credentials", e))?;
    if !uid_allowed(server.uid) {
        return Err(Error::PermissionDenied {
            pid: Some(server.pid),
            reason: format!(
                "the socket `{name}` is served by uid {}, neither this user nor root (or the \
                 overflow uid, which stands for any unmapped user); refusing descriptors from it",
                server.uid
            ),
        });
    }
    if !creator_may_be(handle, server.pid) {
        return Err(impostor(name, server.pid, handle));
    }
    Ok(())
}

/// Whether the process `server` (pid as this process sees it) may be the
/// creator of `handle`: it is the creator's pid; or the handle names its
/// creator's start time and the creator cannot be checked here: it is not
/// alive as this process's `/proc` shows it (gone, or numbered by another
/// pid namespace), or the server runs in a pid namespace this process
/// cannot see (its pid reads 0; the creator's pid in the handle is then the
/// exporter's own view and means nothing here). A handle without a start
/// time (`creator_start == 0`) must be served by its creator's pid.
fn creator_may_be(handle: &Handle, server: u32) -> bool {
    server == handle.creator_pid
        || (handle.creator_start != 0
            && (server == 0 || !os::process_alive(handle.creator_pid, handle.creator_start)))
}

fn impostor(name: &str, server: u32, handle: &Handle) -> Error {
    Error::PermissionDenied {
        pid: Some(server),
        reason: format!(
            "the socket `{name}` is served by pid {server}, not by the exporter (pid {}); \
             refusing descriptors from it",
            handle.creator_pid
        ),
    }
}

fn gone(handle: &Handle, name: &str) -> Error {
    let pid = handle.creator_pid;
    if os::process_alive(pid, handle.creator_start) {
        Error::NotFound {
            what: format!(
                "no descriptor broker listens on `{name}` in this network namespace: the exporter \
                 (pid {pid}) runs in another network namespace (abstract sockets do not cross \
                 them: pass the handle over a Unix socket file with exchange::socket instead), or \
                 the handle is stale"
            ),
        }
    } else {
        Error::Closed {
            what: format!(
                "the exporting process (pid {pid}) has exited and its descriptors went with it \
                 (its broker `{name}` is gone); export the resource again. (An exporter in \
                 another network namespace looks the same: abstract sockets do not cross them.)"
            ),
        }
    }
}

fn timeout(name: &str, pid: u32, what: &str) -> Error {
    Error::Timeout {
        after: BROKER_TIMEOUT,
        what: format!("the descriptor broker `{name}` of pid {pid} {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(pid: u32) -> super::super::PeerCred {
        super::super::PeerCred {
            pid,
            uid: nix::unistd::geteuid().as_raw(),
            gid: 0,
        }
    }

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

    #[test]
    fn policy_pins_pids_to_processes() {
        let (me, start) = os::self_identity();
        assert!(Policy::Anyone.admit(7, None));
        let mut p = Policy::Pids(vec![
            Allowed { pid: me, start },
            Allowed { pid: 5, start: 0 },
        ]);
        assert!(p.admit(me, Some(start)));
        assert!(!p.admit(me, Some(start + 1)), "a recycled pid");
        assert!(!p.admit(me, None), "a vanished process");
        assert!(!p.admit(6, Some(1)) && !p.admit(0, Some(1)));
        assert!(
            p.admit(5, Some(99)),
            "an unpinned pid is pinned at first use"
        );
        assert!(p.admit(5, Some(99)));
        assert!(!p.admit(5, Some(100)));
        assert!(!Policy::Pids(Vec::new()).admit(1, Some(1)));
    }

    fn test_handle() -> Handle {
        Handle {
            kind: crate::handle::HandleKind::Memory,
            backend: crate::types::BackendId::CpuShm,
            device: 0,
            device_uuid: [0; 16],
            location: crate::types::Location::Host,
            size: 4096,
            offset: 0,
            address: 0,
            creator_pid: 1,
            creator_start: 1,
            creator_pid_ns: 0,
            object_id: os::random_id(),
            flags: crate::handle::HandleFlags::default(),
            pid_kind: crate::PidKind::Os,
            allowed_pids: Vec::new(),
            fds: crate::handle::FdSource::None,
            payload: Vec::new(),
        }
    }

    #[test]
    fn policy_of_a_handle_keeps_old_pins() {
        let (me, start) = os::self_identity();
        let mut h = test_handle();
        h.allowed_pids = vec![me];
        let first = Policy::of(&h, None);
        assert_eq!(first, Policy::Pids(vec![Allowed { pid: me, start }]));
        let old = Policy::Pids(vec![Allowed { pid: me, start: 1 }]);
        h.allowed_pids = vec![me, 0x7fff_fff0];
        assert_eq!(
            Policy::of(&h, Some(&old)),
            Policy::Pids(vec![
                Allowed { pid: me, start: 1 },
                Allowed {
                    pid: 0x7fff_fff0,
                    start: 0
                }
            ])
        );
        h.flags.insert(crate::handle::HandleFlags::ANY_IMPORTER);
        assert_eq!(Policy::of(&h, Some(&old)), Policy::Anyone);
    }

    #[test]
    fn uids_never_match_the_overflow_uid() {
        assert!(uid_matches(0, 1000, 65534));
        assert!(uid_matches(1000, 1000, 65534));
        assert!(!uid_matches(1001, 1000, 65534));
        assert!(!uid_matches(65534, 65534, 65534), "overflow uid as both");
        assert!(!uid_matches(65534, 0, 65534));
        assert!(uid_allowed(0));
        assert!(!uid_allowed(overflow_uid()));
        let configured = std::fs::read_to_string("/proc/sys/kernel/overflowuid")
            .map(|s| s.trim().parse::<u32>().unwrap())
            .unwrap_or(65534);
        assert_eq!(overflow_uid(), configured);
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
