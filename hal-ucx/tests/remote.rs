//! hal-ucx with real processes: an exporter and its importers in separate
//! processes, over UCX's TCP transport (`UCX_TLS=tcp`, so that no
//! shared-memory transport can hide the network path) and over UCX's
//! defaults, on one host and on two hosts made of network namespaces
//! joined by a veth pair ([`hal_tests::hosts`]), each with its own
//! `/dev/shm`, so that nothing local can be reached.
//!
//! Where UCX is not installed, or the machine refuses namespaces, a test
//! says `NOT RUN` and why (a failure with `HAL_TESTS_STRICT=1`).

use std::sync::Arc;
use std::time::Duration;

use hal_core::testing::not_run;
use hal_core::{AllocDesc, Device, DeviceExt, Error, Memory, Notify, WaitOptions};
use hal_cpu_shm::CpuShm;
use hal_tests::hosts::Hosts;
use hal_tests::process::{arg, opt_arg, report, wait_for, ChildProc, ROLE_ENV};
use hal_ucx::{Node, Op, RemoteOptions};

/// The module of the child entry point.
const ROLES: &str = "node";

/// How long a child waits for its peers: a guard against hangs.
const PATIENCE: Duration = Duration::from_secs(60);

/// Byte `o` of the pattern `seed`.
fn pattern(seed: u64, o: u64) -> u8 {
    ((o.wrapping_mul(31) + seed * 7) % 251) as u8
}

fn fill(seed: u64, off: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| pattern(seed, off + i)).collect()
}

/// The roles a child plays.
mod node {
    use super::*;

    /// The child entry point: a role in a child process its parent started.
    #[test]
    #[ignore = "child entry point: run by its parent"]
    fn __child() {
        let role = std::env::var(ROLE_ENV).expect("a child entry point, run by its parent");
        match role.as_str() {
            "exporter" => exporter(),
            "importer" => importer(),
            "notifier" => notifier(),
            other => panic!("unknown role {other}"),
        }
    }

    /// A node on the argument `listen`, with the argument `spin_us` as
    /// its spin when the parent passed one.
    fn node_on() -> Node {
        let mut opts = hal_ucx::NodeOptions::new(arg("listen").parse().unwrap());
        if let Some(us) = opt_arg("spin_us") {
            opts.spin = Duration::from_micros(us.parse().unwrap());
        }
        if let Some(ms) = opt_arg("timeout_ms") {
            opts.timeout = Duration::from_millis(ms.parse().unwrap());
        }
        Node::with_options(opts).unwrap()
    }

    /// Export `size` bytes of cpu-shm memory filled with pattern 1 from a
    /// node on `listen`; then follow the parent's commands.
    fn exporter() {
        let size: u64 = arg("size").parse().unwrap();
        let dev = CpuShm::new().host();
        let mem = dev.allocate(&AllocDesc::host(size)).unwrap();
        mem.write(0, &fill(1, 0, size as usize)).unwrap();
        let node = node_on();
        let opts = RemoteOptions {
            read_only: opt_arg("read_only").is_some(),
        };
        let mut export = Some(node.export(&mem, opts).unwrap());
        report("text", &export.as_ref().unwrap().text());
        loop {
            let line = wait_for("do");
            let words: Vec<&str> = line.split_whitespace().collect();
            let e = || export.as_ref().expect("the export was dropped");
            match words.as_slice() {
                ["importers", n] => {
                    e().wait_importers(n.parse().unwrap(), PATIENCE).unwrap();
                    report("importers", &e().importers().to_string());
                }
                ["count"] => report("count", &e().importers().to_string()),
                ["unused"] => {
                    e().wait_unused(PATIENCE).unwrap();
                    report("unused", "0");
                }
                ["signal"] => {
                    e().wait_signal(PATIENCE).unwrap();
                    report("signal", "taken");
                }
                ["verify", off, len, seed] => {
                    let (off, len, seed) = (
                        off.parse().unwrap(),
                        len.parse::<usize>().unwrap(),
                        seed.parse().unwrap(),
                    );
                    let mut got = vec![0u8; len];
                    mem.read(off, &mut got).unwrap();
                    let ok = got == fill(seed, off, len);
                    report("verify", if ok { "ok" } else { "bad" });
                }
                ["drop"] => {
                    export = None;
                    report("dropped", "");
                }
                ["quit"] => return,
                other => panic!("unknown command {other:?}"),
            }
        }
    }

