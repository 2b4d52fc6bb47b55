//! `halctl channel ls` shows a remote subscriber with its host: the
//! publisher offers its channel on host 0, a subscriber on host 1
//! subscribes over UCX's TCP transport (`UCX_TLS=tcp`); host 0's listing
//! names the proxy's pid and the remote's address, text and JSON, until
//! the remote subscriber is killed.
//!
//! Hosts are network namespaces joined by a veth pair, each with its own
//! `/dev/shm` ([`hal_tests::hosts::Hosts`]). Where UCX is not installed, or
//! the machine refuses namespaces, the test says `NOT RUN` and why (a
//! failure with `HAL_TESTS_STRICT=1`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hal::channel::{ChannelOptions, Publisher};
use hal::cpu_shm::CpuShm;
use hal::remote::{Node, RemoteChannelOptions, RemoteSubscribeOptions, RemoteSubscriber};
use hal::testing::not_run;
use hal::Backend;
use hal_tests::hosts::Hosts;
use hal_tests::process::{arg, report, wait_for, ChildProc, ROLE_ENV};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_halctl");

/// The module of the child entry point.
const ROLES: &str = "roles";

/// How long the listing may take to see the killed subscriber gone (its
/// proxy notices the closed connection first).
const PATIENCE: Duration = Duration::from_secs(60);

mod roles {
    use super::*;

    /// The child entry point: a role in a child process its parent started.
    #[test]
    #[ignore = "child entry point: run by its parent"]
    fn __child() {
        let role = std::env::var(ROLE_ENV).expect("a child entry point, run by its parent");
        match role.as_str() {
            "publisher" => publisher(),
            "remote" => remote(),
            other => panic!("unknown role {other}"),
        }
    }

    /// Create the channel `name`, offer it on a node of `listen`, report
    /// the offer's text; stay until told to quit.
    fn publisher() {
        let device = CpuShm::new().open(0).expect("open cpu-shm");
        let name = arg("name");
        let _publisher = Publisher::create(
            &device,
            &name,
            &ChannelOptions::default().slots(4).slot_size(4096),
        )
        .expect("create the channel");
        let node = Node::bind(arg("listen").parse().unwrap()).expect("bind a node");
        let offer = node
            .offer_channel(
                Arc::new(CpuShm::new().host()),
                &name,
                &RemoteChannelOptions::default(),
            )
            .expect("offer the channel");
        report("offer", offer.text());
        assert_eq!(wait_for("do"), "quit");
    }

    /// Subscribe to the offer `text` from a node of `listen`; report the
    /// node's address; stay until killed or told to quit.
    fn remote() {
        let node = Node::bind(arg("listen").parse().unwrap()).expect("bind a node");
        let host = CpuShm::new().host();
        let _sub = RemoteSubscriber::connect(
            &node,
            &host,
            &arg("text"),
            &RemoteSubscribeOptions::default(),
        )
        .expect("subscribe");
        report("subscribed", "ok");
        assert_eq!(wait_for("do"), "quit");
    }
}

fn ucx_here() -> bool {
    match Node::bind("127.0.0.1:0".parse().unwrap()) {
        Ok(_) => true,
        Err(e @ (hal::Error::Unavailable { .. } | hal::Error::Unsupported { .. })) => {
            not_run(&format!("UCX cannot be used here: {e}"));
            false
        }
        Err(e) => panic!("making a node: {e}"),
    }
}

fn spawn(hosts: &Hosts, i: usize, role: &str, args: &[(&str, String)]) -> ChildProc {
    let mut args = args.to_vec();
    args.push(("listen", format!("{}:0", hosts.address(i))));
    ChildProc::spawn_with(ROLES, role, &args, |cmd| {
        cmd.env("UCX_TLS", "tcp");
        hosts.place(i, cmd);
    })
}

/// `halctl channel ls` (with `args`) on host `i`: its stdout.
fn ls(hosts: &Hosts, i: usize, args: &[&str]) -> String {
    let out = hosts
        .command(i, BIN)
        .args(["channel", "ls"])
        .args(args)
        .output()
        .expect("run halctl");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// Channel `name` as host `i`'s `halctl channel ls --json` lists it.
fn listed(hosts: &Hosts, i: usize, name: &str) -> Option<Value> {
    let v: Value = serde_json::from_str(&ls(hosts, i, &["--json"])).expect("JSON");
    v["channels"]
        .as_array()
        .expect("a list of channels")
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
}

#[test]
fn a_remote_subscriber_is_listed_with_its_host_until_it_is_killed() {
    if !ucx_here() {
        return;
    }
    let Some(hosts) = Hosts::new_or_not_run() else {
        return;
    };
    let name = format!("halctl-ls-remote-{}", std::process::id());
    let mut publisher = spawn(&hosts, 0, "publisher", &[("name", name.clone())]);
    let text = publisher.expect("offer");
    let mut remote = spawn(&hosts, 1, "remote", &[("text", text)]);
    assert_eq!(remote.expect("subscribed"), "ok");

    let c = listed(&hosts, 0, &name).expect("the channel is listed on host 0");
    let pid = u64::from(publisher.pid());
    // The proxy is a subscriber of the offering process.
    assert_eq!(c["subscribers"], serde_json::json!([pid]), "{c}");
    let remotes = c["remote_subscribers"].as_array().expect("a list").clone();
    assert_eq!(remotes.len(), 1, "{c}");
    assert_eq!(remotes[0]["pid"], pid, "{c}");
    let host = remotes[0]["host"].as_str().expect("an address").to_string();
    let addr: std::net::SocketAddr = host.parse().expect("IP:PORT");
    assert_eq!(addr.ip(), hosts.address(1), "{c}");
    let line = ls(&hosts, 0, &[]);
    assert!(
        line.contains(&format!("subscribers: {pid} (remote {host})")),
        "{line}"
    );
    // Host 1 has no channel of that name: the remote holds its own slots.
    assert!(listed(&hosts, 1, &name).is_none());

    remote.kill();
    let deadline = Instant::now() + PATIENCE;
    let c = loop {
        let c = listed(&hosts, 0, &name).expect("the channel is still listed");
        if c["subscribers"] == serde_json::json!([]) || Instant::now() >= deadline {
            break c;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(c["subscribers"], serde_json::json!([]), "{c}");
    assert_eq!(c["remote_subscribers"], serde_json::json!([]), "{c}");
    let line = ls(&hosts, 0, &[]);
    assert!(line.contains("subscribers: none"), "{line}");
    // The note went with its last entry.
    let uid = nix::unistd::geteuid().as_raw();
    let note = hosts
        .dev_shm(0)
        .join(format!(".hal-{uid}"))
        .join(format!("remote.{name}"));
    assert!(!note.exists(), "{} is left behind", note.display());

    publisher.send("do quit");
    publisher.finish();
    assert!(
        listed(&hosts, 0, &name).is_none(),
        "a closed channel is gone"
    );
}
