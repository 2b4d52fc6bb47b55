//! The direct import path (`HAL_PIDFD_GETFD=1`): imports found on the
//! exporter's board, leased there and taken with `pidfd_getfd`, asking no
//! one, across real processes: the exporter counts them exactly, a crashed
//! importer is not counted, a dropped export is not found, exports the
//! board cannot state go to the broker, and a hostile process that writes
//! the board (it can: it has ptrace access to the exporter, as every
//! direct importer does) makes imports ask the broker, never take another
//! file.
//!
//! Each test starts this test binary again with `--exact child_process`
//! and `HAL_DIRECT_ROLE` naming what the child does.

mod common;

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::imports::{import, memfd_with, memory_handle, open_fds, read_fd, shared};
use common::{read_line, say, Kid};
use hal_core::exchange::{self, PIDFD_GETFD_ENV};
use hal_core::kit::os::{self, Prot, SharedMap};
use hal_core::lease::LeaseTable;
use hal_core::{Error, Exported, Handle, HandleFlags, SharedHandle};

const ROLE: &str = "HAL_DIRECT_ROLE";
const ARG: &str = "HAL_DIRECT_ARG";

// The board's documented layout (`exchange::broker::board`), as an
// attacker reads it.
const BOARD_LEN: usize = 4096 + 4096 * 256 + 4096 * 32;
const ENTRIES_AT: usize = 4096;
const ENTRY_LEN: usize = 256;
const ENTRIES: usize = 4096;
const LEASES_AT: usize = ENTRIES_AT + ENTRIES * ENTRY_LEN;
const E_STATE: usize = 4;
const E_FDS: usize = 48;
const LEASE_LEN: usize = 32;
const L_GENERATION: usize = 8;
const L_ENTRY: usize = 16;
const L_START: usize = 24;
const E_GENERATION: usize = 8;
/// A lease slot's held state (the low byte of its word).
const HELD: u64 = 2;

impl Kid {
    fn spawn(role: &str, arg: &str) -> Kid {
        Kid::start((ROLE, role), (ARG, arg), |cmd| {
            cmd.env(PIDFD_GETFD_ENV, "1");
        })
    }
}

fn handle(descriptors: u32) -> Handle {
    handle_with(descriptors, HandleFlags::ANY_IMPORTER, Vec::new())
}

fn handle_with(descriptors: u32, flags: HandleFlags, allowed_pids: Vec<u32>) -> Handle {
    memory_handle(
        flags,
        allowed_pids,
        format!("direct-test-{descriptors}").as_bytes(),
    )
}

/// The entry of every child process, run by its parent by exact name.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_process() {
    let role = std::env::var(ROLE)
        .expect("a child entry point: its parent sets the role (run the other tests of this file)");
    let arg = std::env::var(ARG).unwrap_or_default();
    match role.as_str() {
        "exporter" => child_exporter(),
        "importer" => child_importer(),
        "holder" => child_holder(&arg),
        "dropped" => child_dropped(),
        "attacker" => child_attacker(),
        "later" => child_later(),
        "forged" => child_forged(),
        "orphan" => child_orphan(),
        "redirector" => child_redirector(),
        other => panic!("unknown child role {other}"),
    }
}

