//! The broker's workers: a few threads, each an `epoll` loop over the
//! listening socket and the connections it accepted. No thread is started
//! per connection, and no worker ever blocks on a peer: sockets are
//! non-blocking, each wake-up reads at most one message per connection, and
//! a peer that stays silent or lets its replies pile up only loses its own
//! connection.
//!
//! - Credentials are read once per connection (`SO_PEERCRED`, at accept);
//!   every request on it is decided for them.
//! - A new connection must send its first request within
//!   [`FIRST_REQUEST`] (another user's within [`STRANGER`]); a served one
//!   is closed after [`IDLE`] without a request.
//! - At most [`MAX_CONNECTIONS`] connections are open at once; past that,
//!   a worker closes its least recently used connection to accept a new
//!   one (the importer reconnects on its next request).
//! - A connection holds at most one unread answer: a request that comes
//!   while the peer has not read the previous answer (`SIOCOUTQ`) is not
//!   served, and the connection is closed with a warning. An importer reads
//!   each answer before it sends its next request; one that does not would
//!   otherwise pile up descriptors in flight, which the kernel charges to
//!   this process's user (`RLIMIT_NOFILE`, `ETOOMANYREFS`) until every
//!   broker of that user fails to send.
//! - The leases of an answer whose send fails are given back at once: the
//!   importer never got their tickets.
//! - A forked child closes the listening socket, the workers' `epoll`
//!   descriptors and every connection ([`close_in_child`]), so that it never
//!   answers for its parent, nor keeps an importer's connection open after
//!   the parent exits.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::socket::{self, SockFlag};

use super::decide::respond;
use super::policy::uid_allowed;
use super::protocol::MAX_REQUEST;
use super::registry::{Table, LISTENER_FD};
use crate::error::{Error, Result};
use crate::exchange::peer::PeerCred;
use crate::exchange::sys;

/// Most workers, whatever the number of CPUs.
pub(super) const MAX_WORKERS: usize = 4;
/// Most connections open at once, all workers together.
pub(super) const MAX_CONNECTIONS: usize = 1024;
/// How long a new connection may take to send its first request.
pub(super) const FIRST_REQUEST: Duration = Duration::from_secs(1);
/// How long another user's connection may take to send the request it is
/// refused.
pub(super) const STRANGER: Duration = Duration::from_millis(50);
/// How long a served connection may stay idle before the broker closes it.
pub(super) const IDLE: Duration = Duration::from_secs(30);
/// How often a worker looks for connections past their deadline.
const SWEEP: Duration = Duration::from_millis(100);
/// The epoll token of the listening socket.
const LISTENER: u64 = u64::MAX;

/// Open connection descriptors, one slot per connection, for the fork
/// handler (which may only touch atomics).
static CONN_FDS: [AtomicI32; MAX_CONNECTIONS] = [const { AtomicI32::new(-1) }; MAX_CONNECTIONS];
/// The workers' epoll descriptors, for the fork handler.
static EPOLL_FDS: [AtomicI32; MAX_WORKERS] = [const { AtomicI32::new(-1) }; MAX_WORKERS];
/// Whether a peer that piled up answers was warned about in this process
/// (later ones are logged at debug level).
static WARNED_UNREAD: AtomicBool = AtomicBool::new(false);

/// Runs in a child right after `fork`: the child must not keep the parent's
/// listening socket (it would hold the abstract name after the parent exits,
/// and importers would then wait for a broker that never answers), nor its
/// connections (an importer would not see the broker hang up when the
/// parent exits).
pub(super) extern "C" fn close_in_child() {
    let all = std::iter::once(&LISTENER_FD)
        .chain(EPOLL_FDS.iter())
        .chain(CONN_FDS.iter());
    for slot in all {
        let fd = slot.swap(-1, Ordering::SeqCst);
        if fd >= 0 {
            // SAFETY: right after fork the child's descriptor table is a
            // copy of the parent's, where `fd` is one of the broker's
            // sockets (a slot is cleared before its descriptor is closed, so
            // a number in a slot is always open); their only owners in the
            // child are the worker threads' states, which did not survive
            // the fork and are never dropped here. close(2) is
            // async-signal-safe, as a fork handler requires.
            unsafe { libc::close(fd) };
        }
    }
}

