//! The located form of the `pidfd_getfd` path of imports
//! (`HAL_PIDFD_GETFD=1`), across real processes: imports and batches taken
//! from the exporter, the exporter's allow-list and leases kept, nothing
//! left behind; and a process whose seccomp filter refuses `pidfd_getfd`,
//! as container runtimes' profiles do, which warns once where the path was
//! asked for, says nothing where it is on by default, and imports all the
//! same; and one whose filter refuses `pidfd_open` of the exporter's broker
//! (`EPERM`) or answers that no such process exists (`ESRCH`), which falls
//! back to `SCM_RIGHTS` from the first import on.
//!
//! Each test starts this test binary again with `--exact child_process`
//! and `HAL_PIDFD_ROLE` naming what the child does: importers run in
//! children of their own, so that the switch, the counters, the logger
//! and the descriptors they count are theirs alone.

mod common;

use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;

use common::imports::{import, memfd_with, memory_handle, open_fds, read_fd, shared};
use common::{read_line, say, Kid};
use hal_core::exchange::{self, take_fds_leased_batch, PIDFD_GETFD_ENV};
use hal_core::kit::os;
use hal_core::lease::LeaseTable;
use hal_core::{Error, Exported, Handle, HandleFlags, SharedHandle};

const ROLE: &str = "HAL_PIDFD_ROLE";
const ARG: &str = "HAL_PIDFD_ARG";

impl Kid {
    fn spawn(role: &str, arg: &str, getfd: bool) -> Kid {
        Kid::start((ROLE, role), (ARG, arg), |cmd| {
            cmd.env(PIDFD_GETFD_ENV, if getfd { "1" } else { "0" });
        })
    }

    /// A child with the path as it is by default (`HAL_PIDFD_GETFD` unset).
    fn spawn_default(role: &str) -> Kid {
        Kid::start((ROLE, role), (ARG, ""), |cmd| {
            cmd.env_remove(PIDFD_GETFD_ENV);
        })
    }

    /// The exporter's number of importers.
    fn count(&mut self) -> String {
        self.ask("count")
    }
}

fn handle(flags: HandleFlags, allowed: Vec<u32>) -> Handle {
    memory_handle(flags, allowed, b"pidfd-test")
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
        "taken" => child_taken(),
        "refused" => child_refused(),
        "quiet" => child_quiet(),
        "denied" => child_denied(),
        "no-pidfd" => child_no_pidfd(&arg),
        other => panic!("unknown child role {other}"),
    }
}

/// Export three objects, "aaa", "bbb", "ccc", counting importers: to
/// anyone (`any`), or the second one to pid 1 only (`deny`). Print their
/// texts, then answer `count` with the number of importers until stdin
/// closes.
fn child_exporter(arg: &str) {
    let table = LeaseTable::new(16).unwrap();
    let exports: Vec<Exported> = ["aaa", "bbb", "ccc"]
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            let h = if arg == "deny" && i == 1 {
                handle(HandleFlags::default(), vec![1])
            } else {
                handle(HandleFlags::ANY_IMPORTER, Vec::new())
            };
            Exported::with_leases(h, vec![memfd_with(bytes.as_bytes())], Arc::clone(&table))
                .unwrap()
        })
        .collect();
    let texts: Vec<String> = exports.iter().map(Exported::to_text).collect();
    say(texts.join(" "));
    loop {
        match read_line().as_str() {
            "count" => say(table.count()),
            _ => return,
        }
    }
}

/// Import the three exports of an exporter child in one batch and check
/// their bytes; the leases go back as the results drop.
fn import_all_three(texts: &[String]) {
    let mut batch: Vec<SharedHandle> = texts.iter().map(|t| shared(t)).collect();
    for (r, want) in take_fds_leased_batch(&mut batch)
        .into_iter()
        .zip(["aaa", "bbb", "ccc"])
    {
        assert_eq!(read_fd(&r.unwrap().fds[0]), want);
    }
}

fn texts(kid: &mut Kid) -> Vec<String> {
    kid.result().split(' ').map(str::to_owned).collect()
}

#[test]
fn the_fast_path_takes_imports_and_batches_and_leaves_nothing_behind() {
    let mut kid = Kid::spawn("taken", "", true);
    assert_eq!(kid.result(), "taken ok");
    kid.finish();
}

