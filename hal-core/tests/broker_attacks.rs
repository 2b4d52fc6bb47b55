//! Attacks on the descriptor broker and its importers, with real processes:
//! a hostile exporter that locates a FUSE-backed file for the importer's
//! own taking, another user who sends the broker FUSE-backed descriptors,
//! an importer that leaves answers unread over many
//! connections until the exporter's user may have no more descriptors in
//! flight, and one that sends requests on one connection without reading
//! the answers.
//!
//! Each test starts this test binary again with `--exact child_process
//! --include-ignored` and `HAL_ATTACK_ROLE` naming what the child does; the
//! child reports on stdout with lines that start with `RESULT `.

mod common;

use std::fs::File;
use std::io::IoSlice;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use common::{read_line, say, Kid};
use hal_core::exchange::{self, PIDFD_GETFD_ENV};
use hal_core::kit::os;
use hal_core::lease::LeaseTable;
use hal_core::{Exported, FdSource, Handle, HandleFlags, SharedHandle};
use nix::sys::socket::{self, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType};
use nix::sys::socket::{sockopt, UnixAddr};

const ROLE: &str = "HAL_ATTACK_ROLE";
const ARG: &str = "HAL_ATTACK_ARG";

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn unique(tag: &str) -> String {
    format!(
        "hal-test-{tag}-{}-{}-{}",
        os::pid(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        os::hex(&os::random_id()[..4])
    )
}

/// A test that cannot run here: a failure under `HAL_TESTS_STRICT=1` (CI
/// runs as root with it), a line saying so otherwise.
fn cannot_run(test: &str, why: &str) {
    hal_core::testing::not_run(&format!("{test}: {why}"));
}

// ---------------------------------------------------------------------------
// Child processes

impl Kid {
    fn spawn(role: &str, arg: &str, env: &[(&str, &str)]) -> Kid {
        Kid::start((ROLE, role), (ARG, arg), |cmd| {
            cmd.envs(env.iter().copied());
        })
    }
}

/// The entry of every child process (ignored: its parent runs it by name;
/// run by hand without a role, it does nothing).
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let arg = std::env::var(ARG).unwrap_or_default();
    match role.as_str() {
        "fuse-exporter" => child_fuse_exporter(&arg),
        "fuse-sender" => child_fuse_sender(&arg),
        "watched-importer" => child_watched_importer(&arg),
        "getfd-importer" => child_getfd_importer(&arg),
        "exporter" => child_exporter(&arg),
        "hoarder" => child_hoarder(&arg),
        "pipeliner" => child_pipeliner(&arg),
        other => panic!("unknown child role {other}"),
    }
}

// ---------------------------------------------------------------------------
// Helpers

fn handle(object_id: [u8; 16], fds: FdSource) -> Handle {
    Handle {
        object_id,
        fds,
        ..common::imports::memory_handle(HandleFlags::ANY_IMPORTER, Vec::new(), b"broker-attack")
    }
}

fn sealed_memfd_with(bytes: &[u8]) -> OwnedFd {
    let fd = os::memfd("hal-attack-test", 4096, None).expect("memfd");
    File::from(os::dup(fd.as_fd()).expect("dup"))
        .write_all_at(bytes, 0)
        .expect("write memfd");
    os::add_seals(fd.as_fd(), os::EXPORT_SEALS).expect("seal");
    fd
}

fn read_fd(fd: &OwnedFd) -> String {
    let mut buf = vec![0u8; 3];
    File::from(os::dup(fd.as_fd()).expect("dup"))
        .read_exact_at(&mut buf, 0)
        .expect("read memfd");
    String::from_utf8_lossy(&buf).into_owned()
}

/// A fetch request of the broker protocol for `id`: `HALB`, version 2,
/// operation 1, zeros, the id, zeros.
fn fetch_request(id: &[u8; 16]) -> [u8; 40] {
    let mut r = [0u8; 40];
    r[..4].copy_from_slice(b"HALB");
    r[4] = 2;
    r[5] = 1;
    r[8..24].copy_from_slice(id);
    r
}

