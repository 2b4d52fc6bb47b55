//! The importer's kept connections to exporters' brokers, across real
//! processes: reused by later imports, dropped when the exporter exits (and
//! imports from the restarted exporter work), never used by a forked child;
//! batch fetches from a broker, with a handle the importer may not take.
//!
//! These are the broker's connections: the children run with the direct
//! path off (`HAL_PIDFD_GETFD=0`), so that every import asks the broker
//! (`direct.rs` tests the path that asks no one).
//!
//! Each test starts this test binary again with `--exact child_process` and
//! `HAL_CONN_ROLE` naming what the child does. Importers run in children of
//! their own, so that the sockets they count are theirs alone (the test
//! harness runs other tests on threads of its own process).

mod common;

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use common::{read_line, say, Kid};
use hal_core::exchange::{self, take_fds_leased_batch, PIDFD_GETFD_ENV};
use hal_core::kit::os;
use hal_core::lease::LeaseTable;
use hal_core::{Error, Exported, FdSource, Handle, HandleFlags, SharedHandle};

const ROLE: &str = "HAL_CONN_ROLE";
const ARG: &str = "HAL_CONN_ARG";

impl Kid {
    fn spawn(role: &str, arg: &str) -> Kid {
        Kid::start((ROLE, role), (ARG, arg), |cmd| {
            cmd.env(PIDFD_GETFD_ENV, "0");
        })
    }
}

fn handle(flags: HandleFlags, allowed: Vec<u32>) -> Handle {
    common::imports::memory_handle(flags, allowed, b"connections-test")
}

fn memfd_with(bytes: &[u8]) -> OwnedFd {
    let fd = os::memfd("hal-connections-test", 4096, None).expect("memfd");
    File::from(os::dup(fd.as_fd()).expect("dup"))
        .write_all_at(bytes, 0)
        .expect("write memfd");
    fd
}

fn read_fd(fd: &OwnedFd, len: usize) -> String {
    let mut buf = vec![0u8; len];
    File::from(os::dup(fd.as_fd()).expect("dup"))
        .read_exact_at(&mut buf, 0)
        .expect("read memfd");
    String::from_utf8(buf).expect("utf-8")
}

fn broker_of(text: &str) -> String {
    match exchange::decode(text).expect("decode").fds {
        FdSource::Broker { name, .. } => name,
        other => panic!("no broker in the handle: {other:?}"),
    }
}

/// The socket inodes among this process's descriptors.
fn sockets() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|l| l.to_string_lossy().into_owned())
        .filter(|l| l.starts_with("socket:"))
        .collect();
    v.sort();
    v
}

/// Import `text` with a lease; the bytes read and the lease.
fn import(text: &str) -> Result<(String, Option<exchange::Lease>), Error> {
    let mut shared = SharedHandle::from(exchange::decode(text).expect("decode"));
    let taken = exchange::take_fds_leased(&mut shared)?;
    Ok((read_fd(&taken.fds[0], 3), taken.lease))
}

/// The entry of every child process, run by its parent by exact name.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_process() {
    let role = std::env::var(ROLE)
        .expect("a child entry point: its parent sets the role (run the other tests of this file)");
    let arg = std::env::var(ARG).unwrap_or_default();
    match role.as_str() {
        "exporter" => child_exporter(&arg),
        "restart" => child_restart(),
        "fork" => child_fork(&arg),
        "batch" => child_batch(),
        other => panic!("unknown child role {other}"),
    }
}

/// Export `bytes` (three of them) to anyone, counting importers; print the
/// text, then answer `count` with the number of importers until stdin
/// closes.
fn child_exporter(bytes: &str) {
    let table = LeaseTable::new(16).unwrap();
    let ex = Exported::with_leases(
        handle(HandleFlags::ANY_IMPORTER, Vec::new()),
        vec![memfd_with(bytes.as_bytes())],
        Arc::clone(&table),
    )
    .unwrap();
    say(ex.to_text());
    loop {
        match read_line().as_str() {
            "count" => say(table.count()),
            _ => return,
        }
    }
}

#[test]
fn a_kept_connection_is_reused_and_an_exporters_restart_is_survived() {
    let mut kid = Kid::spawn("restart", "");
    assert_eq!(kid.result(), "restart ok");
    kid.finish();
}

fn child_restart() {
    let mut first = Kid::spawn("exporter", "one");
    let text = first.result();
    let name = broker_of(&text);
    assert!(sockets().is_empty(), "no socket before the first import");
    let (bytes, lease) = import(&text).unwrap();
    assert_eq!(bytes, "one");
    assert_eq!(exchange::broker_connections(Some(&name)), 1, "kept");
    let kept = sockets();
    assert_eq!(kept.len(), 1, "one connection: {kept:?}");
    first.tell("count");
    assert_eq!(first.result(), "1");
    // The lease goes back, and the import comes again, over the same
    // connection.
    drop(lease);
    first.tell("count");
    assert_eq!(first.result(), "0");
    let (bytes, lease) = import(&text).unwrap();
    assert_eq!(bytes, "one");
    assert_eq!(sockets(), kept, "the kept connection was reused");
    drop(lease);
    // The exporter exits: the kept connection is dropped at the next
    // request, which says the exporter exited.
    first.finish();
    match import(&text) {
        Err(Error::Closed { what }) => assert!(what.contains("exited"), "{what}"),
        other => panic!("an import from an exited exporter: {other:?}"),
    }
    assert_eq!(exchange::broker_connections(Some(&name)), 0);
    assert!(sockets().is_empty(), "the dead connection was closed");
    // The exporter restarts (a new process, a new broker): imports work.
    let mut second = Kid::spawn("exporter", "two");
    let text = second.result();
    let (bytes, lease) = import(&text).unwrap();
    assert_eq!(bytes, "two");
    second.tell("count");
    assert_eq!(second.result(), "1");
    drop(lease);
    assert_eq!(exchange::broker_connections(None), 1);
    assert_eq!(exchange::close_broker_connections(), 1);
    assert!(sockets().is_empty(), "closed on request");
    second.finish();
    say("restart ok");
}