fn child_taken() {
    let mut exporter = Kid::spawn("exporter", "any", false);
    let texts = texts(&mut exporter);
    let before = open_fds();
    assert_eq!(exchange::pidfd_getfd_counts(), (0, 0));
    // One import: the exporter's board taken once (one locate request),
    // then the object found there, leased there and taken by pidfd_getfd.
    let (bytes, lease) = import(&texts[0]).unwrap();
    assert_eq!(bytes, "aaa");
    assert_eq!(
        exchange::pidfd_getfd_counts(),
        (1, 0),
        "taken by pidfd_getfd"
    );
    assert_eq!(exchange::direct_import_count(), 1, "asking no one");
    assert_eq!(exporter.count(), "1", "the exporter counts the importer");
    drop(lease);
    assert_eq!(exporter.count(), "0");
    // A batch: every object taken from the board, no request.
    let mut batch: Vec<SharedHandle> = texts.iter().map(|t| shared(t)).collect();
    let got = take_fds_leased_batch(&mut batch);
    let mut leases = Vec::new();
    for (r, want) in got.into_iter().zip(["aaa", "bbb", "ccc"]) {
        let t = r.unwrap();
        assert_eq!(read_fd(&t.fds[0]), want);
        assert!(t.checked && t.lease.is_some());
        leases.push(t);
    }
    assert_eq!(exchange::pidfd_getfd_counts(), (4, 0), "the batch too");
    assert_eq!(exchange::direct_import_count(), 4);
    assert_eq!(exporter.count(), "3");
    assert_eq!(exchange::broker_connections(None), 1, "one connection");
    drop(leases);
    assert_eq!(exporter.count(), "0");
    // The connection and the exporter's pidfd kept with it, and the
    // board's pidfd and descriptor (kept open: the exporter counts the
    // leases only of processes that hold its board): all that is left, and
    // closed with the connections.
    assert_eq!(
        open_fds(),
        before + 4,
        "a kept connection, its pidfd, the board's pidfd and descriptor"
    );
    assert_eq!(exchange::close_broker_connections(), 1);
    assert_eq!(open_fds(), before, "nothing left behind");
    // With the path off, the same import comes with SCM_RIGHTS.
    exchange::set_pidfd_getfd(Some(false));
    let (bytes, lease) = import(&texts[2]).unwrap();
    assert_eq!(bytes, "ccc");
    assert_eq!(exchange::pidfd_getfd_counts(), (4, 0), "not by pidfd_getfd");
    drop(lease);
    assert_eq!(open_fds(), before + 1, "a kept connection, no pidfd");
    exchange::close_broker_connections();
    exporter.finish();
    say("taken ok");
}

/// Make this thread's `pidfd_getfd` fail with `EPERM`, as the seccomp
/// profiles of container runtimes do.
fn refuse_pidfd_getfd() {
    refuse_call(libc::SYS_pidfd_getfd, libc::EPERM);
    // The filter holds: this process cannot take even its own descriptor.
    let me = os::pidfd_open(os::pid()).unwrap();
    let e = os::pidfd_getfd(me.as_fd(), me.as_raw_fd() as u32).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EPERM));
}

/// Make this thread's `pidfd_open` fail with `errno`: a seccomp profile
/// that refuses it (`EPERM`), or one that answers as if no process had the
/// pid (`ESRCH`).
fn refuse_pidfd_open(errno: i32) {
    refuse_call(libc::SYS_pidfd_open, errno);
    // The filter holds: this process cannot open a pidfd even of itself.
    let e = os::pidfd_open(os::pid()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(errno));
}

