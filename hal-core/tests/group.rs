//! Groups across real processes: ranks, all-gather, broadcast and barrier
//! among eight members; a member killed mid-exchange named by the others;
//! a name left by crashed members replaced by the next join; a joiner
//! that reaches the board through a member other than its dead founder;
//! members that outlive their name truncated by another process, whose
//! board that process cannot truncate; another user's file of the name
//! refused, and one that another user took first (a file or a directory)
//! refused naming its owner.

mod common;

use std::time::Duration;

use common::{read_line, say, Kid};
use hal_core::group::{Group, GroupOptions};
use hal_core::Error;

const ROLE: &str = "HAL_GROUP_TEST_ROLE";
const ARG: &str = "HAL_GROUP_TEST_ARG";

fn unique(tag: &str) -> String {
    format!(
        "test-{tag}-{}-{:x}",
        std::process::id(),
        u64::from_le_bytes(hal_core::kit::os::random_id()[..8].try_into().unwrap())
    )
}

fn file_of(name: &str) -> std::path::PathBuf {
    hal_core::kit::os::private_path("group", name).expect("a group name")
}

/// Require that the group's name is gone: its last member to leave
/// removed it.
#[track_caller]
fn assert_name_removed(name: &str) {
    assert!(
        !file_of(name).exists(),
        "the last to leave removed the name"
    );
}

fn options() -> GroupOptions {
    GroupOptions::default().timeout(Duration::from_secs(30))
}

fn start(role: &str, arg: &str) -> Kid {
    Kid::start((ROLE, role), (ARG, arg), |_| {})
}

#[test]
#[ignore = "child entry point: run by its parent"]
fn child_process() {
    let role = std::env::var(ROLE)
        .expect("a child entry point: its parent sets the role (run the other tests of this file)");
    let arg = std::env::var(ARG).unwrap_or_default();
    let (name, size) = arg.split_once(':').expect("NAME:SIZE");
    let size: usize = size.parse().expect("a size");
    match role.as_str() {
        "member" => child_member(name, size),
        "sleeper" => child_sleeper(name, size),
        "survivor" => child_survivor(name, size),
        "joiner" => child_joiner(name, size),
        "squatted" => child_squatted(name, size),
        other => panic!("unknown child role {other}"),
    }
}

/// Join, then a hundred all-gathers of this process's pid and round, a
/// broadcast from every rank and a barrier; report rank and members.
fn child_member(name: &str, size: usize) {
    let mut g = Group::join(name, size, &options()).expect("join");
    let me = std::process::id();
    for round in 0..100u32 {
        let mine = format!("{me}:{round}");
        let all = g.all_gather(mine.as_bytes()).expect("all_gather");
        for (rank, payload) in all.iter().enumerate() {
            let expected = format!("{}:{round}", g.members()[rank].pid);
            assert_eq!(payload, expected.as_bytes(), "rank {rank} round {round}");
        }
    }
    for root in 0..size {
        let said = g
            .broadcast(root, format!("root {root}").as_bytes())
            .expect("broadcast");
        assert_eq!(said, format!("root {root}").as_bytes());
    }
    g.barrier().expect("barrier");
    let pids: Vec<String> = g.members().iter().map(|m| m.pid.to_string()).collect();
    say(format!("{} {}", g.rank(), pids.join(",")));
}

/// Join, say so, and wait for the parent (which kills this process).
fn child_sleeper(name: &str, size: usize) {
    let g = Group::join(name, size, &options()).expect("join");
    say(format!("joined {}", g.rank()));
    read_line();
    std::thread::sleep(Duration::from_secs(60));
}

/// Join, say so, wait for the parent's word, then all-gather: the answer
/// must be an error naming the member that was killed meanwhile.
fn child_survivor(name: &str, size: usize) {
    let mut g = Group::join(name, size, &options()).expect("join");
    say(format!("joined {}", g.rank()));
    read_line();
    match g.all_gather(b"still here") {
        Ok(_) => say("no error"),
        Err(e @ Error::Closed { .. }) => say(format!("closed: {e}")),
        Err(e) => say(format!("other: {e}")),
    }
}