/// Export "aaa" and "ccc" (one descriptor each) and "bbb" (five: more
/// than the board states), all counting importers; print the texts and
/// answer until stdin closes: `count` (importers of every export), `drop`
/// (drop "aaa"), `more KIND` (export "ddd" and print its text; KIND: `any`,
/// `pid N` (to pid N alone), `user` (to this user), `nolease` (counting no
/// importers), `zero` (no descriptor, a lease only), `four` (four
/// descriptors: as many as the board states)), `allow N` (allow pid
/// N too on the latest export).
fn child_exporter() {
    let table = LeaseTable::new(64).unwrap();
    let export = |bytes: &str, n: u32| {
        let fds = (0..n).map(|_| memfd_with(bytes.as_bytes())).collect();
        Exported::with_leases(handle(n), fds, Arc::clone(&table)).unwrap()
    };
    let mut exports = vec![
        Some(export("aaa", 1)),
        Some(export("bbb", 5)),
        Some(export("ccc", 1)),
    ];
    let texts: Vec<String> = exports.iter().flatten().map(Exported::to_text).collect();
    say(texts.join(" "));
    loop {
        let line = read_line();
        let words: Vec<&str> = line.split(' ').collect();
        let fd = || vec![memfd_with(b"ddd")];
        let leased = |h: Handle, fds| Exported::with_leases(h, fds, Arc::clone(&table)).unwrap();
        let made = match words.as_slice() {
            ["count"] => {
                say(table.count());
                continue;
            }
            ["drop"] => {
                exports[0] = None;
                say("dropped");
                continue;
            }
            ["more", "any"] => leased(handle(1), fd()),
            ["more", "pid", pid] => leased(
                handle_with(1, HandleFlags::default(), vec![pid.parse().unwrap()]),
                fd(),
            ),
            ["more", "user"] => leased(handle_with(1, HandleFlags::SAME_USER, Vec::new()), fd()),
            ["more", "nolease"] => Exported::new(handle(1), fd()).unwrap(),
            ["more", "zero"] => leased(handle(0), Vec::new()),
            ["more", "four"] => leased(handle(4), (0..4).map(|_| fd().remove(0)).collect()),
            ["allow", pid] => {
                // Allow `pid` too on the latest export.
                let last = exports.iter_mut().rev().flatten().next().unwrap();
                last.add_importers(&[pid.parse().unwrap()]).unwrap();
                say("allowed");
                continue;
            }
            _ => return,
        };
        say(made.to_text());
        exports.push(Some(made));
    }
}

fn texts(kid: &mut Kid) -> Vec<String> {
    kid.result().split(' ').map(str::to_owned).collect()
}

#[test]
fn direct_imports_ask_no_one_and_are_counted_exactly() {
    let mut kid = Kid::spawn("importer", "");
    assert_eq!(kid.result(), "importer ok");
    kid.finish();
}