    /// Connect to `text` from a node on `listen`; report how; then follow
    /// the parent's commands.
    fn importer() {
        let node = node_on();
        let r = match node.connect(&arg("text")) {
            Ok(r) => {
                report("connected", "ok");
                r
            }
            Err(e) => {
                report("connected", &kind(&e));
                report("message", &e.to_string().replace('\n', " "));
                return;
            }
        };
        loop {
            let line = wait_for("do");
            let words: Vec<&str> = line.split_whitespace().collect();
            let num = |s: &str| s.parse::<u64>().unwrap();
            match words.as_slice() {
                ["read", off, len, seed] => {
                    let (off, len, seed) = (num(off), num(len) as usize, num(seed));
                    let mut buf = vec![0u8; len];
                    let out = match r.read(off, &mut buf) {
                        Ok(()) if buf == fill(seed, off, len) => "ok".to_string(),
                        Ok(()) => "wrong-bytes".to_string(),
                        Err(e) => {
                            report("why", &e.to_string().replace('\n', " "));
                            kind(&e)
                        }
                    };
                    report("read", &out);
                }
                ["read-why", off, len, seed] => {
                    let (off, len, seed) = (num(off), num(len) as usize, num(seed));
                    let mut buf = vec![0u8; len];
                    let out = match r.read(off, &mut buf) {
                        Ok(()) if buf == fill(seed, off, len) => "ok".to_string(),
                        Ok(()) => "wrong-bytes".to_string(),
                        Err(e) => format!("{}: {e}", kind(&e)),
                    };
                    report("read-why", &out);
                }
                ["write", off, len, seed] => {
                    let data = fill(num(seed), num(off), num(len) as usize);
                    let out = r.write(num(off), &data).and_then(|()| r.flush());
                    report("write", &out.map_or_else(|e| kind(&e), |()| "ok".into()));
                }
                ["write-signal", off, len, seed] => {
                    let data = fill(num(seed), num(off), num(len) as usize);
                    let out = r.write_signal(num(off), &data);
                    report(
                        "write-signal",
                        &out.map_or_else(|e| kind(&e), |()| "ok".into()),
                    );
                }
                ["into", off, len] => {
                    // Into local hal memory, at an odd offset of it.
                    let (off, len) = (num(off), num(len));
                    let dev = CpuShm::new().host();
                    let local = dev.allocate(&AllocDesc::host(len + 4096)).unwrap();
                    r.read_into(off, &local, 3, len).unwrap();
                    let mut got = vec![0u8; len as usize];
                    local.read(3, &mut got).unwrap();
                    assert_eq!(got, fill(1, off, len as usize));
                    // And back from it, to another place.
                    local.write(3, &fill(5, 8192, len as usize)).unwrap();
                    r.write_from(8192, &local, 3, len).unwrap();
                    r.flush().unwrap();
                    report("into", "ok");
                }
                ["batch"] => {
                    let (mut a, mut b) = (vec![0u8; 10], vec![0u8; 4096]);
                    let w = fill(9, 20_000, 333);
                    let mut ops = [
                        Op::Read {
                            offset: 1,
                            buf: &mut a,
                        },
                        Op::Write {
                            offset: 20_000,
                            data: &w,
                        },
                        Op::Read {
                            offset: 4096 * 60 + 5,
                            buf: &mut b,
                        },
                    ];
                    r.batch(&mut ops).unwrap();
                    assert!(a == fill(1, 1, 10), "the batch's first read");
                    let want = fill(1, 4096 * 60 + 5, 4096);
                    let first = b.iter().zip(&want).position(|(x, y)| x != y);
                    assert!(
                        first.is_none(),
                        "the batch's second read differs from byte {first:?}"
                    );
                    // A batch with one range outside sends nothing.
                    let w2 = fill(3, 0, 8);
                    let mut c = vec![0u8; 8];
                    let mut bad = [
                        Op::Write {
                            offset: 0,
                            data: &w2,
                        },
                        Op::Read {
                            offset: r.len() - 4,
                            buf: &mut c,
                        },
                    ];
                    let e = r.batch(&mut bad).unwrap_err();
                    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
                    r.flush().unwrap();
                    report("batch", "ok");
                }
                ["async", off, len] => {
                    let (off, len) = (num(off), num(len) as usize);
                    let got = block_on(r.read_async(off, len)).unwrap();
                    assert_eq!(got, fill(1, off, len));
                    block_on(r.write_async(off + 1, fill(6, off + 1, 16))).unwrap();
                    r.flush().unwrap();
                    report("async", "ok");
                }
                ["bounds"] => {
                    let size = r.len();
                    let mut one = [0u8; 1];
                    let past = r.read(size, &mut one).unwrap_err();
                    let over = r.write(size - 1, &[0, 0]).unwrap_err();
                    let wrap = r.read(u64::MAX, &mut one).unwrap_err();
                    let all = [past, over, wrap]
                        .iter()
                        .all(|e| matches!(e, Error::InvalidArgument { .. }));
                    report("bounds", if all { "refused" } else { "accepted" });
                }
                ["hostile"] => {
                    // Ranges this side would refuse, sent anyway: the
                    // exporter must refuse them itself.
                    let size = r.len();
                    let mut eight = [0u8; 8];
                    let outcomes = [
                        r.read_unchecked(size - 4, &mut eight).map_err(|e| kind(&e)),
                        r.read_unchecked(u64::MAX - 2, &mut eight)
                            .map_err(|e| kind(&e)),
                        r.write_unchecked(size - 4, &[7u8; 8]).map_err(|e| kind(&e)),
                        r.write_unchecked(u64::MAX - 2, &[7u8; 8])
                            .map_err(|e| kind(&e)),
                        r.write_unchecked(0, &[7u8; 8]).map_err(|e| kind(&e)),
                    ];
                    let shown: Vec<String> = outcomes
                        .iter()
                        .map(|o| o.clone().err().unwrap_or_else(|| "ok".into()))
                        .collect();
                    report("hostile", &shown.join(","));
                }
                ["read-forever"] => {
                    report("reading", "");
                    let mut buf = vec![0u8; r.len() as usize];
                    let err = loop {
                        if let Err(e) = r.read(0, &mut buf) {
                            break e;
                        }
                    };
                    report("read-error", &kind(&err));
                }
                ["quit"] => return,
                other => panic!("unknown command {other:?}"),
            }
        }
    }

