//! Handle exchange across real processes.
//!
//! Each cross-process test starts this test binary again with
//! `--exact child_process` and the environment variable `HAL_EXCHANGE_ROLE`
//! naming what the child does; the child reports on stdout with lines that
//! start with `RESULT ` and fails (exit status 101) on any broken
//! expectation. Sockets are abstract or live in temporary directories, and
//! memory is in memfds, so nothing is left behind.

mod common;

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{read_line, say, Kid};
use hal_core::exchange::{self, HandleListener, HandleStream};
use hal_core::kit::os;
use hal_core::lease::LeaseTable;
use hal_core::{
    Error, Exported, FdSource, Handle, HandleError, HandleFlags, Importers, SharedHandle,
};
use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, UnixAddr};

const ROLE: &str = "HAL_EXCHANGE_ROLE";
const ARG: &str = "HAL_EXCHANGE_ARG";
/// Generous bound on waits for a child, so that a broken child fails the
/// test instead of hanging it (never a timing assertion).
const PATIENCE: Duration = Duration::from_secs(60);

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn unique(tag: &str) -> String {
    format!(
        "hal-test-{tag}-{}-{}-{}",
        os::pid(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        os::hex(&os::random_id()[..4])
    )
}

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

fn handle_with(fds: FdSource, flags: HandleFlags, allowed: Vec<u32>) -> Handle {
    Handle {
        fds,
        ..common::imports::memory_handle(flags, allowed, b"exchange-test")
    }
}

fn memfd_with(bytes: &[u8]) -> OwnedFd {
    let fd = os::memfd("hal-exchange-test", 4096, None).expect("memfd");
    File::from(os::dup(fd.as_fd()).expect("dup"))
        .write_all_at(bytes, 0)
        .expect("write memfd");
    fd
}

fn read_fd(fd: &OwnedFd, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    File::from(os::dup(fd.as_fd()).expect("dup"))
        .read_exact_at(&mut buf, 0)
        .expect("read memfd");
    buf
}

// ---------------------------------------------------------------------------
// Child processes

impl Kid {
    fn spawn(role: &str, arg: &str) -> Kid {
        Kid::spawn_with(role, arg, |_| {})
    }

    fn spawn_with(role: &str, arg: &str, setup: impl FnOnce(&mut Command)) -> Kid {
        Kid::start((ROLE, role), (ARG, arg), setup)
    }
}

/// The entry of every child process, run by its parent by exact name.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_process() {
    let role = std::env::var(ROLE)
        .expect("a child entry point: its parent sets the role (run the other tests of this file)");
    let arg = std::env::var(ARG).unwrap_or_default();
    match role.as_str() {
        "socket-recv" => child_socket_recv(&arg),
        "socket-expect-nothing" => child_socket_expect_nothing(&arg),
        "broker-import" => child_broker_import(),
        "broker-denied" => child_broker_denied(),
        "export-and-exit" => child_export_and_exit(),
        "other-user" => child_other_user(),
        "file-writer" => child_file_writer(&arg),
        "umask-writer" => child_umask_writer(&arg),
        "rlimit-recv" => child_rlimit_recv(&arg),
        "pair-child" => child_pair(&arg),
        "fork" => child_fork(),
        "lease-holder" => child_lease_holder(),
        other => panic!("unknown child role {other}"),
    }
}

// ---------------------------------------------------------------------------
// A handle with a descriptor crosses a Unix socket; both sides see each other.

#[test]
fn socket_carries_a_memfd_and_both_sides_see_the_peer() {
    let name = unique("sock");
    let listener = HandleListener::bind_abstract(&name).unwrap();
    let mut kid = Kid::spawn("socket-recv", &name);
    let stream = listener.accept_timeout(PATIENCE).unwrap();
    stream.set_timeout(Some(PATIENCE)).unwrap();
    let peer = stream.peer().unwrap();
    assert_eq!(peer.pid, kid.id(), "the parent sees the child's pid");
    assert_eq!(peer.uid, euid());

    let fd = memfd_with(b"bytes across the socket");
    let handle = handle_with(
        FdSource::Attached { count: 1 },
        HandleFlags::default(),
        vec![kid.id()],
    );
    stream.send(&handle, &[fd]).unwrap();
    assert_eq!(kid.result(), "bytes across the socket");
    assert_eq!(kid.result(), handle.to_text(), "the handle arrives intact");
    kid.finish();
}

fn child_socket_recv(name: &str) {
    let stream = HandleStream::connect_abstract(name).unwrap();
    stream.set_timeout(Some(PATIENCE)).unwrap();
    let parent = std::os::unix::process::parent_id();
    let peer = stream.peer().unwrap();
    assert_eq!(peer.pid, parent, "the child sees the parent's pid");
    assert_eq!(peer.uid, euid());
    let (mut shared, sender) = stream.recv().unwrap();
    assert_eq!(sender.pid, parent);
    assert_eq!(sender.uid, euid());
    let fds = exchange::take_fds(&mut shared).unwrap();
    assert_eq!(fds.len(), 1);
    say(String::from_utf8(read_fd(&fds[0], 23)).unwrap());
    say(shared.handle.to_text());
}

