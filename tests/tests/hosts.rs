//! Two hosts on one machine ([`hal_tests::hosts`]), with real processes:
//! they reach each other over their veth pair and nothing else, they share
//! no `/dev/shm`, each sees its own network devices, two pairs of hosts at
//! once do not meet, and nothing is left when they are dropped.
//!
//! Where the machine refuses (not root, no namespaces, no veth), each test
//! says `NOT RUN` and why (a failure with `HAL_TESTS_STRICT=1`).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use hal_tests::hosts::Hosts;
use hal_tests::process::{arg, opt_arg, report, wait_for_eof, ROLE_ENV};

/// The module of the child entry point, as [`Hosts::spawn`] names it.
const ROLES: &str = "host";

/// The roles a child plays on a host.
mod host {
    use super::*;

    /// The child entry point: a role in a child process its parent started.
    #[test]
    #[ignore = "child entry point: run by its parent"]
    fn __child() {
        let role = std::env::var(ROLE_ENV).expect("a child entry point, run by its parent");
        match role.as_str() {
            "listener" => listener(),
            "client" => client(),
            "shm-writer" => shm_writer(),
            "shm-looker" => shm_looker(),
            "interfaces" => interfaces(),
            "leave-nothing" => super::leave_nothing(),
            "unprivileged" => unprivileged(),
            other => panic!("unknown role {other}"),
        }
    }

    /// Listen on `at` and on this host's loopback; answer one connection
    /// on `at` with `name heard LINE`; wait for the parent to close.
    fn listener() {
        let at: SocketAddr = arg("at").parse().expect("a socket address");
        let listener = TcpListener::bind(at).expect("listening on the host's address");
        let lo = TcpListener::bind("127.0.0.1:0").expect("listening on the host's loopback");
        let lo_port = lo.local_addr().unwrap().port();
        // This host's own loopback reaches the loopback listener.
        drop(TcpStream::connect(("127.0.0.1", lo_port)).expect("connecting to its own loopback"));
        drop(lo.accept().expect("accepting on its own loopback"));
        let port = listener.local_addr().unwrap().port();
        report("listening", &format!("{port} {lo_port}"));
        let (stream, peer) = listener.accept().expect("accepting the peer");
        let mut line = String::new();
        BufReader::new(stream.try_clone().unwrap())
            .read_line(&mut line)
            .expect("reading the peer's line");
        writeln!(&stream, "{} heard {}", arg("name"), line.trim_end()).expect("answering");
        report("peer", &peer.ip().to_string());
        wait_for_eof();
        drop(lo);
    }

    /// Try `127.0.0.1:loopback` (when given) and report how it went;
    /// connect to `to`, say `say`, report the answer.
    fn client() {
        if let Some(port) = opt_arg("loopback") {
            let port: u16 = port.parse().expect("a port");
            let outcome = match TcpStream::connect(("127.0.0.1", port)) {
                Ok(_) => "connected".to_string(),
                Err(e) => format!("{:?}", e.kind()),
            };
            report("loopback", &outcome);
        }
        let to: SocketAddr = arg("to").parse().expect("a socket address");
        let stream = TcpStream::connect(to).expect("connecting to the other host");
        report("local", &stream.local_addr().unwrap().ip().to_string());
        writeln!(&stream, "{}", arg("say")).expect("saying the line");
        let mut reply = String::new();
        BufReader::new(&stream)
            .read_line(&mut reply)
            .expect("reading the answer");
        report("reply", reply.trim_end());
    }

    /// Create `/dev/shm/<name>`, say so, wait for the parent to close.
    fn shm_writer() {
        let path = Path::new("/dev/shm").join(arg("name"));
        std::fs::write(&path, b"host").expect("creating a file in /dev/shm");
        report("created", "");
        wait_for_eof();
    }

    /// Report whether `/dev/shm/<name>` exists here.
    fn shm_looker() {
        let path = Path::new("/dev/shm").join(arg("name"));
        report("exists", &path.exists().to_string());
    }

    /// Report the network devices `/sys/class/net` lists here, wait for the
    /// parent to close.
    fn interfaces() {
        let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
            .expect("reading /sys/class/net")
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        report("interfaces", &names.join(","));
        wait_for_eof();
    }

    /// Try to make hosts; report how it went.
    fn unprivileged() {
        let outcome = match Hosts::new() {
            Ok(_) => "made".to_string(),
            Err(e) if e.is_refusal() => format!("refused {e}"),
            Err(e) => format!("failed {e}"),
        };
        report("outcome", &outcome);
    }
}

