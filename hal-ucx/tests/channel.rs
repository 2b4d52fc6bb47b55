//! Channels with subscribers on other hosts, with real processes: the
//! publisher, its local subscribers and the process that offers the
//! channel on host 0, remote subscribers on host 1 ([`hal_tests::hosts`]:
//! network namespaces joined by a veth pair, each with its own
//! `/dev/shm`), over UCX's TCP transport (`UCX_TLS=tcp`).
//!
//! Where UCX is not installed, or the machine refuses namespaces, a test
//! says `NOT RUN` and why (a failure with `HAL_TESTS_STRICT=1`).

use std::sync::Arc;
use std::time::Duration;

use hal_core::channel::{ChannelOptions, Mode, Publisher, SubscribeOptions, Subscriber};
use hal_core::handle::remote::RemoteHandle;
use hal_core::testing::not_run;
use hal_core::Error;
use hal_cpu_shm::CpuShm;
use hal_tests::hosts::Hosts;
use hal_tests::process::{arg, opt_arg, report, wait_for, ChildProc, ROLE_ENV};
use hal_ucx::{Node, RemoteChannelOptions, RemoteSample, RemoteSubscribeOptions, RemoteSubscriber};

/// The module of the child entry point.
const ROLES: &str = "roles";

/// A subscription and an offer move between threads, and a subscriber's
/// threads may receive at once.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<RemoteSubscriber>();
    shared::<hal_ucx::ChannelOffer>();
};

/// Byte `i` of sample `seq`.
fn pattern(seq: u64, i: u64) -> u8 {
    ((i.wrapping_mul(31) + seq * 7 + i / 4096) % 251) as u8
}

/// The bytes of sample `seq`, of `len` bytes.
fn sample_bytes(seq: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| pattern(seq, i)).collect()
}

/// The length of sample `seq` on a channel of slots of `slot_size`: every
/// sample a length of its own, the first ones full.
fn sample_len(seq: u64, slot_size: u64) -> usize {
    (slot_size - (seq * 977) % (slot_size / 2 + 1)) as usize
}

/// The roles a child plays.
mod roles {
    use super::*;

    /// The child entry point: a role in a child process its parent started.
    #[test]
    #[ignore = "child entry point: run by its parent"]
    fn __child() {
        let role = std::env::var(ROLE_ENV).expect("a child entry point, run by its parent");
        match role.as_str() {
            "publisher" => publisher(),
            "pinger" => pinger(),
            "offerer" => offerer(),
            "local" => local(),
            "remote" => remote(),
            other => panic!("unknown role {other}"),
        }
    }

    fn device() -> Arc<CpuShm> {
        Arc::new(CpuShm::new())
    }

    /// A node on the argument `listen`, with the argument `spin_us` as
    /// its spin when the parent passed one.
    fn node_on() -> Node {
        let mut opts = hal_ucx::NodeOptions::new(arg("listen").parse().unwrap());
        if let Some(us) = opt_arg("spin_us") {
            opts.spin = Duration::from_micros(us.parse().unwrap());
        }
        Node::with_options(opts).unwrap()
    }

    /// Offer channel `name` on a node of `listen`; report its text.
    fn offer(name: &str) -> (Node, hal_ucx::ChannelOffer) {
        let node = node_on();
        let device = Arc::new(CpuShm::new().host());
        let mut options = RemoteChannelOptions::default();
        if let Some(hex) = opt_arg("secret") {
            options = options.secret(secret(&hex));
        }
        let offer = node.offer_channel(device, name, &options).unwrap();
        report("offer", offer.text());
        (node, offer)
    }