/// A reply head of the broker protocol: `HALR`, version 2, status 0,
/// `count` descriptors, `flags`, the pid the broker saw, no ticket.
fn reply_head(count: u8, flags: u8, seen_pid: u32) -> Vec<u8> {
    let mut r = vec![0u8; 40];
    r[..4].copy_from_slice(b"HALR");
    r[4] = 2;
    r[6] = count;
    r[7] = flags;
    r[8..12].copy_from_slice(&seen_pid.to_le_bytes());
    r
}

fn broker_of(text: &str) -> (String, [u8; 16]) {
    let h = exchange::decode(text).expect("decode");
    let FdSource::Broker { name, .. } = h.fds else {
        panic!("the handle names no broker")
    };
    (name, h.object_id)
}

fn connect(name: &str) -> OwnedFd {
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .expect("socket");
    socket::connect(
        fd.as_raw_fd(),
        &UnixAddr::new_abstract(name.as_bytes()).expect("name"),
    )
    .expect("connect to the broker");
    let patience = nix::sys::time::TimeVal::new(30, 0);
    socket::setsockopt(&fd, sockopt::ReceiveTimeout, &patience).expect("SO_RCVTIMEO");
    fd
}

fn send(fd: &OwnedFd, bytes: &[u8], fds: &[RawFd]) -> nix::Result<usize> {
    let rights = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &rights };
    socket::sendmsg::<()>(
        fd.as_raw_fd(),
        &[IoSlice::new(bytes)],
        cmsgs,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
}

// ---------------------------------------------------------------------------
// FUSE-backed descriptors

/// Where a FUSE test cannot run: why, or `None`.
fn fuse_missing() -> Option<&'static str> {
    if !nix::unistd::geteuid().is_root() {
        return Some("mounting a FUSE file system needs root");
    }
    if !std::path::Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse");
    }
    None
}

fn fuse_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("hal-test-fuse-")
        .tempdir()
        .expect("temporary directory")
}

/// The path the importer takes (`HAL_PIDFD_GETFD=1`: the broker locates
/// the descriptor, the importer takes it from the exporter itself) is
/// pointed by a hostile exporter at a file of a FUSE file system it serves,
/// whose daemon holds every request of another process: an `open`, an
/// `fstat`, or the `flush` of the `close` of a refused descriptor, which no
/// signal ends. The importer must take nothing but a memfd and never wait
/// on anything else: it falls back to `SCM_RIGHTS` without a single
/// request reaching the daemon, and the import completes while the daemon
/// holds its requests.
#[test]
fn fuse_descriptor_on_the_board_does_not_hang_the_importer() {
    const TEST: &str = "fuse_descriptor_on_the_board_does_not_hang_the_importer";
    if let Some(why) = fuse_missing() {
        return cannot_run(TEST, why);
    }
    let dir = fuse_dir();
    let mut exporter = Kid::spawn("fuse-exporter", &dir.path().to_string_lossy(), &[]);
    let ready = exporter.result();
    if let Some(why) = ready.strip_prefix("cannot ") {
        return cannot_run(TEST, why);
    }
    let texts: Vec<&str> = ready.split(' ').collect();
    assert_eq!(texts.len(), 2, "{ready}");
    let mut importer = Kid::spawn(
        "getfd-importer",
        &ready,
        &[(PIDFD_GETFD_ENV, "1"), ("RUST_LOG", "")],
    );
    let got = importer.result();
    let asked = exporter.ask(&format!("requests {}", importer.id()));
    // Let go of whatever the daemon holds before judging, so that no
    // process is left waiting whatever the outcome.
    exporter.tell("stop");
    assert_eq!(
        got, "honest xyz taken 1 fell 0; fuse xyz taken 1 fell 1; warnings 0",
        "the honest object comes by the importer's own taking; the FUSE-backed one falls \
         back to SCM_RIGHTS"
    );
    assert_eq!(
        asked, "none",
        "FUSE requests of the importer reached the daemon (opcodes: 3 GETATTR, an fstat; 14 \
         OPEN; 25 FLUSH, a close): a hostile daemon could have left the importer waiting \
         forever"
    );
    importer.finish();
    exporter.finish();
    drop(dir);
}