/// Start the workers on `listener` (non-blocking): as many as the CPUs this
/// process may use, at most [`MAX_WORKERS`].
pub(super) fn spawn_workers(listener: OwnedFd, table: Arc<Table>, pid: u32) -> Result<()> {
    let n = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_WORKERS);
    let listener = Arc::new(listener);
    let mut started = 0;
    for (index, slot) in EPOLL_FDS.iter().enumerate().take(n) {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| Error::errno("creating the descriptor broker's epoll", e))?;
        // Every worker watches the listener; EPOLLEXCLUSIVE wakes one of
        // them per connection rather than all.
        epoll
            .add(
                listener.as_fd(),
                EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLEXCLUSIVE, LISTENER),
            )
            .map_err(|e| Error::errno("watching the descriptor broker's socket", e))?;
        slot.store(epoll.0.as_raw_fd(), Ordering::SeqCst);
        let worker = Worker {
            epoll,
            listener: Arc::clone(&listener),
            table: Arc::clone(&table),
            pid,
            slots: index * (MAX_CONNECTIONS / n)..(index + 1) * (MAX_CONNECTIONS / n),
            conns: HashMap::new(),
            next_token: 0,
        };
        let spawned = crate::kit::os::thread::spawn("hal-broker", move || worker.run());
        match spawned {
            Ok(_) => started += 1,
            Err(e) if started == 0 => {
                slot.store(-1, Ordering::SeqCst);
                return Err(Error::io("starting the descriptor broker's worker", e));
            }
            Err(e) => {
                slot.store(-1, Ordering::SeqCst);
                log::warn!("descriptor broker: {started} worker(s) instead of {n}: {e}");
                break;
            }
        }
    }
    Ok(())
}

/// One accepted connection.
struct Conn {
    fd: OwnedFd,
    peer: PeerCred,
    /// The peer's start time, read at most once.
    start: OnceCell<Option<u64>>,
    /// When the broker closes it unless a request comes.
    deadline: Instant,
    /// When it was last served (for eviction).
    used: Instant,
    /// Whether an answer was sent on it (which the peer must have read
    /// before its next request).
    answered: bool,
    /// Its slot in [`CONN_FDS`].
    slot: usize,
}

struct Worker {
    epoll: Epoll,
    listener: Arc<OwnedFd>,
    table: Arc<Table>,
    pid: u32,
    /// This worker's slots in [`CONN_FDS`].
    slots: std::ops::Range<usize>,
    conns: HashMap<u64, Conn>,
    next_token: u64,
}

impl Worker {
    fn run(mut self) {
        let mut events = [EpollEvent::empty(); 64];
        let mut warned = false;
        let mut next_sweep = Instant::now() + SWEEP;
        loop {
            let timeout = EpollTimeout::from(SWEEP.as_millis() as u16);
            let n = match self.epoll.wait(&mut events, timeout) {
                Ok(n) => n,
                Err(Errno::EINTR) => 0,
                Err(e) => {
                    if !warned {
                        log::warn!("descriptor broker: epoll_wait failed ({e})");
                        warned = true;
                    }
                    std::thread::sleep(SWEEP);
                    0
                }
            };
            for ev in &events[..n] {
                let token = ev.data();
                let served = catch_unwind(AssertUnwindSafe(|| {
                    if token == LISTENER {
                        self.accept(&mut warned);
                    } else {
                        self.serve(token);
                    }
                }));
                if served.is_err() {
                    log::error!(
                        "descriptor broker: a request handler panicked; the broker goes on"
                    );
                    self.close(token);
                }
            }
            let now = Instant::now();
            if now >= next_sweep {
                next_sweep = now + SWEEP;
                let expired: Vec<u64> = self
                    .conns
                    .iter()
                    .filter(|(_, c)| c.deadline <= now)
                    .map(|(&t, _)| t)
                    .collect();
                for token in expired {
                    self.close(token);
                }
            }
        }
    }

