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
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{self, AddressFamily, Backlog, SockFlag, SockType, UnixAddr};

use super::{sys, BROKER_TIMEOUT, MAX_FDS};
use crate::error::{Error, HandleError, Result};
use crate::handle::Handle;
use crate::os;

/// Magic of a request.
pub(crate) const REQUEST_MAGIC: [u8; 4] = *b"HALB";
/// Magic of a reply.
pub(crate) const REPLY_MAGIC: [u8; 4] = *b"HALR";
/// Protocol version.
pub(crate) const PROTOCOL_VERSION: u8 = 1;
/// Operation: fetch the descriptors of an object.
pub(crate) const OP_FETCH: u8 = 1;
/// Length of a request.
pub(crate) const REQUEST_LEN: usize = 24;
/// Length of a reply.
pub(crate) const REPLY_LEN: usize = 12;
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
    /// No export of this process has the object id.
    NotFound = 3,
    /// The importer's pid is not on the export's allow-list.
    PidDenied = 4,
    /// The importer runs as another user.
    UidDenied = 5,
    /// The broker could not serve the request.
    Internal = 6,
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
            _ => return None,
        })
    }
}

/// Who may fetch an export's descriptors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Policy {
    /// Any process of an allowed user.
    Anyone,
    /// Only these pids (as this process's pid namespace numbers them).
    Pids(Vec<u32>),
}

impl Policy {
    /// The policy a handle states.
    pub(crate) fn of(handle: &Handle) -> Policy {
        if handle
            .flags
            .contains(crate::handle::HandleFlags::ANY_IMPORTER)
        {
            Policy::Anyone
        } else {
            Policy::Pids(handle.allowed_pids.clone())
        }
    }

    fn allows(&self, pid: u32) -> bool {
        match self {
            Policy::Anyone => true,
            Policy::Pids(pids) => pid != 0 && pids.contains(&pid),
        }
    }
}

/// True when a process of `uid` may talk to a broker of this user (and a
/// broker of `uid` may serve us): the same effective uid, or root.
pub(crate) fn uid_allowed(uid: u32) -> bool {
    uid == 0 || uid == nix::unistd::geteuid().as_raw()
}

struct Entry {
    serial: u64,
    fds: Arc<[OwnedFd]>,
    policy: Policy,
}

type Table = Mutex<HashMap<[u8; 16], Vec<Entry>>>;