fn child_importer() {
    let mut exporter = Kid::spawn("exporter", "");
    let texts = texts(&mut exporter);
    let before = open_fds();
    // The first import takes the board (one locate request)...
    let (bytes, first) = import(&texts[0]).unwrap();
    assert_eq!(bytes, "aaa");
    assert_eq!(exchange::direct_import_count(), 1);
    // ... and later ones ask no one: they come while the exporter is
    // stopped (SIGSTOP), when its broker could answer nothing.
    stop(exporter.id(), true);
    let (bytes, second) = import(&texts[0]).unwrap();
    let (other, third) = import(&texts[2]).unwrap();
    stop(exporter.id(), false);
    assert_eq!((bytes.as_str(), other.as_str()), ("aaa", "ccc"));
    assert_eq!(exchange::direct_import_count(), 3);
    // Counted exactly: each lease as it is taken and given back.
    assert_eq!(exporter.ask("count"), "3", "three direct leases");
    // A forked child's copy of a lease gives nothing back when it drops.
    // SAFETY: the child only drops its copy (a pid check, an atomic
    // decrement) and leaves with _exit, running nothing else.
    match unsafe { nix::unistd::fork() }.expect("fork") {
        nix::unistd::ForkResult::Child => {
            drop(first);
            // SAFETY: _exit ends the child without running anything more.
            unsafe { libc::_exit(0) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            nix::sys::wait::waitpid(child, None).expect("waitpid");
        }
    }
    assert_eq!(
        exporter.ask("count"),
        "3",
        "the child's copy gave nothing back"
    );
    drop(first);
    assert_eq!(exporter.ask("count"), "2");
    drop((second, third));
    assert_eq!(exporter.ask("count"), "0");
    // Five descriptors: more than the board states, so the broker is asked
    // (by location) and the import is counted there.
    let taken = exchange::take_fds_leased(&mut shared(&texts[1])).unwrap();
    assert_eq!(taken.fds.len(), 5);
    assert!(taken.fds.iter().all(|fd| read_fd(fd) == "bbb"));
    assert_eq!(exchange::direct_import_count(), 3, "not from the board");
    assert_eq!(exchange::pidfd_getfd_counts(), (4, 0), "by location");
    assert_eq!(exporter.ask("count"), "1");
    drop(taken);
    assert_eq!(exporter.ask("count"), "0");
    // Four descriptors: as many as the board states, so from the board.
    let four = exporter.ask("more four");
    let taken = exchange::take_fds_leased(&mut shared(&four)).unwrap();
    assert_eq!(taken.fds.len(), 4);
    assert!(taken.fds.iter().all(|fd| read_fd(fd) == "ddd"));
    assert_eq!(
        exchange::direct_import_count(),
        4,
        "four come from the board"
    );
    assert_eq!(exporter.ask("count"), "1");
    drop(taken);
    assert_eq!(exporter.ask("count"), "0");
    exchange::close_broker_connections();
    assert_eq!(open_fds(), before, "nothing left behind");
    exporter.finish();
    say("importer ok");
}

/// Stop the process `pid` (and wait until it is stopped), or continue it.
fn stop(pid: u32, stopped: bool) {
    use nix::sys::signal::{kill, Signal};
    let signal = if stopped {
        Signal::SIGSTOP
    } else {
        Signal::SIGCONT
    };
    kill(nix::unistd::Pid::from_raw(pid as i32), signal).expect("kill");
    if !stopped {
        return;
    }
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next());
        if state == Some("T") {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn a_crashed_direct_importer_is_not_counted() {
    let mut exporter = Kid::spawn("exporter", "");
    let texts = texts(&mut exporter);
    let mut holder = Kid::spawn("holder", &texts[0]);
    assert_eq!(holder.result(), "held");
    assert_eq!(exporter.ask("count"), "1", "the holder's direct lease");
    // Killed holding it (and reaped): no lease given back.
    drop(holder);
    assert_eq!(exporter.ask("count"), "0", "a dead holder is not counted");
    exporter.finish();
}

fn child_holder(text: &str) {
    let (bytes, lease) = import(text).unwrap();
    assert_eq!(bytes, "aaa");
    assert_eq!(exchange::direct_import_count(), 1);
    say("held");
    let _ = read_line();
    drop(lease);
}

#[test]
fn a_dropped_export_is_not_found_on_the_board() {
    let mut kid = Kid::spawn("dropped", "");
    assert_eq!(kid.result(), "dropped ok");
    kid.finish();
}

fn child_dropped() {
    let mut exporter = Kid::spawn("exporter", "");
    let texts = texts(&mut exporter);
    let (_, lease) = import(&texts[0]).unwrap();
    assert_eq!(exchange::direct_import_count(), 1);
    let board = steal_board(exporter.id());
    assert_eq!(live_entries(&board), 2, "aaa and ccc");
    assert_eq!(exporter.ask("drop"), "dropped");
    assert_eq!(live_entries(&board), 1, "withdrawn");
    // The export is gone from the board and from the broker.
    match import(&texts[0]) {
        Err(Error::NotFound { .. }) => {}
        other => panic!("a dropped export gave {other:?}"),
    }
    assert_eq!(exchange::direct_import_count(), 1);
    // The lease taken before the drop is still counted, then given back.
    assert_eq!(exporter.ask("count"), "1");
    drop(lease);
    assert_eq!(exporter.ask("count"), "0");
    // A forged handle (an id the exporter never had) is not found either.
    let mut forged = exchange::decode(&texts[2]).unwrap();
    forged.object_id = os::random_id();
    match exchange::take_fds_leased(&mut SharedHandle::from(forged)) {
        Err(Error::NotFound { .. }) => {}
        other => panic!("a forged handle gave {other:?}"),
    }
    assert_eq!(exchange::direct_import_count(), 1);
    exchange::close_broker_connections();
    exporter.finish();
    say("dropped ok");
}

#[test]
fn a_hostile_board_writer_makes_imports_ask_the_broker() {
    let mut kid = Kid::spawn("attacker", "");
    assert_eq!(kid.result(), "attacker ok");
    kid.finish();
}

/// The exporter's board, as an attacker with ptrace access finds it: by
/// the name of its memfd among the exporter's descriptors.
fn steal_board(pid: u32) -> SharedMap {
    let pidfd = os::pidfd_open(pid).expect("pidfd_open");
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).expect("/proc/PID/fd") {
        let entry = entry.expect("fd entry");
        let link = std::fs::read_link(entry.path()).unwrap_or_default();
        if link.to_string_lossy().contains("hal-broker-board") {
            let n: u32 = entry
                .file_name()
                .to_string_lossy()
                .parse()
                .expect("fd number");
            let fd = os::pidfd_getfd(pidfd.as_fd(), n).expect("pidfd_getfd");
            return SharedMap::map(fd.as_fd(), BOARD_LEN as u64, 0, Prot::ReadWrite, None)
                .expect("map the board");
        }
    }
    panic!("the exporter has no board");
}

/// The entries of `board` that are live.
fn live(board: &SharedMap) -> Vec<usize> {
    (0..ENTRIES)
        .filter(|&i| {
            let state = board
                .atomic_u32(ENTRIES_AT + i * ENTRY_LEN + E_STATE)
                .unwrap();
            state.load(Ordering::SeqCst) == 1
        })
        .collect()
}

fn live_entries(board: &SharedMap) -> usize {
    live(board).len()
}

fn child_attacker() {
    let mut exporter = Kid::spawn("exporter", "");
    let texts = texts(&mut exporter);
    let (_, lease) = import(&texts[0]).unwrap();
    drop(lease);
    assert_eq!(exchange::direct_import_count(), 1, "the board is made");
    let board = steal_board(exporter.id());
    let live = live(&board);
    assert_eq!(
        live.len(),
        2,
        "two exports stated (not the five-descriptor one)"
    );
    // Swap the two entries' descriptor numbers: each now names the other
    // export's file (its identity stays the board's): refused, and the
    // broker serves the right one.
    let fd_at = |i: usize| {
        board
            .atomic_u32(ENTRIES_AT + i * ENTRY_LEN + E_FDS)
            .unwrap()
    };
    let (a, c) = (
        fd_at(live[0]).load(Ordering::SeqCst),
        fd_at(live[1]).load(Ordering::SeqCst),
    );
    fd_at(live[0]).store(c, Ordering::SeqCst);
    fd_at(live[1]).store(a, Ordering::SeqCst);
    let (bytes, lease) = import(&texts[0]).unwrap();
    assert_eq!(bytes, "aaa", "the broker's answer, not the swapped file");
    let (bytes, lease2) = import(&texts[2]).unwrap();
    assert_eq!(bytes, "ccc");
    assert_eq!(
        exchange::direct_import_count(),
        1,
        "none taken from the board"
    );
    assert_eq!(
        exchange::pidfd_getfd_counts().1,
        0,
        "the broker located them"
    );
    assert_eq!(exporter.ask("count"), "2", "counted by the broker");
    drop((lease, lease2));
    // Name the exporter's standard input (a pipe, no memfd) with its true
    // identity: refused by its seals before anything else.
    let st = std::fs::metadata(format!("/proc/{}/fd/0", exporter.id())).expect("stat fd 0");
    use std::os::unix::fs::MetadataExt as _;
    let e = ENTRIES_AT + live[0] * ENTRY_LEN + E_FDS;
    board.atomic_u32(e).unwrap().store(0, Ordering::SeqCst);
    board
        .atomic_u64(e + 8)
        .unwrap()
        .store(st.dev(), Ordering::SeqCst);
    board
        .atomic_u64(e + 16)
        .unwrap()
        .store(st.ino(), Ordering::SeqCst);
    let (bytes, lease) = import(&texts[0]).unwrap();
    assert_eq!(bytes, "aaa");
    drop(lease);
    // Every lease slot taken by garbage: no direct lease can be recorded,
    // so imports ask the broker; the exporter counts only live holders.
    for slot in 0..4096 {
        let w = board.atomic_u64(LEASES_AT + slot * 32).unwrap();
        w.store(u64::MAX, Ordering::SeqCst);
    }
    // Garbage over every entry as well: none is read as an export.
    for i in 0..ENTRIES {
        for word in (0..ENTRY_LEN).step_by(4) {
            let at = ENTRIES_AT + i * ENTRY_LEN + word;
            board
                .atomic_u32(at)
                .unwrap()
                .store(0xffff_ffff, Ordering::SeqCst);
        }
    }
    let (bytes, lease) = import(&texts[2]).unwrap();
    assert_eq!(bytes, "ccc");
    assert_eq!(exchange::direct_import_count(), 1);
    assert_eq!(exporter.ask("count"), "1", "the garbage counts for no one");
    drop(lease);
    assert_eq!(exporter.ask("count"), "0");
    exchange::close_broker_connections();
    exporter.finish();
    say("attacker ok");
}

/// A process of the exporter's user opens the board through
/// `/proc/PID/fd/N`, which needs no `pidfd_getfd` (seccomp and Yama refuse
/// that call, not this open), and points export "aaa"'s entry at export
/// "ccc"'s descriptor with its true number, device and inode (and the
/// other way round). The importer of "aaa" must still get "aaa": the entry
/// is bound to its descriptors by a tag derived from the object id, which
/// the importer's handle carries and the board never shows, so the
/// redirected entries go to the broker. Then the attacker records leases in
/// the names of live processes that never import by the board (the
/// exporter itself, and pid 1, each with its true start time): the
/// exporter does not count them, so `wait_unleased` is not held up for
/// ever.
#[test]
fn board_cannot_redirect_an_import() {
    let mut kid = Kid::spawn("redirector", "");
    assert_eq!(kid.result(), "redirector ok");
    kid.finish();
}

/// The exporter's board opened as any process of its user may: through
/// `/proc/PID/fd/N`, without `pidfd_getfd`.
fn open_board(pid: u32) -> SharedMap {
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).expect("/proc/PID/fd") {
        let entry = entry.expect("fd entry");
        let link = std::fs::read_link(entry.path()).unwrap_or_default();
        if link.to_string_lossy().contains("hal-broker-board") {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(entry.path())
                .expect("opening the board through /proc");
            return SharedMap::map(file.as_fd(), BOARD_LEN as u64, 0, Prot::ReadWrite, None)
                .expect("map the board");
        }
    }
    panic!("the exporter has no board");
}

