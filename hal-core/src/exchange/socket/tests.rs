//! Unit tests of the handle socket: listening, connecting, hello and handle messages.

use super::*;
use nix::fcntl::OFlag;
use std::io::Read;

fn sample(fds: FdSource, flags: HandleFlags, allowed: Vec<u32>) -> Handle {
    let (pid, start) = os::self_identity();
    Handle {
        kind: crate::HandleKind::Notify,
        backend: crate::BackendId::MockCuda,
        device: 1,
        device_uuid: [3; 16],
        location: crate::Location::Device(1),
        size: 0,
        offset: 0,
        address: 0,
        creator_pid: pid,
        creator_start: start,
        creator_pid_ns: os::pid_namespace(),
        object_id: os::random_id(),
        flags,
        pid_kind: crate::PidKind::Os,
        allowed_pids: allowed,
        fds,
        payload: vec![1, 2, 3],
    }
}

fn pair() -> (HandleStream, HandleStream) {
    let (a, b) = socketpair().unwrap();
    a.set_timeout(Some(Duration::from_secs(30))).unwrap();
    b.set_timeout(Some(Duration::from_secs(30))).unwrap();
    (a, b)
}

/// A pipe whose write end is sent around: once every copy of it is
/// closed, the read end reads end-of-file instead of "would block".
fn leak_probe() -> (OwnedFd, OwnedFd) {
    nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).unwrap()
}

fn write_end_still_open(read: OwnedFd) -> bool {
    let mut buf = [0u8; 1];
    match std::fs::File::from(read).read(&mut buf) {
        Ok(0) => false,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => true,
        other => panic!("unexpected read result {other:?}"),
    }
}

fn raw_frame(kind: u8, announced: u8, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    push_header(&mut f, kind, announced, body.len() as u32);
    f.extend_from_slice(body);
    f
}

#[test]
fn pair_carries_a_handle_after_hello() {
    let (a, b) = pair();
    let h = sample(
        FdSource::Attached { count: 1 },
        HandleFlags::default(),
        vec![os::pid()],
    );
    let fd = os::memfd("hal-socket-test", 4096, None).unwrap();
    b.hello().unwrap();
    assert_eq!(a.wait_hello().unwrap().pid, os::pid());
    a.send(&h, &[&fd]).unwrap();
    let (shared, cred) = b.recv().unwrap();
    assert_eq!(cred.pid, os::pid());
    assert_eq!(cred.uid, nix::unistd::geteuid().as_raw());
    assert_eq!(shared.handle, h);
    assert_eq!(shared.fds.len(), 1);
    // A broker handle may go without its descriptors.
    let h = sample(
        FdSource::Broker {
            count: 2,
            name: "hal-elsewhere".into(),
        },
        HandleFlags::ANY_IMPORTER,
        Vec::new(),
    );
    a.send::<OwnedFd>(&h, &[]).unwrap();
    let (shared, _) = b.recv().unwrap();
    assert_eq!(shared.handle, h);
    assert!(shared.fds.is_empty());
}

/// The bytes the socket `fd` holds unread, without waiting.
fn queued(fd: BorrowedFd<'_>) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int, `n`, which outlives the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) };
    assert_eq!(rc, 0, "FIONREAD: {}", io::Error::last_os_error());
    n as usize
}

#[test]
fn a_message_is_in_the_peers_socket_when_its_send_returns() {
    let (a, b) = pair();
    assert_eq!(queued(b.as_fd()), 0);
    a.hello().unwrap();
    assert_eq!(queued(b.as_fd()), HEADER_LEN, "a hello is a bare header");
    assert_eq!(b.wait_hello().unwrap().pid, os::pid());
    let h = sample(FdSource::None, HandleFlags::ANY_IMPORTER, Vec::new());
    a.send::<OwnedFd>(&h, &[]).unwrap();
    assert_eq!(queued(b.as_fd()), HEADER_LEN + h.to_bytes().len());
    assert_eq!(b.recv().unwrap().0.handle, h);
    let fd = os::memfd("hal-socket-test", 4096, None).unwrap();
    let one = sample(
        FdSource::Attached { count: 1 },
        HandleFlags::ANY_IMPORTER,
        Vec::new(),
    );
    let exported = crate::Exported::new(one, vec![fd]).unwrap();
    a.send_exported(&exported).unwrap();
    assert_eq!(
        queued(b.as_fd()),
        HEADER_LEN + exported.handle().to_bytes().len()
    );
    assert_eq!(b.recv().unwrap().1.pid, os::pid());
}

