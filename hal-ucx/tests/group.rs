//! Groups across hosts with real processes: members in separate
//! processes on two hosts made of network namespaces joined by a veth pair
//! ([`hal_tests::hosts`]), over UCX's TCP transport (`UCX_TLS=tcp`). Each
//! pair of hosts is fresh, so the group's address (host 0's, port
//! [`PORT`]) is free in every test.
//!
//! Where UCX is not installed, or the machine refuses namespaces, a test
//! says `NOT RUN` and why (a failure with `HAL_TESTS_STRICT=1`).

use std::time::Duration;

use hal_core::testing::not_run;
use hal_core::{AllocDesc, Device, Error, Memory};
use hal_cpu_shm::CpuShm;
use hal_tests::hosts::Hosts;
use hal_tests::process::{arg, opt_arg, report, wait_for, ChildProc, ROLE_ENV};
use hal_ucx::{Node, RemoteGroup, RemoteGroupOptions, RemoteOptions};

/// The module of the child entry point.
const ROLES: &str = "member";

/// The group's port on host 0.
const PORT: u16 = 29500;

/// The members' secret, as `HAL_GROUP_SECRET` spells it.
const SECRET: &str = "00112233445566778899aabbccddeeff";

/// A membership moves between threads (a runtime's worker thread joins,
/// its main thread leaves).
const _: fn() = || {
    fn send<T: Send>() {}
    send::<RemoteGroup>();
};

/// What member `rank` posts: its own bytes, of a length of its own.
fn contribution(rank: usize, round: u32) -> Vec<u8> {
    let len = 100 + 37 * rank + round as usize;
    (0..len)
        .map(|i| ((i * 13 + rank * 101 + round as usize * 7) % 251) as u8)
        .collect()
}

/// The roles a child plays.
mod member {
    use super::*;

    /// The child entry point: a role in a child process its parent started.
    #[test]
    #[ignore = "child entry point: run by its parent"]
    fn __child() {
        let role = std::env::var(ROLE_ENV).expect("a child entry point, run by its parent");
        match role.as_str() {
            "member" => member(),
            other => panic!("unknown role {other}"),
        }
    }