    /// A notify ping-pong: export this process's notify, connect to the
    /// peer's, and signal and wait `rounds` times (the `first` one signals
    /// first).
    fn notifier() {
        let dev = CpuShm::new().host();
        let mine: Arc<dyn Notify> = Arc::new(dev.create_notify().unwrap());
        let node = node_on();
        let export = node.export_notify(Arc::clone(&mine)).unwrap();
        report("text", &export.text());
        let peer = node.connect_notify(&wait_for("peer")).unwrap();
        let rounds: u32 = arg("rounds").parse().unwrap();
        let first = opt_arg("first").is_some();
        // A spinning node's signals are waited for through the export,
        // which drives the worker; the others on the notify itself.
        let spinning = opt_arg("spin_us").is_some();
        let wait = || {
            if spinning {
                export.wait_signal(PATIENCE)
            } else {
                mine.wait(WaitOptions::timeout(PATIENCE))
            }
        };
        for _ in 0..rounds {
            if first {
                peer.signal().unwrap();
                wait().unwrap();
            } else {
                wait().unwrap();
                peer.signal().unwrap();
            }
        }
        report("rounds", &rounds.to_string());
        wait_for("quit");
    }

    /// A one-word name of an error's kind, for the parent.
    fn kind(e: &Error) -> String {
        match e {
            Error::Closed { .. } => "Closed",
            Error::PermissionDenied { .. } => "PermissionDenied",
            Error::NotFound { .. } => "NotFound",
            Error::InvalidArgument { .. } => "InvalidArgument",
            Error::Timeout { .. } => "Timeout",
            Error::InvalidHandle(_) => "InvalidHandle",
            Error::Unavailable { .. } => "Unavailable",
            _ => "Other",
        }
        .to_string()
    }