    fn secret(hex: &str) -> [u8; 16] {
        let mut s = [0u8; 16];
        for (i, b) in s.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
        }
        s
    }

    /// One end of a ping-pong of samples: publish on a channel of its own,
    /// offered on its node; subscribe to the other end's offer; then
    /// `rounds` times publish and receive (the first end) or receive and
    /// publish, checking every byte; report the rounds.
    fn pinger() {
        let name = arg("name");
        let slot_size = 4096;
        let host = device().host();
        let options = ChannelOptions::default()
            .slots(2)
            .slot_size(slot_size)
            .timeout(Duration::from_secs(60));
        let mut publisher = Publisher::create(&host, &name, &options).unwrap();
        let (node, _offer) = offer(&name);
        let sub = RemoteSubscriber::connect(
            &node,
            &host,
            &wait_for("peer"),
            &RemoteSubscribeOptions::default().timeout(Some(Duration::from_secs(60))),
        )
        .unwrap();
        // A broadcast sample goes to the subscribers there when it is
        // published: both ends start once both are subscribed.
        report("subscribed", "ok");
        wait_for("go");
        let rounds: u64 = arg("rounds").parse().unwrap();
        let first = opt_arg("first").is_some();
        let mut publish = |seq: u64| {
            let loan = publisher.loan().unwrap();
            let len = sample_len(seq, slot_size);
            loan.write(0, &sample_bytes(seq, len)).unwrap();
            loan.publish(len as u64).unwrap();
        };
        let receive = |seq: u64| {
            let got = sub.receive().unwrap();
            assert_eq!(got.sequence(), seq);
            assert_eq!(
                got.to_vec().unwrap(),
                sample_bytes(seq, sample_len(seq, slot_size))
            );
        };
        for seq in 0..rounds {
            if first {
                publish(seq);
                receive(seq);
            } else {
                receive(seq);
                publish(seq);
            }
        }
        report("rounds", &rounds.to_string());
        wait_for("quit");
    }

    /// Make the channel the arguments name (offered from this process
    /// too with `offer`), then publish as the parent says.
    fn publisher() {
        let name = arg("name");
        let slots: usize = arg("slots").parse().unwrap();
        let slot_size: u64 = arg("slot_size").parse().unwrap();
        let mode = match arg("mode").as_str() {
            "queue" => Mode::Queue,
            _ => Mode::Broadcast,
        };
        let dev = device();
        let host = dev.host();
        let options = ChannelOptions::default()
            .slots(slots)
            .slot_size(slot_size)
            .mode(mode)
            .timeout(Duration::from_secs(60));
        let mut publisher = Some(Publisher::create(&host, &name, &options).unwrap());
        let _offered = opt_arg("offer").map(|_| offer(&name));
        report("created", &name);
        let mut seq = 0u64;
        loop {
            let line = wait_for("do");
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["publish", n] => {
                    for _ in 0..n.parse::<u64>().unwrap() {
                        let loan = publisher.as_mut().unwrap().loan().unwrap();
                        let len = sample_len(seq, slot_size);
                        loan.write(0, &sample_bytes(seq, len)).unwrap();
                        loan.publish(len as u64).unwrap();
                        seq += 1;
                    }
                    report("published", &seq.to_string());
                }
                ["try"] => {
                    let out = match publisher.as_mut().unwrap().try_loan() {
                        Ok(loan) => {
                            drop(loan);
                            "free".to_string()
                        }
                        Err(Error::Busy { .. }) => "busy".to_string(),
                        Err(e) => format!("error {e}"),
                    };
                    report("try", &out);
                }
                // The publisher closes; the offer stays.
                ["close"] => {
                    publisher = None;
                    report("close", "ok");
                }
                ["quit"] => return,
                other => panic!("unknown command {other:?}"),
            }
        }
    }

    /// Offer a channel another process publishes; stay until told.
    fn offerer() {
        let _offered = offer(&arg("name"));
        assert_eq!(wait_for("do"), "quit");
    }

    /// A local subscriber: receive and check `count` samples.
    fn local() {
        let dev = device();
        let host = dev.host();
        let sub = Subscriber::open(&host, &arg("name"), &SubscribeOptions::default()).unwrap();
        report("subscribed", "local");
        let count: u64 = arg("count").parse().unwrap();
        let slot_size = sub.slot_size();
        for want in 0..count {
            let s = sub.receive().unwrap();
            assert_eq!(s.sequence(), want);
            let len = sample_len(want, slot_size);
            assert_eq!(s.len(), len as u64);
            assert!(
                s.to_vec().unwrap() == sample_bytes(want, len),
                "sample {want}"
            );
        }
        report("got", &count.to_string());
        assert_eq!(wait_for("do"), "quit");
    }

    /// Check a remote sample's bytes, read in place.
    fn check(s: &RemoteSample<'_>, slot_size: u64) {
        let seq = s.sequence();
        let len = sample_len(seq, slot_size);
        assert_eq!(s.len(), len as u64, "sample {seq}'s length");
        assert!(
            s.to_vec().unwrap() == sample_bytes(seq, len),
            "sample {seq}'s bytes"
        );
    }

    fn kind(e: &Error) -> &'static str {
        match e {
            Error::Closed { .. } => "Closed",
            Error::PermissionDenied { .. } => "PermissionDenied",
            Error::NotFound { .. } => "NotFound",
            Error::Timeout { .. } => "Timeout",
            Error::Busy { .. } => "Busy",
            _ => "Other",
        }
    }

    /// A remote subscriber of the offer `text`: receive, hold, release and
    /// drain as the parent says; every sample's bytes are checked.
    fn remote() {
        let node = node_on();
        let dev = device();
        let host = dev.host();
        let mut options = RemoteSubscribeOptions::default();
        if let Some(n) = opt_arg("slots") {
            options = options.slots(n.parse().unwrap());
        }
        let sub = match RemoteSubscriber::connect(&node, &host, &arg("text"), &options) {
            Ok(s) => s,
            Err(e) => {
                report("subscribed", kind(&e));
                assert_eq!(wait_for("do"), "quit");
                return;
            }
        };
        report("subscribed", "ok");
        let slot_size = sub.slot_size();
        let mut held: Vec<RemoteSample<'_>> = Vec::new();
        let mut next = 0u64;
        loop {
            let line = wait_for("do");
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                // Receive `n` samples in order, each checked and released.
                ["recv", n] => {
                    for _ in 0..n.parse::<u64>().unwrap() {
                        let s = sub.receive().unwrap();
                        assert_eq!(s.sequence(), next, "samples in order");
                        check(&s, slot_size);
                        next += 1;
                    }
                    report("recv", &next.to_string());
                }
                // As `recv`, slowly: the publisher waits for this one.
                ["slow", n] => {
                    for _ in 0..n.parse::<u64>().unwrap() {
                        let s = sub.receive().unwrap();
                        assert_eq!(s.sequence(), next, "samples in order");
                        std::thread::sleep(Duration::from_millis(10));
                        check(&s, slot_size);
                        next += 1;
                    }
                    report("slow", &next.to_string());
                }
                // Receive `n` samples and keep them.
                ["hold", n] => {
                    for _ in 0..n.parse::<u64>().unwrap() {
                        let s = sub.receive().unwrap();
                        check(&s, slot_size);
                        next = s.sequence() + 1;
                        held.push(s);
                    }
                    report("hold", &held.len().to_string());
                }
                // Check the held samples again, and release `n` of them.
                ["release", n] => {
                    for s in &held {
                        check(s, slot_size);
                    }
                    let n: usize = n.parse().unwrap();
                    held.drain(..n.min(held.len()));
                    report("release", &held.len().to_string());
                }
                // Receive until the channel ends: the sequences received,
                // and the error's kind and words.
                ["drain"] => {
                    let mut seqs = Vec::new();
                    let end = loop {
                        match sub.receive() {
                            Ok(s) => {
                                check(&s, slot_size);
                                seqs.push(s.sequence().to_string());
                            }
                            Err(e) => break e,
                        }
                    };
                    for s in &held {
                        check(s, slot_size);
                    }
                    let words = end.to_string().replace('\n', " ");
                    report(
                        "drain",
                        &format!("{} [{}] {words}", kind(&end), seqs.join(",")),
                    );
                }
                ["quit"] => return,
                other => panic!("unknown command {other:?}"),
            }
        }
    }
}

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