    /// Join the group the arguments name; report the rank (or the join's
    /// error); then follow the parent's commands.
    fn member() {
        let mut options = RemoteGroupOptions::default();
        if let Some(ms) = opt_arg("timeout_ms") {
            options = options.timeout(Duration::from_millis(ms.parse().unwrap()));
        }
        if let Some(n) = opt_arg("max_payload") {
            options = options.max_payload(n.parse().unwrap());
        }
        if let Some(hex) = opt_arg("secret") {
            let mut s = [0u8; 16];
            for (i, b) in s.iter_mut().enumerate() {
                *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
            }
            options = options.secret(s);
        }
        let size: usize = arg("size").parse().unwrap();
        let joined = RemoteGroup::join_at(arg("at").parse().unwrap(), &arg("name"), size, &options);
        let mut group = match joined {
            Ok(g) => g,
            Err(e) => {
                report("joined", &format!("{}: {}", kind(&e), one_line(&e)));
                assert_eq!(wait_for("do"), "quit");
                return;
            }
        };
        assert_eq!(group.size(), size);
        report("joined", &group.rank().to_string());
        let mut round = 0u32;
        loop {
            let line = wait_for("do");
            let words: Vec<&str> = line.split_whitespace().collect();
            let rank = group.rank();
            match words.as_slice() {
                ["members"] => {
                    let ms = group.members();
                    for (i, m) in ms.iter().enumerate() {
                        assert_eq!(m.rank, i);
                    }
                    assert_eq!(ms[rank].pid, std::process::id());
                    assert_eq!(ms[rank].address, group.node().address());
                    let ips: Vec<String> = ms.iter().map(|m| m.address.ip().to_string()).collect();
                    report("members", &ips.join(","));
                }
                ["gather"] => {
                    round += 1;
                    let out = match group.all_gather(&contribution(rank, round)) {
                        Ok(all) => {
                            assert_eq!(all.len(), size);
                            for (r, got) in all.iter().enumerate() {
                                assert!(*got == contribution(r, round), "rank {r}'s bytes");
                            }
                            "ok".to_string()
                        }
                        Err(e) => format!("{}: {}", kind(&e), one_line(&e)),
                    };
                    report("gather", &out);
                }
                ["gather-big", len] => {
                    // Every member's `len + rank` bytes, whole.
                    round += 1;
                    let len: usize = len.parse().unwrap();
                    let big = |r: usize| -> Vec<u8> {
                        let mut v = contribution(r, round);
                        v.resize(len + r, r as u8);
                        v
                    };
                    let all = group.all_gather(&big(rank)).unwrap();
                    for (r, got) in all.iter().enumerate() {
                        assert!(*got == big(r), "rank {r}'s {} bytes", len + r);
                    }
                    report("gather-big", "ok");
                }
                ["gather-over"] => {
                    let over = vec![0u8; options.max_payload + 1];
                    let e = group.all_gather(&over).unwrap_err();
                    report("gather-over", &kind(&e));
                }
                ["bcast", root] => {
                    round += 1;
                    let root: usize = root.parse().unwrap();
                    let mine = if rank == root {
                        contribution(root, round)
                    } else {
                        b"ignored".to_vec()
                    };
                    let got = group.broadcast(root, &mine).unwrap();
                    assert!(got == contribution(root, round), "the root's bytes");
                    report("bcast", "ok");
                }
                ["barrier"] => {
                    round += 1;
                    group.barrier().unwrap();
                    report("barrier", "ok");
                }
                ["local"] => {
                    // The members of this host, and a group of them whose
                    // rounds go through this host's shared memory.
                    let local = group.local_members();
                    assert!(local
                        .iter()
                        .any(|m| m.rank == rank && m.pid == std::process::id()));
                    for m in &local {
                        assert_eq!(
                            m.address.ip(),
                            group.node().address().ip(),
                            "rank {}",
                            m.rank
                        );
                    }
                    let options =
                        hal_core::group::GroupOptions::default().timeout(Duration::from_secs(30));
                    let mut here = group.local_group(&options).unwrap();
                    assert_eq!(here.size(), local.len());
                    let all = here.all_gather(&(rank as u32).to_le_bytes()).unwrap();
                    let mut got: Vec<usize> = all
                        .iter()
                        .map(|b| u32::from_le_bytes(b[..4].try_into().unwrap()) as usize)
                        .collect();
                    got.sort_unstable();
                    let want: Vec<usize> = local.iter().map(|m| m.rank).collect();
                    assert_eq!(got, want, "the local group's members are this host's");
                    let mut pids: Vec<u32> = here.members().iter().map(|m| m.pid).collect();
                    pids.sort_unstable();
                    let mut local_pids: Vec<u32> = local.iter().map(|m| m.pid).collect();
                    local_pids.sort_unstable();
                    assert_eq!(pids, local_pids);
                    report("local", &local.len().to_string());
                }
                ["swap"] => swap(&mut group),
                ["quit"] => return,
                other => panic!("unknown command {other:?}"),
            }
        }
    }

    /// Every member exports memory of its own from the group's node, the
    /// members swap the handles in one all_gather, and each reads the
    /// next member's memory through its handle.
    fn swap(group: &mut RemoteGroup) {
        let (rank, size) = (group.rank(), group.size());
        let mem = CpuShm::new()
            .host()
            .allocate(&AllocDesc::host(4096))
            .unwrap();
        let mine = contribution(rank, 1000);
        mem.write(0, &mine).unwrap();
        let export = group.node().export(&mem, RemoteOptions::default()).unwrap();
        let texts = group.all_gather(export.text().as_bytes()).unwrap();
        let next = (rank + 1) % size;
        let text = std::str::from_utf8(&texts[next]).unwrap();
        let remote = group.node().connect(text).unwrap();
        let want = contribution(next, 1000);
        let mut got = vec![0u8; want.len()];
        remote.read(0, &mut got).unwrap();
        assert!(got == want, "rank {next}'s memory");
        drop(remote);
        // Every reader is done before any export goes.
        group.barrier().unwrap();
        drop(export);
        report("swap", "ok");
    }

    fn one_line(e: &Error) -> String {
        e.to_string().replace('\n', " ")
    }