#[test]
fn set_timeout_bounds_both_directions_and_none_clears_it() {
    use nix::sys::socket::{getsockopt, sockopt};
    let (a, _b) = pair();
    let read = |a: &HandleStream| {
        let r = getsockopt(&a.as_fd(), sockopt::ReceiveTimeout).unwrap();
        let s = getsockopt(&a.as_fd(), sockopt::SendTimeout).unwrap();
        ((r.tv_sec(), r.tv_usec()), (s.tv_sec(), s.tv_usec()))
    };
    a.set_timeout(Some(Duration::from_millis(1_500))).unwrap();
    assert_eq!(read(&a), ((1, 500_000), (1, 500_000)));
    a.set_timeout(None).unwrap();
    assert_eq!(read(&a), ((0, 0), (0, 0)), "forever");
}

#[test]
fn send_checks_its_arguments() {
    let (a, _b) = pair();
    let fd = os::memfd("hal-socket-test", 4096, None).unwrap();
    let two = sample(
        FdSource::Attached { count: 2 },
        HandleFlags::ANY_IMPORTER,
        Vec::new(),
    );
    assert!(matches!(
        a.send(&two, &[&fd]),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        a.send::<OwnedFd>(&two, &[]),
        Err(Error::InvalidArgument { .. })
    ));
    let none = sample(FdSource::None, HandleFlags::ANY_IMPORTER, Vec::new());
    assert!(matches!(
        a.send(&none, &[&fd]),
        Err(Error::InvalidArgument { .. })
    ));
    // Over the bound, with a handle that describes them all.
    let many: Vec<&OwnedFd> = vec![&fd; MAX_FDS + 1];
    let over = sample(
        FdSource::Attached {
            count: MAX_FDS as u8 + 1,
        },
        HandleFlags::ANY_IMPORTER,
        Vec::new(),
    );
    match a.send(&over, &many) {
        Err(Error::InvalidArgument { what }) => {
            assert!(what.contains("over the bound"), "{what}")
        }
        other => panic!("{} descriptors sent: {other:?}", MAX_FDS + 1),
    }
    let mut bad = none.clone();
    bad.payload = vec![0; crate::handle::wire::MAX_PAYLOAD + 1];
    assert!(matches!(
        a.send::<OwnedFd>(&bad, &[]),
        Err(Error::InvalidHandle(_))
    ));
}

#[test]
fn as_many_descriptors_as_the_bound_travel() {
    let (a, b) = pair();
    let fd = os::memfd("hal-socket-test", 4096, None).unwrap();
    let all: Vec<&OwnedFd> = vec![&fd; MAX_FDS];
    let h = sample(
        FdSource::Attached {
            count: MAX_FDS as u8,
        },
        HandleFlags::ANY_IMPORTER,
        Vec::new(),
    );
    a.send(&h, &all).unwrap();
    let (shared, _) = b.recv().unwrap();
    assert_eq!(shared.fds.len(), MAX_FDS);
}

#[test]
fn an_export_travels_with_its_descriptors() {
    let (a, b) = pair();
    let fd = os::memfd("hal-socket-test", 4096, None).unwrap();
    let h = sample(
        FdSource::Attached { count: 1 },
        HandleFlags::ANY_IMPORTER,
        Vec::new(),
    );
    let exported = crate::Exported::new(h, vec![fd]).unwrap();
    a.send_exported(&exported).unwrap();
    let (shared, _) = b.recv().unwrap();
    assert_eq!(&shared.handle, exported.handle());
    assert_eq!(shared.fds.len(), 1);
    let got = os::fstat(shared.fds[0].as_fd()).unwrap();
    let sent = os::fstat(exported.fds()[0].as_fd()).unwrap();
    assert_eq!((got.st_dev, got.st_ino), (sent.st_dev, sent.st_ino));
}