fn hosts() -> Option<Hosts> {
    if !ucx_here() {
        return None;
    }
    Hosts::new_or_not_run()
}

/// The spin of the nodes a test's children make, in microseconds (none:
/// the default, zero).
type Spin = Option<u64>;

fn spawn(hosts: &Hosts, i: usize, role: &str, args: &[(&str, String)]) -> ChildProc {
    spun(hosts, i, role, args, None)
}

/// [`spawn`], its node spinning `spin`.
fn spun(hosts: &Hosts, i: usize, role: &str, args: &[(&str, String)], spin: Spin) -> ChildProc {
    let mut args = args.to_vec();
    args.push(("listen", format!("{}:0", hosts.address(i))));
    if let Some(us) = spin {
        args.push(("spin_us", us.to_string()));
    }
    ChildProc::spawn_with(ROLES, role, &args, |cmd| {
        cmd.env("UCX_TLS", "tcp");
        hosts.place(i, cmd);
    })
}

/// A publisher on host 0 of channel `name`, offered from its own process;
/// and the offer's text.
fn publisher(
    hosts: &Hosts,
    name: &str,
    slots: usize,
    slot_size: u64,
    mode: &str,
) -> (ChildProc, String) {
    spun_publisher(hosts, name, slots, slot_size, mode, None)
}