    /// A one-word name of an error's kind, for the parent.
    fn kind(e: &Error) -> String {
        match e {
            Error::Closed { .. } => "Closed",
            Error::PermissionDenied { .. } => "PermissionDenied",
            Error::NotFound { .. } => "NotFound",
            Error::InvalidArgument { .. } => "InvalidArgument",
            Error::Timeout { .. } => "Timeout",
            Error::Busy { .. } => "Busy",
            Error::Unavailable { .. } => "Unavailable",
            _ => "Other",
        }
        .to_string()
    }
}

/// UCX is loadable here; otherwise the test says it did not run.
fn ucx_here() -> bool {
    match Node::bind("127.0.0.1:0".parse().unwrap()) {
        Ok(_) => true,
        Err(e @ (Error::Unavailable { .. } | Error::Unsupported { .. })) => {
            not_run(&format!("UCX cannot be used here: {e}"));
            false
        }
        Err(e) => panic!("making a node: {e}"),
    }
}

/// Two hosts, where UCX and namespaces are there.
fn hosts() -> Option<Hosts> {
    if !ucx_here() {
        return None;
    }
    Hosts::new_or_not_run()
}

/// How a member is started.
struct Join<'a> {
    name: &'a str,
    size: usize,
    /// `HAL_GROUP_SECRET`'s value (none: unset).
    env_secret: Option<&'a str>,
    /// The secret in the options.
    secret: Option<&'a str>,
    timeout_ms: u64,
    /// `UCX_TLS` (none: UCX's defaults).
    tls: Option<&'a str>,
    max_payload: Option<usize>,
}

impl Join<'_> {
    fn new(name: &str, size: usize) -> Join<'_> {
        Join {
            name,
            size,
            env_secret: Some(SECRET),
            secret: None,
            timeout_ms: 30_000,
            tls: Some("tcp"),
            max_payload: None,
        }
    }
}

/// A member on host `i` joining `j`'s group at host 0's address.
fn spawn(hosts: &Hosts, i: usize, j: &Join<'_>) -> ChildProc {
    let mut args = vec![
        ("at", format!("{}:{PORT}", hosts.address(0))),
        ("name", j.name.to_string()),
        ("size", j.size.to_string()),
        ("timeout_ms", j.timeout_ms.to_string()),
    ];
    if let Some(s) = j.secret {
        args.push(("secret", s.to_string()));
    }
    if let Some(n) = j.max_payload {
        args.push(("max_payload", n.to_string()));
    }
    ChildProc::spawn_with(ROLES, "member", &args, |cmd| {
        match j.tls {
            Some(t) => cmd.env("UCX_TLS", t),
            None => cmd.env_remove("UCX_TLS"),
        };
        match j.env_secret {
            Some(s) => cmd.env("HAL_GROUP_SECRET", s),
            None => cmd.env_remove("HAL_GROUP_SECRET"),
        };
        hosts.place(i, cmd);
    })
}

/// Send `do CMD` to each, then return each one's answer tagged `tag`.
fn ask_all(members: &mut [ChildProc], cmd: &str, tag: &str) -> Vec<String> {
    for m in members.iter_mut() {
        m.send(&format!("do {cmd}"));
    }
    members.iter_mut().map(|m| m.expect(tag)).collect()
}

/// Tell each to quit and require a clean exit.
fn quit_all(members: Vec<ChildProc>) {
    let mut members = members;
    for m in members.iter_mut() {
        m.send("do quit");
    }
    for m in members {
        m.finish();
    }
}

/// The ranks the members reported, checked to be 0..n once each.
fn ranks(members: &mut [ChildProc]) -> Vec<usize> {
    let said: Vec<String> = members.iter_mut().map(|m| m.expect("joined")).collect();
    let ranks: Vec<usize> = said
        .iter()
        .map(|r| {
            r.parse()
                .unwrap_or_else(|_| panic!("not every member joined: {said:?}"))
        })
        .collect();
    let mut sorted = ranks.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..members.len()).collect::<Vec<_>>());
    ranks
}