fn lock(table: &Table) -> MutexGuard<'_, HashMap<[u8; 16], Vec<Entry>>> {
    // The table stays consistent even if a holder panicked: every update is
    // a single insert or remove.
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

    /// Replace the export's policy.
    pub(crate) fn set_policy(&self, policy: Policy) {
        if !self.here() {
            return;
        }
        if let Some(entries) = lock(&self.table).get_mut(&self.object_id) {
            for e in entries.iter_mut().filter(|e| e.serial == self.serial) {
                e.policy = policy.clone();
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
    let (status, fds) = decide(
        &buf[..got.bytes.min(buf.len())],
        got.trunc,
        peer,
        table,
        self_pid,
    );
    reply(conn, peer, status, fds.as_deref());
}

fn reply(conn: BorrowedFd<'_>, peer: super::PeerCred, status: Status, fds: Option<&[OwnedFd]>) {
    let mut reply = [0u8; REPLY_LEN];
    reply[..4].copy_from_slice(&REPLY_MAGIC);
    reply[4] = PROTOCOL_VERSION;
    reply[5] = status as u8;
    let raw: Vec<RawFd> = fds
        .map(|f| f.iter().map(|fd| fd.as_raw_fd()).collect())
        .unwrap_or_default();
    reply[6] = raw.len() as u8;
    reply[8..12].copy_from_slice(&peer.pid.to_le_bytes());
    if let Err(e) = sys::send_msg(conn, &reply, &raw) {
        log::debug!(
            "descriptor broker: replying to pid {} failed: {e}",
            peer.pid
        );
    }
}

fn decide(
    request: &[u8],
    truncated: bool,
    peer: super::PeerCred,
    table: &Table,
    self_pid: u32,
) -> (Status, Option<Arc<[OwnedFd]>>) {
    if !uid_allowed(peer.uid) {
        return (Status::UidDenied, None);
    }
    let id = match parse_request(request, truncated) {
        Ok(id) => id,
        Err(status) => return (status, None),
    };
    let table = lock(table);
    let Some(entries) = table.get(&id) else {
        return (Status::NotFound, None);
    };
    match entries
        .iter()
        .find(|e| peer.pid == self_pid || e.policy.allows(peer.pid))
    {
        Some(e) if e.fds.len() <= MAX_FDS => (Status::Ok, Some(Arc::clone(&e.fds))),
        Some(_) => (Status::Internal, None),
        None if entries.is_empty() => (Status::NotFound, None),
        None => (Status::PidDenied, None),
    }
}

/// The object id of a well-formed request.
pub(crate) fn parse_request(
    request: &[u8],
    truncated: bool,
) -> std::result::Result<[u8; 16], Status> {
    if truncated || request.len() != REQUEST_LEN || request[..4] != REQUEST_MAGIC {
        return Err(Status::BadRequest);
    }
    if request[4] != PROTOCOL_VERSION {
        return Err(Status::UnsupportedVersion);
    }
    if request[5] != OP_FETCH || request[6] != 0 || request[7] != 0 {
        return Err(Status::BadRequest);
    }
    let mut id = [0u8; 16];
    id.copy_from_slice(&request[8..24]);
    Ok(id)
}

/// The request for `object_id`.
pub(crate) fn request(object_id: &[u8; 16]) -> [u8; REQUEST_LEN] {
    let mut r = [0u8; REQUEST_LEN];
    r[..4].copy_from_slice(&REQUEST_MAGIC);
    r[4] = PROTOCOL_VERSION;
    r[5] = OP_FETCH;
    r[8..].copy_from_slice(object_id);
    r
}

/// Fetch the `count` descriptors of `handle` from the broker `name`.
pub(crate) fn fetch(handle: &Handle, name: &str, count: usize) -> Result<Vec<OwnedFd>> {
    let exporter = handle.creator_pid;
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
            Ok(()) => break,
            Err(Errno::EINTR) => continue,
            Err(Errno::ECONNREFUSED | Errno::ENOENT) => return Err(gone(handle, name)),
            Err(Errno::EAGAIN) => return Err(timeout(name, exporter, "to accept the connection")),
            Err(e) => {
                return Err(Error::errno(
                    format!("connecting to the descriptor broker `{name}` of pid {exporter}"),
                    e,
                ))
            }
        }
    }
    check_server(fd.as_fd(), handle, name)?;
    match sys::send_msg(fd.as_fd(), &request(&handle.object_id), &[]) {
        Ok(_) => {}
        Err(e) if sys::is_timeout(&e) => {
            return Err(timeout(name, exporter, "to take the request"))
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPIPE | libc::ECONNRESET)) => {
            return Err(gone(handle, name))
        }
        Err(e) => {
            return Err(Error::io(
                format!("sending a request to the broker `{name}`"),
                e,
            ))
        }
    }
    let mut buf = [0u8; 64];
    let got = match sys::recv_msg(fd.as_fd(), &mut buf, MAX_FDS) {
        Ok(got) => got,
        Err(e) if sys::is_timeout(&e) => return Err(timeout(name, exporter, "to answer")),
        Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) => return Err(gone(handle, name)),
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
        return Err(Error::Closed {
            what: format!(
                "the descriptor broker `{name}` of pid {exporter} hung up without answering \
                 (the exporter may be exiting); export again"
            ),
        });
    }
    let reply = &buf[..got.bytes.min(buf.len())];
    if got.trunc
        || reply.len() != REPLY_LEN
        || reply[..4] != REPLY_MAGIC
        || reply[4] != PROTOCOL_VERSION
    {
        return Err(Error::io(
            format!("reading the reply of the broker `{name}`"),
            io::Error::new(
                io::ErrorKind::InvalidData,
                "malformed reply: the exporter runs an incompatible hal version, or the socket is not a hal broker",
            ),
        ));
    }
    let seen_pid = u32::from_le_bytes([reply[8], reply[9], reply[10], reply[11]]);
    let object = os::hex(&handle.object_id);
    match Status::from_wire(reply[5]) {
        Some(Status::Ok) => {
            let announced = reply[6] as usize;
            if got.fds.len() != announced || announced != count {
                return Err(HandleError::Descriptors(format!(
                    "the broker `{name}` sent {} descriptor(s) and announced {announced}, and the \
                     handle describes {count}",
                    got.fds.len()
                ))
                .into());
            }
            Ok(got.fds)
        }
        Some(Status::NotFound) => Err(Error::NotFound {
            what: format!(
                "object {object} at the descriptor broker `{name}` of pid {exporter}: the export \
                 was dropped, or the handle is from another run; ask the exporter for a fresh handle"
            ),
        }),
        Some(Status::PidDenied) => {
            let own = os::pid();
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
            Err(Error::PermissionDenied {
                pid: Some(pid),
                reason: format!(
                    "the exporter (pid {exporter}) has not allowed pid {pid}{view} to import object \
                     {object}; it must add the pid (Exported::add_importers, \
                     Device::allow_importers) or export to anyone"
                ),
            })
        }
        Some(Status::UidDenied) => Err(Error::PermissionDenied {
            pid: Some(if seen_pid != 0 { seen_pid } else { os::pid() }),
            reason: format!(
                "the exporter (pid {exporter}) runs as another user: its broker serves only \
                 processes of its own uid, and root"
            ),
        }),
        Some(Status::BadRequest | Status::UnsupportedVersion) => Err(Error::io(
            format!("fetching descriptors from the broker `{name}` of pid {exporter}"),
            io::Error::new(
                io::ErrorKind::InvalidData,
                "the broker refused the request as malformed or of an unknown protocol version: \
                 the exporter runs an incompatible hal version",
            ),
        )),
        Some(Status::Internal) | None => Err(Error::io(
            format!("fetching descriptors from the broker `{name}` of pid {exporter}"),
            io::Error::other(format!("the broker answered with status {}", reply[5])),
        )),
    }
}