#[test]
fn socket_sender_refuses_a_pid_not_on_the_allow_list() {
    let name = unique("deny");
    let listener = HandleListener::bind_abstract(&name).unwrap();
    let mut kid = Kid::spawn("socket-expect-nothing", &name);
    let stream = listener.accept_timeout(PATIENCE).unwrap();
    let fd = memfd_with(b"secret");
    // Someone else (pid 1) is allowed; the child is not.
    let handle = handle_with(
        FdSource::Attached { count: 1 },
        HandleFlags::default(),
        vec![1],
    );
    match stream.send(&handle, &[fd]) {
        Err(Error::PermissionDenied { pid, .. }) => assert_eq!(pid, Some(kid.id())),
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
    drop(stream);
    assert_eq!(kid.result(), "closed");
    kid.finish();
}

fn child_socket_expect_nothing(name: &str) {
    let stream = HandleStream::connect_abstract(name).unwrap();
    stream.set_timeout(Some(PATIENCE)).unwrap();
    match stream.recv() {
        Err(Error::Closed { .. }) => say("closed"),
        other => panic!("expected the parent to hang up without sending, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// A socket pair shared with a child: the child says hello, the parent learns
// its pid from the kernel, then sends.

#[test]
fn socketpair_child_is_identified_by_its_hello() {
    let (parent_end, child_end) = exchange::socketpair().unwrap();
    parent_end.set_timeout(Some(PATIENCE)).unwrap();
    let child_raw = child_end.as_fd().as_raw_fd();
    let mut kid = Kid::spawn_with("pair-child", &child_raw.to_string(), |cmd| {
        // SAFETY: fcntl is async-signal-safe; clearing close-on-exec on the
        // child's end (same number) lets it survive the exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(child_raw, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
    });
    drop(child_end);
    let handle = handle_with(
        FdSource::Attached { count: 1 },
        HandleFlags::default(),
        vec![kid.id()],
    );
    let fd = memfd_with(b"through a pair");
    // Before the hello the peer of the pair is unknown: a restricted handle
    // is not sent.
    assert!(matches!(
        parent_end.send(&handle, &[&fd]),
        Err(Error::PermissionDenied { pid: None, .. })
    ));
    let hello = parent_end.wait_hello().unwrap();
    assert_eq!(hello.pid, kid.id());
    assert_eq!(parent_end.peer().unwrap().pid, kid.id());
    parent_end.send(&handle, &[&fd]).unwrap();
    assert_eq!(kid.result(), "through a pair");
    kid.finish();
}

fn child_pair(arg: &str) {
    let raw: RawFd = arg.parse().unwrap();
    // SAFETY: the parent left this process's end of the pair open at `raw`
    // across the exec, and nothing else here owns that number.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let stream = HandleStream::from_fd(fd).unwrap();
    stream.set_timeout(Some(PATIENCE)).unwrap();
    let parent = std::os::unix::process::parent_id();
    assert_eq!(stream.peer().unwrap().pid, parent);
    stream.hello().unwrap();
    let (mut shared, sender) = stream.recv().unwrap();
    assert_eq!(sender.pid, parent);
    let fds = exchange::take_fds(&mut shared).unwrap();
    say(String::from_utf8(read_fd(&fds[0], 14)).unwrap());
}

// ---------------------------------------------------------------------------
// The broker: a handle's text is enough for an allowed process.

#[test]
fn broker_serves_a_text_only_import_to_an_allowed_child() {
    let fd = memfd_with(b"fetched from the broker");
    let handle = handle_with(FdSource::None, HandleFlags::default(), Vec::new());
    let mut exported = Exported::new(handle, vec![fd]).unwrap();
    assert!(matches!(
        exported.handle().fds,
        FdSource::Broker { count: 1, .. }
    ));
    let mut kid = Kid::spawn("broker-import", "");
    exported.add_importers(&[kid.id()]).unwrap();
    kid.tell(&exported.to_text());
    assert_eq!(kid.result(), "fetched from the broker");
    kid.finish();
}

fn child_broker_import() {
    let handle = exchange::decode(&read_line()).unwrap();
    assert!(handle.allows(os::pid()));
    let mut shared = SharedHandle::from(handle);
    let fds = exchange::take_fds(&mut shared).unwrap();
    assert_eq!(fds.len(), 1);
    say(String::from_utf8(read_fd(&fds[0], 23)).unwrap());
}

#[test]
fn broker_refuses_a_pid_not_on_its_list_even_with_a_forged_handle() {
    let fd = memfd_with(b"allowed at last");
    let handle = handle_with(FdSource::None, HandleFlags::default(), Vec::new());
    let mut exported = Exported::new(handle, vec![fd]).unwrap();
    exported.set_importers(&Importers::Pids(vec![1])).unwrap();
    let mut kid = Kid::spawn("broker-denied", "");
    kid.tell(&exported.to_text());
    assert_eq!(kid.result(), format!("denied {}", kid.id()));
    assert_eq!(kid.result(), "forged handle denied");
    // The exporter's own decision counts: allowing the child lets it in.
    exported.add_importers(&[kid.id()]).unwrap();
    kid.tell("go");
    assert_eq!(kid.result(), "allowed at last");
    kid.finish();
}

fn child_broker_denied() {
    let handle = exchange::decode(&read_line()).unwrap();
    assert!(!handle.allows(os::pid()));
    let mut shared = SharedHandle::from(handle.clone());
    match exchange::take_fds(&mut shared) {
        Err(Error::PermissionDenied {
            pid: Some(pid),
            reason,
        }) => {
            assert!(reason.contains("not allowed"), "{reason}");
            say(format!("denied {pid}"));
        }
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
    // Claim in the text that anyone, and this pid, may import.
    let mut forged = handle.clone();
    forged.flags.insert(HandleFlags::ANY_IMPORTER);
    forged.allowed_pids = vec![os::pid()];
    let mut shared = SharedHandle::from(exchange::decode(&forged.to_text()).unwrap());
    match exchange::take_fds(&mut shared) {
        Err(Error::PermissionDenied { .. }) => say("forged handle denied"),
        other => panic!("a forged handle must not open the broker, got {other:?}"),
    }
    assert_eq!(read_line(), "go");
    let mut shared = SharedHandle::from(handle);
    let fds = exchange::take_fds(&mut shared).unwrap();
    say(String::from_utf8(read_fd(&fds[0], 15)).unwrap());
}

#[test]
fn importing_after_the_exporter_exited_says_so() {
    let mut kid = Kid::spawn("export-and-exit", "");
    let text = kid.result();
    kid.finish();
    let mut shared = SharedHandle::from(exchange::decode(&text).unwrap());
    match exchange::take_fds(&mut shared) {
        Err(Error::Closed { what }) => assert!(what.contains("exited"), "{what}"),
        other => panic!("expected Closed, got {other:?}"),
    }
}

fn child_export_and_exit() {
    let handle = handle_with(FdSource::None, HandleFlags::ANY_IMPORTER, Vec::new());
    let exported = Exported::new(handle, vec![memfd_with(b"gone")]).unwrap();
    say(exported.to_text());
}

#[test]
fn broker_serves_another_user_only_what_is_exported_to_anyone() {
    let open = handle_with(FdSource::None, HandleFlags::ANY_IMPORTER, Vec::new());
    let open = Exported::new(open, vec![memfd_with(b"open")]).unwrap();
    let own = handle_with(FdSource::None, HandleFlags::SAME_USER, Vec::new());
    let own = Exported::new(own, vec![memfd_with(b"mine")]).unwrap();
    let mut kid = Kid::spawn("other-user", "");
    kid.tell(&format!("{} {}", open.to_text(), own.to_text()));
    let outcome = kid.result();
    eprintln!("another user: {outcome}");
    // Changing user needs root; elsewhere the child says it could not.
    assert!(
        outcome == "served open, uid denied" || outcome == "skipped: not root",
        "{outcome}"
    );
    kid.finish();
    if outcome == "skipped: not root" {
        hal_core::testing::not_run("changing to another user's uid needs root");
    }
}

fn child_other_user() {
    let line = read_line();
    let (open, own) = line.split_once(' ').expect("two handles");
    if euid() != 0 {
        say("skipped: not root");
        return;
    }
    let nobody = 65534;
    nix::unistd::setgid(nix::unistd::Gid::from_raw(nobody)).unwrap();
    nix::unistd::setuid(nix::unistd::Uid::from_raw(nobody)).unwrap();
    let mut shared = SharedHandle::from(exchange::decode(open).unwrap());
    let served = match exchange::take_fds(&mut shared) {
        Ok(fds) => format!("served {}", String::from_utf8_lossy(&read_fd(&fds[0], 4))),
        Err(e) => panic!("an export to anyone refused another user: {e}"),
    };
    let mut shared = SharedHandle::from(exchange::decode(own).unwrap());
    match exchange::take_fds(&mut shared) {
        Err(Error::PermissionDenied { reason, .. }) if reason.contains("another user") => {
            say(format!("{served}, uid denied"))
        }
        other => panic!("expected the broker to refuse another user, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// In-process broker behaviour.

fn broker_name(handle: &Handle) -> String {
    match &handle.fds {
        FdSource::Broker { name, .. } => name.clone(),
        other => panic!("expected a broker handle, got {other:?}"),
    }
}

fn raw_connect(name: &str) -> OwnedFd {
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    let timeout = nix::sys::time::TimeVal::new(30, 0);
    socket::setsockopt(&fd, socket::sockopt::ReceiveTimeout, &timeout).unwrap();
    let addr = UnixAddr::new_abstract(name.as_bytes()).unwrap();
    socket::connect(fd.as_raw_fd(), &addr).unwrap();
    fd
}

/// Send `bytes` (and optionally descriptors) and return the reply's status.
fn raw_exchange(name: &str, bytes: &[u8], fds: &[RawFd]) -> Option<u8> {
    let fd = raw_connect(name);
    let rights = [socket::ControlMessage::ScmRights(fds)];
    let cmsgs: &[socket::ControlMessage<'_>] = if fds.is_empty() { &[] } else { &rights };
    socket::sendmsg::<()>(
        fd.as_raw_fd(),
        &[std::io::IoSlice::new(bytes)],
        cmsgs,
        socket::MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .unwrap();
    let mut reply = [0u8; 64];
    let n = socket::recv(fd.as_raw_fd(), &mut reply, socket::MsgFlags::empty()).unwrap();
    (n >= 6).then(|| {
        assert_eq!(&reply[..4], b"HALR");
        reply[5]
    })
}

/// A fetch request: `HALB`, version, operation 1, two zero bytes, the
/// object id, then 16 zero bytes (no lease ticket).
fn request(object_id: &[u8; 16], version: u8) -> Vec<u8> {
    let mut r = b"HALB".to_vec();
    r.extend_from_slice(&[version, 1, 0, 0]);
    r.extend_from_slice(object_id);
    r.extend_from_slice(&[0; 16]);
    r
}

#[test]
fn garbage_on_the_broker_socket_does_not_break_it() {
    let handle = handle_with(FdSource::None, HandleFlags::ANY_IMPORTER, Vec::new());
    let exported = Exported::new(handle, vec![memfd_with(b"still served")]).unwrap();
    let name = broker_name(exported.handle());
    let id = exported.handle().object_id;

    // Connect and hang up, send an empty packet, stay silent for a while.
    drop(raw_connect(&name));
    assert_eq!(raw_exchange(&name, &[], &[]), None);
    let silent = raw_connect(&name);
    // Short, random, oversized and mislabelled requests.
    assert_eq!(raw_exchange(&name, b"hi!", &[]), Some(1));
    assert_eq!(raw_exchange(&name, &[0xff; 24], &[]), Some(1));
    assert_eq!(raw_exchange(&name, &vec![0x5a; 60_000], &[]), Some(1));
    let mut long = request(&id, 2);
    long.push(0);
    assert_eq!(raw_exchange(&name, &long, &[]), Some(1));
    assert_eq!(raw_exchange(&name, &request(&id, 1)[..24], &[]), Some(1));
    assert_eq!(raw_exchange(&name, &request(&id, 99), &[]), Some(2));
    assert_eq!(
        raw_exchange(&name, &request(&os::random_id(), 2), &[]),
        Some(3)
    );
    // Descriptors sent to the broker are dropped, and the request served.
    let (r, w) = nix::unistd::pipe().unwrap();
    assert_eq!(
        raw_exchange(&name, &request(&id, 2), &[r.as_raw_fd(), w.as_raw_fd()]),
        Some(0)
    );
    drop(silent);

    let mut shared = SharedHandle::from(exported.handle().clone());
    let fds = exchange::take_fds(&mut shared).unwrap();
    assert_eq!(read_fd(&fds[0], 12), b"still served");
}

#[test]
fn a_broker_that_never_answers_times_out() {
    // A socket that listens but never accepts, named in a handle of ours.
    let name = unique("mute");
    let mute = socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    let addr = UnixAddr::new_abstract(name.as_bytes()).unwrap();
    socket::bind(mute.as_raw_fd(), &addr).unwrap();
    socket::listen(&mute, socket::Backlog::new(4).unwrap()).unwrap();
    let handle = handle_with(
        FdSource::Broker { count: 1, name },
        HandleFlags::ANY_IMPORTER,
        Vec::new(),
    );
    let err = exchange::take_fds(&mut SharedHandle::from(handle)).unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
}

#[test]
fn take_fds_checks_counts_and_unknown_objects() {
    let handle = handle_with(FdSource::None, HandleFlags::ANY_IMPORTER, Vec::new());
    let exported = Exported::new(handle, vec![memfd_with(b"x")]).unwrap();

    // Same process, attached descriptors: taken as they are.
    let mut shared = exported.share().unwrap();
    assert_eq!(exchange::take_fds(&mut shared).unwrap().len(), 1);
    assert!(shared.fds.is_empty());

    // A count that does not match the handle.
    let mut shared = exported.share().unwrap();
    shared.fds.push(memfd_with(b"extra"));
    assert!(matches!(
        exchange::take_fds(&mut shared),
        Err(Error::InvalidHandle(HandleError::Descriptors(_)))
    ));

    // An object the broker does not know.
    let mut stale = exported.handle().clone();
    stale.object_id = os::random_id();
    assert!(matches!(
        exchange::take_fds(&mut SharedHandle::from(stale)),
        Err(Error::NotFound { .. })
    ));

    // No descriptors at all; descriptors that should have come along.
    let none = handle_with(FdSource::None, HandleFlags::ANY_IMPORTER, Vec::new());
    assert!(exchange::take_fds(&mut SharedHandle::from(none))
        .unwrap()
        .is_empty());
    let attached = handle_with(
        FdSource::Attached { count: 2 },
        HandleFlags::ANY_IMPORTER,
        Vec::new(),
    );
    assert!(matches!(
        exchange::take_fds(&mut SharedHandle::from(attached)),
        Err(Error::InvalidHandle(HandleError::Descriptors(_)))
    ));

    // After the export is dropped its descriptors are no longer served.
    let gone = exported.handle().clone();
    drop(exported);
    assert!(matches!(
        exchange::take_fds(&mut SharedHandle::from(gone)),
        Err(Error::NotFound { .. })
    ));
}

#[test]
fn an_export_without_descriptors_names_none() {
    let handle = handle_with(
        FdSource::Attached { count: 3 },
        HandleFlags::ANY_IMPORTER,
        Vec::new(),
    );
    let exported = Exported::new(handle, Vec::new()).unwrap();
    assert_eq!(exported.handle().fds, FdSource::None);
    assert!(exported.fds().is_empty());
}

// ---------------------------------------------------------------------------
// A forked child neither serves nor holds its parent's broker.

#[test]
fn a_forked_child_does_not_serve_its_parents_registrations() {
    // Forking happens in a child of its own, away from the other tests' threads.
    let mut kid = Kid::spawn("fork", "");
    assert_eq!(kid.result(), "fork ok");
    kid.finish();
}

fn socket_inode(abstract_name: &str) -> Option<String> {
    let table = std::fs::read_to_string("/proc/net/unix").ok()?;
    let want = format!("@{abstract_name}");
    table.lines().find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        (cols.len() >= 8 && cols[7] == want).then(|| cols[6].to_owned())
    })
}

fn holds_socket(inode: &str) -> bool {
    let want = format!("socket:[{inode}]");
    std::fs::read_dir("/proc/self/fd")
        .map(|dir| {
            dir.flatten()
                .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == want))
        })
        .unwrap_or(false)
}

fn in_forked_child(parent: &Exported) -> Result<(), String> {
    // A grandchild forked before this child exports anything keeps its
    // standard descriptors: the fork handler closed only the broker's
    // socket, once.
    // SAFETY: the grandchild calls only fcntl(2) and _exit(2).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: fcntl on descriptor numbers, then leave the grandchild.
        unsafe {
            let open = (0..3).all(|fd| libc::fcntl(fd, libc::F_GETFD) != -1);
            libc::_exit(i32::from(!open));
        }
    }
    let mut status = 0;
    // SAFETY: waits for the grandchild forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        return Err("a grandchild lost a standard descriptor to the fork handler".into());
    }
    let parent_name = broker_name(parent.handle());
    let inode = socket_inode(&parent_name).ok_or("the parent's broker is not listed")?;
    if holds_socket(&inode) {
        return Err("the child still holds the parent's listening socket".into());
    }
    let handle = handle_with(FdSource::None, HandleFlags::ANY_IMPORTER, Vec::new());
    let own = Exported::new(handle, vec![memfd_with(b"child")]).map_err(|e| e.to_string())?;
    let own_name = broker_name(own.handle());
    if own_name == parent_name || !own_name.contains(&format!("-{}-", os::pid())) {
        return Err(format!(
            "child broker named {own_name}, parent's {parent_name}"
        ));
    }
    // A handle whose socket is served by someone other than its (live)
    // creator is refused before anything is asked.
    let mut asked = parent.handle().clone();
    asked.fds = FdSource::Broker {
        count: 1,
        name: own_name,
    };
    match exchange::take_fds(&mut SharedHandle::from(asked.clone())) {
        Err(Error::PermissionDenied { pid, .. }) if pid == Some(os::pid()) => {}
        other => return Err(format!("an impostor broker was trusted: {other:?}")),
    }
    // The child's broker does not know the parent's export.
    (asked.creator_pid, asked.creator_start) = os::self_identity();
    match exchange::take_fds(&mut SharedHandle::from(asked)) {
        Err(Error::NotFound { .. }) => {}
        other => return Err(format!("child broker answered for the parent: {other:?}")),
    }
    // The parent's broker still serves it to the child.
    let fds = exchange::take_fds(&mut SharedHandle::from(parent.handle().clone()))
        .map_err(|e| e.to_string())?;
    if read_fd(&fds[0], 6) != b"parent" {
        return Err("wrong bytes from the parent's broker".into());
    }
    Ok(())
}

fn child_fork() {
    let handle = handle_with(FdSource::None, HandleFlags::ANY_IMPORTER, Vec::new());
    let parent = Exported::new(handle, vec![memfd_with(b"parent")]).unwrap();
    // SAFETY: the forked child runs only `in_forked_child` and leaves with
    // `_exit`; no other thread of this process holds a lock the child needs
    // (the broker thread is idle, this test runs alone).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = match in_forked_child(&parent) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("forked child: {e}");
                1
            }
        };
        // SAFETY: ends the forked child without running the parent's
        // exit handlers or destructors twice.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above; `status` is a valid out pointer.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "forked child failed: {status:#x}"
    );
    // The parent's broker works as before.
    let fds = exchange::take_fds(&mut SharedHandle::from(parent.handle().clone())).unwrap();
    assert_eq!(read_fd(&fds[0], 6), b"parent");
    say("fork ok");
}

// ---------------------------------------------------------------------------
// Handle files.

fn file_handles() -> [Handle; 2] {
    let mut small = handle_with(FdSource::None, HandleFlags::ANY_IMPORTER, Vec::new());
    small.object_id = [1; 16];
    small.creator_pid = 100;
    small.creator_start = 1;
    let mut large = small.clone();
    large.object_id = [2; 16];
    large.flags = HandleFlags::default();
    large.allowed_pids = (1..=64).collect();
    large.payload = vec![0xab; 256];
    large.fds = FdSource::Broker {
        count: 2,
        name: "b".repeat(100),
    };
    [small, large]
}

#[test]
fn a_reader_never_sees_a_half_written_handle_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("handle");
    let handles = file_handles();
    exchange::write_handle_file(&path, &handles[0]).unwrap();
    let mut kid = Kid::spawn("file-writer", path.to_str().unwrap());
    let mut reads = 0u64;
    let mut seen = [false; 2];
    loop {
        let done = kid.exited();
        let h = exchange::read_handle_file(&path).unwrap();
        let which = handles
            .iter()
            .position(|x| *x == h)
            .expect("a known handle");
        seen[which] = true;
        reads += 1;
        if done {
            break;
        }
    }
    kid.finish();
    assert!(reads > 0);
    eprintln!(
        "{reads} reads; saw the small handle: {}, the large: {}",
        seen[0], seen[1]
    );
    assert_eq!(leftovers(dir.path()), vec!["handle".to_owned()]);
}