/// [`publisher`], its node spinning `spin`.
fn spun_publisher(
    hosts: &Hosts,
    name: &str,
    slots: usize,
    slot_size: u64,
    mode: &str,
    spin: Spin,
) -> (ChildProc, String) {
    let mut p = spun(
        hosts,
        0,
        "publisher",
        &[
            ("name", name.to_string()),
            ("slots", slots.to_string()),
            ("slot_size", slot_size.to_string()),
            ("mode", mode.to_string()),
            ("offer", "1".to_string()),
        ],
        spin,
    );
    let text = p.expect("offer");
    assert_eq!(p.expect("created"), name);
    (p, text)
}

fn remote(hosts: &Hosts, text: &str, slots: Option<usize>) -> ChildProc {
    spun_remote(hosts, text, slots, None)
}

/// [`remote`], its node spinning `spin`.
fn spun_remote(hosts: &Hosts, text: &str, slots: Option<usize>, spin: Spin) -> ChildProc {
    let mut args = vec![("text", text.to_string())];
    if let Some(n) = slots {
        args.push(("slots", n.to_string()));
    }
    spun(hosts, 1, "remote", &args, spin)
}

fn ask(c: &mut ChildProc, cmd: &str, tag: &str) -> String {
    c.send(&format!("do {cmd}"));
    c.expect(tag)
}

fn quit(c: ChildProc) {
    let mut c = c;
    c.send("do quit");
    c.finish();
}

#[test]
fn remote_subscriber_across_network_namespaces() {
    subscribers_across(None);
}

/// The same between nodes that spin (the remote subscribers' receives
/// drive their workers).
#[test]
fn remote_subscriber_between_spinning_nodes_across_network_namespaces() {
    subscribers_across(Some(300));
}

fn subscribers_across(spin: Spin) {
    let Some(hosts) = hosts() else {
        return;
    };
    let name = &format!("frames-across-{}", spin.unwrap_or(0));
    let (mut publisher, text) = spun_publisher(&hosts, name, 8, 1 << 20, "broadcast", spin);
    let args = [("name", name.to_string()), ("count", "100".to_string())];
    let mut locals: Vec<ChildProc> = (0..2).map(|_| spawn(&hosts, 0, "local", &args)).collect();
    let mut remotes: Vec<ChildProc> = (0..2)
        .map(|_| spun_remote(&hosts, &text, None, spin))
        .collect();
    for c in locals.iter_mut() {
        assert_eq!(c.expect("subscribed"), "local");
    }
    for c in remotes.iter_mut() {
        assert_eq!(c.expect("subscribed"), "ok");
    }
    for c in remotes.iter_mut() {
        c.send("do recv 100");
    }
    assert_eq!(ask(&mut publisher, "publish 100", "published"), "100");
    for c in remotes.iter_mut() {
        assert_eq!(c.expect("recv"), "100");
    }
    for c in locals.iter_mut() {
        assert_eq!(c.expect("got"), "100");
    }
    // The publisher closes: the remote subscribers hear it.
    assert_eq!(ask(&mut publisher, "close", "close"), "ok");
    for c in remotes.iter_mut() {
        let end = ask(c, "drain", "drain");
        assert!(end.starts_with("Closed [] "), "{end}");
        assert!(end.contains("its publisher closed it"), "{end}");
    }
    quit(publisher);
    for c in locals.into_iter().chain(remotes) {
        quit(c);
    }
}

#[test]
fn remote_subscribers_share_a_queue() {
    let Some(hosts) = hosts() else {
        return;
    };
    let (mut publisher, text) = publisher(&hosts, "work-queue", 4, 64 << 10, "queue");
    let mut remotes: Vec<ChildProc> = (0..2).map(|_| remote(&hosts, &text, Some(2))).collect();
    for c in remotes.iter_mut() {
        assert_eq!(c.expect("subscribed"), "ok");
        c.send("do drain");
    }
    assert_eq!(ask(&mut publisher, "publish 60", "published"), "60");
    assert_eq!(ask(&mut publisher, "close", "close"), "ok");
    let mut all: Vec<u64> = Vec::new();
    for c in remotes.iter_mut() {
        let end = c.expect("drain");
        assert!(end.starts_with("Closed ["), "{end}");
        let list = &end[end.find('[').unwrap() + 1..end.find(']').unwrap()];
        all.extend(
            list.split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.parse::<u64>().unwrap()),
        );
    }
    all.sort_unstable();
    assert_eq!(
        all,
        (0..60).collect::<Vec<_>>(),
        "each sample to one subscriber"
    );
    quit(publisher);
    for c in remotes {
        quit(c);
    }
}