/// A `/dev/shm` name of this test process, unique per call.
fn shm_name() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "hal-hosts-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Start a listener on host 0 of `hosts` (port 0: any) answering as `name`;
/// it and its two ports (on host 0's address, on its loopback).
fn listen(hosts: &Hosts, port: u16, name: &str) -> (hal_tests::process::ChildProc, u16, u16) {
    let at = SocketAddr::from((hosts.address(0), port)).to_string();
    let mut listener = hosts.spawn(
        0,
        ROLES,
        "listener",
        &[("at", at), ("name", name.to_string())],
    );
    let ports = listener.expect("listening");
    let (port, lo_port) = ports.split_once(' ').expect("two ports");
    (
        listener,
        port.parse().expect("a port"),
        lo_port.parse().expect("a port"),
    )
}

#[test]
fn two_hosts_reach_each_other_only_over_the_veth() {
    let Some(hosts) = Hosts::new_or_not_run() else {
        return;
    };
    let (mut listener, port, lo_port) = listen(&hosts, 0, "host-0");

    // The test process, in its own namespace, has no way to host 0.
    let target = SocketAddr::from((hosts.address(0), port));
    let from_root = TcpStream::connect_timeout(&target, Duration::from_secs(3));
    assert!(
        from_root.is_err(),
        "the test process reached {target}, which only host 1 should reach"
    );

    let mut client = hosts.spawn(
        1,
        ROLES,
        "client",
        &[
            ("to", target.to_string()),
            ("loopback", lo_port.to_string()),
            ("say", "hello from host 1".to_string()),
        ],
    );
    // Host 1's loopback is its own: host 0's loopback listener is not there.
    assert_eq!(client.expect("loopback"), "ConnectionRefused");
    assert_eq!(client.expect("local"), hosts.address(1).to_string());
    assert_eq!(client.expect("reply"), "host-0 heard hello from host 1");
    assert_eq!(listener.expect("peer"), hosts.address(1).to_string());
    client.finish();
    listener.finish();
}

/// A file removed when this is dropped.
struct Removed(std::path::PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn hosts_do_not_share_dev_shm() {
    let Some(hosts) = Hosts::new_or_not_run() else {
        return;
    };
    let name = shm_name();
    // Were the writer on no host of its own, its file would be ours.
    let _ours = Removed(Path::new("/dev/shm").join(&name));
    let args = [("name", name.clone())];
    let mut writer = hosts.spawn(0, ROLES, "shm-writer", &args);
    writer.expect("created");
    let look = |i: usize| {
        let mut looker = hosts.spawn(i, ROLES, "shm-looker", &args);
        let seen = looker.expect("exists");
        looker.finish();
        seen
    };
    assert_eq!(look(0), "true", "another process of host 0 sees the file");
    let here = Removed(Path::new("/dev/shm").join(shm_name()));
    std::fs::write(&here.0, b"here").unwrap();
    let mut looker = hosts.spawn(
        0,
        ROLES,
        "shm-looker",
        &[(
            "name",
            here.0.file_name().unwrap().to_string_lossy().into_owned(),
        )],
    );
    assert_eq!(
        looker.expect("exists"),
        "false",
        "host 0 sees the test's /dev/shm"
    );
    looker.finish();
    drop(here);
    assert_eq!(look(1), "false", "host 1 sees host 0's /dev/shm");
    assert!(
        !Path::new("/dev/shm").join(&name).exists(),
        "the test process sees host 0's /dev/shm"
    );
    assert!(hosts.dev_shm(0).join(&name).exists());
    assert!(!hosts.dev_shm(1).join(&name).exists());
    let old_dev_shm = hosts.dev_shm(0);
    writer.finish();
    drop(hosts);
    assert!(!Path::new("/dev/shm").join(&name).exists());
    assert!(
        !old_dev_shm.join(&name).exists(),
        "host 0's /dev/shm outlived its hosts"
    );
}

#[test]
fn hosts_see_their_own_interfaces() {
    let Some(hosts) = Hosts::new_or_not_run() else {
        return;
    };
    for i in 0..2 {
        let mut child = hosts.spawn(i, ROLES, "interfaces", &[]);
        assert_eq!(
            child.expect("interfaces"),
            format!("{},lo", hosts.interface(i))
        );
        child.finish();
    }
    let here: BTreeSet<String> = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for i in 0..2 {
        assert!(!here.contains(hosts.interface(i)), "{here:?}");
    }
}

/// The namespace a link of `/proc/PID/ns/` or `/proc/PID/fd/` names
/// (`net:[4026532000]`), if it is there.
fn link(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_link(path)
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// The namespaces the descriptors of this process name.
fn namespace_descriptors() -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| link(e.unwrap().path()))
        .filter(|l| l.starts_with("net:[") || l.starts_with("mnt:["))
        .collect()
}