/// The broker takes no descriptor from a request. Another user sends each
/// of the exporter's broker workers a message carrying the descriptor of a
/// FUSE file whose daemon holds the `flush` that a `close` sends: a worker
/// that let the kernel install it and closed it would wait for ever (no
/// signal ends that wait), and with every worker stopped no import is
/// answered and the exporter cannot even be killed. The broker must let
/// the kernel drop such descriptors uninstalled: an honest import made
/// while the daemon holds its requests is served, and no request of the
/// exporter's process reaches the daemon.
#[test]
fn fuse_descriptor_sent_to_the_broker_does_not_stop_it() {
    const TEST: &str = "fuse_descriptor_sent_to_the_broker_does_not_stop_it";
    if let Some(why) = fuse_missing() {
        return cannot_run(TEST, why);
    }
    let mut exporter = Kid::spawn("exporter", "", &[]);
    let text = exporter.result();
    let dir = fuse_dir();
    let arg = format!("{} {text}", dir.path().to_string_lossy());
    let mut attacker = Kid::spawn("fuse-sender", &arg, &[]);
    let sent = attacker.result();
    if let Some(why) = sent.strip_prefix("cannot ") {
        return cannot_run(TEST, why);
    }
    let mut importer = Kid::spawn("watched-importer", &text, &[(PIDFD_GETFD_ENV, "0")]);
    let got = importer.result();
    let asked = attacker.ask(&format!("requests {}", exporter.id()));
    attacker.tell("stop");
    assert!(sent.starts_with("sent "), "{sent}");
    assert_eq!(
        got, "abc",
        "an import while the FUSE daemon holds its requests ({sent})"
    );
    assert_eq!(
        asked, "none",
        "FUSE requests of the exporter's process reached the daemon (25 is FLUSH: a worker \
         closed the descriptor)"
    );
    importer.finish();
    attacker.finish();
    assert_eq!(
        exporter.ask("count"),
        "0",
        "the importer's lease was given back"
    );
    exporter.finish();
    drop(dir);
}

/// Mount the hostile FUSE file system at `dir` for a test (its daemon
/// holds every request of another process); `None` after saying why it
/// cannot.
fn mount_for_test(dir: &str) -> Option<hal_tests::fuse::Fuse> {
    match hal_tests::fuse::Fuse::mount(dir) {
        Ok(f) => Some(f),
        Err(e) => {
            say(format!("cannot mount a FUSE file system: {e}"));
            None
        }
    }
}

/// Serve the parent's `requests PID` (the opcodes process PID sent the
/// daemon, or `none`) until it says `stop`; then let go of every held
/// request.
fn answer_requests(mut fuse: hal_tests::fuse::Fuse) {
    loop {
        let line = read_line();
        let Some(pid) = line.strip_prefix("requests ") else {
            break;
        };
        let ops = fuse.requests_from(pid.parse().expect("a pid"));
        say(if ops.is_empty() {
            "none".to_owned()
        } else {
            format!("{ops:?}")
        });
    }
    fuse.stop();
}

/// The attacker of `fuse_descriptor_sent_to_the_broker_does_not_stop_it`:
/// mounts the file system at the first word of `arg`, becomes uid 65534
/// (another user than the exporter's), and sends the broker of the handle
/// (the rest of `arg`) a request with four descriptors of the FUSE file on
/// each of eight connections (more than the broker has workers).
fn child_fuse_sender(arg: &str) {
    let (dir, text) = arg.split_once(' ').expect("a directory and a handle");
    let Some(fuse) = mount_for_test(dir) else {
        return;
    };
    let nobody = nix::unistd::Uid::from_raw(65534);
    let nogroup = nix::unistd::Gid::from_raw(65534);
    nix::unistd::setgroups(&[])
        .and_then(|_| nix::unistd::setgid(nogroup))
        .and_then(|_| nix::unistd::setuid(nobody))
        .expect("becoming uid 65534");
    let (name, id) = broker_of(text);
    let file = fuse.file().as_raw_fd();
    let mut conns = Vec::new();
    for _ in 0..8 {
        let conn = connect(&name);
        send(&conn, &fetch_request(&id), &[file; 4]).expect("send to the broker");
        conns.push(conn);
    }
    say(format!("sent {} messages of 4 descriptors", conns.len()));
    answer_requests(fuse);
    drop(conns);
}