#[test]
fn remote_subscriber_killed_frees_its_slots() {
    let Some(hosts) = hosts() else {
        return;
    };
    let (mut publisher, text) = publisher(&hosts, "victim", 4, 4096, "broadcast");
    let mut victim = remote(&hosts, &text, None);
    assert_eq!(victim.expect("subscribed"), "ok");
    assert_eq!(ask(&mut publisher, "publish 4", "published"), "4");
    assert_eq!(ask(&mut victim, "hold 4", "hold"), "4");
    // Every slot is the remote's to release.
    assert_eq!(ask(&mut publisher, "try", "try"), "busy");
    victim.kill();
    // Its proxy unsubscribes: the slots come back, and the publisher goes on.
    assert_eq!(ask(&mut publisher, "publish 8", "published"), "12");
    assert_eq!(ask(&mut publisher, "try", "try"), "free");
    quit(publisher);
}

#[test]
fn publisher_killed_remote_subscribers_drain_then_see_closed() {
    let Some(hosts) = hosts() else {
        return;
    };
    let name = "doomed";
    // The publisher alone; another process of its host offers the channel.
    let mut publisher = spawn(
        &hosts,
        0,
        "publisher",
        &[
            ("name", name.to_string()),
            ("slots", "8".to_string()),
            ("slot_size", (256 << 10).to_string()),
            ("mode", "broadcast".to_string()),
        ],
    );
    assert_eq!(publisher.expect("created"), name);
    let mut offerer = spawn(&hosts, 0, "offerer", &[("name", name.to_string())]);
    let text = offerer.expect("offer");
    let mut remotes: Vec<ChildProc> = (0..2).map(|_| remote(&hosts, &text, None)).collect();
    for c in remotes.iter_mut() {
        assert_eq!(c.expect("subscribed"), "ok");
    }
    assert_eq!(ask(&mut publisher, "publish 6", "published"), "6");
    for c in remotes.iter_mut() {
        assert_eq!(ask(c, "hold 2", "hold"), "2");
    }
    publisher.kill();
    for c in remotes.iter_mut() {
        let end = ask(c, "drain", "drain");
        assert!(end.starts_with("Closed [2,3,4,5] "), "{end}");
        assert!(end.contains("died"), "{end}");
        // The held samples are still there, whole.
        assert_eq!(ask(c, "release 2", "release"), "0");
    }
    quit(offerer);
    for c in remotes {
        quit(c);
    }
}

#[test]
fn offering_process_killed_remote_subscribers_keep_what_they_received() {
    let Some(hosts) = hosts() else {
        return;
    };
    let (mut publisher, text) = publisher(&hosts, "gone-with-node", 4, 4096, "broadcast");
    let mut r = remote(&hosts, &text, None);
    assert_eq!(r.expect("subscribed"), "ok");
    assert_eq!(ask(&mut publisher, "publish 3", "published"), "3");
    assert_eq!(ask(&mut r, "hold 3", "hold"), "3");
    publisher.kill();
    let end = ask(&mut r, "drain", "drain");
    assert!(end.starts_with("Closed [] "), "{end}");
    assert_eq!(ask(&mut r, "release 3", "release"), "0");
    quit(r);
}