    /// Run a future to its end on this thread.
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        use std::task::{Context, Poll, Wake, Waker};
        struct Unpark(std::thread::Thread);
        impl Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut f = std::pin::pin!(f);
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
            std::thread::park_timeout(Duration::from_millis(100));
        }
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

/// Where the processes run: two hosts, or this one.
enum Place {
    Hosts(Hosts),
    Here,
}

impl Place {
    fn two_hosts() -> Option<Place> {
        Hosts::new_or_not_run().map(Place::Hosts)
    }

    /// Host `i`'s address to listen on.
    fn listen(&self, i: usize) -> String {
        match self {
            Place::Hosts(h) => format!("{}:0", h.address(i)),
            Place::Here => "127.0.0.1:0".into(),
        }
    }

    /// A child on host `i`, with `UCX_TLS` as given (or UCX's default).
    fn spawn(&self, i: usize, role: &str, tls: Option<&str>, args: &[(&str, String)]) -> ChildProc {
        ChildProc::spawn_with(ROLES, role, args, |cmd| {
            match tls {
                Some(t) => cmd.env("UCX_TLS", t),
                None => cmd.env_remove("UCX_TLS"),
            };
            if let Place::Hosts(h) = self {
                h.place(i, cmd);
            }
        })
    }
}

/// An exporter of `size` bytes on host 0 and its text.
fn exporter(place: &Place, tls: Option<&str>, size: u64, read_only: bool) -> (ChildProc, String) {
    spun_exporter(place, tls, size, read_only, None)
}

/// [`exporter`] on a node whose spin is `spin_us`.
fn spun_exporter(
    place: &Place,
    tls: Option<&str>,
    size: u64,
    read_only: bool,
    spin_us: Option<u64>,
) -> (ChildProc, String) {
    let mut args = vec![("listen", place.listen(0)), ("size", size.to_string())];
    if read_only {
        args.push(("read_only", "1".into()));
    }
    if let Some(us) = spin_us {
        args.push(("spin_us", us.to_string()));
    }
    let mut e = place.spawn(0, "exporter", tls, &args);
    let text = e.expect("text");
    (e, text)
}

fn importer(place: &Place, tls: Option<&str>, text: &str) -> ChildProc {
    spun_importer(place, tls, text, None)
}

/// [`importer`] on a node whose spin is `spin_us`.
fn spun_importer(place: &Place, tls: Option<&str>, text: &str, spin_us: Option<u64>) -> ChildProc {
    let mut args = vec![("listen", place.listen(1)), ("text", text.to_string())];
    if let Some(us) = spin_us {
        args.push(("spin_us", us.to_string()));
    }
    place.spawn(1, "importer", tls, &args)
}

/// Send `do CMD` and return the answer tagged `tag`.
fn ask(c: &mut ChildProc, cmd: &str, tag: &str) -> String {
    c.send(&format!("do {cmd}"));
    c.expect(tag)
}

