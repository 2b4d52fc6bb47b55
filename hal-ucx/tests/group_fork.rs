//! The fork rule of a group across hosts, with a real `fork()`: a child
//! forked from a process with two members of a group (the one serving it
//! and one joined to it, on the loopback address over UCX's TCP
//! transport) is refused every round with `Error::Forked`, and its drops
//! send nothing: the parent's members go on together afterwards.
//!
//! Where UCX is not installed, the test says `NOT RUN` and why (a failure
//! with `HAL_TESTS_STRICT=1`).

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use hal_core::testing::not_run;
use hal_core::Error;
use hal_ucx::{RemoteGroup, RemoteGroupOptions};

/// The members' secret.
const SECRET: [u8; 16] = *b"fork rule secret";

/// A port of the loopback address that was free a moment ago.
fn free_port() -> u16 {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a loopback port");
    l.local_addr().expect("its address").port()
}

/// What the child finds: 0 when every check held, else the first that
/// failed (its exit status). Only `_exit` leaves it: no test harness runs
/// in the child.
fn in_child(groups: Vec<RemoteGroup>) -> i32 {
    for (i, mut g) in groups.into_iter().enumerate() {
        let code = 10 * (i as i32 + 1);
        if !matches!(g.barrier(), Err(Error::Forked { .. })) {
            return code + 1;
        }
        if !matches!(g.all_gather(b"from the child"), Err(Error::Forked { .. })) {
            return code + 2;
        }
        match g.broadcast(0, b"") {
            Err(e @ Error::Forked { .. }) if e.to_string().contains("membership of group") => {}
            _ => return code + 3,
        }
        // What needs no network still answers.
        if g.size() != 2 || g.name() != "forked" {
            return code + 4;
        }
        // The drop sends nothing and waits for no thread of the parent's.
        drop(g);
    }
    0
}

/// Wait for `pid`, at most `patience` (a guard against a child that hangs,
/// which is then killed and reported).
fn reap(pid: libc::pid_t, patience: Duration) -> Result<i32, String> {
    let until = Instant::now() + patience;
    loop {
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is a valid place.
        let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if got == pid {
            return if libc::WIFEXITED(status) {
                Ok(libc::WEXITSTATUS(status))
            } else {
                Err(format!("the child ended with wait status {status}"))
            };
        }
        if got < 0 || Instant::now() > until {
            // SAFETY: our own child, which is then reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return Err(format!(
                "the child did not end in {patience:?} (its drop hung)"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_forked_child_is_refused_and_its_drop_leaves_the_parents_group_whole() {
    // The only test of this program: no other thread reads the
    // environment; UCX reads it when the first node is made.
    std::env::set_var("UCX_TLS", "tcp");
    let at = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    let options = RemoteGroupOptions::default()
        .secret(SECRET)
        .timeout(Duration::from_secs(30));
    let joiner = {
        let options = options.clone();
        // Whichever binds the address first serves the group; the other
        // connects to it. A moment's delay spares UCX's error line of the
        // race for the address, most times.
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            RemoteGroup::join_at(at, "forked", 2, &options)
        })
    };
    let mine = match RemoteGroup::join_at(at, "forked", 2, &options) {
        Ok(g) => g,
        Err(e @ (Error::Unavailable { .. } | Error::Unsupported { .. })) => {
            let _ = joiner.join();
            not_run(&format!("UCX cannot be loaded here: {e}"));
            return;
        }
        Err(e) => panic!("this thread's join: {e}"),
    };
    let theirs = joiner.join().expect("the other thread");
    let (mut mine, mut theirs) = (mine, theirs.expect("the other thread's join"));
    assert_eq!(mine.rank() + theirs.rank(), 1, "ranks 0 and 1");

    // SAFETY: the child runs only `in_child` (no lock the parent's other
    // threads may hold is taken: the rounds are refused before any), then
    // `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = in_child(vec![mine, theirs]);
        // SAFETY: ends the child without running the parent's destructors
        // or the test harness.
        unsafe { libc::_exit(code) };
    }
    let code = reap(pid, Duration::from_secs(30)).unwrap();
    assert_eq!(code, 0, "the child's check {code} failed");

    // The parent's members go on: nothing of theirs was closed.
    let other = std::thread::spawn(move || {
        let all = theirs.all_gather(b"theirs")?;
        theirs.barrier()?;
        Ok::<_, Error>((all, theirs))
    });
    let all = mine.all_gather(b"mine").unwrap();
    mine.barrier().unwrap();
    let (their_all, theirs) = other.join().unwrap().unwrap();
    let mut want = vec![b"mine".to_vec(), b"theirs".to_vec()];
    if mine.rank() == 1 {
        want.reverse();
    }
    assert_eq!(all, want);
    assert_eq!(their_all, want);
    drop(theirs);
    drop(mine);
}