#[test]
fn group_at_address_across_network_namespaces() {
    let Some(hosts) = hosts() else {
        return;
    };
    let j = Join::new("eight", 8);
    let mut members: Vec<ChildProc> = (0..8).map(|k| spawn(&hosts, k % 2, &j)).collect();
    let ranks = ranks(&mut members);
    // Rank 0 serves host 0's address, so it is on host 0.
    let server = ranks.iter().position(|r| *r == 0).unwrap();
    assert_eq!(server % 2, 0, "rank 0 is a member of host 0");
    // Every member sees the same list: four members on each host, each
    // at its own node's address.
    let lists = ask_all(&mut members, "members", "members");
    assert!(lists.iter().all(|l| *l == lists[0]), "{lists:?}");
    let ips: Vec<&str> = lists[0].split(',').collect();
    for (k, r) in ranks.iter().enumerate() {
        assert_eq!(ips[*r], hosts.address(k % 2).to_string(), "rank {r}'s host");
    }
    assert_eq!(ask_all(&mut members, "gather", "gather"), vec!["ok"; 8]);
    for root in [0, 5, 7] {
        assert_eq!(
            ask_all(&mut members, &format!("bcast {root}"), "bcast"),
            vec!["ok"; 8]
        );
    }
    assert_eq!(ask_all(&mut members, "barrier", "barrier"), vec!["ok"; 8]);
    assert_eq!(ask_all(&mut members, "gather", "gather"), vec!["ok"; 8]);
    // The use it is for: every member's remote handle to every other in
    // one round, and reads across the hosts through them.
    assert_eq!(ask_all(&mut members, "swap", "swap"), vec!["ok"; 8]);
    // What is local goes the local way: the four members of each host
    // know each other, and form a group there.
    assert_eq!(ask_all(&mut members, "local", "local"), vec!["4"; 8]);
    quit_all(members);
}

#[test]
fn group_at_address_large_payloads_over_ucx_defaults_on_one_host() {
    let Some(hosts) = hosts() else {
        return;
    };
    // UCX picks its own transports between the processes of one host.
    let j = Join {
        tls: None,
        max_payload: Some(1 << 20),
        ..Join::new("large", 3)
    };
    let mut members: Vec<ChildProc> = (0..3).map(|_| spawn(&hosts, 0, &j)).collect();
    ranks(&mut members);
    let ok = vec!["ok"; 3];
    assert_eq!(ask_all(&mut members, "gather-big 300000", "gather-big"), ok);
    assert_eq!(
        ask_all(&mut members, "gather-big 1048573", "gather-big"),
        ok
    );
    // A post over the limit is refused here, and the group goes on.
    let over = vec!["InvalidArgument"; 3];
    assert_eq!(ask_all(&mut members, "gather-over", "gather-over"), over);
    assert_eq!(ask_all(&mut members, "gather", "gather"), ok);
    quit_all(members);
}

#[test]
fn group_at_address_member_killed_is_named() {
    let Some(hosts) = hosts() else {
        return;
    };
    let j = Join::new("victims", 4);
    let mut members: Vec<ChildProc> = (0..4).map(|k| spawn(&hosts, k % 2, &j)).collect();
    let ranks = ranks(&mut members);
    assert_eq!(ask_all(&mut members, "gather", "gather"), vec!["ok"; 4]);
    // Rank 2 dies while the others wait for it in a round.
    let at = ranks.iter().position(|r| *r == 2).unwrap();
    let victim = members.remove(at);
    for m in members.iter_mut() {
        m.send("do gather");
    }
    std::thread::sleep(Duration::from_millis(300));
    victim.kill();
    for m in members.iter_mut() {
        let got = m.expect("gather");
        // Closed, not Timeout: named before the group's timeout (30 s).
        assert!(got.starts_with("Closed: "), "{got}");
        assert!(got.contains("member 2 "), "the message names rank 2: {got}");
    }
    // The group is broken for the others: later rounds fail at once.
    for g in ask_all(&mut members, "gather", "gather") {
        assert!(g.starts_with("Closed: ") && g.contains("broken"), "{g}");
    }
    quit_all(members);
}

#[test]
fn group_at_address_server_killed_is_named() {
    let Some(hosts) = hosts() else {
        return;
    };
    let j = Join::new("headless", 3);
    let mut members: Vec<ChildProc> = (0..3).map(|k| spawn(&hosts, k % 2, &j)).collect();
    let ranks = ranks(&mut members);
    assert_eq!(ask_all(&mut members, "barrier", "barrier"), vec!["ok"; 3]);
    let at = ranks.iter().position(|r| *r == 0).unwrap();
    let server = members.remove(at);
    for m in members.iter_mut() {
        m.send("do gather");
    }
    std::thread::sleep(Duration::from_millis(300));
    server.kill();
    for m in members.iter_mut() {
        let got = m.expect("gather");
        assert!(got.starts_with("Closed: "), "{got}");
        assert!(got.contains("member 0 "), "the message names rank 0: {got}");
    }
    quit_all(members);
}