#[test]
fn eight_processes_rank_gather_broadcast_and_leave_nothing() {
    let name = unique("eight");
    let arg = format!("{name}:8");
    let mut kids: Vec<Kid> = (0..8).map(|_| start("member", &arg)).collect();
    let pids: Vec<u32> = kids.iter().map(Kid::id).collect();
    let mut ranks = Vec::new();
    let mut lists = Vec::new();
    for kid in &mut kids {
        let line = kid.result();
        let (rank, list) = line.split_once(' ').expect("rank and members");
        ranks.push(rank.parse::<usize>().expect("a rank"));
        lists.push(list.to_string());
    }
    for kid in kids {
        kid.finish();
    }
    let mut sorted = ranks.clone();
    sorted.sort();
    assert_eq!(sorted, (0..8).collect::<Vec<_>>());
    assert!(lists.iter().all(|l| l == &lists[0]), "{lists:?}");
    let mut listed: Vec<u32> = lists[0].split(',').map(|p| p.parse().unwrap()).collect();
    listed.sort();
    let mut started = pids.clone();
    started.sort();
    assert_eq!(listed, started, "the members are the processes started");
    // Each child's rank matches its place in the members list.
    for (i, rank) in ranks.iter().enumerate() {
        let list: Vec<u32> = lists[i].split(',').map(|p| p.parse().unwrap()).collect();
        assert_eq!(list[*rank], pids[i]);
    }
    assert!(!file_of(&name).exists(), "the last member removed the file");
}

#[test]
fn a_member_killed_mid_exchange_is_named_by_the_others() {
    let name = unique("killed");
    let arg = format!("{name}:4");
    let mut victim = start("sleeper", &arg);
    let mut survivors: Vec<Kid> = (0..3).map(|_| start("survivor", &arg)).collect();
    assert!(victim.result().starts_with("joined"));
    for s in &mut survivors {
        assert!(s.result().starts_with("joined"));
    }
    let victim_pid = victim.id();
    for s in &mut survivors {
        s.tell("go");
    }
    // The survivors wait in their all-gather for the victim, which never
    // posts; then it dies.
    std::thread::sleep(Duration::from_millis(50));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(victim_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the victim");
    for mut s in survivors {
        let answer = s.result();
        assert!(
            answer.starts_with("closed: ") && answer.contains(&format!("(pid {victim_pid}) died")),
            "{answer}"
        );
        s.finish();
    }
    drop(victim);
    assert!(
        !file_of(&name).exists(),
        "the last live member removed the file"
    );
}

/// Join and stay (the parent kills this process, in the middle of its
/// join or after it).
fn child_joiner(name: &str, size: usize) {
    let joined = Group::join(name, size, &options());
    std::thread::sleep(Duration::from_secs(60));
    drop(joined);
}

/// Slot `i`'s entry in the group's name (`record.rs`'s layout): the pid and
/// the descriptor number of the member that holds the board there; `None`
/// while there is no name or no member in the slot.
fn entry(name: &str, i: u64) -> Option<(u32, u32)> {
    use std::os::unix::fs::FileExt as _;
    let f = std::fs::File::open(file_of(name)).ok()?;
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, 64 + 16 * i).ok()?;
    let pid = u32::from_le_bytes(b[..4].try_into().unwrap());
    (pid != 0).then(|| (pid, u32::from_le_bytes(b[4..].try_into().unwrap())))
}