#[test]
fn extra_descriptors_are_closed_and_reported() {
    let (a, b) = pair();
    let (probe, write) = leak_probe();
    let h = sample(
        FdSource::Attached { count: 1 },
        HandleFlags::ANY_IMPORTER,
        Vec::new(),
    );
    let w = write.as_raw_fd();
    sys::send_all(
        a.as_fd(),
        &raw_frame(KIND_HANDLE, 1, &h.to_bytes()),
        &[w, w, w],
    )
    .unwrap();
    drop(write);
    match b.recv() {
        Err(Error::InvalidHandle(HandleError::Descriptors(msg))) => {
            assert!(
                msg.contains("announced 1") && msg.contains("3 arrived"),
                "{msg}"
            )
        }
        other => panic!("expected a descriptor count error, got {other:?}"),
    }
    assert!(!write_end_still_open(probe), "received descriptors leaked");
}

#[test]
fn more_descriptors_than_the_bound_are_an_error() {
    let (a, b) = pair();
    let (probe, write) = leak_probe();
    let w = write.as_raw_fd();
    let h = sample(FdSource::None, HandleFlags::ANY_IMPORTER, Vec::new());
    sys::send_all(
        a.as_fd(),
        &raw_frame(KIND_HANDLE, 0, &h.to_bytes()),
        &[w; MAX_FDS + 4],
    )
    .unwrap();
    drop(write);
    match b.recv() {
        Err(e @ Error::Io { .. }) => assert!(e.to_string().contains("MSG_CTRUNC"), "{e}"),
        other => panic!("expected MSG_CTRUNC to be an error, got {other:?}"),
    }
    assert!(!write_end_still_open(probe), "received descriptors leaked");
}

/// Descriptors that come in several pieces of one message count
/// together against the bound.
#[test]
fn descriptors_over_the_bound_across_reads_are_an_error() {
    let (a, b) = pair();
    let (probe, write) = leak_probe();
    let w = write.as_raw_fd();
    let h = sample(
        FdSource::Attached {
            count: MAX_FDS as u8,
        },
        HandleFlags::ANY_IMPORTER,
        Vec::new(),
    );
    let frame = raw_frame(KIND_HANDLE, MAX_FDS as u8, &h.to_bytes());
    sys::send_all(a.as_fd(), &frame[..HEADER_LEN], &[w; MAX_FDS]).unwrap();
    sys::send_all(a.as_fd(), &frame[HEADER_LEN..], &[w]).unwrap();
    drop(write);
    match b.recv() {
        Err(Error::InvalidHandle(HandleError::OverBound {
            field: "descriptors",
            len,
            ..
        })) => assert_eq!(len, MAX_FDS + 1),
        other => panic!("expected the descriptor bound, got {other:?}"),
    }
    assert!(!write_end_still_open(probe), "received descriptors leaked");
}

/// A peer that closes its end with a message unread resets the
/// connection (ECONNRESET): a hang-up, as a plain close is.
#[test]
fn a_peer_that_closes_with_a_message_unread_has_hung_up() {
    let (a, b) = pair();
    a.hello().unwrap();
    drop(b);
    match a.recv() {
        Err(Error::Closed { what }) => assert!(what.contains("hung up"), "{what}"),
        other => panic!("expected a hang-up, got {other:?}"),
    }
}

#[test]
fn a_hang_up_says_whether_a_message_was_cut() {
    let (a, b) = pair();
    drop(b);
    match a.recv() {
        Err(Error::Closed { what }) => assert!(!what.contains("middle"), "{what}"),
        other => panic!("expected a hang-up, got {other:?}"),
    }
    let h = sample(FdSource::None, HandleFlags::ANY_IMPORTER, Vec::new());
    let frame = raw_frame(KIND_HANDLE, 0, &h.to_bytes());
    for cut in [HEADER_LEN / 2, HEADER_LEN + 3] {
        let (a, b) = pair();
        sys::send_all(a.as_fd(), &frame[..cut], &[]).unwrap();
        drop(a);
        match b.recv() {
            Err(Error::Closed { what }) => {
                assert!(what.contains("in the middle of a message"), "{cut}: {what}")
            }
            other => panic!("{cut} bytes and a hang-up: {other:?}"),
        }
    }
}