    /// Accept what is waiting (a few at a time, so that serving goes on).
    fn accept(&mut self, warned: &mut bool) {
        for _ in 0..16 {
            let raw = match socket::accept4(
                self.listener.as_raw_fd(),
                SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            ) {
                Ok(raw) => raw,
                Err(Errno::EAGAIN) => return,
                Err(Errno::EINTR | Errno::ECONNABORTED | Errno::EPROTO) => continue,
                Err(e) => {
                    if !*warned {
                        log::warn!(
                            "descriptor broker of pid {}: accept failed ({e}); importers may \
                             time out until it recovers (at the open-file limit, close \
                             descriptors or raise it)",
                            self.pid
                        );
                        *warned = true;
                    }
                    // Make room: the least recently used connection goes.
                    if !self.evict() {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    return;
                }
            };
            // SAFETY: accept4 returned a new descriptor that nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            self.admit(fd);
        }
    }

    fn admit(&mut self, fd: OwnedFd) {
        let peer = match sys::peer_cred(fd.as_fd()) {
            Ok(p) => p,
            Err(e) => {
                log::debug!("descriptor broker: SO_PEERCRED failed: {e}");
                return;
            }
        };
        let slot = match self.claim_slot(fd.as_raw_fd()) {
            Some(s) => s,
            None => {
                self.evict();
                match self.claim_slot(fd.as_raw_fd()) {
                    Some(s) => s,
                    None => return,
                }
            }
        };
        let token = self.next_token;
        self.next_token += 1;
        let flags = EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP;
        if let Err(e) = self.epoll.add(fd.as_fd(), EpollEvent::new(flags, token)) {
            log::debug!("descriptor broker: watching a connection failed: {e}");
            CONN_FDS[slot].store(-1, Ordering::SeqCst);
            return;
        }
        let now = Instant::now();
        let wait = if uid_allowed(peer.uid, peer.pid) {
            FIRST_REQUEST
        } else {
            STRANGER
        };
        self.conns.insert(
            token,
            Conn {
                fd,
                peer,
                start: OnceCell::new(),
                deadline: now + wait,
                used: now,
                answered: false,
                slot,
            },
        );
    }

    fn claim_slot(&self, fd: RawFd) -> Option<usize> {
        self.slots.clone().find(|&i| {
            CONN_FDS[i]
                .compare_exchange(-1, fd, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        })
    }

    /// Close the least recently used connection; false when there is none.
    fn evict(&mut self) -> bool {
        let oldest = self
            .conns
            .iter()
            .min_by_key(|(_, c)| c.used)
            .map(|(&t, _)| t);
        match oldest {
            Some(t) => {
                self.close(t);
                true
            }
            None => false,
        }
    }

    /// Read one message from connection `token` and answer it.
    fn serve(&mut self, token: u64) {
        let Some(conn) = self.conns.get(&token) else {
            return;
        };
        let mut buf = [0u8; MAX_REQUEST + 1];
        // Descriptors a peer attaches are taken and closed at once.
        let got = match sys::recv_msg(conn.fd.as_fd(), &mut buf, 0) {
            Ok(got) => got,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(e) => {
                log::debug!(
                    "descriptor broker: no request from pid {}: {e}",
                    conn.peer.pid
                );
                self.close(token);
                return;
            }
        };
        if got.bytes == 0 && !got.trunc {
            // The peer hung up (or sent an empty message).
            self.close(token);
            return;
        }
        if conn.answered && unread(conn) {
            let (me, peer) = (self.pid, conn.peer.pid);
            let text = format!(
                "descriptor broker of pid {me}: pid {peer} sent a request before reading the \
                 previous answer; its connection is closed unanswered (a connection may hold \
                 one unread answer, so that no importer piles up descriptors in flight, which \
                 count against this user's open-file limit)"
            );
            if WARNED_UNREAD.swap(true, Ordering::Relaxed) {
                log::debug!("{text}");
            } else {
                log::warn!("{text}");
            }
            self.close(token);
            return;
        }
        let message = &buf[..got.bytes.min(MAX_REQUEST)];
        let truncated = got.trunc || got.bytes > MAX_REQUEST;
        let response = respond(
            message,
            truncated,
            conn.peer,
            &self.table,
            self.pid,
            &conn.start,
        );
        let raw: Vec<RawFd> = response
            .fds
            .iter()
            .flat_map(|f| f.iter().map(|fd| fd.as_raw_fd()))
            .collect();
        let sent = send(conn.fd.as_fd(), &response.bytes, &raw);
        if let Err(e) = &sent {
            log::debug!(
                "descriptor broker: replying to pid {} failed: {e}; its leases of this answer \
                 are given back",
                conn.peer.pid
            );
            response.undo(conn.peer);
        }
        if sent.is_err() || response.end {
            self.close(token);
            return;
        }
        if let Some(c) = self.conns.get_mut(&token) {
            let now = Instant::now();
            c.used = now;
            c.deadline = now + IDLE;
            c.answered = true;
        }
    }

    fn close(&mut self, token: u64) {
        if let Some(c) = self.conns.remove(&token) {
            // Out of the epoll set first: a forked child's copy of the
            // descriptor would keep it there after close.
            let _ = self.epoll.delete(c.fd.as_fd());
            // The slot is cleared before the descriptor is closed (see
            // `close_in_child`).
            CONN_FDS[c.slot].store(-1, Ordering::SeqCst);
            drop(c);
        }
    }
}

/// Whether the peer of `conn` has not read everything sent to it (an
/// error reading that counts as unread: the connection is not served).
fn unread(conn: &Conn) -> bool {
    sys::unread_by_peer(conn.fd.as_fd()).map_or(true, |n| n > 0)
}

/// Send a reply without waiting: a peer whose socket is full (it does not
/// read its replies) gets `EAGAIN`, and its connection is closed.
fn send(fd: BorrowedFd<'_>, bytes: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    let n = sys::send_msg(fd, bytes, fds)?;
    if n != bytes.len() {
        return Err(std::io::ErrorKind::WriteZero.into());
    }
    Ok(())
}