/// Two processes on two hosts, each publishing on a channel of its own and
/// subscribed to the other's, ping-pong samples over spinning nodes: the
/// waits of each drive its worker, and their passes forward its samples
/// (its proxy's thread stays back).
#[test]
fn remote_channel_ping_pong_between_spinning_nodes_across_network_namespaces() {
    let Some(hosts) = hosts() else {
        return;
    };
    let rounds = "200".to_string();
    let spin = Some(300);
    let mut a = spun(
        &hosts,
        0,
        "pinger",
        &[
            ("name", format!("ping-{}", std::process::id())),
            ("rounds", rounds.clone()),
            ("first", "1".into()),
        ],
        spin,
    );
    let mut b = spun(
        &hosts,
        1,
        "pinger",
        &[
            ("name", format!("pong-{}", std::process::id())),
            ("rounds", rounds.clone()),
        ],
        spin,
    );
    let (ta, tb) = (a.expect("offer"), b.expect("offer"));
    a.send(&format!("peer {tb}"));
    b.send(&format!("peer {ta}"));
    assert_eq!(a.expect("subscribed"), "ok");
    assert_eq!(b.expect("subscribed"), "ok");
    a.send("go");
    b.send("go");
    assert_eq!(a.expect("rounds"), rounds);
    assert_eq!(b.expect("rounds"), rounds);
    a.send("quit");
    b.send("quit");
    a.finish();
    b.finish();
}

#[test]
fn slow_remote_subscriber_holds_the_publisher_back() {
    slow_remote_subscriber(None);
}

/// The same between nodes that spin: the remote subscriber's waits drive
/// its worker, and the publisher's progress thread forwards in its passes
/// beside the proxy's thread.
#[test]
fn slow_remote_subscriber_holds_the_publisher_back_between_spinning_nodes() {
    slow_remote_subscriber(Some(300));
}

fn slow_remote_subscriber(spin: Spin) {
    let Some(hosts) = hosts() else {
        return;
    };
    let name = format!("slow-{}", spin.unwrap_or(0));
    let (mut publisher, text) = spun_publisher(&hosts, &name, 4, 64 << 10, "broadcast", spin);
    let mut r = spun_remote(&hosts, &text, None, spin);
    assert_eq!(r.expect("subscribed"), "ok");
    assert_eq!(ask(&mut publisher, "publish 4", "published"), "4");
    assert_eq!(ask(&mut r, "hold 4", "hold"), "4");
    // Not a slot is free until the remote subscriber releases one.
    assert_eq!(ask(&mut publisher, "try", "try"), "busy");
    assert_eq!(ask(&mut r, "release 1", "release"), "3");
    assert_eq!(ask(&mut publisher, "publish 1", "published"), "5");
    assert_eq!(ask(&mut publisher, "try", "try"), "busy");
    assert_eq!(ask(&mut r, "release 3", "release"), "0");
    // Many more than the slots, through a slow reader: none is
    // overwritten before it is read (every byte is checked).
    r.send("do slow 41");
    assert_eq!(ask(&mut publisher, "publish 40", "published"), "45");
    assert_eq!(r.expect("slow"), "45");
    quit(publisher);
    quit(r);
}

#[test]
fn remote_subscriber_with_a_wrong_secret_is_refused() {
    let Some(hosts) = hosts() else {
        return;
    };
    let (publisher, text) = publisher(&hosts, "guarded", 4, 4096, "broadcast");
    let mut forged = RemoteHandle::from_text(&text).unwrap();
    forged.secret[0] ^= 1;
    let mut r = remote(&hosts, &forged.to_text(), None);
    assert_eq!(r.expect("subscribed"), "PermissionDenied");
    quit(r);
    // The right one is taken.
    let mut ok = remote(&hosts, &text, None);
    assert_eq!(ok.expect("subscribed"), "ok");
    quit(ok);
    quit(publisher);
}

/// A channel name of this process's own.
fn own_name(what: &str) -> String {
    format!("rchan-{what}-{}", std::process::id())
}

/// A node on the loopback address.
fn loopback() -> Node {
    Node::bind("127.0.0.1:0".parse().unwrap()).unwrap()
}