/// In a process of its own (no other hosts in it, whose namespaces could
/// reuse the numbers of dropped ones): make hosts, run a child on one,
/// drop them, check that nothing is left, report `clean`.
fn leave_nothing() {
    let hosts = match Hosts::new() {
        Ok(hosts) => hosts,
        Err(e) if e.is_refusal() => {
            report("outcome", &format!("refused {e}"));
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert_eq!(
        namespace_descriptors().len(),
        4,
        "two hosts hold two namespaces each"
    );
    let interfaces = [
        hosts.interface(0).to_string(),
        hosts.interface(1).to_string(),
    ];
    let mut child = hosts.spawn(0, ROLES, "interfaces", &[]);
    child.expect("interfaces");
    let mut pids = vec![child.pid(), hosts.anchor_pid(0), hosts.anchor_pid(1)];
    let mut namespaces = BTreeSet::new();
    for pid in &pids {
        for ns in ["net", "mnt"] {
            namespaces.insert(link(format!("/proc/{pid}/ns/{ns}")).expect("a host's namespace"));
        }
    }
    assert_eq!(namespaces.len(), 4, "{namespaces:?}");
    child.finish();
    drop(hosts);

    for name in &interfaces {
        let shown = std::process::Command::new("ip")
            .args(["link", "show", name])
            .output()
            .expect("running ip");
        assert!(!shown.status.success(), "{name} is in the test's namespace");
    }
    // The anchors and the child are gone (were one of their pids taken
    // again since, it would not be by a process in these namespaces).
    pids.retain(|pid| {
        ["net", "mnt"]
            .iter()
            .any(|ns| link(format!("/proc/{pid}/ns/{ns}")).is_some_and(|l| namespaces.contains(&l)))
    });
    assert_eq!(pids, Vec::<u32>::new(), "processes of the hosts still run");
    // And every child of this process was reaped: none is left, not even
    // a zombie.
    let mut status = 0;
    // SAFETY: waitpid(2) with WNOHANG writes only to `status`.
    let waited = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    assert_eq!(
        (waited, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::ECHILD)),
        "a child process of the hosts was not reaped"
    );
    assert_eq!(
        namespace_descriptors(),
        Vec::<String>::new(),
        "descriptors of the hosts' namespaces are still open"
    );
    report("outcome", "clean");
}

#[test]
fn hosts_leave_nothing_behind() {
    let mut child = hal_tests::process::ChildProc::spawn(ROLES, "leave-nothing", &[]);
    let outcome = child.expect("outcome");
    child.finish();
    if let Some(why) = outcome.strip_prefix("refused ") {
        hal_core::testing::not_run(why);
        return;
    }
    assert_eq!(outcome, "clean");
}

#[test]
fn two_pairs_of_hosts_at_once_work_independently() {
    let Some(a) = Hosts::new_or_not_run() else {
        return;
    };
    let Some(b) = Hosts::new_or_not_run() else {
        return;
    };
    let names: BTreeSet<&str> = [
        a.interface(0),
        a.interface(1),
        b.interface(0),
        b.interface(1),
    ]
    .into_iter()
    .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert_eq!(a.address(0), b.address(0));

    // The same address and port on both host 0s: separate namespaces.
    let (mut listen_a, port, _) = listen(&a, 0, "a");
    let (mut listen_b, port_b, _) = listen(&b, port, "b");
    assert_eq!(port, port_b);
    let to = SocketAddr::from((a.address(0), port)).to_string();
    let mut clients = Vec::new();
    for (hosts, says) in [(&b, "to b"), (&a, "to a")] {
        let client = hosts.spawn(
            1,
            ROLES,
            "client",
            &[("to", to.clone()), ("say", says.to_string())],
        );
        clients.push(client);
    }
    assert_eq!(clients[0].expect("reply"), "b heard to b");
    assert_eq!(clients[1].expect("reply"), "a heard to a");
    for client in clients {
        client.finish();
    }
    listen_a.expect("peer");
    listen_b.expect("peer");
    listen_a.finish();
    listen_b.finish();
}

#[test]
fn a_process_without_privileges_is_refused_with_a_typed_error() {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        hal_core::testing::not_run("this test needs root to start a process as another uid");
        return;
    }
    let mut child = hal_tests::process::ChildProc::spawn_with(ROLES, "unprivileged", &[], |cmd| {
        use std::os::unix::process::CommandExt;
        cmd.uid(65534).gid(65534);
    });
    let outcome = child.expect("outcome");
    child.finish();
    assert!(
        outcome.starts_with("refused ") && outcome.contains("run as root"),
        "{outcome}"
    );
}