fn child_redirector() {
    let mut exporter = Kid::spawn("exporter", "");
    let texts = texts(&mut exporter);
    let (bytes, lease) = import(&texts[0]).unwrap();
    assert_eq!(bytes, "aaa");
    drop(lease);
    assert_eq!(exchange::direct_import_count(), 1, "the board is made");
    let board = open_board(exporter.id());
    let live = live(&board);
    assert_eq!(live.len(), 2, "\"aaa\" and \"ccc\" are stated");
    // Swap the two entries' descriptors whole: number, device, inode.
    let field = |i: usize, k: usize| ENTRIES_AT + i * ENTRY_LEN + E_FDS + k;
    let triple = |i: usize| {
        (
            board
                .atomic_u32(field(i, 0))
                .unwrap()
                .load(Ordering::SeqCst),
            board
                .atomic_u64(field(i, 8))
                .unwrap()
                .load(Ordering::SeqCst),
            board
                .atomic_u64(field(i, 16))
                .unwrap()
                .load(Ordering::SeqCst),
        )
    };
    let put = |i: usize, (fd, dev, ino): (u32, u64, u64)| {
        board
            .atomic_u32(field(i, 0))
            .unwrap()
            .store(fd, Ordering::SeqCst);
        board
            .atomic_u64(field(i, 8))
            .unwrap()
            .store(dev, Ordering::SeqCst);
        board
            .atomic_u64(field(i, 16))
            .unwrap()
            .store(ino, Ordering::SeqCst);
    };
    let (first, second) = (triple(live[0]), triple(live[1]));
    assert_ne!(first, second);
    put(live[0], second);
    put(live[1], first);
    let (bytes, lease) = import(&texts[0]).unwrap();
    assert_eq!(
        bytes, "aaa",
        "the export the handle names, not the one the board points at"
    );
    let (bytes, lease2) = import(&texts[2]).unwrap();
    assert_eq!(bytes, "ccc");
    assert_eq!(
        exchange::direct_import_count(),
        1,
        "neither taken from the board"
    );
    assert_eq!(exporter.ask("count"), "2", "both counted by the broker");
    drop((lease, lease2));
    put(live[0], first);
    put(live[1], second);
    assert_eq!(exporter.ask("count"), "0");
    // Leases in the names of live processes that map nothing of the export.
    let generation = |i: usize| {
        board
            .atomic_u64(ENTRIES_AT + i * ENTRY_LEN + E_GENERATION)
            .unwrap()
            .load(Ordering::SeqCst)
    };
    let forge = |slot: usize, pid: u32, start: u64, entry: usize| {
        let at = LEASES_AT + slot * LEASE_LEN;
        board
            .atomic_u64(at + L_GENERATION)
            .unwrap()
            .store(generation(entry), Ordering::SeqCst);
        board
            .atomic_u32(at + L_ENTRY)
            .unwrap()
            .store(entry as u32, Ordering::SeqCst);
        board
            .atomic_u64(at + L_START)
            .unwrap()
            .store(start, Ordering::SeqCst);
        board
            .atomic_u64(at)
            .unwrap()
            .store(u64::from(pid) << 32 | HELD, Ordering::SeqCst);
    };
    let exporter_start = os::process_start_time(exporter.id()).unwrap();
    forge(4000, exporter.id(), exporter_start, live[0]);
    forge(4001, 1, os::process_start_time(1).unwrap_or(0), live[1]);
    assert_eq!(
        exporter.ask("count"),
        "0",
        "leases in the names of processes that do not hold the board are not counted"
    );
    // A genuine direct import is still counted.
    let (bytes, lease) = import(&texts[2]).unwrap();
    assert_eq!(bytes, "ccc");
    assert_eq!(exchange::direct_import_count(), 2, "taken from the board");
    assert_eq!(exporter.ask("count"), "1");
    drop(lease);
    assert_eq!(exporter.ask("count"), "0");
    exchange::close_broker_connections();
    exporter.finish();
    say("redirector ok");
}