/// Import the handle `text` once from its broker, on a thread of its own:
/// report the bytes, the error, or `hung` when the import has not returned
/// after 20 s (four times the broker's timeout). Then wait for the parent's
/// end of input.
fn child_watched_importer(text: &str) {
    let text = text.to_owned();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut shared = SharedHandle::from(exchange::decode(&text).unwrap());
        let got = match exchange::take_fds(&mut shared) {
            Ok(fds) => read_fd(&fds[0]),
            Err(e) => format!("error: {e}"),
        };
        exchange::close_broker_connections();
        let _ = tx.send(got);
    });
    match rx.recv_timeout(std::time::Duration::from_secs(20)) {
        Ok(got) => say(got),
        Err(_) => say("hung"),
    }
    read_line();
}

/// A hostile exporter: a broker of its own on an abstract socket, with two
/// objects. Asked to locate the honest one, it names a sealed memfd; asked
/// to locate the other, a file of a FUSE file system it serves, whose
/// daemon holds every request of another process. A fetch of either gets
/// the sealed memfd, with `SCM_RIGHTS`. Prints the two handle texts, then
/// serves [`answer_requests`].
fn child_fuse_exporter(dir: &str) {
    let Some(fuse) = mount_for_test(dir) else {
        return;
    };
    let memfd = sealed_memfd_with(b"xyz");
    let st = os::fstat(memfd.as_fd()).unwrap();
    let fuse_st = os::quick_stat(fuse.file().as_fd()).unwrap();
    let name = unique("fuse-broker");
    let listener = socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    socket::bind(
        listener.as_raw_fd(),
        &UnixAddr::new_abstract(name.as_bytes()).unwrap(),
    )
    .unwrap();
    socket::listen(&listener, socket::Backlog::new(16).unwrap()).unwrap();
    let (honest, hostile) = (os::random_id(), os::random_id());
    let places = [
        (honest, memfd.as_raw_fd(), st.st_dev, st.st_ino),
        // The FUSE file's true identity: only its file system betrays it.
        (hostile, fuse.file().as_raw_fd(), fuse_st.dev, fuse_st.ino),
    ];
    let texts: Vec<String> = [honest, hostile]
        .iter()
        .map(|id| {
            exchange::encode(&handle(
                *id,
                FdSource::Broker {
                    count: 1,
                    name: name.clone(),
                },
            ))
        })
        .collect();
    let memfd_raw = memfd.as_raw_fd();
    std::thread::spawn(move || loop {
        let Ok(raw) = socket::accept(listener.as_raw_fd()) else {
            return;
        };
        // SAFETY: accept returned a new descriptor nothing else owns.
        let conn = unsafe { OwnedFd::from_raw_fd(raw) };
        let peer = socket::getsockopt(&conn, sockopt::PeerCredentials)
            .map(|c| c.pid() as u32)
            .unwrap_or(0);
        let mut req = [0u8; 64];
        while let Ok(n) = nix::unistd::read(conn.as_raw_fd(), &mut req) {
            if n != 40 {
                break;
            }
            let id: [u8; 16] = req[8..24].try_into().unwrap();
            let sent = match req[5] {
                // Locate: where the object's descriptor is.
                5 => {
                    let Some(&(_, fd, dev, ino)) = places.iter().find(|p| p.0 == id) else {
                        break;
                    };
                    let mut r = reply_head(1, 2, peer);
                    r.extend_from_slice(&(fd as u32).to_le_bytes());
                    r.extend_from_slice(&[0; 4]);
                    r.extend_from_slice(&dev.to_le_bytes());
                    r.extend_from_slice(&ino.to_le_bytes());
                    send(&conn, &r, &[])
                }
                // Fetch: the sealed memfd.
                1 => send(&conn, &reply_head(1, 0, peer), &[memfd_raw]),
                _ => break,
            };
            if sent.is_err() {
                break;
            }
        }
    });
    say(texts.join(" "));
    answer_requests(fuse);
    drop(memfd);
}