/// Refuse a broker socket served by a process that cannot be the exporter:
/// another user (other than root), or, when the exporter is visible in this
/// pid namespace, another pid.
fn check_server(fd: BorrowedFd<'_>, handle: &Handle, name: &str) -> Result<()> {
    let server =
        sys::peer_cred(fd).map_err(|e| Error::io("reading the broker socket's credentials", e))?;
    if !uid_allowed(server.uid) {
        return Err(Error::PermissionDenied {
            pid: Some(server.pid),
            reason: format!(
                "the socket `{name}` is served by uid {}, neither this user nor root; refusing \
                 descriptors from it",
                server.uid
            ),
        });
    }
    if handle.creator_start != 0
        && server.pid != handle.creator_pid
        && os::process_alive(handle.creator_pid, handle.creator_start)
    {
        return Err(Error::PermissionDenied {
            pid: Some(server.pid),
            reason: format!(
                "the socket `{name}` is served by pid {}, not by the exporter (pid {}); refusing \
                 descriptors from it",
                server.pid, handle.creator_pid
            ),
        });
    }
    Ok(())
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

    #[test]
    fn request_round_trip_and_garbage() {
        let id = os::random_id();
        assert_eq!(parse_request(&request(&id), false), Ok(id));
        assert_eq!(parse_request(&request(&id), true), Err(Status::BadRequest));
        assert_eq!(parse_request(&[], false), Err(Status::BadRequest));
        assert_eq!(parse_request(&[0xff; 24], false), Err(Status::BadRequest));
        let mut r = request(&id);
        r[4] = 9;
        assert_eq!(parse_request(&r, false), Err(Status::UnsupportedVersion));
        let mut r = request(&id);
        r[5] = 2;
        assert_eq!(parse_request(&r, false), Err(Status::BadRequest));
        let mut long = request(&id).to_vec();
        long.push(0);
        assert_eq!(parse_request(&long, false), Err(Status::BadRequest));
        for b in 0..=255u8 {
            let _ = Status::from_wire(b);
        }
    }

    #[test]
    fn policy_checks_pids() {
        assert!(Policy::Anyone.allows(7));
        let p = Policy::Pids(vec![5, 7]);
        assert!(p.allows(7) && !p.allows(6) && !p.allows(0));
        assert!(!Policy::Pids(Vec::new()).allows(1));
        assert!(uid_allowed(0));
        assert!(uid_allowed(nix::unistd::geteuid().as_raw()));
    }
}