fn leftovers(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn child_file_writer(path: &str) {
    let handles = file_handles();
    for i in 0..2000 {
        exchange::write_handle_file(path, &handles[(i + 1) % 2]).unwrap();
    }
}

#[test]
fn handle_files_are_0600_whatever_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    // The umask is per process: change it in a child, not under other tests.
    let mut kid = Kid::spawn("umask-writer", dir.path().to_str().unwrap());
    assert_eq!(kid.result(), "600");
    kid.finish();
    let mode = std::fs::metadata(dir.path().join("handle"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(leftovers(dir.path()), vec!["handle".to_owned()]);
}

fn child_umask_writer(dir: &str) {
    // SAFETY: umask has no memory-safety preconditions.
    unsafe { libc::umask(0) };
    let path = PathBuf::from(dir).join("handle");
    exchange::write_handle_file(&path, &file_handles()[0]).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    say(format!("{mode:o}"));
}

#[test]
fn handle_files_refuse_symbolic_links() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    let link = dir.path().join("link");
    let [a, b] = file_handles();
    exchange::write_handle_file(&target, &a).unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert!(matches!(
        exchange::read_handle_file(&link),
        Err(Error::PermissionDenied { pid: None, .. })
    ));
    assert!(matches!(
        exchange::write_handle_file(&link, &b),
        Err(Error::PermissionDenied { pid: None, .. })
    ));
    assert_eq!(exchange::read_handle_file(&target).unwrap(), a);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    // A dangling link is refused too.
    let dangling = dir.path().join("dangling");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
    assert!(matches!(
        exchange::read_handle_file(&dangling),
        Err(Error::PermissionDenied { .. })
    ));
    assert!(matches!(
        exchange::read_handle_file(dir.path().join("missing")),
        Err(Error::NotFound { .. })
    ));
}

// ---------------------------------------------------------------------------
// Descriptors dropped at the open-file limit.

#[test]
fn descriptors_dropped_at_the_open_file_limit_are_an_error() {
    let name = unique("nofile");
    let listener = HandleListener::bind_abstract(&name).unwrap();
    let mut kid = Kid::spawn("rlimit-recv", &name);
    let stream = listener.accept_timeout(PATIENCE).unwrap();
    stream.set_timeout(Some(PATIENCE)).unwrap();
    let handle = handle_with(
        FdSource::Attached { count: 2 },
        HandleFlags::ANY_IMPORTER,
        Vec::new(),
    );
    // Wait until the child has lowered its limit, then send two descriptors.
    assert_eq!(kid.result(), "limited");
    stream
        .send(&handle, &[memfd_with(b"one"), memfd_with(b"two")])
        .unwrap();
    let outcome = kid.result();
    assert!(outcome.starts_with("error io"), "{outcome}");
    assert!(outcome.contains("MSG_CTRUNC"), "{outcome}");
    kid.finish();
}

fn lowest_free_fd() -> RawFd {
    let probe = os::dup(std::io::stdin().as_fd()).unwrap();
    probe.as_raw_fd()
}

fn child_rlimit_recv(name: &str) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let stream = HandleStream::connect_abstract(name).unwrap();
    stream.set_timeout(Some(PATIENCE)).unwrap();
    let free = lowest_free_fd();
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    // Room for exactly one more descriptor: the first of the two arrives,
    // the second cannot.
    setrlimit(Resource::RLIMIT_NOFILE, free as u64 + 1, hard).unwrap();
    say("limited");
    let outcome = stream.recv();
    let err = match outcome {
        Ok((shared, _)) => panic!(
            "a reception that lost descriptors must fail, got {} fd(s)",
            shared.fds.len()
        ),
        Err(e) => e,
    };
    // The descriptor that did arrive was closed again.
    assert_eq!(lowest_free_fd(), free, "a received descriptor leaked");
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    say(format!("error {} {err}", err.kind_name()));
}