/// Import the honest object, then the FUSE-backed one, by the
/// `pidfd_getfd` path; report each one's bytes and the path's counts.
fn child_getfd_importer(texts: &str) {
    hal_tests::warnings::capture();
    let texts: Vec<String> = texts.split(' ').map(str::to_owned).collect();
    let (tx, rx) = std::sync::mpsc::channel();
    // On a thread of its own: an import that waits on the daemon is
    // reported as such instead of leaving the test waiting too.
    std::thread::spawn(move || {
        let mut report = Vec::new();
        for (what, text) in ["honest", "fuse"].iter().zip(&texts) {
            let mut shared = SharedHandle::from(exchange::decode(text).unwrap());
            let taken = exchange::take_fds(&mut shared).unwrap();
            let (taken_n, fell) = exchange::pidfd_getfd_counts();
            report.push(format!(
                "{what} {} taken {taken_n} fell {fell}",
                read_fd(&taken[0])
            ));
        }
        exchange::close_broker_connections();
        let _ = tx.send(report.join("; "));
    });
    let Ok(report) = rx.recv_timeout(std::time::Duration::from_secs(20)) else {
        say("hung");
        read_line();
        return;
    };
    let warnings = hal_tests::warnings::all();
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    say(format!("{report}; warnings {}", warnings.len()));
}

// ---------------------------------------------------------------------------
// Answers an importer never reads

/// An exporter of one object of `fds` sealed memfds that counts importers.
/// With `limited`, it first becomes uid 65534 when it runs as root (so that
/// neither capability lifts the kernel's limit, and the descriptors it
/// sends are charged to a user of their own), and lowers its open-file
/// limit to a few more than it holds: the kernel then refuses its sends
/// (`ETOOMANYREFS`) once more descriptors than that are in flight. Prints
/// the handle text, then answers `count` with the number of importers and
/// `warned` with the warnings it logged.
fn child_exporter(arg: &str) {
    hal_tests::warnings::capture();
    let (fds, limited) = match arg {
        "limited" => (16, true),
        _ => (1, false),
    };
    if limited && nix::unistd::geteuid().is_root() {
        let nobody = nix::unistd::Uid::from_raw(65534);
        let nogroup = nix::unistd::Gid::from_raw(65534);
        let changed = nix::unistd::setgroups(&[])
            .and_then(|_| nix::unistd::setgid(nogroup))
            .and_then(|_| nix::unistd::setuid(nobody));
        match changed {
            // SAFETY: PR_SET_DUMPABLE takes plain integers: this process's
            // /proc files stay readable to its peers after the uid change.
            Ok(()) => unsafe {
                libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
            },
            // Root of a user namespace without uid 65534: its capabilities
            // do not count outside it, so the limit holds all the same.
            Err(e) => eprintln!("staying uid 0 (setuid to 65534: {e})"),
        }
    }
    let table = LeaseTable::new(64).unwrap();
    let memfds: Vec<OwnedFd> = (0..fds).map(|_| sealed_memfd_with(b"abc")).collect();
    let exported = Exported::with_leases(
        handle(os::random_id(), FdSource::None),
        memfds,
        Arc::clone(&table),
    )
    .unwrap();
    let text = exported.to_text();
    // Start the broker before the limit (the first registration starts it).
    if limited {
        let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
        let (_, hard) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, open + 24, hard)
            .unwrap();
    }
    say(text);
    loop {
        match read_line().as_str() {
            "count" => say(table.count()),
            "warned" => say(hal_tests::warnings::all().join(" | ")),
            _ => break,
        }
    }
    drop(exported);
}

/// A hostile importer: connection after connection, one fetch request on
/// each, no answer ever read, until a connection is closed without an
/// answer (the exporter's send failed) or 200 connections. Reports how
/// many answers wait unread and whether a send failed, then holds them
/// until told `done`.
fn child_hoarder(text: &str) {
    let (name, id) = broker_of(text);
    let mut held = Vec::new();
    let mut refused = false;
    for _ in 0..200 {
        let conn = connect(&name);
        send(&conn, &fetch_request(&id), &[]).expect("send a request");
        // Look at what came without taking it (no room for descriptors:
        // they stay in flight).
        let mut head = [0u8; 40];
        let n = loop {
            match socket::recv(conn.as_raw_fd(), &mut head, MsgFlags::MSG_PEEK) {
                Ok(n) => break n,
                // Said once, before what is queued (see the pipeliner).
                Err(nix::errno::Errno::ECONNRESET) => continue,
                Err(e) => panic!("an answer or a hang-up within 30 s: {e}"),
            }
        };
        if n == 0 {
            refused = true;
            break;
        }
        assert_eq!((n, &head[..4], head[5]), (40, &b"HALR"[..], 0), "served");
        held.push(conn);
    }
    say(format!("unread {} refused {refused}", held.len()));
    while read_line() != "done" {}
    drop(held);
}