#[test]
fn a_socket_file_nobody_listens_on_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stale");
    // A listener gone without removing its file.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    match HandleStream::connect(&path) {
        Err(Error::Closed { what }) => assert!(what.contains("nobody listens"), "{what}"),
        other => panic!("a stale socket file: {other:?}"),
    }
}

#[test]
fn garbage_frames_are_typed_errors() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"GARBAGE!0000".to_vec(), "magic"),
        (
            {
                let mut f = raw_frame(KIND_HANDLE, 0, &[]);
                f[4] = 7;
                f
            },
            "version",
        ),
        (raw_frame(9, 0, &[]), "kind"),
        (raw_frame(KIND_HELLO, 0, b"x"), "hello"),
        (raw_frame(KIND_HANDLE, 0, b"not a handle"), "bad magic"),
        (
            {
                let mut f = raw_frame(KIND_HANDLE, 0, &[]);
                f[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
                f
            },
            "over the bound",
        ),
        (
            raw_frame(KIND_HANDLE, MAX_FDS as u8 + 1, &[]),
            "over the bound",
        ),
    ];
    for (frame, expect) in cases {
        let (a, b) = pair();
        sys::send_all(a.as_fd(), &frame, &[]).unwrap();
        let e = b.recv().expect_err("garbage must not decode");
        assert!(e.to_string().contains(expect), "{expect}: {e}");
    }
    // A peer that stops in the middle of a message.
    let (a, b) = pair();
    sys::send_all(a.as_fd(), &raw_frame(KIND_HANDLE, 0, &[0; 40])[..20], &[]).unwrap();
    drop(a);
    assert!(matches!(b.recv(), Err(Error::Closed { .. })));
}

#[test]
fn timeouts_and_hang_ups() {
    let (a, b) = pair();
    b.set_timeout(Some(Duration::from_millis(20))).unwrap();
    assert!(b.recv().unwrap_err().is_timeout());
    drop(a);
    assert!(matches!(b.recv(), Err(Error::Closed { .. })));
    // Before a hello, the peer of a pair is unknown.
    let (a, _b) = pair();
    assert!(matches!(a.peer(), Err(Error::NotFound { .. })));
}

#[test]
fn listener_on_a_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sock");
    let listener = HandleListener::bind(&path).unwrap();
    assert_eq!(listener.path(), Some(path.as_path()));
    let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(matches!(
        HandleListener::bind(&path),
        Err(Error::AlreadyExists { .. })
    ));
    let client = HandleStream::connect(&path).unwrap();
    let server = listener.accept_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(server.peer().unwrap().pid, os::pid());
    assert_eq!(client.peer().unwrap().pid, os::pid());
    assert!(listener
        .accept_timeout(Duration::from_millis(10))
        .unwrap_err()
        .is_timeout());
    drop(listener);
    assert!(
        !path.exists(),
        "the socket file is removed with the listener"
    );
    // A file put in the socket's place (same directory, so the same
    // device) is not the listener's to remove.
    let replaced = dir.path().join("replaced");
    let listener = HandleListener::bind(&replaced).unwrap();
    let planted = dir.path().join("planted");
    std::fs::write(&planted, b"someone else's").unwrap();
    std::fs::rename(&planted, &replaced).unwrap();
    drop(listener);
    assert_eq!(std::fs::read(&replaced).unwrap(), b"someone else's");
    assert!(matches!(
        HandleStream::connect(&path),
        Err(Error::NotFound { .. })
    ));
    let name = format!(
        "hal-socket-test-{}-{}",
        os::pid(),
        os::hex(&os::random_id())
    );
    let l = HandleListener::bind_abstract(&name).unwrap();
    assert!(matches!(
        HandleListener::bind_abstract(&name),
        Err(Error::AlreadyExists { .. })
    ));
    drop(l);
    assert!(HandleStream::connect_abstract(&name).is_err());
}

#[test]
fn from_fd_wants_a_stream_socket() {
    let (r, _w) = leak_probe();
    assert!(HandleStream::from_fd(r).is_err());
    let (a, b) = UnixStream::pair().unwrap();
    let a = HandleStream::from_fd(OwnedFd::from(a)).unwrap();
    let b = HandleStream::from_fd(OwnedFd::from(b)).unwrap();
    a.hello().unwrap();
    assert_eq!(b.wait_hello().unwrap().pid, os::pid());
}