// ---------------------------------------------------------------------------
// Leases registered by the broker.

fn leased_export(bytes: &[u8], slots: u32) -> (Exported, Arc<LeaseTable>) {
    let handle = handle_with(FdSource::None, HandleFlags::ANY_IMPORTER, Vec::new());
    let table = LeaseTable::new(slots).unwrap();
    let exported =
        Exported::with_leases(handle, vec![memfd_with(bytes)], Arc::clone(&table)).unwrap();
    (exported, table)
}

#[test]
fn a_text_import_in_another_process_holds_a_lease_until_dropped() {
    let (exported, table) = leased_export(b"leased", 4);
    let mut kid = Kid::spawn("lease-holder", "");
    kid.tell(&exported.to_text());
    assert_eq!(kid.result(), "leased");
    assert_eq!(table.count(), 1, "the importer is counted");
    kid.tell("drop");
    assert_eq!(kid.result(), "dropped");
    assert_eq!(table.count(), 0, "the lease went back to the broker");
    kid.tell(&exported.to_text());
    assert_eq!(kid.result(), "leased");
    assert_eq!(table.count(), 1);
    kid.finish();
    table
        .wait_empty(Some(Duration::from_secs(30)))
        .expect("an importer that exited is not counted");
}

fn child_lease_holder() {
    loop {
        let line = read_line();
        if line.is_empty() {
            return;
        }
        let mut shared = SharedHandle::from(exchange::decode(&line).unwrap());
        let taken = exchange::take_fds_leased(&mut shared).unwrap();
        assert!(taken.checked, "fetched from the creator's broker");
        let lease = taken.lease.expect("a lease with the descriptors");
        say(String::from_utf8(read_fd(&taken.fds[0], 6)).unwrap());
        if read_line() != "drop" {
            // The parent is done: exit holding the lease.
            return;
        }
        drop(lease);
        say("dropped");
    }
}