#[test]
fn later_exports_and_their_allow_lists_are_honoured_on_the_board() {
    let mut kid = Kid::spawn("later", "");
    assert_eq!(kid.result(), "later ok");
    kid.finish();
}

fn child_later() {
    let mut exporter = Kid::spawn("exporter", "");
    let texts = texts(&mut exporter);
    let (_, first) = import(&texts[0]).unwrap();
    // Another importer takes the board too: the exporter keeps one board.
    let mut other = Kid::spawn("holder", &texts[0]);
    assert_eq!(other.result(), "held");
    let mut held = vec![first];
    let mut direct = 1;
    // Exports made after the board: published as they are made.
    for kind in [
        "any".to_string(),
        format!("pid {}", os::pid()),
        "user".into(),
    ] {
        let text = exporter.ask(&format!("more {kind}"));
        let (bytes, lease) = import(&text).unwrap();
        assert_eq!(bytes, "ddd");
        assert!(lease.is_some(), "{kind}: leased");
        direct += 1;
        assert_eq!(
            exchange::direct_import_count(),
            direct,
            "{kind}: asking no one"
        );
        held.push(lease);
    }
    // Allowed to another pid: refused by the broker, never taken.
    let text = exporter.ask("more pid 1");
    match import(&text) {
        Err(Error::PermissionDenied { pid, .. }) => assert_eq!(pid, Some(os::pid())),
        other => panic!("an import allowed to pid 1 gave {other:?}"),
    }
    assert_eq!(exchange::direct_import_count(), direct);
    // Allowed afterwards: stated again on the board, and taken from it.
    assert_eq!(exporter.ask(&format!("allow {}", os::pid())), "allowed");
    let (bytes, lease) = import(&text).unwrap();
    assert_eq!(bytes, "ddd");
    direct += 1;
    assert_eq!(exchange::direct_import_count(), direct, "allowed later");
    held.push(lease);
    // An export that counts no importers: no lease at all.
    let text = exporter.ask("more nolease");
    let (bytes, lease) = import(&text).unwrap();
    assert_eq!((bytes.as_str(), lease.is_none()), ("ddd", true));
    direct += 1;
    assert_eq!(exchange::direct_import_count(), direct);
    // A lease only (no data descriptor, as a GPU export's: its lease
    // token, a sealed empty memfd): leased on the board.
    let text = exporter.ask("more zero");
    let taken = exchange::take_fds_leased(&mut shared(&text)).unwrap();
    assert!(taken.fds.len() == 1 && taken.lease.is_some());
    direct += 1;
    assert_eq!(exchange::direct_import_count(), direct);
    held.push(taken.lease);
    // Every lease counted (the other importer's too), then given back.
    assert_eq!(exporter.ask("count"), (held.len() + 1).to_string());
    drop(held);
    assert_eq!(exporter.ask("count"), "1");
    other.tell("done");
    other.finish();
    assert_eq!(exporter.ask("count"), "0");
    exchange::close_broker_connections();
    exporter.finish();
    say("later ok");
}

