//! Groups inside one process: members on threads (each joins as a process
//! would), the name's life, and what a writer of the board can and cannot
//! do.
//! Across processes: `tests/group.rs`.

use super::*;
use crate::kit::os::{self, peer_region};
use std::sync::atomic::Ordering;
use std::thread;

fn unique(tag: &str) -> String {
    format!(
        "test-{tag}-{}-{:x}",
        std::process::id(),
        u64::from_le_bytes(crate::kit::os::random_id()[..8].try_into().unwrap())
    )
}

fn quick() -> GroupOptions {
    GroupOptions::default().timeout(Duration::from_secs(20))
}

/// `size` members on threads, each running `body` with its group.
fn run_members<T: Send + 'static>(
    name: &str,
    size: usize,
    body: impl Fn(Group) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let threads: Vec<_> = (0..size)
        .map(|_| {
            let (name, body) = (name.to_string(), body.clone());
            thread::spawn(move || body(Group::join(&name, size, &quick()).expect("join")))
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn members_get_distinct_ranks_and_gather_every_payload_in_order() {
    let name = unique("gather");
    let results = run_members(&name, 5, |mut g| {
        let mut rounds = Vec::new();
        for round in 0..40u32 {
            // Lengths differ by member and round, over both buffers.
            let mine = vec![g.rank() as u8; (g.rank() + round as usize) % 7];
            let all = g.all_gather(&mine).unwrap();
            for (r, p) in all.iter().enumerate() {
                assert_eq!(p, &vec![r as u8; (r + round as usize) % 7], "round {round}");
            }
            rounds.push(all.len());
        }
        (g.rank(), g.size(), rounds)
    });
    let mut ranks: Vec<usize> = results.iter().map(|r| r.0).collect();
    ranks.sort();
    assert_eq!(ranks, vec![0, 1, 2, 3, 4]);
    assert!(results.iter().all(|r| r.1 == 5 && r.2 == vec![5; 40]));
    assert!(
        !file::path(&name).unwrap().exists(),
        "the last member removes the name"
    );
}

#[test]
fn broadcast_gives_the_roots_bytes_to_everyone_and_barrier_waits() {
    let name = unique("bcast");
    let got = run_members(&name, 3, |mut g| {
        let mut seen = Vec::new();
        for root in 0..3 {
            let data = format!("from {root}");
            let mine = if g.rank() == root {
                data.as_bytes()
            } else {
                b"ignored"
            };
            seen.push(String::from_utf8(g.broadcast(root, mine).unwrap()).unwrap());
            g.barrier().unwrap();
        }
        assert!(g.broadcast(3, b"").is_err(), "rank 3 of 3");
        seen
    });
    for seen in got {
        assert_eq!(seen, vec!["from 0", "from 1", "from 2"]);
    }
}

#[test]
fn members_list_every_pid() {
    let name = unique("members");
    let lists = run_members(&name, 2, |g| g.members().to_vec());
    for list in lists {
        assert_eq!(list.len(), 2);
        assert!(list
            .iter()
            .enumerate()
            .all(|(i, m)| m.rank == i && m.pid == std::process::id()));
    }
}

#[test]
fn a_member_that_never_comes_is_a_timeout_naming_it_and_nothing_stays() {
    let name = unique("absent");
    let err = Group::join(
        &name,
        3,
        &GroupOptions::default().timeout(Duration::from_millis(100)),
    )
    .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("1 (not joined)") && text.contains("2 (not joined)"),
        "{text}"
    );
    assert!(
        !file::path(&name).unwrap().exists(),
        "the failed joiner left and removed the name"
    );
}

#[test]
fn a_payload_over_the_limit_is_refused_before_it_is_posted() {
    let name = unique("limit");
    let opts = quick().max_payload(8);
    let mut g = Group::join(&name, 1, &opts).unwrap();
    let err = g.all_gather(&[0; 9]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert_eq!(g.all_gather(&[1; 8]).unwrap(), vec![vec![1; 8]]);
}

#[test]
fn bad_names_sizes_and_limits_are_refused() {
    for name in ["", "a/b", "tab\there", &"x".repeat(201)] {
        assert!(matches!(
            Group::join(name, 1, &quick()),
            Err(Error::InvalidArgument { .. })
        ));
    }
    let name = unique("bad");
    for size in [0, MAX_MEMBERS + 1] {
        assert!(matches!(
            Group::join(&name, size, &quick()),
            Err(Error::InvalidArgument { .. })
        ));
    }
    assert!(matches!(
        Group::join(&name, 1, &quick().max_payload(MAX_PAYLOAD + 1)),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn a_live_group_of_another_shape_is_refused_and_a_full_one_is_busy() {
    let name = unique("shape");
    let first = Group::join(&name, 1, &quick()).unwrap();
    let err = Group::join(&name, 2, &quick()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert!(err.to_string().contains("1 members"), "{err}");
    let err = Group::join(&name, 1, &quick().max_payload(16)).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    let err = Group::join(&name, 1, &quick()).unwrap_err();
    assert!(matches!(err, Error::Busy { .. }), "{err}");
    drop(first);
    // Reusable once its member left, with another shape.
    let again = Group::join(&name, 1, &quick().max_payload(16)).unwrap();
    drop(again);
    assert!(!file::path(&name).unwrap().exists());
}

/// The group's board, mapped by a writer who is no member: reached, as a
/// joiner would, through the member in slot 0 that the name lists.
fn forge(name: &str) -> SharedMap {
    let bytes = std::fs::read(file::path(name).unwrap()).unwrap();
    let names = record::decode(&bytes).expect("a group's name");
    let holder = names.holders[0].expect("a member in slot 0");
    let (_fd, map) =
        peer_region::map_peer_region(&names.region(holder), names.shape.board_len(), "a test")
            .unwrap();
    map
}

use crate::kit::os::SharedMap;

/// Slot `i`'s offset with the default 4096-byte payload limit (see the
/// layout table of `layout.rs`).
fn slot(i: usize) -> usize {
    64 + i * (64 + 2 * 4096)
}

/// Wait (bounded) until the group's name exists (its founder is in slot 0
/// from the start).
fn await_file(name: &str) {
    for _ in 0..5000 {
        if file::path(name).unwrap().exists() {
            return;
        }
        thread::sleep(Duration::from_millis(1));
    }
    panic!("group {name} never made its name");
}

/// A member on a thread that joins `name` as one of two and all-gathers
/// once, once the group's name exists: what a writer of the board then
/// does decides how it ends.
fn lone_member(name: &str) -> thread::JoinHandle<Result<Vec<Vec<u8>>>> {
    let member = {
        let name = name.to_string();
        thread::spawn(move || {
            let mut g = Group::join(&name, 2, &quick())?;
            g.all_gather(b"mine")
        })
    };
    await_file(name);
    member
}

/// Bump the board's post word and wake its sleepers, as a member's post does.
fn bump(map: &SharedMap) {
    map.atomic_u32(16).unwrap().fetch_add(1, Ordering::Release);
    os::futex_wake(map.atomic_u32(16).unwrap(), u32::MAX);
}

#[test]
fn a_forged_length_is_an_error_not_a_read_out_of_bounds() {
    let name = unique("forged-len");
    let member = lone_member(&name);
    // A writer of the board claims slot 1 as a live process, says it posted
    // a thousand rounds, each of 4 GiB.
    let map = forge(&name);
    let at = slot(1);
    map.atomic_u64(at + 8).unwrap().store(0, Ordering::Relaxed);
    map.atomic_u32(at + 16)
        .unwrap()
        .store(1000, Ordering::Relaxed);
    map.atomic_u32(at + 20)
        .unwrap()
        .store(u32::MAX, Ordering::Relaxed);
    map.atomic_u32(at + 24)
        .unwrap()
        .store(u32::MAX, Ordering::Relaxed);
    map.atomic_u32(at + 4).unwrap().store(1, Ordering::Relaxed);
    map.atomic_u32(at)
        .unwrap()
        .store(std::process::id(), Ordering::Release);
    bump(&map);
    let err = member.join().unwrap().unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert!(err.to_string().contains("4294967295 bytes"), "{err}");
    drop(map);
    let _ = std::fs::remove_file(file::path(&name).unwrap());
}

#[test]
fn a_state_no_member_writes_fails_the_join_instead_of_waiting() {
    let name = unique("forged-state");
    let member = lone_member(&name);
    let map = forge(&name);
    map.atomic_u32(slot(1) + 4)
        .unwrap()
        .store(7, Ordering::Release);
    bump(&map);
    let err = member.join().unwrap().unwrap_err();
    assert!(err.to_string().contains("state 7"), "{err}");
    drop(map);
    let _ = std::fs::remove_file(file::path(&name).unwrap());
}

#[test]
fn a_board_whose_header_was_rewritten_is_refused_to_a_joiner() {
    let name = unique("header");
    let member = lone_member(&name);
    let map = forge(&name);
    // The magic, then the version, rewritten under the member.
    for (at, forged) in [(0, u32::from_le_bytes(*b"HGRQ")), (4, 2)] {
        let genuine = map.atomic_u32(at).unwrap().swap(forged, Ordering::AcqRel);
        let err = Group::join(&name, 2, &quick()).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        assert!(err.to_string().contains("another shape"), "{err}");
        map.atomic_u32(at)
            .unwrap()
            .store(genuine, Ordering::Release);
    }
    let mut g = Group::join(&name, 2, &quick()).unwrap();
    assert_eq!(g.all_gather(b"mine").unwrap(), vec![b"mine".to_vec(); 2]);
    assert_eq!(member.join().unwrap().unwrap(), vec![b"mine".to_vec(); 2]);
    drop((g, map));
    assert!(!file::path(&name).unwrap().exists());
}

#[test]
fn a_member_that_leaves_takes_its_entry_out_of_the_name() {
    let name = unique("entry");
    let other = {
        let name = name.clone();
        thread::spawn(move || Group::join(&name, 2, &quick()).unwrap())
    };
    let mine = Group::join(&name, 2, &quick()).unwrap();
    let other = other.join().unwrap();
    let holders = || {
        let bytes = std::fs::read(file::path(&name).unwrap()).unwrap();
        record::decode(&bytes).expect("a group's name").holders
    };
    assert!(holders().iter().all(Option::is_some), "{:?}", holders());
    let (left, stays) = (other.rank(), mine.rank());
    drop(other);
    let now = holders();
    assert_eq!(now[left], None, "the entry of the member that left");
    assert_eq!(now[stays].map(|h| h.pid), Some(std::process::id()));
    drop(mine);
    assert!(!file::path(&name).unwrap().exists());
}

#[test]
fn a_file_others_may_open_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let name = unique("mode");
    let path = file::path(&name).unwrap();
    std::fs::write(&path, b"").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = Group::join(&name, 1, &quick()).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(err, Error::PermissionDenied { .. }), "{err}");
    assert!(err.to_string().contains("mode 644"), "{err}");
}

#[test]
fn a_file_that_is_no_groups_is_refused_and_kept() {
    use std::os::unix::fs::OpenOptionsExt as _;
    let name = unique("junk");
    let path = file::path(&name).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    std::fs::write(
        &path,
        b"not a group at all, and long enough to hold a header.........",
    )
    .unwrap();
    let err = Group::join(&name, 1, &quick()).unwrap_err();
    assert!(path.exists(), "another program's file is never removed");
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert!(err.to_string().contains("remove it"), "{err}");
}

#[test]
fn a_member_whose_process_is_gone_fails_the_round_naming_it_and_nothing_stays() {
    let name = unique("dead");
    let mut exited = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = exited.id();
    exited.wait().unwrap();
    let member = lone_member(&name);
    // Slot 1 taken by a process that has exited since.
    let map = forge(&name);
    let at = slot(1);
    map.atomic_u32(at + 4).unwrap().store(1, Ordering::Relaxed);
    map.atomic_u32(at)
        .unwrap()
        .store(dead_pid, Ordering::Release);
    bump(&map);
    let err = member.join().unwrap().unwrap_err();
    assert!(matches!(err, Error::Closed { .. }), "{err}");
    assert!(
        err.to_string()
            .contains(&format!("member 1 (pid {dead_pid}) died")),
        "{err}"
    );
    drop(map);
    assert!(
        !file::path(&name).unwrap().exists(),
        "the last live member removed the name when it left"
    );
}