#[test]
fn imports_in_the_exporting_process_are_leased_and_checked() {
    let (exported, table) = leased_export(b"here", 4);
    // From the text: the broker's registration, answered in place.
    let mut text = SharedHandle::from(exported.handle().clone());
    let taken = exchange::take_fds_leased(&mut text).unwrap();
    assert!(taken.checked);
    assert_eq!(read_fd(&taken.fds[0], 4), b"here");
    assert_eq!(table.count(), 1);
    // With the registered descriptors attached (Exported::share): checked,
    // and a lease of its own.
    let mut shared = exported.share().unwrap();
    assert!(exchange::source_is_checked(&shared));
    let again = exchange::take_fds_leased(&mut shared).unwrap();
    assert!(again.checked && again.lease.is_some());
    assert_eq!(table.count(), 2);
    drop(again);
    drop(taken);
    assert_eq!(table.count(), 0, "both leases given back");
    // Other descriptors attached to the genuine handle: not checked (nothing
    // can tell them apart), still leased.
    let mut forged = exported.share().unwrap();
    forged.fds = vec![memfd_with(b"not it")];
    assert!(!exchange::source_is_checked(&forged));
    let t = exchange::take_fds_leased(&mut forged).unwrap();
    assert!(!t.checked && t.lease.is_some());
    drop(t);
    // The wrong number of registered descriptors, or a non-memfd: not
    // checked either.
    let mut two = exported.share().unwrap();
    two.fds.push(memfd_with(b"extra"));
    two.handle.fds = FdSource::Broker {
        count: 2,
        name: broker_name(exported.handle()),
    };
    assert!(!exchange::source_is_checked(&two));
    let mut pipe = exported.share().unwrap();
    pipe.fds = vec![nix::unistd::pipe().unwrap().0];
    assert!(!exchange::source_is_checked(&pipe));
    // A plain take_fds gives its lease back at once.
    let fds = exchange::take_fds(&mut SharedHandle::from(exported.handle().clone())).unwrap();
    assert_eq!(fds.len(), 1);
    assert_eq!(table.count(), 0);
    // Another export of the same object id's process, without leases: none.
    let plain = Exported::new(
        handle_with(FdSource::None, HandleFlags::ANY_IMPORTER, Vec::new()),
        vec![memfd_with(b"plain")],
    )
    .unwrap();
    let t = exchange::take_fds_leased(&mut SharedHandle::from(plain.handle().clone())).unwrap();
    assert!(t.lease.is_none() && t.checked);
}

