//! The importer's connections to exporters' brokers, kept open for later
//! requests: the first import from an exporter connects, later ones (and
//! lease releases) reuse the connection.
//!
//! - A connection is taken out of the pool for one request and put back
//!   after it, so threads never share one; a second thread importing from
//!   the same exporter at the same time opens a second connection (at most
//!   [`PER_BROKER`] are kept per broker).
//! - A connection idle for [`CLIENT_IDLE`] is closed at the next visit to
//!   the pool; the broker closes its side after its own idle time, and a
//!   request on a connection the broker closed is sent again once on a new
//!   one (the broker never reads a request from a connection it closes).
//! - After `fork`, the child never uses its parent's connections: their
//!   peer credentials are the parent's, so the broker would count the
//!   child's leases as the parent's. A fork handler closes the child's
//!   copies right after `fork` ([`inherited`](super::inherited)); at its
//!   first visit the child forgets the pool it inherited, and connects
//!   anew.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use super::inherited::{handler_installed, ListedFd};
use crate::exchange::peer::PeerCred;
use crate::kit::os;
use crate::kit::os::lock::lock;

/// How long an importer keeps a connection it does not use.
pub(super) const CLIENT_IDLE: Duration = Duration::from_secs(5);
/// Most idle connections kept per broker.
pub(super) const PER_BROKER: usize = 4;

/// A connection to a broker, with the server's credentials read at
/// connect time, and a pidfd of the server once the `pidfd_getfd` path
/// needed one (closed with the connection).
#[derive(Debug)]
pub(super) struct Pooled {
    pub(super) fd: ListedFd,
    pub(super) server: PeerCred,
    pidfd: Option<ListedFd>,
    idle_since: Instant,
}

impl Pooled {
    pub(super) fn new(fd: OwnedFd, server: PeerCred) -> Pooled {
        Pooled {
            fd: ListedFd::new(fd),
            server,
            pidfd: None,
            idle_since: Instant::now(),
        }
    }

    /// The server's pidfd, once [`Pooled::set_pidfd`] kept one.
    pub(super) fn pidfd(&self) -> Option<BorrowedFd<'_>> {
        self.pidfd.as_ref().map(|p| p.as_fd())
    }

    /// Keep `pidfd`, the server's, with the connection.
    pub(super) fn set_pidfd(&mut self, pidfd: OwnedFd) {
        self.pidfd = Some(ListedFd::new(pidfd));
    }

    /// Whether a forked child would close all of it at once (see
    /// [`ListedFd::listed`]): only such a connection is kept.
    fn keepable(&self) -> bool {
        self.fd.listed() && self.pidfd.as_ref().is_none_or(ListedFd::listed)
    }
}

type Idle = HashMap<String, Vec<Pooled>>;

static POOL: Mutex<Option<Idle>> = Mutex::new(None);
/// The process the pool's connections belong to (0: none yet).
static OWNER: AtomicU32 = AtomicU32::new(0);

/// The pool, emptied first in a forked child. `None` in a child forked
/// while another thread held the pool's lock: that child never pools.
fn pool() -> Option<MutexGuard<'static, Option<Idle>>> {
    let me = os::pid();
    if OWNER.load(Ordering::Acquire) == me {
        return Some(lock(&POOL));
    }
    let mut guard = match POOL.try_lock() {
        Ok(g) => g,
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        // Inherited locked from a thread that did not survive the fork, or
        // the first use racing another thread's: no pooling this time.
        Err(TryLockError::WouldBlock) => return None,
    };
    if OWNER.load(Ordering::Acquire) != me {
        // The parent's connections. The fork handler closed this process's
        // copies: forget them (dropping them would close their numbers
        // again, which may be this process's own descriptors by now).
        // Without the handler, close them here.
        let inherited = guard.take();
        if handler_installed() {
            std::mem::forget(inherited);
        } else {
            drop(inherited);
        }
        OWNER.store(me, Ordering::Release);
    }
    Some(guard)
}

/// An idle connection to the broker `name`, if one is kept.
pub(super) fn checkout(name: &str) -> Option<Pooled> {
    let mut guard = pool()?;
    let idle = guard.get_or_insert_with(HashMap::new);
    sweep(idle);
    let list = idle.get_mut(name)?;
    let conn = list.pop();
    if list.is_empty() {
        idle.remove(name);
    }
    conn
}

/// Keep `conn` for the next request to the broker `name`.
pub(super) fn checkin(name: &str, mut conn: Pooled) {
    if !conn.keepable() {
        return;
    }
    let Some(mut guard) = pool() else {
        return;
    };
    conn.idle_since = Instant::now();
    let list = guard
        .get_or_insert_with(HashMap::new)
        .entry(name.to_owned())
        .or_default();
    if list.len() < PER_BROKER {
        list.push(conn);
    }
}

/// Close the connections idle for longer than [`CLIENT_IDLE`].
fn sweep(idle: &mut Idle) {
    let now = Instant::now();
    idle.retain(|_, list| {
        list.retain(|c| now.duration_since(c.idle_since) < CLIENT_IDLE);
        !list.is_empty()
    });
}

/// Close every kept connection; returns how many were closed.
pub(crate) fn close_all() -> usize {
    super::view::forget_all();
    pool()
        .and_then(|mut g| g.take())
        .map_or(0, |idle| idle.values().map(Vec::len).sum())
}

/// How many connections are kept, to the broker `name` or to all.
pub(crate) fn kept(name: Option<&str>) -> usize {
    let Some(guard) = pool() else {
        return 0;
    };
    let Some(idle) = guard.as_ref() else {
        return 0;
    };
    match name {
        Some(n) => idle.get(n).map_or(0, Vec::len),
        None => idle.values().map(Vec::len).sum(),
    }
}