const MIB64: u64 = 64 << 20;

/// The cases every transport must pass: sizes, unaligned, batch, local
/// hal memory, async, bounds, write then signal, the count.
fn read_write_cases(place: &Place, tls: Option<&str>) {
    spun_read_write_cases(place, tls, None)
}

/// [`read_write_cases`] between nodes whose spin is `spin_us`: the
/// importer's calls drive its worker themselves.
fn spun_read_write_cases(place: &Place, tls: Option<&str>, spin_us: Option<u64>) {
    let (mut e, text) = spun_exporter(place, tls, MIB64, false, spin_us);
    let mut i = spun_importer(place, tls, &text, spin_us);
    assert_eq!(i.expect("connected"), "ok");
    assert_eq!(ask(&mut e, "importers 1", "importers"), "1");
    for (off, len) in [
        (0, 1),
        (4096, 4096),
        (0, MIB64),
        (4097, 12_345),
        (MIB64 - 3, 3),
    ] {
        assert_eq!(
            ask(&mut i, &format!("read {off} {len} 1"), "read"),
            "ok",
            "read {off}+{len}"
        );
    }
    for (off, len, seed) in [(7, 1, 2), (8192, 4096, 3), (0, MIB64, 4), (12_289, 777, 5)] {
        assert_eq!(
            ask(&mut i, &format!("write {off} {len} {seed}"), "write"),
            "ok"
        );
        assert_eq!(
            ask(&mut e, &format!("verify {off} {len} {seed}"), "verify"),
            "ok"
        );
        assert_eq!(
            ask(&mut i, &format!("read {off} {len} {seed}"), "read"),
            "ok"
        );
    }
    // Pattern 1 back, for the cases that read it.
    assert_eq!(ask(&mut i, &format!("write 0 {MIB64} 1"), "write"), "ok");
    assert_eq!(ask(&mut i, "into 65536 100000", "into"), "ok");
    assert_eq!(ask(&mut e, "verify 8192 100000 5", "verify"), "ok");
    assert_eq!(ask(&mut i, "batch", "batch"), "ok");
    assert_eq!(ask(&mut e, "verify 20000 333 9", "verify"), "ok");
    assert_eq!(ask(&mut i, "async 300000 5000", "async"), "ok");
    assert_eq!(ask(&mut e, "verify 300001 16 6", "verify"), "ok");
    assert_eq!(ask(&mut i, "bounds", "bounds"), "refused");
    i.send("do write-signal 40000 64 8");
    assert_eq!(ask(&mut e, "signal", "signal"), "taken");
    assert_eq!(i.expect("write-signal"), "ok");
    assert_eq!(ask(&mut e, "verify 40000 64 8", "verify"), "ok");
    i.send("do quit");
    i.finish();
    assert_eq!(ask(&mut e, "unused", "unused"), "0");
    e.send("do quit");
    e.finish();
}

#[test]
fn remote_read_write_across_network_namespaces() {
    if !ucx_here() {
        return;
    }
    let Some(place) = Place::two_hosts() else {
        return;
    };
    read_write_cases(&place, Some("tcp"));
}

#[test]
fn remote_read_write_over_tcp_on_one_host() {
    if ucx_here() {
        read_write_cases(&Place::Here, Some("tcp"));
    }
}

/// Nodes that spin: the importer's reads, writes and batches wait by
/// driving its worker (the exporter's progress thread polls).
#[test]
fn remote_read_write_between_spinning_nodes_over_tcp() {
    if ucx_here() {
        spun_read_write_cases(&Place::Here, Some("tcp"), Some(300));
    }
}

#[test]
fn remote_read_write_over_ucx_defaults_on_one_host() {
    if ucx_here() {
        read_write_cases(&Place::Here, None);
    }
}

#[test]
fn remote_read_write_over_ucx_defaults_across_network_namespaces() {
    if !ucx_here() {
        return;
    }
    let Some(place) = Place::two_hosts() else {
        return;
    };
    read_write_cases(&place, None);
}