#[test]
fn offer_withdrawn_ends_its_remote_subscribers_after_their_samples() {
    if !ucx_here() {
        return;
    }
    let dev = Arc::new(CpuShm::new().host());
    let name = own_name("withdrawn");
    let options = ChannelOptions::default().slots(4).slot_size(4096);
    let mut publisher = Publisher::create(&*dev, &name, &options).unwrap();
    let (a, b) = (loopback(), loopback());
    let offer = a
        .offer_channel(dev.clone(), &name, &RemoteChannelOptions::default())
        .unwrap();
    assert_eq!(offer.name(), name);
    let sub = RemoteSubscriber::connect(&b, &*dev, offer.text(), &Default::default()).unwrap();
    assert_eq!(
        (sub.slots(), sub.slot_size(), sub.mode()),
        (4, 4096, Mode::Broadcast)
    );
    assert_eq!(offer.subscribers(), 1);
    for seq in 0..3u64 {
        let loan = publisher.loan().unwrap();
        let len = sample_len(seq, 4096);
        loan.write(0, &sample_bytes(seq, len)).unwrap();
        loan.publish(len as u64).unwrap();
    }
    let first = sub.receive().unwrap();
    assert_eq!(first.sequence(), 0);
    // The offer goes while samples are on their way or held: they stay.
    drop(offer);
    let mut seqs = vec![];
    let end = loop {
        match sub.receive() {
            Ok(s) => {
                let len = sample_len(s.sequence(), 4096);
                assert!(s.to_vec().unwrap() == sample_bytes(s.sequence(), len));
                seqs.push(s.sequence());
            }
            Err(e) => break e,
        }
    };
    assert_eq!(seqs, vec![1, 2]);
    assert!(
        matches!(&end, Error::Closed { what } if what.contains("withdrawn")),
        "{end}"
    );
    let mut held = vec![0u8; first.len() as usize];
    first.read(0, &mut held).unwrap();
    assert!(held == sample_bytes(0, held.len()));
    drop(first);
    // Its proxy is gone: the publisher has every slot again.
    for _ in 0..4 {
        drop(publisher.loan().unwrap());
    }
}

#[test]
fn remote_subscriber_refuses_other_texts_and_unknown_offers() {
    if !ucx_here() {
        return;
    }
    let dev = Arc::new(CpuShm::new().host());
    let name = own_name("texts");
    let _publisher = Publisher::create(&*dev, &name, &ChannelOptions::default()).unwrap();
    let (a, b) = (loopback(), loopback());
    let offer = a
        .offer_channel(dev.clone(), &name, &RemoteChannelOptions::default())
        .unwrap();
    let options = RemoteSubscribeOptions::default();
    // The handle of an export is not an offer's.
    let mem = {
        use hal_core::{AllocDesc, Device};
        dev.allocate(&AllocDesc::host(4096)).unwrap()
    };
    let export = a.export(&mem, Default::default()).unwrap();
    let e = RemoteSubscriber::connect(&b, &*dev, &export.text(), &options).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    // An offer this node never made (or withdrew).
    let mut other = RemoteHandle::from_text(offer.text()).unwrap();
    other.export_id += 100;
    let e = RemoteSubscriber::connect(&b, &*dev, &other.to_text(), &options).unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e}");
    // More slots than a subscriber holds.
    let e = RemoteSubscriber::connect(&b, &*dev, offer.text(), &options.clone().slots(1 << 20))
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    // A channel that is gone by the time the subscriber comes.
    let gone = a
        .offer_channel(
            dev.clone(),
            &own_name("never"),
            &RemoteChannelOptions::default(),
        )
        .unwrap();
    let e = RemoteSubscriber::connect(&b, &*dev, gone.text(), &options).unwrap_err();
    assert!(matches!(e, Error::Closed { .. }), "{e}");
    drop(export);
}

#[test]
fn remote_subscribers_that_come_and_go_give_their_slots_back() {
    if !ucx_here() {
        return;
    }
    let dev = Arc::new(CpuShm::new().host());
    let name = own_name("churn");
    let options = ChannelOptions::default().slots(4).slot_size(64 << 10);
    let mut publisher = Publisher::create(&*dev, &name, &options).unwrap();
    let (a, b) = (loopback(), loopback());
    let offer = a
        .offer_channel(dev.clone(), &name, &RemoteChannelOptions::default())
        .unwrap();
    let mut seq = 0u64;
    for round in 0..10 {
        let sub = RemoteSubscriber::connect(&b, &*dev, offer.text(), &Default::default()).unwrap();
        // Every slot taken by a sample this subscriber holds or will get.
        for _ in 0..4 {
            let loan = publisher.loan().unwrap();
            let len = sample_len(seq, 64 << 10);
            loan.write(0, &sample_bytes(seq, len)).unwrap();
            loan.publish(len as u64).unwrap();
            seq += 1;
        }
        let held = sub.receive().unwrap();
        assert_eq!(held.sequence(), seq - 4, "round {round}");
        assert!(matches!(publisher.try_loan(), Err(Error::Busy { .. })));
        // Gone with a sample held and three on their way or waiting: the
        // publisher gets every slot back.
        drop(held);
        drop(sub);
        for _ in 0..4 {
            drop(publisher.loan().unwrap());
        }
    }
}