#[test]
fn forged_handles_never_go_direct_nor_spoil_the_board_for_genuine_ones() {
    let mut kid = Kid::spawn("forged", "");
    assert_eq!(kid.result(), "forged ok");
    kid.finish();
}

fn child_forged() {
    let mut exporter = Kid::spawn("exporter", "");
    let texts = texts(&mut exporter);
    let genuine = exchange::decode(&texts[0]).unwrap();
    let mut forgeries = Vec::new();
    let mut h = genuine.clone();
    h.creator_start += 1;
    forgeries.push(("another start time", h));
    let mut h = genuine.clone();
    h.creator_start = 0;
    forgeries.push(("no start time", h));
    let mut h = genuine.clone();
    h.creator_pid_ns ^= 1;
    forgeries.push(("another pid namespace", h));
    let mut h = genuine.clone();
    h.creator_pid = os::pid();
    forgeries.push(("another creator", h));
    // Before the board is loaded (a forgery must not load it) and after
    // (a forgery must not use it).
    for loaded in [false, true] {
        for (what, h) in &forgeries {
            let r = exchange::take_fds_leased(&mut SharedHandle::from(h.clone()));
            // The broker decides each (what it answers is its own tests'
            // matter): none is taken from the board.
            assert_eq!(
                exchange::direct_import_count(),
                u64::from(loaded),
                "{what}, the board loaded: {loaded}: {r:?}"
            );
            drop(r);
        }
        // The genuine handle still imports directly: no forgery spoiled
        // the broker's board for this process.
        let (bytes, lease) = import(&texts[0]).unwrap();
        assert_eq!(bytes, "aaa");
        assert_eq!(exchange::direct_import_count(), 1 + u64::from(loaded));
        drop(lease);
    }
    exchange::close_broker_connections();
    exporter.finish();
    say("forged ok");
}

#[test]
fn the_board_of_an_exporter_that_exited_is_let_go() {
    let mut kid = Kid::spawn("orphan", "");
    assert_eq!(kid.result(), "orphan ok");
    kid.finish();
}

fn child_orphan() {
    let mut exporter = Kid::spawn("exporter", "");
    let texts = texts(&mut exporter);
    let before = open_fds();
    let (_, lease) = import(&texts[0]).unwrap();
    drop(lease);
    assert_eq!(
        open_fds(),
        before + 4,
        "a kept connection, its pidfd, the board's pidfd and descriptor"
    );
    exporter.finish();
    // The exporter exited: the import fails, and its board, its pidfd and
    // the connection are let go with it.
    assert!(import(&texts[2]).is_err());
    assert_eq!(exchange::direct_import_count(), 1);
    // Nothing left for `close_broker_connections` to close, and every
    // descriptor of the exporter's gone (its standard input and output
    // closed with it).
    let after = open_fds();
    assert_eq!(exchange::close_broker_connections(), 0);
    assert_eq!(open_fds(), after, "nothing of the exporter kept");
    assert_eq!(after, before - 2);
    say("orphan ok");
}