#[test]
fn a_full_lease_table_is_busy_and_frees_with_its_holders() {
    let (exported, table) = leased_export(b"full", 1);
    let mut first = SharedHandle::from(exported.handle().clone());
    let held = exchange::take_fds_leased(&mut first).unwrap();
    let mut second = SharedHandle::from(exported.handle().clone());
    match exchange::take_fds_leased(&mut second) {
        Err(Error::Busy { .. }) => {}
        other => panic!("a full table must be busy: {other:?}"),
    }
    drop(held);
    assert_eq!(table.count(), 0);
    let mut third = SharedHandle::from(exported.handle().clone());
    assert!(exchange::take_fds_leased(&mut third)
        .unwrap()
        .lease
        .is_some());
}

#[test]
fn an_export_of_the_most_descriptors_is_served() {
    let fds: Vec<OwnedFd> = (0..exchange::MAX_FDS).map(|_| memfd_with(b"x")).collect();
    let handle = handle_with(FdSource::None, HandleFlags::ANY_IMPORTER, Vec::new());
    let exported = Exported::new(handle, fds).unwrap();
    let got = exchange::take_fds(&mut SharedHandle::from(exported.handle().clone())).unwrap();
    assert_eq!(got.len(), exchange::MAX_FDS);
    assert!(format!("{exported:?}").contains("broker"));
}