/// Wait (bounded) until slot `i`'s entry names process `pid`.
fn await_entry(name: &str, i: u64, pid: u32) -> (u32, u32) {
    for _ in 0..10_000 {
        match entry(name, i) {
            Some(e) if e.0 == pid => return e,
            _ => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    panic!("process {pid} never took slot {i} of group {name}");
}

#[test]
fn a_joiner_reaches_the_board_through_a_live_member_once_the_founder_died() {
    let name = unique("founder");
    let arg = format!("{name}:3");
    let founder = start("joiner", &arg);
    let dead = founder.id();
    await_entry(&name, 0, dead);
    // Each member joins, then waits for the others at a barrier.
    let member = |name: String, timeout: Duration| {
        let mut g = Group::join(&name, 3, &options().timeout(timeout))?;
        Ok::<_, Error>((g.rank(), g.barrier()))
    };
    let second = {
        let name = name.clone();
        std::thread::spawn(move || member(name, Duration::from_secs(30)))
    };
    await_entry(&name, 1, std::process::id());
    drop(founder); // SIGKILL and reap, in the middle of its join.
                   // Only the second member's descriptor leads to the board now: the
                   // third joins that group (a joiner that reached no board would found a
                   // new one and wait there until its timeout), and both learn at the
                   // barrier who died.
    let third = member(name.clone(), Duration::from_secs(10));
    for (who, rank, got) in [("third", 2, third), ("second", 1, second.join().unwrap())] {
        let (joined, barrier) = got.unwrap_or_else(|e| panic!("{who}'s join: {e}"));
        assert_eq!(joined, rank, "{who}'s rank");
        match barrier {
            Err(e @ Error::Closed { .. }) => assert!(
                e.to_string()
                    .contains(&format!("member 0 (pid {dead}) died")),
                "{who}: {e}"
            ),
            other => panic!("{who}'s barrier: {other:?}"),
        }
    }
    assert_name_removed(&name);
}

#[test]
fn members_outlive_their_name_truncated_and_their_board_cannot_be_truncated() {
    let name = unique("truncated");
    let arg = format!("{name}:2");
    let mut kid = start("survivor", &arg);
    let mut g = Group::join(&name, 2, &options()).expect("join");
    assert!(kid.result().starts_with("joined"));
    let kid_rank = g.members().iter().position(|m| m.pid == kid.id());
    let (pid, fd) = entry(&name, kid_rank.expect("the child's rank") as u64).expect("an entry");
    assert_eq!(pid, kid.id());
    // Another process of the user: the board, through the member's
    // descriptor, keeps its size; the name does not.
    let truncate = |size: &str, path: &str| {
        std::process::Command::new("truncate")
            .args(["-s", size, path])
            .output()
            .expect("running truncate")
    };
    let board = format!("/proc/{pid}/fd/{fd}");
    for size in ["0", "1G"] {
        let out = truncate(size, &board);
        assert!(!out.status.success(), "the board was resized to {size}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("Operation not permitted"), "{said}");
    }
    assert!(truncate("0", file_of(&name).to_str().unwrap())
        .status
        .success());
    // The members go on; a new join is refused.
    kid.tell("go");
    let all = g
        .all_gather(b"still here")
        .expect("an all-gather after the attack");
    assert_eq!(all, vec![b"still here".to_vec(); 2]);
    assert_eq!(kid.result(), "no error");
    let err = Group::join(&name, 2, &options()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert!(err.to_string().contains("not a group's name"), "{err}");
    kid.finish();
    // A leave writes into no name of another length than its group's.
    let left = std::fs::metadata(file_of(&name)).expect("the name, one member left");
    assert_eq!(
        left.len(),
        0,
        "the child's leave wrote into the truncated name"
    );
    drop(g);
    assert_name_removed(&name);
}

#[test]
fn a_group_of_the_most_members_is_joined_through_its_longest_name() {
    let name = unique("most");
    let most = hal_core::group::MAX_MEMBERS;
    let founder = start("joiner", &format!("{name}:{most}"));
    await_entry(&name, 0, founder.id());
    assert_eq!(
        std::fs::metadata(file_of(&name)).unwrap().len(),
        64 + 16 * most as u64,
        "the longest name"
    );
    // The second joiner takes a slot, then waits for the other 4094.
    let short = options().timeout(Duration::from_millis(200));
    let err = Group::join(&name, most, &short).unwrap_err();
    let said: String = err.to_string().chars().take(300).collect();
    assert!(err.is_timeout(), "{said}");
    assert!(err.to_string().contains("2 (not joined)"));
    drop(founder);
    std::fs::remove_file(file_of(&name)).unwrap();
}

#[test]
fn a_file_left_by_crashed_members_is_replaced_by_the_next_join() {
    let name = unique("crashed");
    let arg = format!("{name}:2");
    let mut kids = [start("sleeper", &arg), start("sleeper", &arg)];
    for k in &mut kids {
        assert!(k.result().starts_with("joined"));
    }
    drop(kids); // SIGKILL and reap: neither leaves.
    assert!(file_of(&name).exists(), "crashed members leave their file");
    // The next join of the name, of another size, replaces it.
    let mut g = Group::join(&name, 1, &options()).expect("join over a dead group");
    assert_eq!(g.all_gather(b"x").unwrap(), vec![b"x".to_vec()]);
    drop(g);
    assert!(!file_of(&name).exists());
}

#[test]
fn another_users_file_of_the_name_is_refused() {
    use std::os::unix::fs::OpenOptionsExt as _;
    if !nix::unistd::geteuid().is_root() {
        hal_core::testing::not_run("giving a file to another user needs root");
        return;
    }
    let name = unique("owner");
    let path = file_of(&name);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    nix::unistd::chown(
        &path,
        Some(nix::unistd::Uid::from_raw(65534)),
        Some(nix::unistd::Gid::from_raw(65534)),
    )
    .unwrap();
    let err = Group::join(&name, 1, &options()).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(err, Error::PermissionDenied { .. }), "{err}");
    assert!(err.to_string().contains("uid 65534"), "{err}");
}

/// Another user tries to take a user's group names first. A name in the
/// user's directory (`/dev/shm/.hal-UID`, mode 0700) cannot be taken: a
/// real process of uid 65534 fails to make a file or a directory at root's
/// name, and root's join of that name works. What another user can take is
/// the directory of a user who has none yet: it makes `/dev/shm/.hal-X` (a
/// directory, or a link) for an unused uid X; a real process of uid X is
/// then refused with `PermissionDenied` naming the owner and the path and
/// saying what to do (root removes it), not `Io`.
#[test]
fn squatted_group_name_is_permission_denied() {
    use std::os::unix::process::CommandExt as _;
    if !nix::unistd::geteuid().is_root() {
        hal_core::testing::not_run("a process of another uid needs root to start");
        return;
    }
    let squat = |how: &str, path: &std::path::Path| {
        std::process::Command::new("/bin/sh")
            .args(["-c", how, "squatter"])
            .arg(path)
            .stderr(std::process::Stdio::null())
            .uid(65534)
            .gid(65534)
            .status()
            .expect("starting a shell of uid 65534")
    };
    hal_core::kit::os::make_user_dir().expect("root's directory");
    for (tag, how) in [
        ("file", "umask 077 && : > \"$1\""),
        ("dir", "mkdir -m 700 \"$1\""),
    ] {
        let name = unique(&format!("squatted-{tag}"));
        let path = file_of(&name);
        assert!(
            !squat(how, &path).success(),
            "{tag}: uid 65534 made {} in root's directory",
            path.display()
        );
        drop(Group::join(&name, 1, &options()).expect("root's join"));
        assert_name_removed(&name);
    }
    for (tag, how) in [
        ("dir", "mkdir -m 700 \"$1\""),
        ("link", "ln -s /tmp \"$1\""),
    ] {
        let base = 3_100_000_000 + (std::process::id() % 100_000) * 1000;
        let victim = (base..base + 1000)
            .find(|uid| !hal_core::kit::os::user_dir(*uid).exists())
            .expect("an unused uid");
        let dir = hal_core::kit::os::user_dir(victim);
        assert!(squat(how, &dir).success(), "{tag}: the squatter failed");
        let name = unique(&format!("squatted-{tag}"));
        let mut kid = Kid::start((ROLE, "squatted"), (ARG, &format!("{name}:1")), |c| {
            c.uid(victim).gid(victim);
        });
        let got = kid.result();
        kid.finish();
        if std::fs::remove_file(&dir).is_err() {
            std::fs::remove_dir(&dir).unwrap();
        }
        let (kind, reason) = got.split_once('|').expect("KIND|REASON");
        assert_eq!(kind, "PermissionDenied", "{tag}: {reason}");
        for says in [
            "owner uid 65534".to_string(),
            dir.display().to_string(),
            format!("not the private directory of uid {victim}"),
            "root remove".to_string(),
        ] {
            assert!(reason.contains(&says), "{tag}: {reason}");
        }
    }
}

/// Join, and say how the join was refused (`KIND|REASON`).
fn child_squatted(name: &str, size: usize) {
    match Group::join(name, size, &options()) {
        Ok(_) => say("Ok|joined"),
        Err(Error::PermissionDenied { reason, .. }) => say(format!("PermissionDenied|{reason}")),
        Err(e) => say(format!("{e:?}|")),
    }
}