/// Make this thread's system call `nr` fail with `errno`: a classic BPF
/// filter that checks the architecture, then the system call number.
fn refuse_call(nr: libc::c_long, errno: i32) {
    #[cfg(target_arch = "x86_64")]
    const AUDIT_ARCH: u32 = 0xc000_003e;
    #[cfg(target_arch = "aarch64")]
    const AUDIT_ARCH: u32 = 0xc000_00b7;
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    let nr = u32::try_from(nr).expect("a system call number");
    let errno = u32::try_from(errno).expect("an errno") & 0xffff;
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let mut filter = [
        op(LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        op(JEQ_K, 1, 0, AUDIT_ARCH),
        op(RET_K, 0, 0, RET_ALLOW),
        op(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        op(JEQ_K, 0, 1, nr),
        op(RET_K, 0, 0, RET_ERRNO | errno),
        op(RET_K, 0, 0, RET_ALLOW),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: PR_SET_NO_NEW_PRIVS takes plain integers.
    let r = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    assert_eq!(r, 0, "PR_SET_NO_NEW_PRIVS");
    // SAFETY: `prog` points to `filter`, both alive for the call; the
    // kernel copies the program.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const libc::sock_fprog,
        )
    };
    assert_eq!(r, 0, "PR_SET_SECCOMP: {}", std::io::Error::last_os_error());
}

#[test]
fn a_refused_pidfd_getfd_warns_once_and_imports_all_the_same() {
    let mut kid = Kid::spawn("refused", "", true);
    assert_eq!(kid.result(), "refused ok");
    kid.finish();
}

fn child_refused() {
    hal_tests::warnings::capture();
    let mut first = Kid::spawn("exporter", "any", false);
    let mut second = Kid::spawn("exporter", "any", false);
    let (one, two) = (texts(&mut first), texts(&mut second));
    refuse_pidfd_getfd();
    let before = open_fds();
    // Refused: warned, and imported with SCM_RIGHTS.
    let (bytes, lease) = import(&one[0]).unwrap();
    assert_eq!(bytes, "aaa");
    assert_eq!(first.count(), "1", "one lease: the locate's went back");
    let w = hal_tests::warnings::all();
    assert_eq!(w.len(), 1, "one warning: {w:?}");
    assert!(w[0].contains("pidfd_getfd refused"), "{w:?}");
    drop(lease);
    assert_eq!(first.count(), "0");
    // Later imports, a batch, and another exporter (tried once more, since
    // a refusal is remembered per exporter): no warning again.
    let (bytes, lease) = import(&one[1]).unwrap();
    assert_eq!(bytes, "bbb");
    drop(lease);
    import_all_three(&two);
    assert_eq!(second.count(), "0", "the batch's leases went back");
    let (bytes, _lease) = import(&two[2]).unwrap();
    assert_eq!(bytes, "ccc");
    assert_eq!(second.count(), "1");
    let w = hal_tests::warnings::all();
    assert_eq!(w.len(), 1, "still one warning: {w:?}");
    let (taken, fell_back) = exchange::pidfd_getfd_counts();
    assert_eq!(taken, 0, "nothing came by pidfd_getfd");
    assert!(fell_back >= 2, "each exporter tried once: {fell_back}");
    drop(_lease);
    exchange::close_broker_connections();
    assert_eq!(open_fds(), before, "nothing left behind");
    first.finish();
    second.finish();
    say("refused ok");
}

#[test]
fn by_default_a_refused_pidfd_getfd_is_silent_and_costs_the_exporter_no_board() {
    let mut kid = Kid::spawn_default("quiet");
    assert_eq!(kid.result(), "quiet ok");
    kid.finish();
}

/// Whether process `pid` holds its broker's board.
fn has_board(pid: u32) -> bool {
    let board = format!("/memfd:{} ", exchange::board_memfd_name(pid));
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("/proc/PID/fd of a child")
        .flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().contains(&board)))
}

fn child_quiet() {
    hal_tests::warnings::capture();
    let mut first = Kid::spawn("exporter", "any", false);
    let one = texts(&mut first);
    // The control: an importer that may take the exporter's descriptors
    // asks for its board, and the exporter makes it.
    let mut second = Kid::spawn("exporter", "any", false);
    let two = texts(&mut second);
    let (bytes, lease) = import(&two[0]).unwrap();
    assert_eq!(bytes, "aaa");
    assert_eq!(
        exchange::direct_import_count(),
        1,
        "the first import asks for the board, then finds its object there"
    );
    drop(lease);
    let (bytes, lease) = import(&two[1]).unwrap();
    assert_eq!(bytes, "bbb");
    assert_eq!(exchange::direct_import_count(), 2, "the second asks no one");
    drop(lease);
    assert!(has_board(second.id()), "the exporter made its board");
    refuse_pidfd_getfd();
    // Without the connection and the board kept for `second`.
    exchange::close_broker_connections();
    let before = open_fds();
    let (bytes, lease) = import(&one[0]).unwrap();
    assert_eq!(bytes, "aaa");
    assert_eq!(first.count(), "1");
    drop(lease);
    import_all_three(&one);
    assert_eq!(first.count(), "0", "every lease went back");
    let w = hal_tests::warnings::all();
    assert!(
        w.is_empty(),
        "nothing said where the path is only the default: {w:?}"
    );
    assert_eq!(
        exchange::pidfd_getfd_counts(),
        (2, 0),
        "nothing more taken, nothing tried: the kernel's refusal was known before the broker \
         was asked"
    );
    assert!(
        !has_board(first.id()),
        "no board made for an importer that cannot use it"
    );
    exchange::close_broker_connections();
    assert_eq!(open_fds(), before, "nothing left behind");
    first.finish();
    second.finish();
    say("quiet ok");
}

#[test]
fn the_allow_list_holds_on_the_fast_path() {
    let mut kid = Kid::spawn("denied", "", true);
    assert_eq!(kid.result(), "denied ok");
    kid.finish();
}