#[test]
fn remote_read_only_export_refuses_writes() {
    if !ucx_here() {
        return;
    }
    let Some(place) = Place::two_hosts() else {
        return;
    };
    let (mut e, text) = exporter(&place, Some("tcp"), 1 << 20, true);
    let mut i = importer(&place, Some("tcp"), &text);
    assert_eq!(i.expect("connected"), "ok");
    assert_eq!(ask(&mut i, "write 0 16 2", "write"), "PermissionDenied");
    assert_eq!(
        ask(&mut i, "write-signal 0 16 2", "write-signal"),
        "PermissionDenied"
    );
    assert_eq!(ask(&mut e, "verify 0 16 1", "verify"), "ok");
    assert_eq!(ask(&mut i, "read 0 4096 1", "read"), "ok");
    i.send("do quit");
    i.finish();
    e.send("do quit");
    e.finish();
}

#[test]
fn remote_wrong_secret_is_refused() {
    if !ucx_here() {
        return;
    }
    let Some(place) = Place::two_hosts() else {
        return;
    };
    let (mut e, text) = exporter(&place, Some("tcp"), 1 << 16, false);
    let mut h = hal_ucx::RemoteHandle::from_text(&text).unwrap();
    h.secret[0] ^= 1;
    let mut i = importer(&place, Some("tcp"), &h.to_text());
    assert_eq!(i.expect("connected"), "PermissionDenied");
    i.finish();
    // Another export id: not found, and nothing else.
    let mut h = hal_ucx::RemoteHandle::from_text(&text).unwrap();
    h.export_id += 1000;
    let mut i = importer(&place, Some("tcp"), &h.to_text());
    assert_eq!(i.expect("connected"), "NotFound");
    i.finish();
    // Forged, cut and altered texts never reach the network.
    let cut = &text[..text.len() - 3];
    let mut altered = text.clone().into_bytes();
    let at = altered.len() - 10;
    altered[at] = if altered[at] == b'A' { b'B' } else { b'A' };
    for bad in [
        cut.to_string(),
        String::from_utf8(altered).unwrap(),
        "hal1r.".into(),
        text.replace("hal1r.", "hal1."),
    ] {
        let mut i = importer(&place, Some("tcp"), &bad);
        assert_eq!(i.expect("connected"), "InvalidHandle", "{bad}");
        i.finish();
    }
    assert_eq!(ask(&mut e, "count", "count"), "0");
    e.send("do quit");
    e.finish();
}

#[test]
fn remote_exporter_killed_mid_read_is_closed() {
    if !ucx_here() {
        return;
    }
    let Some(place) = Place::two_hosts() else {
        return;
    };
    let (e, text) = exporter(&place, Some("tcp"), MIB64, false);
    let mut i = importer(&place, Some("tcp"), &text);
    assert_eq!(i.expect("connected"), "ok");
    i.send("do read-forever");
    i.expect("reading");
    std::thread::sleep(Duration::from_millis(300));
    e.kill();
    assert_eq!(i.expect("read-error"), "Closed");
    // Later operations fail the same way.
    assert_eq!(ask(&mut i, "read 0 8 1", "read"), "Closed");
    i.send("do quit");
    i.finish();
}

#[test]
fn remote_importer_killed_is_dropped_from_the_count() {
    if !ucx_here() {
        return;
    }
    let Some(place) = Place::two_hosts() else {
        return;
    };
    let (mut e, text) = exporter(&place, Some("tcp"), MIB64, false);
    let mut a = importer(&place, Some("tcp"), &text);
    let mut b = importer(&place, Some("tcp"), &text);
    assert_eq!(a.expect("connected"), "ok");
    assert_eq!(b.expect("connected"), "ok");
    assert_eq!(ask(&mut e, "importers 2", "importers"), "2");
    // Killed in the middle of reading the whole export, over and over.
    a.send("do read-forever");
    a.expect("reading");
    std::thread::sleep(Duration::from_millis(300));
    a.kill();
    b.send("do read 0 100 1");
    let got = b.expect("read");
    if got != "ok" {
        let c = ask(&mut e, "count", "count");
        panic!("{got}: exporter count {c}");
    }
    b.send("do quit");
    b.finish();
    assert_eq!(ask(&mut e, "unused", "unused"), "0");
    e.send("do quit");
    e.finish();
}