#[test]
fn a_forked_child_never_uses_its_parents_connection() {
    let mut kid = Kid::spawn("fork", "");
    assert_eq!(kid.result(), "fork ok");
    kid.finish();
}

fn child_fork(_: &str) {
    let mut exporter = Kid::spawn("exporter", "abc");
    let text = exporter.result();
    let (bytes, lease) = import(&text).unwrap();
    assert_eq!(bytes, "abc");
    let parents = sockets();
    assert_eq!(parents.len(), 1, "the parent's kept connection");
    // SAFETY: this process runs one thread (libtest with one test thread,
    // and no broker: it exports nothing), so no lock is held by a thread
    // that would vanish in the child; the child leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = match forked_import(&text, &parents) {
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
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "forked child failed: {status:#x}"
    );
    // The parent's connection is untouched and still serves it.
    exporter.tell("count");
    assert_eq!(exporter.result(), "1", "the child's lease went with it");
    drop(lease);
    let (bytes, _lease) = import(&text).unwrap();
    assert_eq!(bytes, "abc");
    assert_eq!(sockets(), parents, "the parent reused its own connection");
    exporter.tell("count");
    assert_eq!(exporter.result(), "1");
    say("fork ok");
}

/// In a child forked after its parent kept a connection: the parent's copy
/// is closed at once, before the child calls anything of the library (the
/// fork handler), so the child can never speak on it as its parent; an
/// import works over a connection of the child's own.
fn forked_import(text: &str, parents: &[String]) -> Result<(), String> {
    let inherited = sockets();
    if !inherited.is_empty() {
        return Err(format!(
            "right after fork the child holds {inherited:?}; its parent's connection was \
             {parents:?}"
        ));
    }
    let (bytes, lease) = import(text).map_err(|e| e.to_string())?;
    if bytes != "abc" || lease.is_none() {
        return Err(format!("imported {bytes:?}, lease {lease:?}"));
    }
    let mine = sockets();
    if mine.len() != 1 || mine == parents {
        return Err(format!(
            "the child imports over {mine:?}; its parent's connection was {parents:?}"
        ));
    }
    std::mem::forget(lease);
    Ok(())
}

#[test]
fn a_batch_serves_each_handle_on_its_own() {
    let mut kid = Kid::spawn("batch", "");
    assert_eq!(kid.result(), "batch ok");
    kid.finish();
}

/// A batch of handles of one exporter, one of them allowed to another pid
/// only: the others come with their bytes and leases, that one is refused
/// with PermissionDenied, all over one kept connection.
fn child_batch() {
    // This process exports to a child of its own, which imports.
    let me = std::process::id();
    let table = LeaseTable::new(16).unwrap();
    let mut exports = Vec::new();
    for (i, bytes) in ["aaa", "bbb", "ccc"].iter().enumerate() {
        let flags = if i == 1 {
            HandleFlags::default()
        } else {
            HandleFlags::ANY_IMPORTER
        };
        exports.push(
            Exported::with_leases(
                handle(flags, vec![me]),
                vec![memfd_with(bytes.as_bytes())],
                Arc::clone(&table),
            )
            .unwrap(),
        );
    }
    let texts: Vec<String> = exports.iter().map(Exported::to_text).collect();
    // SAFETY: this process runs one thread besides its broker's workers,
    // which hold no lock while idle in epoll_wait; the child only imports
    // and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = match batch_in_child(&texts) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("batch child: {e}");
                1
            }
        };
        // SAFETY: ends the forked child without running destructors twice.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "batch child failed: {status:#x}"
    );
    assert_eq!(table.count(), 0, "the child's leases went with it");
    say("batch ok");
}

fn batch_in_child(texts: &[String]) -> Result<(), String> {
    let mut shared: Vec<SharedHandle> = texts
        .iter()
        .chain(std::iter::once(&texts[0]))
        .map(|t| SharedHandle::from(exchange::decode(t).expect("decode")))
        .collect();
    let got = take_fds_leased_batch(&mut shared);
    if got.len() != 4 {
        return Err(format!("{} results for 4 handles", got.len()));
    }
    let mut leases = Vec::new();
    for (i, (r, want)) in got.into_iter().zip(["aaa", "", "ccc", "aaa"]).enumerate() {
        match (i, r) {
            (1, Err(Error::PermissionDenied { pid, .. })) if pid == Some(os::pid()) => {}
            (1, other) => return Err(format!("the refused handle gave {other:?}")),
            (_, Ok(t)) => {
                let bytes = read_fd(&t.fds[0], 3);
                if bytes != want || !t.checked || t.lease.is_none() {
                    return Err(format!("handle {i}: {bytes:?}, {:?}", t.lease));
                }
                leases.push(t.lease);
            }
            (_, Err(e)) => return Err(format!("handle {i}: {e}")),
        }
    }
    if exchange::broker_connections(None) != 1 || sockets().len() != 1 {
        return Err(format!(
            "one connection for the batch, not {} ({:?})",
            exchange::broker_connections(None),
            sockets()
        ));
    }
    std::mem::forget(leases);
    Ok(())
}