#[test]
fn silent_connections_do_not_hold_up_an_import() {
    let handle = handle_with(FdSource::None, HandleFlags::default(), Vec::new());
    let mut exported = Exported::new(handle, vec![memfd_with(b"fetched from the broker")]).unwrap();
    let name = broker_name(exported.handle());
    // Eight peers connect and say nothing. Each would hold a broker that
    // served connections one at a time for its 1 s limit: eight of them
    // outlast the importer's 5 s timeout. The importer is another process
    // (an import here is decided in place, without the socket).
    let silent: Vec<OwnedFd> = (0..8).map(|_| raw_connect(&name)).collect();
    let mut kid = Kid::spawn("broker-import", "");
    exported.add_importers(&[kid.id()]).unwrap();
    kid.tell(&exported.to_text());
    assert_eq!(kid.result(), "fetched from the broker");
    kid.finish();
    drop(silent);
}

// ---------------------------------------------------------------------------
// An importer against a broker that answers what a test tells it to.

/// A reply of the broker protocol: `HALR`, version 2, status, descriptor
/// count, flags, the pid the broker saw, then a ticket (slot, token, table).
fn canned_reply(status: u8, announced: u8, seen_pid: u32, ticket: Option<(u32, u64)>) -> Vec<u8> {
    let mut r = b"HALR\x02".to_vec();
    r.extend_from_slice(&[status, announced, u8::from(ticket.is_some())]);
    r.extend_from_slice(&seen_pid.to_le_bytes());
    let (slot, token) = ticket.unwrap_or((0, 0));
    r.extend_from_slice(&slot.to_le_bytes());
    r.extend_from_slice(&token.to_le_bytes());
    r.extend_from_slice(&[7; 16]);
    r
}

/// A script entry that waits for the request and closes without reading it:
/// the importer's `recv` then fails with `ECONNRESET`.
const RESET: usize = usize::MAX;

