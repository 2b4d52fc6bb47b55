//! An importer's fetch of one object: by `pidfd_getfd` where that path is
//! on ([`getfd`](super::getfd)), with `SCM_RIGHTS` otherwise or when it
//! fails. Either way the broker decides first (allow-list, lease), so the
//! path reveals nothing, and takes nothing, that a fetch would refuse.

use std::io;
use std::os::fd::AsFd;

use super::client::{
    closed_by_exit, hung_up, recv_failure, release, send_failure, status_error, with_connection,
    Served,
};
use super::getfd::{self, Took};
use super::protocol::{encode_request, parse_located_reply, Request, Status, MAX_LOCATED_REPLY};
use crate::error::{Error, HandleError, Result};
use crate::exchange::limits::{dropped_descriptors, MAX_FDS};
use crate::exchange::sys;
use crate::handle::Handle;
use crate::kit::os;
use crate::lease::LeaseTicket;

/// What one locate request gave.
enum Located {
    /// The descriptors, taken and checked.
    Done(Served),
    /// Fetch with `SCM_RIGHTS`, after giving back this lease.
    Fallback(Option<LeaseTicket>),
}

/// The `pidfd_getfd` path for the object `id` of the broker `name`, which
/// serves `handle`'s creator; `None` when the descriptors must be fetched
/// with `SCM_RIGHTS` (any lease the broker gave is back by then).
pub(super) fn locate_id(
    handle: &Handle,
    id: &[u8; 16],
    name: &str,
    count: usize,
) -> Result<Option<Served>> {
    let exporter = handle.creator_pid;
    let what = format!(
        "object {} at the descriptor broker `{name}` of pid {exporter}",
        os::hex(id)
    );
    let request = encode_request(&Request::Locate(*id));
    let got = with_connection(Some(handle), name, exporter, |conn| {
        if !getfd::ensure_pidfd(conn, handle, name) {
            return Ok(Located::Fallback(None));
        }
        let Some(pidfd) = conn.pidfd() else {
            return Ok(Located::Fallback(None));
        };
        let server_pid = conn.server.pid;
        let fd = conn.fd.as_fd();
        sys::send_msg(fd, &request, &[]).map_err(|e| send_failure(e, name, exporter))?;
        let mut buf = [0u8; MAX_LOCATED_REPLY + 1];
        let got =
            sys::recv_msg(fd, &mut buf, MAX_FDS).map_err(|e| recv_failure(e, name, exporter))?;
        // `got.fds` owns whatever arrived: every error return closes it.
        if got.ctrunc {
            return Err(dropped_descriptors(got.fds.len(), None));
        }
        if got.bytes == 0 && !got.trunc {
            return Err(hung_up(name, exporter));
        }
        if !got.fds.is_empty() {
            return Err(HandleError::Descriptors(format!(
                "the broker `{name}` sent descriptors with a reply that locates them"
            ))
            .into());
        }
        let reply = &buf[..got.bytes.min(buf.len())];
        let Some((status, seen_pid, lease, places)) = parse_located_reply(reply, got.trunc) else {
            return Err(Error::io(
                format!("reading the reply of the broker `{name}`"),
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    "malformed reply: the exporter runs an incompatible hal version, or the \
                     socket is not a hal broker",
                ),
            ));
        };
        match status {
            // An older broker, which does not know the request: it closes
            // the connection (the next request goes on a new one).
            Some(Status::BadRequest | Status::UnsupportedVersion) => {
                getfd::turn_off(name);
                Ok(Located::Fallback(None))
            }
            Some(Status::Ok) => match places {
                Some(places) if places.len() == count => {
                    Ok(match getfd::take(pidfd, server_pid, &places, name) {
                        Took::Fds(fds, facts) => Located::Done(Served {
                            fds,
                            lease,
                            board: None,
                            facts: Some(facts),
                        }),
                        Took::Fallback => Located::Fallback(lease),
                    })
                }
                // Another count than the handle's: the fetch says so.
                _ => Ok(Located::Fallback(lease)),
            },
            Some(s) => Err(status_error(s, &what, exporter, Some(seen_pid))),
            None => Err(Error::io(
                what.clone(),
                io::Error::other(format!("the broker answered with status {}", reply[5])),
            )),
        }
    })
    .map_err(|e| closed_by_exit(e, handle, name))?;
    match got {
        Located::Done(served) => Ok(Some(served)),
        Located::Fallback(lease) => {
            give_back(name, lease);
            Ok(None)
        }
    }
}