#[test]
fn group_at_address_wrong_secret_is_refused() {
    let Some(hosts) = hosts() else {
        return;
    };
    let j = Join::new("guarded", 2);
    let mut server = spawn(&hosts, 0, &j);
    // A joiner whose secret (in its options) differs from the group's.
    let wrong = Join {
        secret: Some("ffeeddccbbaa99887766554433221100"),
        ..Join::new("guarded", 2)
    };
    let mut intruder = spawn(&hosts, 1, &wrong);
    let got = intruder.expect("joined");
    assert!(got.starts_with("PermissionDenied: "), "{got}");
    assert!(got.contains("secret"), "{got}");
    // The refused joiner took no rank: the right one is rank 1.
    let mut member = spawn(&hosts, 1, &j);
    assert_eq!(member.expect("joined"), "1");
    assert_eq!(server.expect("joined"), "0");
    let mut both = vec![server, member];
    assert_eq!(ask_all(&mut both, "gather", "gather"), vec!["ok"; 2]);
    quit_all(both);
    quit_all(vec![intruder]);
}

#[test]
fn group_at_address_second_group_refused_until_the_first_ends() {
    let Some(hosts) = hosts() else {
        return;
    };
    let a = Join::new("first", 2);
    let mut first = vec![spawn(&hosts, 0, &a), spawn(&hosts, 1, &a)];
    ranks(&mut first);
    // Another group at the same address is refused, naming the one there,
    // and so is one member too many of the first.
    let b = Join::new("second", 2);
    let mut other = spawn(&hosts, 1, &b);
    let got = other.expect("joined");
    assert!(
        got.starts_with("Busy: ") && got.contains("\"first\""),
        "{got}"
    );
    let mut extra = spawn(&hosts, 0, &a);
    let got = extra.expect("joined");
    assert!(
        got.starts_with("Busy: ") && got.contains("all its members"),
        "{got}"
    );
    // The first goes on, then ends.
    assert_eq!(ask_all(&mut first, "gather", "gather"), vec!["ok"; 2]);
    quit_all(first);
    quit_all(vec![other, extra]);
    // Now the second forms at the address.
    let mut second = vec![spawn(&hosts, 1, &b), spawn(&hosts, 0, &b)];
    ranks(&mut second);
    assert_eq!(ask_all(&mut second, "gather", "gather"), vec!["ok"; 2]);
    quit_all(second);
}

#[test]
fn group_at_address_join_times_out_with_a_clear_error() {
    let Some(hosts) = hosts() else {
        return;
    };
    // Nobody serves host 0's address: a joiner on host 1 tries until its
    // timeout.
    let alone = Join {
        timeout_ms: 1500,
        ..Join::new("nobody", 2)
    };
    let mut lonely = spawn(&hosts, 1, &alone);
    let got = lonely.expect("joined");
    assert!(got.starts_with("Timeout: "), "{got}");
    assert!(got.contains("start the group's first member"), "{got}");
    quit_all(vec![lonely]);
    // Too few members: a group of 3 that only 2 join. The server names the
    // rank that did not come; the member that joined (and would wait
    // longer) is told that the server left.
    let few = Join {
        timeout_ms: 5000,
        ..Join::new("few", 3)
    };
    let mut server = spawn(&hosts, 0, &few);
    let mut member = spawn(&hosts, 1, &Join::new("few", 3));
    let got = server.expect("joined");
    assert!(got.starts_with("Timeout: "), "{got}");
    assert!(
        got.contains("2 of 3 members joined; rank(s) 2 did not"),
        "{got}"
    );
    let got = member.expect("joined");
    assert!(
        got.starts_with("Closed: ") && got.contains("member 0 "),
        "{got}"
    );
    quit_all(vec![server, member]);
    // No secret at all: the error says how to set one.
    let bare = Join {
        env_secret: None,
        ..Join::new("bare", 2)
    };
    let mut bare = spawn(&hosts, 0, &bare);
    let got = bare.expect("joined");
    assert!(
        got.starts_with("InvalidArgument: ") && got.contains("HAL_GROUP_SECRET"),
        "{got}"
    );
    quit_all(vec![bare]);
}