#[test]
fn remote_export_dropped_while_connected_closes_its_importers() {
    if !ucx_here() {
        return;
    }
    let (mut e, text) = exporter(&Place::Here, Some("tcp"), 1 << 20, false);
    let mut i = importer(&Place::Here, Some("tcp"), &text);
    assert_eq!(i.expect("connected"), "ok");
    assert_eq!(ask(&mut e, "importers 1", "importers"), "1");
    assert_eq!(ask(&mut e, "drop", "dropped"), "");
    assert_eq!(ask(&mut i, "read 0 8 1", "read"), "Closed");
    let mut late = importer(&Place::Here, Some("tcp"), &text);
    assert_eq!(late.expect("connected"), "NotFound");
    late.finish();
    i.send("do quit");
    i.finish();
    e.send("do quit");
    e.finish();
}

#[test]
fn remote_notify_across_network_namespaces() {
    notify_ping_pong(None);
}

/// The same between nodes that spin: each side's wait drives its worker,
/// and its progress thread stays back.
#[test]
fn remote_notify_between_spinning_nodes_across_network_namespaces() {
    notify_ping_pong(Some(200));
}

fn notify_ping_pong(spin_us: Option<u64>) {
    if !ucx_here() {
        return;
    }
    let Some(place) = Place::two_hosts() else {
        return;
    };
    let rounds = "50".to_string();
    let spin = spin_us.map(|us| ("spin_us", us.to_string()));
    let mut args_a = vec![
        ("listen", place.listen(0)),
        ("rounds", rounds.clone()),
        ("first", "1".into()),
    ];
    let mut args_b = vec![("listen", place.listen(1)), ("rounds", rounds.clone())];
    args_a.extend(spin.clone());
    args_b.extend(spin);
    let mut a = place.spawn(0, "notifier", Some("tcp"), &args_a);
    let mut b = place.spawn(1, "notifier", Some("tcp"), &args_b);
    let (ta, tb) = (a.expect("text"), b.expect("text"));
    a.send(&format!("peer {tb}"));
    b.send(&format!("peer {ta}"));
    assert_eq!(a.expect("rounds"), rounds);
    assert_eq!(b.expect("rounds"), rounds);
    a.send("quit");
    b.send("quit");
    a.finish();
    b.finish();
}

#[test]
fn remote_sixteen_importers_at_once() {
    if !ucx_here() {
        return;
    }
    let Some(place) = Place::two_hosts() else {
        return;
    };
    let (mut e, text) = exporter(&place, Some("tcp"), 1 << 20, false);
    let mut all: Vec<ChildProc> = (0..16)
        .map(|_| importer(&place, Some("tcp"), &text))
        .collect();
    for i in &mut all {
        assert_eq!(i.expect("connected"), "ok");
    }
    assert_eq!(ask(&mut e, "importers 16", "importers"), "16");
    for (n, i) in all.iter_mut().enumerate() {
        let off = n as u64 * 65536;
        i.send(&format!("do write {off} 65536 {}", n + 10));
    }
    for (n, i) in all.iter_mut().enumerate() {
        assert_eq!(i.expect("write"), "ok");
        let off = n as u64 * 65536;
        assert_eq!(
            ask(&mut e, &format!("verify {off} 65536 {}", n + 10), "verify"),
            "ok"
        );
    }
    for mut i in all {
        i.send("do quit");
        i.finish();
    }
    assert_eq!(ask(&mut e, "unused", "unused"), "0");
    e.send("do quit");
    e.finish();
}