/// Give back the lease of a locate request whose descriptors are fetched
/// again (the fetch registers its own), and count the fallback.
pub(super) fn give_back(name: &str, lease: Option<LeaseTicket>) {
    getfd::note_fell_back();
    if let Some(t) = lease {
        if let Err(e) = release(name, &t) {
            log::debug!("giving back a lease at `{name}` before fetching again: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::client;
    use super::super::located::{locate as locations, Located as Place};
    use super::super::protocol::{
        encode_located_reply, encode_reply, parse_request, OP_LOCATE, REQUEST_LEN,
    };
    use super::*;
    use crate::handle::FdSource;
    use nix::sys::socket::{
        accept, bind, listen, socket, AddressFamily, Backlog, SockFlag, SockType, UnixAddr,
    };
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

    /// What a scripted broker answers to one request.
    struct Step {
        /// The request it expects.
        expect: fn(&Request) -> bool,
        /// Its reply.
        reply: Vec<u8>,
        /// The descriptors sent with it.
        fds: Vec<RawFd>,
    }

    /// A broker in a thread of this process (so its pid is the handle's
    /// creator's) that answers `steps` on one connection, in order, then
    /// waits for the importer to hang up; the handle of an object with one
    /// descriptor at it.
    fn scripted(steps: Vec<Step>) -> (Handle, String, std::thread::JoinHandle<()>) {
        let name = format!("hal-test-locate-{}", os::hex(&os::random_id()[..8]));
        let listener = socket(
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
        let server = std::thread::spawn(move || {
            let raw = accept(listener.as_raw_fd()).unwrap();
            // SAFETY: accept returned a new descriptor that nothing else owns.
            let conn = unsafe { OwnedFd::from_raw_fd(raw) };
            for step in steps {
                let mut buf = [0u8; 64];
                let got = sys::recv_msg(conn.as_fd(), &mut buf, 0).unwrap();
                assert_eq!(got.bytes, REQUEST_LEN);
                let request = parse_request(&buf[..REQUEST_LEN], false).unwrap();
                assert!((step.expect)(&request), "unexpected request {request:?}");
                sys::send_msg(conn.as_fd(), &step.reply, &step.fds).unwrap();
            }
            let mut buf = [0u8; 64];
            let got = sys::recv_msg(conn.as_fd(), &mut buf, 0).unwrap();
            assert_eq!(got.bytes, 0, "no request past the script");
        });
        let mut handle = crate::handle::sample();
        handle.fds = FdSource::Broker {
            name: name.clone(),
            count: 1,
        };
        (handle, name, server)
    }

    fn ticket() -> LeaseTicket {
        LeaseTicket {
            table: os::random_id(),
            slot: 0,
            token: 7,
        }
    }

    fn place_of(fd: &OwnedFd) -> Place {
        locations(std::slice::from_ref(fd)).unwrap()[0]
    }

    fn same_file(a: &OwnedFd, b: &OwnedFd) -> bool {
        let (x, y) = (os::fstat(a.as_fd()).unwrap(), os::fstat(b.as_fd()).unwrap());
        (x.st_dev, x.st_ino) == (y.st_dev, y.st_ino)
    }

    #[test]
    fn located_descriptors_are_taken_from_the_exporter() {
        let file = os::memfd("hal-locate-taken", 4096, None).unwrap();
        let t = ticket();
        let (handle, name, server) = scripted(vec![Step {
            expect: |r| matches!(r, Request::Locate(_)),
            reply: encode_located_reply(os::pid(), Some(t), &[place_of(&file)]),
            fds: Vec::new(),
        }]);
        let served = locate_id(&handle, &handle.object_id, &name, 1)
            .unwrap()
            .expect("taken by pidfd_getfd");
        assert_eq!(served.lease, Some(t));
        assert!(same_file(&served.fds[0], &file));
        assert_ne!(
            served.fds[0].as_raw_fd(),
            file.as_raw_fd(),
            "a copy of its own"
        );
        assert_eq!(client::close_all_for_test(&name), 1);
        server.join().unwrap();
    }

    #[test]
    fn another_file_at_the_located_number_is_fetched_again() {
        // The broker locates file A under B's identity, as if A's number had
        // been closed and reused for another file between reply and take.
        let a = os::memfd("hal-locate-a", 4096, None).unwrap();
        let b = os::memfd("hal-locate-b", 4096, None).unwrap();
        let mut lie = place_of(&a);
        let real = place_of(&b);
        (lie.dev, lie.ino) = (real.dev, real.ino);
        let t = ticket();
        let (handle, name, server) = scripted(vec![
            Step {
                expect: |r| matches!(r, Request::Locate(_)),
                reply: encode_located_reply(os::pid(), Some(t), &[lie]),
                fds: Vec::new(),
            },
            // The lease of the locate goes back...
            Step {
                expect: |r| matches!(r, Request::Release(t) if t.token == 7),
                reply: encode_reply(Status::Ok, 0, os::pid(), None).to_vec(),
                fds: Vec::new(),
            },
            // ...and the fetch gets B with SCM_RIGHTS.
            Step {
                expect: |r| matches!(r, Request::Fetch(_)),
                reply: encode_reply(Status::Ok, 1, os::pid(), None).to_vec(),
                fds: vec![b.as_raw_fd()],
            },
        ]);
        let fell = getfd::counts().1;
        assert!(
            locate_id(&handle, &handle.object_id, &name, 1)
                .unwrap()
                .is_none(),
            "not taken"
        );
        assert!(getfd::counts().1 > fell);
        assert!(
            !getfd::is_off(&name),
            "a mismatch does not turn the path off"
        );
        let served = client::fetch(&handle, &name, 1).unwrap();
        assert!(same_file(&served.fds[0], &b));
        assert_eq!(client::close_all_for_test(&name), 1);
        server.join().unwrap();
    }

    #[test]
    fn a_number_no_longer_open_is_fetched_again() {
        let gone = os::memfd("hal-locate-gone", 4096, None).unwrap();
        let place = place_of(&gone);
        drop(gone);
        let b = os::memfd("hal-locate-b", 4096, None).unwrap();
        // Another file may now have the number: the identity check or
        // EBADF sends the importer to the fetch either way.
        let (handle, name, server) = scripted(vec![
            Step {
                expect: |r| matches!(r, Request::Locate(_)),
                reply: encode_located_reply(os::pid(), None, &[place]),
                fds: Vec::new(),
            },
            Step {
                expect: |r| matches!(r, Request::Fetch(_)),
                reply: encode_reply(Status::Ok, 1, os::pid(), None).to_vec(),
                fds: vec![b.as_raw_fd()],
            },
        ]);
        assert!(locate_id(&handle, &handle.object_id, &name, 1)
            .unwrap()
            .is_none());
        let served = client::fetch(&handle, &name, 1).unwrap();
        assert!(same_file(&served.fds[0], &b));
        assert_eq!(client::close_all_for_test(&name), 1);
        server.join().unwrap();
    }

    #[test]
    fn a_broker_that_does_not_know_the_request_turns_the_path_off_silently() {
        let (handle, name, server) = scripted(vec![Step {
            expect: |r| matches!(r, Request::Locate(_)),
            reply: encode_reply(Status::BadRequest, 0, os::pid(), None).to_vec(),
            fds: Vec::new(),
        }]);
        assert!(locate_id(&handle, &handle.object_id, &name, 1)
            .unwrap()
            .is_none());
        assert!(getfd::is_off(&name));
        assert_eq!(client::close_all_for_test(&name), 1);
        server.join().unwrap();
        assert_eq!(OP_LOCATE, 5);
    }

    #[test]
    fn a_refusal_is_the_fetchs_refusal_and_takes_nothing() {
        let (handle, name, server) = scripted(vec![Step {
            expect: |r| matches!(r, Request::Locate(_)),
            reply: encode_reply(Status::PidDenied, 0, os::pid(), None).to_vec(),
            fds: Vec::new(),
        }]);
        match locate_id(&handle, &handle.object_id, &name, 1) {
            Err(Error::PermissionDenied { .. }) => {}
            other => panic!("{other:?}"),
        }
        assert!(!getfd::is_off(&name));
        // A refusal ends the connection, as for a fetch.
        assert_eq!(client::close_all_for_test(&name), 0);
        server.join().unwrap();
    }
}
