//! The broker's client: what an importer asks an exporter's broker, and
//! how it checks who answers.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;
use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, UnixAddr};

use super::decide::decide;
use super::policy::overflow_uid;
use super::pool::{self, Pooled};
use super::protocol::{encode_request, parse_reply, Request, Status};
use super::server::own_table;
use super::trust::{broker_trusted, TRUST_ENV};
use super::view::BoardLease;
use crate::error::{Error, HandleError, Result};
use crate::exchange::limits::{dropped_descriptors, BROKER_TIMEOUT, MAX_FDS};
use crate::exchange::peer::PeerCred;
use crate::exchange::sys;
use crate::handle::Handle;
use crate::kit::os;
use crate::lease::LeaseTicket;

/// What an importer gets from a broker: descriptors and a lease ticket.
#[derive(Debug)]
pub(crate) struct Served {
    pub(crate) fds: Vec<OwnedFd>,
    pub(crate) lease: Option<LeaseTicket>,
    /// The lease this process recorded itself on the exporter's board (a
    /// direct import), instead of `lease`.
    pub(crate) board: Option<BoardLease>,
    /// What was read of each descriptor when it was taken by
    /// `pidfd_getfd` (its seals, then its `fstat`), so that the import's
    /// checks need not read it again.
    pub(crate) facts: Option<Vec<os::FileFacts>>,
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
        let me = PeerCred {
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
    let what = format!("lease release at `{name}`");
    with_connection(None, name, 0, |conn| {
        exchange(conn.fd.as_fd(), name, 0, &request, 0, &what).map(drop)
    })
}

pub(super) fn call(handle: &Handle, name: &str, request: Request, count: usize) -> Result<Served> {
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
        let me = PeerCred {
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
            board: None,
            facts: None,
        });
    }
    let (lease, fds) = with_connection(Some(handle), name, exporter, |conn| {
        exchange(conn.fd.as_fd(), name, exporter, &request, count, &what)
    })
    .map_err(|e| closed_by_exit(e, handle, name))?;
    Ok(Served {
        fds,
        lease,
        board: None,
        facts: None,
    })
}

/// Close the connections kept to the broker `name`; how many were kept.
#[cfg(test)]
pub(super) fn close_all_for_test(name: &str) -> usize {
    let mut n = 0;
    while let Some(c) = pool::checkout(name) {
        drop(c);
        n += 1;
    }
    n
}

/// Run `f` on a connection to the broker `name`: a kept one when there is
/// one (sent again once on a new connection if the broker had closed it),
/// else a new one, checked ([`open`]) and, for `handle`, checked to be
/// served by its creator. The connection is kept for later requests when
/// `f` succeeds.
pub(super) fn with_connection<T>(
    handle: Option<&Handle>,
    name: &str,
    exporter: u32,
    mut f: impl FnMut(&mut Pooled) -> Result<T>,
) -> Result<T> {
    let kept = pool::checkout(name);
    let reused = kept.is_some();
    let mut conn = match kept {
        Some(c) => c,
        None => open(handle, name, exporter)?,
    };
    if let Some(h) = handle {
        if !creator_may_be(h, conn.server.pid) {
            return Err(impostor(name, conn.server.pid, h));
        }
    }
    match f(&mut conn) {
        Ok(v) => {
            pool::checkin(name, conn);
            Ok(v)
        }
        // The broker closed a kept connection (idle, or to make room) before
        // it read the request: send it again on a new one.
        Err(Error::Closed { .. }) if reused => {
            drop(conn);
            let mut conn = open(handle, name, exporter)?;
            let v = f(&mut conn)?;
            pool::checkin(name, conn);
            Ok(v)
        }
        Err(e) => Err(e),
    }
}

/// A new connection to the broker `name`, its server checked: another user
/// than this one or root is refused, and, for `handle`, a server that
/// cannot be its creator ([`check_server`]).
pub(super) fn open(handle: Option<&Handle>, name: &str, exporter: u32) -> Result<Pooled> {
    let fd = connect(name, exporter).map_err(|e| match (e, handle) {
        (Error::NotFound { .. }, Some(h)) => gone(h, name),
        (e, _) => e,
    })?;
    let server = match handle {
        Some(h) => check_server(fd.as_fd(), h, name)?,
        None => {
            let server = sys::peer_cred(fd.as_fd())
                .map_err(|e| Error::io("reading the broker's credentials", e))?;
            if !broker_trusted(server.uid, server.pid) {
                return Err(Error::PermissionDenied {
                    pid: Some(server.pid),
                    reason: format!(
                        "the socket `{name}` is served by uid {}; trust that user's exports \
                         with exchange::trust_exporter_uid or {TRUST_ENV}",
                        server.uid
                    ),
                });
            }
            server
        }
    };
    Ok(Pooled::new(fd, server))
}