#[test]
fn lease_undone_when_the_answer_is_not_delivered() {
    let mut exporter = Kid::spawn("exporter", "limited", &[]);
    let text = exporter.result();
    let mut hoarder = Kid::spawn("hoarder", &text, &[]);
    let got = hoarder.result();
    let (unread, refused) = got
        .strip_prefix("unread ")
        .and_then(|r| r.split_once(" refused "))
        .unwrap_or_else(|| panic!("{got}"));
    assert_eq!(refused, "true", "the exporter's send failed at last: {got}");
    assert!(unread.parse::<u32>().unwrap() >= 1, "{got}");
    // Every answer that waits in the hoarder's sockets holds a lease; the
    // answer that was never sent holds none.
    assert_eq!(
        exporter.ask("count"),
        unread,
        "leases registered for the hoarder: one per answer it was sent"
    );
    hoarder.tell("done");
    hoarder.finish();
    assert_eq!(exporter.ask("count"), "0", "a dead importer is not counted");
    exporter.finish();
}

/// A hostile importer on one connection: 50 fetch requests sent, no answer
/// read. Then it reads what came (answers and descriptors) until the
/// broker hangs up, imports honestly, and reports.
fn child_pipeliner(text: &str) {
    let (name, id) = broker_of(text);
    let conn = connect(&name);
    for _ in 0..50 {
        if send(&conn, &fetch_request(&id), &[]).is_err() {
            break;
        }
    }
    // Read nothing until the broker hangs up (a connected Unix socket
    // queues every request: none of the sends waits for the broker).
    // POLLHUP is reported whatever is asked: ask for nothing else.
    let mut hup = [nix::poll::PollFd::new(
        conn.as_fd(),
        nix::poll::PollFlags::empty(),
    )];
    // Not hung up within 30 s: the broker answers every request (the count
    // below says how many).
    nix::poll::poll(&mut hup, nix::poll::PollTimeout::from(30_000u16)).expect("poll");
    let (mut answers, mut fds) = (0, 0);
    loop {
        let mut buf = [0u8; 64];
        let mut space = nix::cmsg_space!([RawFd; 16]);
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let msg = match socket::recvmsg::<()>(
            conn.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) if msg.bytes > 0 => msg,
            Ok(_) => break,
            // The broker closed with requests of this process unread: said
            // once, before what is still queued here.
            Err(nix::errno::Errno::ECONNRESET) => continue,
            Err(e) => panic!("an answer or a hang-up within 30 s: {e}"),
        };
        answers += 1;
        for c in msg.cmsgs().unwrap() {
            if let socket::ControlMessageOwned::ScmRights(got) = c {
                fds += got.len();
                for fd in got {
                    // SAFETY: the kernel installed these descriptors here.
                    drop(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
        }
    }
    // Another connection is served as ever.
    let mut shared = SharedHandle::from(exchange::decode(text).unwrap());
    let taken = exchange::take_fds_leased(&mut shared).unwrap();
    let honest = read_fd(&taken.fds[0]);
    drop(taken);
    exchange::close_broker_connections();
    say(format!("answers {answers} fds {fds} honest {honest}"));
    while read_line() != "done" {}
    drop(conn);
}

#[test]
fn a_connection_holds_at_most_one_unread_answer() {
    let mut exporter = Kid::spawn("exporter", "plain", &[]);
    let text = exporter.result();
    let mut pipeliner = Kid::spawn("pipeliner", &text, &[]);
    assert_eq!(
        pipeliner.result(),
        "answers 1 fds 1 honest abc",
        "one answer, then the connection closed; a new one served"
    );
    // The one answer it got carried a lease, which it never gave back.
    assert_eq!(exporter.ask("count"), "1");
    let warned = exporter.ask("warned");
    assert!(
        warned.contains("before reading the previous answer"),
        "the exporter says why it closed the connection: {warned}"
    );
    pipeliner.tell("done");
    pipeliner.finish();
    assert_eq!(exporter.ask("count"), "0");
    exporter.finish();
}