#[test]
fn a_node_without_an_address_to_name_is_refused() {
    if !ucx_here() {
        return;
    }
    let e = Node::bind("0.0.0.0:0".parse().unwrap()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let mut opts = hal_ucx::NodeOptions::new("0.0.0.0:0".parse().unwrap());
    opts.advertise = Some("127.0.0.1".parse().unwrap());
    let n = Node::with_options(opts).unwrap();
    assert_eq!(n.address().ip().to_string(), "127.0.0.1");
    assert_ne!(n.address().port(), 0);
}

/// Wait until every thread of `pid` is stopped (`kill` returns before
/// they are).
fn wait_stopped(pid: u32) {
    let tasks = format!("/proc/{pid}/task");
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let all = std::fs::read_dir(&tasks).unwrap().all(|t| {
            let stat = std::fs::read_to_string(t.unwrap().path().join("stat")).unwrap_or_default();
            // The state follows the command's closing parenthesis.
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T') || rest.starts_with('t'))
        });
        if all {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{pid} did not stop");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn remote_stopped_exporter_times_out_and_both_go_on() {
    if !ucx_here() {
        return;
    }
    let Some(place) = Place::two_hosts() else {
        return;
    };
    let (mut e, text) = exporter(&place, Some("tcp"), MIB64, false);
    let mut i = place.spawn(
        1,
        "importer",
        Some("tcp"),
        &[
            ("listen", place.listen(1)),
            ("text", text),
            ("timeout_ms", "2000".into()),
        ],
    );
    assert_eq!(i.expect("connected"), "ok");
    // A stopped exporter answers nothing, and its connection stays open.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(e.pid() as i32),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    wait_stopped(e.pid());
    assert_eq!(ask(&mut i, &format!("read 0 {MIB64} 1"), "read"), "Timeout");
    // Resumed, the exporter answers the read its importer gave up on: the
    // answer is dropped, and both go on.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(e.pid() as i32),
        nix::sys::signal::Signal::SIGCONT,
    )
    .unwrap();
    assert_eq!(ask(&mut i, "read-why 4096 4096 1", "read-why"), "ok");
    assert_eq!(ask(&mut i, &format!("read 0 {MIB64} 1"), "read"), "ok");
    assert_eq!(ask(&mut e, "count", "count"), "1");
    i.send("do quit");
    i.finish();
    assert_eq!(ask(&mut e, "unused", "unused"), "0");
    e.send("do quit");
    e.finish();
}

#[test]
fn remote_exporter_checks_every_range_itself() {
    if !ucx_here() {
        return;
    }
    for read_only in [false, true] {
        let (mut e, text) = exporter(&Place::Here, Some("tcp"), 1 << 20, read_only);
        let mut i = importer(&Place::Here, Some("tcp"), &text);
        assert_eq!(i.expect("connected"), "ok");
        let want = if read_only {
            "InvalidArgument,InvalidArgument,PermissionDenied,PermissionDenied,PermissionDenied"
        } else {
            "InvalidArgument,InvalidArgument,InvalidArgument,InvalidArgument,ok"
        };
        assert_eq!(
            ask(&mut i, "hostile", "hostile"),
            want,
            "read-only {read_only}"
        );
        // Nothing was written past the end, nor into a read-only export;
        // the connection goes on.
        if read_only {
            assert_eq!(ask(&mut e, "verify 0 8 1", "verify"), "ok");
        }
        assert_eq!(
            ask(&mut e, &format!("verify {} 4 1", (1 << 20) - 4), "verify"),
            "ok"
        );
        assert_eq!(ask(&mut i, "read 4096 4096 1", "read"), "ok");
        i.send("do quit");
        i.finish();
        e.send("do quit");
        e.finish();
    }
}