fn child_denied() {
    let mut exporter = Kid::spawn("exporter", "deny", false);
    let texts = texts(&mut exporter);
    let before = open_fds();
    // The object allowed to pid 1 only: refused, and nothing taken.
    match import(&texts[1]) {
        Err(Error::PermissionDenied { pid, .. }) => assert_eq!(pid, Some(os::pid())),
        other => panic!("a disallowed import gave {other:?}"),
    }
    assert_eq!(exchange::pidfd_getfd_counts(), (0, 0));
    assert_eq!(exporter.count(), "0", "no lease for a refused importer");
    // The board was taken (the refusal is the broker's, asked after the
    // board did not name this process): its pidfd and the board's
    // descriptor are kept, no connection.
    assert_eq!(
        open_fds(),
        before + 2,
        "the board's pidfd and descriptor, no connection kept"
    );
    // In a batch: the allowed objects by pidfd_getfd, the other refused.
    let mut batch: Vec<SharedHandle> = texts.iter().map(|t| shared(t)).collect();
    let got = take_fds_leased_batch(&mut batch);
    let mut kept = Vec::new();
    for (i, r) in got.into_iter().enumerate() {
        match (i, r) {
            (1, Err(Error::PermissionDenied { .. })) => {}
            (1, other) => panic!("the refused handle gave {other:?}"),
            (_, r) => kept.push(r.unwrap()),
        }
    }
    assert_eq!(read_fd(&kept[0].fds[0]), "aaa");
    assert_eq!(read_fd(&kept[1].fds[0]), "ccc");
    assert_eq!(exchange::pidfd_getfd_counts(), (2, 0));
    assert_eq!(exchange::direct_import_count(), 2, "from the board");
    assert_eq!(exporter.count(), "2");
    drop(kept);
    exchange::close_broker_connections();
    assert_eq!(open_fds(), before, "nothing left behind");
    exporter.finish();
    say("denied ok");
}

#[test]
fn a_refused_pidfd_open_falls_back_to_scm_rights_and_warns_once() {
    let mut kid = Kid::spawn("no-pidfd", "EPERM", true);
    assert_eq!(kid.result(), "no-pidfd EPERM ok");
    kid.finish();
}

#[test]
fn a_pidfd_open_that_finds_no_process_falls_back_and_tries_again() {
    let mut kid = Kid::spawn("no-pidfd", "ESRCH", true);
    assert_eq!(kid.result(), "no-pidfd ESRCH ok");
    kid.finish();
}

/// An importer, with the located form asked for, whose `pidfd_open` a
/// seccomp filter answers with `arg` (`EPERM`: a refusal, which turns the
/// path off for the broker and is said once; `ESRCH`: no process, which is
/// not, so the path is tried again at the next import and nothing is said).
/// Every import comes with `SCM_RIGHTS`.
fn child_no_pidfd(arg: &str) {
    let errno = match arg {
        "EPERM" => libc::EPERM,
        "ESRCH" => libc::ESRCH,
        other => panic!("unknown errno {other}"),
    };
    hal_tests::warnings::capture();
    let mut exporter = Kid::spawn("exporter", "any", false);
    let texts = texts(&mut exporter);
    refuse_pidfd_open(errno);
    let before = open_fds();
    let (bytes, lease) = import(&texts[0]).unwrap();
    assert_eq!(bytes, "aaa");
    assert_eq!(exporter.count(), "1", "one lease");
    drop(lease);
    assert_eq!(exporter.count(), "0");
    let warned = hal_tests::warnings::all();
    let (_, fell_back) = exchange::pidfd_getfd_counts();
    if errno == libc::EPERM {
        assert_eq!(warned.len(), 1, "one warning: {warned:?}");
        assert!(warned[0].contains("pidfd_open refused"), "{warned:?}");
        assert_eq!(fell_back, 1, "the path tried once");
    } else {
        assert!(warned.is_empty(), "no process is no refusal: {warned:?}");
        assert_eq!(fell_back, 1, "the path tried once");
    }
    // The next imports and a batch: with the path off for the broker
    // (EPERM), not tried again and nothing said; without (ESRCH), tried
    // again for each request, and nothing said either.
    let (bytes, lease) = import(&texts[1]).unwrap();
    assert_eq!(bytes, "bbb");
    drop(lease);
    import_all_three(&texts);
    assert_eq!(exporter.count(), "0", "every lease went back");
    let warned = hal_tests::warnings::all();
    assert_eq!(
        warned.len(),
        usize::from(errno == libc::EPERM),
        "no more warnings: {warned:?}"
    );
    let (taken, fell_back) = exchange::pidfd_getfd_counts();
    assert_eq!(taken, 0, "nothing came by pidfd_getfd");
    if errno == libc::EPERM {
        assert_eq!(fell_back, 1, "the path is off for the broker");
    } else {
        assert!(fell_back >= 2, "the path tried again: {fell_back}");
    }
    exchange::close_broker_connections();
    assert_eq!(open_fds(), before, "nothing left behind");
    exporter.finish();
    say(format!("no-pidfd {arg} ok"));
}