/// A broker that hung up mid-request: when its exporter has exited, say so
/// ([`gone`]); otherwise the hang-up as it is.
pub(super) fn closed_by_exit(e: Error, handle: &Handle, name: &str) -> Error {
    match e {
        Error::Closed { .. } if !os::process_alive(handle.creator_pid, handle.creator_start) => {
            gone(handle, name)
        }
        e => e,
    }
}

pub(super) fn connect(name: &str, exporter: u32) -> Result<OwnedFd> {
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
pub(super) fn exchange(
    fd: BorrowedFd<'_>,
    name: &str,
    exporter: u32,
    request: &Request,
    count: usize,
    what: &str,
) -> Result<(Option<LeaseTicket>, Vec<OwnedFd>)> {
    sys::send_msg(fd, &encode_request(request), &[])
        .map_err(|e| send_failure(e, name, exporter))?;
    let mut buf = [0u8; 64];
    let got = sys::recv_msg(fd, &mut buf, MAX_FDS).map_err(|e| recv_failure(e, name, exporter))?;
    // `got.fds` owns whatever arrived: every error return below closes it.
    if got.ctrunc {
        return Err(dropped_descriptors(got.fds.len(), Some(count)));
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
    Ok((lease, got.fds.accept()))
}

/// The error for a refusal `status` of a request about `what`; `seen_pid`
/// is this process's pid as the broker saw it, when it said.
pub(super) fn status_error(
    status: Status,
    what: &str,
    exporter: u32,
    seen_pid: Option<u32>,
) -> Error {
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
                "{what}: the exporter (pid {exporter}) runs as another user and has not exported \
                 this to anyone: its broker serves other users only what is exported to anyone \
                 (Importers::Anyone in Rust, HAL_IMPORTERS_ANYONE in C, \"anyone\" in Python, \
                 `halctl export --importers anyone`); an export to its user's processes \
                 (Importers::SameUser) refuses root too. A process that another user namespace \
                 does not map (it shows up as the overflow uid {}) is refused by every broker",
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
        Status::TooMany => Error::io(
            what.to_string(),
            io::Error::other(
                "the batch asked for more descriptors than one reply carries; import fewer \
                 handles at once",
            ),
        ),
        Status::Internal => Error::io(
            what.to_string(),
            io::Error::other("the broker could not serve the request"),
        ),
    }
}

/// The error for a request the broker did not take: its queue stayed full
/// for [`BROKER_TIMEOUT`] ([`Error::Timeout`]), it hung up ([`Error::Closed`]),
/// or the socket failed ([`Error::Io`]).
pub(super) fn send_failure(e: io::Error, name: &str, exporter: u32) -> Error {
    if sys::is_timeout(&e) {
        timeout(name, exporter, "to take the request")
    } else if matches!(e.raw_os_error(), Some(libc::EPIPE | libc::ECONNRESET)) {
        hung_up(name, exporter)
    } else {
        Error::io(format!("sending a request to the broker `{name}`"), e)
    }
}

/// The error for a reply that did not come: no answer within
/// [`BROKER_TIMEOUT`] ([`Error::Timeout`]), a reset ([`Error::Closed`]), or
/// a socket failure ([`Error::Io`]).
pub(super) fn recv_failure(e: io::Error, name: &str, exporter: u32) -> Error {
    if sys::is_timeout(&e) {
        timeout(name, exporter, "to answer")
    } else if e.raw_os_error() == Some(libc::ECONNRESET) {
        hung_up(name, exporter)
    } else {
        Error::io(format!("receiving the reply of the broker `{name}`"), e)
    }
}

pub(super) fn hung_up(name: &str, exporter: u32) -> Error {
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
pub(super) fn check_server(fd: BorrowedFd<'_>, handle: &Handle, name: &str) -> Result<PeerCred> {
    let server =
        sys::peer_cred(fd).map_err(|e| Error::io("reading the broker socket's credentials", e))?;
    if !broker_trusted(server.uid, server.pid) {
        return Err(Error::PermissionDenied {
            pid: Some(server.pid),
            reason: format!(
                "the socket `{name}` is served by uid {}, neither this user nor root nor a user \
                 this process trusts (the overflow uid, which stands for any unmapped user, is \
                 never trusted); to import another user's exports, trust that user: \
                 exchange::trust_exporter_uid({}) in Rust, hal_trust_exporter_uid in C, \
                 hal.trust_exporter_uid in Python, or {TRUST_ENV}={} in the environment",
                server.uid, server.uid, server.uid
            ),
        });
    }
    if !creator_may_be(handle, server.pid) {
        return Err(impostor(name, server.pid, handle));
    }
    Ok(server)
}

/// Whether the process `server` (pid as this process sees it) may be the
/// creator of `handle`: it is the creator's pid; or the handle names its
/// creator's start time and the creator cannot be checked here: it is not
/// alive as this process's `/proc` shows it (gone, or numbered by another
/// pid namespace), or the server runs in a pid namespace this process
/// cannot see (its pid reads 0; the creator's pid in the handle is then the
/// exporter's own view and means nothing here). A handle without a start
/// time (`creator_start == 0`) must be served by its creator's pid.
pub(super) fn creator_may_be(handle: &Handle, server: u32) -> bool {
    server == handle.creator_pid
        || (handle.creator_start != 0
            && (server == 0 || !os::process_alive(handle.creator_pid, handle.creator_start)))
}

pub(super) fn impostor(name: &str, server: u32, handle: &Handle) -> Error {
    Error::PermissionDenied {
        pid: Some(server),
        reason: format!(
            "the socket `{name}` is served by pid {server}, not by the exporter (pid {}); \
             refusing descriptors from it",
            handle.creator_pid
        ),
    }
}

pub(super) fn gone(handle: &Handle, name: &str) -> Error {
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

pub(super) fn timeout(name: &str, pid: u32, what: &str) -> Error {
    Error::Timeout {
        after: BROKER_TIMEOUT,
        what: format!("the descriptor broker `{name}` of pid {pid} {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno(n: i32) -> io::Error {
        io::Error::from_raw_os_error(n)
    }

    #[test]
    fn failed_sends_and_receives_say_what_happened() {
        for (e, want) in [
            (errno(libc::EAGAIN), "timeout"),
            (errno(libc::EPIPE), "closed"),
            (errno(libc::ECONNRESET), "closed"),
            (errno(libc::EBADF), "io"),
        ] {
            assert_eq!(send_failure(e, "b", 1).kind_name(), want);
        }
        for (e, want) in [
            (errno(libc::EAGAIN), "timeout"),
            (errno(libc::EPIPE), "io"),
            (errno(libc::ECONNRESET), "closed"),
            (errno(libc::EBADF), "io"),
        ] {
            assert_eq!(recv_failure(e, "b", 1).kind_name(), want);
        }
    }

    #[test]
    fn a_request_on_a_connection_the_broker_closed_goes_again_on_a_new_one() {
        use super::super::protocol::encode_reply;
        use nix::sys::socket::{accept, bind, listen, Backlog};
        let name = format!("hal-test-retry-{}", os::hex(&os::random_id()[..8]));
        let listener = socket::socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        bind(
            listener.as_raw_fd(),
            &UnixAddr::new_abstract(name.as_bytes()).unwrap(),
        )
        .unwrap();
        listen(&listener, Backlog::new(4).unwrap()).unwrap();
        let (closed_tx, closed_rx) = std::sync::mpsc::channel();
        // A broker that answers one request per connection, then closes it.
        let server = std::thread::spawn(move || {
            for _ in 0..2 {
                let raw = accept(listener.as_raw_fd()).unwrap();
                // SAFETY: accept returned a new descriptor that nothing else owns.
                let conn = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
                let mut buf = [0u8; 64];
                let got = sys::recv_msg(conn.as_fd(), &mut buf, 0).unwrap();
                assert_eq!(got.bytes, 40);
                let reply = encode_reply(Status::Ok, 0, os::pid(), None);
                sys::send_msg(conn.as_fd(), &reply, &[]).unwrap();
                drop(conn);
                closed_tx.send(()).unwrap();
            }
        });
        let ticket = LeaseTicket {
            table: os::random_id(),
            slot: 0,
            token: 1,
        };
        let request = Request::Release(ticket);
        let call = || {
            with_connection(None, &name, 0, |conn| {
                exchange(conn.fd.as_fd(), &name, 0, &request, 0, "a test request")
            })
        };
        call().expect("the first request, on a new connection");
        assert_eq!(pool::kept(Some(&name)), 1, "the connection is kept");
        closed_rx.recv().unwrap();
        // The kept connection is closed on the broker's side: the request
        // goes again, on a new one.
        call().expect("the second request, sent again");
        closed_rx.recv().unwrap();
        server.join().unwrap();
        assert_eq!(pool::kept(Some(&name)), 1);
        // With no broker left, a kept connection it closed gives the error of
        // a new connection.
        assert_eq!(call().unwrap_err().kind_name(), "not-found");
        assert_eq!(pool::kept(Some(&name)), 0);
    }

    #[test]
    fn a_hang_up_of_an_exited_exporter_says_it_exited() {
        let mut h = crate::handle::sample();
        let closed = || Error::Closed {
            what: "hung up".into(),
        };
        // A live exporter: the hang-up as it is.
        assert!(
            matches!(closed_by_exit(closed(), &h, "b"), Error::Closed { what } if what == "hung up")
        );
        // An exporter that has exited: said so.
        h.creator_pid = 0x7fff_fff0;
        match closed_by_exit(closed(), &h, "b") {
            Error::Closed { what } => assert!(what.contains("has exited"), "{what}"),
            other => panic!("{other:?}"),
        }
        // Other errors pass through.
        assert_eq!(
            closed_by_exit(Error::invalid("x"), &h, "b").kind_name(),
            "invalid-argument"
        );
    }
}