/// A listener on a fresh abstract name whose thread answers each connection
/// with the next of `replies` (bytes and how many copies of a sealed memfd
/// ride along; `None`: hang up after reading the request; [`RESET`] as the
/// count: close without reading it), then stops.
fn scripted_broker(
    replies: Vec<Option<(Vec<u8>, usize)>>,
) -> (String, std::thread::JoinHandle<()>) {
    let name = unique("scripted-broker");
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
    let memfd = os::memfd("hal-scripted", 4096, None).unwrap();
    os::add_seals(memfd.as_fd(), os::EXPORT_SEALS).unwrap();
    let thread = std::thread::spawn(move || {
        for reply in replies {
            let raw = socket::accept(listener.as_raw_fd()).unwrap();
            // SAFETY: accept returned a new descriptor nothing else owns.
            let conn = unsafe { OwnedFd::from_raw_fd(raw) };
            if matches!(reply, Some((_, RESET))) {
                let mut ready = [nix::poll::PollFd::new(
                    conn.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                )];
                let _ = nix::poll::poll(&mut ready, nix::poll::PollTimeout::from(30_000u16));
                continue;
            }
            let mut buf = [0u8; 64];
            let _ = nix::unistd::read(conn.as_raw_fd(), &mut buf);
            if let Some((bytes, fds)) = reply {
                let raw_fds = vec![memfd.as_raw_fd(); fds];
                let rights = [socket::ControlMessage::ScmRights(&raw_fds)];
                let cmsgs: &[socket::ControlMessage<'_>] = if fds == 0 { &[] } else { &rights };
                let _ = socket::sendmsg::<()>(
                    conn.as_raw_fd(),
                    &[std::io::IoSlice::new(&bytes)],
                    cmsgs,
                    socket::MsgFlags::MSG_NOSIGNAL,
                    None,
                );
            }
        }
    });
    (name, thread)
}

/// A handle served by `name` whose creator is this process.
fn served_by(name: &str, count: u8) -> SharedHandle {
    let mut h = handle_with(FdSource::None, HandleFlags::ANY_IMPORTER, Vec::new());
    h.fds = FdSource::Broker {
        count,
        name: name.to_owned(),
    };
    SharedHandle::from(h)
}

#[test]
fn an_importer_reads_every_answer_of_a_broker_right() {
    // The script answers fetches: the pidfd_getfd path (HAL_PIDFD_GETFD=1)
    // would ask it to locate instead.
    exchange::set_pidfd_getfd(Some(false));
    let me = os::pid();
    let replies = vec![
        Some((canned_reply(3, 0, me, None), 0)),
        Some((canned_reply(4, 0, me, None), 0)),
        Some((canned_reply(4, 0, 0, None), 0)),
        Some((canned_reply(4, 0, me + 1, None), 0)),
        Some((canned_reply(5, 0, 0, None), 0)),
        Some((canned_reply(5, 0, me + 2, None), 0)),
        Some((canned_reply(7, 0, me, None), 0)),
        Some((canned_reply(8, 0, 0, None), 0)),
        Some((canned_reply(1, 0, me, None), 0)),
        Some((canned_reply(2, 0, me, None), 0)),
        Some((canned_reply(6, 0, me, None), 0)),
        Some((canned_reply(200, 0, me, None), 0)),
        Some((canned_reply(4, 0, me, None), 1)),
        Some((canned_reply(0, 1, me, None), 2)),
        Some((canned_reply(0, 2, me, None), 2)),
        Some((canned_reply(0, 1, me, None)[..39].to_vec(), 0)),
        None,
        Some((Vec::new(), RESET)),
        Some((canned_reply(0, 1, me, Some((3, 99))), 1)),
        Some((canned_reply(0, 1, me, None), 1)),
    ];
    let (name, thread) = scripted_broker(replies);
    let take = || exchange::take_fds_leased(&mut served_by(&name, 1));
    let denied = |r: Result<exchange::Taken, Error>| match r {
        Err(Error::PermissionDenied { pid, reason }) => (pid, reason),
        other => panic!("expected a refusal: {other:?}"),
    };
    assert!(matches!(take(), Err(Error::NotFound { .. })));
    let (pid, reason) = denied(take());
    assert_eq!(pid, Some(me));
    assert!(!reason.contains("pid namespace"), "{reason}");
    let (pid, reason) = denied(take());
    assert_eq!(pid, Some(me), "unseen: this process's own pid");
    assert!(reason.contains("cannot see this process"), "{reason}");
    let (pid, reason) = denied(take());
    assert_eq!(pid, Some(me + 1), "the pid the exporter sees");
    assert!(reason.contains("own pid namespace"), "{reason}");
    let (pid, reason) = denied(take());
    assert_eq!(pid, Some(me));
    assert!(reason.contains("another user"), "{reason}");
    assert_eq!(denied(take()).0, Some(me + 2));
    assert!(matches!(take(), Err(Error::Busy { .. })));
    let (_, reason) = denied(take());
    assert!(reason.contains("counts its importers"), "{reason}");
    for _ in 0..4 {
        assert!(matches!(take(), Err(Error::Io { .. })));
    }
    assert!(matches!(
        take(),
        Err(Error::InvalidHandle(HandleError::Descriptors(_)))
    ));
    for _ in 0..2 {
        assert!(matches!(
            take(),
            Err(Error::InvalidHandle(HandleError::Descriptors(_)))
        ));
    }
    assert!(matches!(take(), Err(Error::Io { .. })), "a short reply");
    assert!(matches!(take(), Err(Error::Closed { .. })), "a hang-up");
    assert!(
        matches!(take(), Err(Error::Closed { .. })),
        "a reset before the answer"
    );
    let leased = take().unwrap();
    let ticket = *leased.lease.as_ref().expect("a ticket").ticket();
    assert!(format!("{:?}", leased.lease.as_ref().unwrap()).contains("slot: 3"));
    assert_eq!((ticket.slot, ticket.token, ticket.table), (3, 99, [7; 16]));
    // Dropping it asks the broker to take it back: the script answers.
    drop(leased);
    thread.join().unwrap();
}

#[test]
fn a_broker_that_is_not_the_creators_is_refused() {
    // The script answers fetches (see above).
    exchange::set_pidfd_getfd(Some(false));
    // One answer for each connection: the refused importers connect too.
    let answer = Some((canned_reply(0, 1, os::pid(), None), 1));
    let (name, thread) = scripted_broker(vec![answer.clone(), answer.clone(), answer]);
    // A live creator that is not this process (the one serving `name`).
    let kid = Kid::spawn("lease-holder", "");
    let start = os::process_start_time(kid.id()).unwrap();
    let mut alive = served_by(&name, 1);
    (alive.handle.creator_pid, alive.handle.creator_start) = (kid.id(), start);
    assert!(matches!(
        exchange::take_fds(&mut alive),
        Err(Error::PermissionDenied { .. })
    ));
    // The same creator without a start time: refused too.
    let mut no_start = served_by(&name, 1);
    (no_start.handle.creator_pid, no_start.handle.creator_start) = (kid.id(), 0);
    assert!(matches!(
        exchange::take_fds(&mut no_start),
        Err(Error::PermissionDenied { .. })
    ));
    // A creator that is gone (no such pid): nothing to check against, and
    // the broker is asked.
    let mut gone = served_by(&name, 1);
    (gone.handle.creator_pid, gone.handle.creator_start) = (0x7fff_fff0, 1);
    assert_eq!(exchange::take_fds(&mut gone).unwrap().len(), 1);
    thread.join().unwrap();
    drop(kid);
}
