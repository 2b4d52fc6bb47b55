//! Hostile peers: a real process that sends bad descriptors, forged handles
//! and garbage over the handle-exchange socket and the descriptor broker.
//!
//! Every case is refused with a typed error (the variant is asserted), and
//! the receiving process is unaffected: right after each refusal it does a
//! normal, successful import, and at the end its descriptor and mapping
//! counts are what they were after the first round. Each case runs 21 times
//! (a warm-up round and 20 more) against one hostile process.

use hal_core::DeviceExt;
mod reliability;

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hal_core::exchange::{self, HandleListener, HandleStream};
use hal_core::kit::os;
use hal_core::{
    AllocDesc, Allocation, Backend, Capabilities, Device, Error, ExportOptions, Exported, FdSource,
    HandleFlags, HandleKind, ImportOptions, Importers, Memory, SharedHandle,
};
use hal_cpu_shm::{named, CpuShm, NamedOptions};
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType, UnixAddr};
use reliability::*;

// --- tests -------------------------------------------------------------------

#[test]
fn bad_descriptors_and_garbage_on_the_handle_socket_cpu() {
    run_scenario("socket-receiver", "cpu");
}

#[test]
fn bad_descriptors_and_garbage_on_the_handle_socket_mock() {
    run_scenario("socket-receiver", "mock");
}

#[test]
fn garbage_on_the_broker_socket() {
    run_scenario("broker-receiver", "cpu");
}

#[test]
fn forged_allow_list_gains_nothing_cpu() {
    run_scenario("allow-list-exporter", "cpu");
}

#[test]
fn forged_allow_list_gains_nothing_mock_ascend() {
    run_scenario("allow-list-exporter", "ascend");
}

#[test]
fn forged_creator_and_hostile_brokers_cpu() {
    run_scenario("fake-broker-importer", "cpu");
}

#[test]
fn forged_creator_and_hostile_brokers_mock() {
    run_scenario("fake-broker-importer", "mock");
}

/// Sharing between users: root and uid 65534, each exporting to anyone.
/// Another user's process gets what is exported to anyone or to a list
/// naming it, and nothing else (and learns nothing of it); an importer
/// takes descriptors from another user's broker only once it trusts that
/// user.
#[test]
fn cross_user_sharing_follows_the_export_and_the_trust() {
    if !is_root() {
        hal_core::testing::not_run(&format!(
            "this test needs root to start a process of uid {NOBODY}; the same-user paths are \
             covered by the other tests"
        ));
        return;
    }
    run_scenario("other-user-importer", "cpu");
}

#[test]
fn hostile_importer_cannot_pin_leases_cpu() {
    run_scenario("lease-exporter", "cpu");
}

#[test]
fn hostile_importer_cannot_pin_leases_mock() {
    run_scenario("lease-exporter", "mock");
}

#[test]
fn named_region_truncated_by_its_owner() {
    run_scenario("truncation-importer", "cpu");
}

#[test]
fn read_only_export_cannot_be_reopened_writable_cpu() {
    run_scenario("read-only-exporter", "cpu");
}

#[test]
fn read_only_export_cannot_be_reopened_writable_mock() {
    run_scenario("read-only-exporter", "mock-ro");
}

/// The child entry point: a role in a child process its parent started.
#[test]
#[ignore = "child entry point: run by its parent"]
fn __child() {
    let role = child_role();
    let (what, backend) = role.split_once(':').unwrap_or((role.as_str(), "cpu"));
    match what {
        "socket-receiver" => on_backend!(backend, |d| socket_receiver(&d, backend)),
        "socket-sender" => on_backend!(backend, |d| socket_sender(&d)),
        "broker-receiver" => broker_receiver(),
        "broker-garbler" => broker_garbler(),
        "allow-list-exporter" => on_backend!(backend, |d| allow_list_exporter(&d, backend)),
        "allow-list-forger" => on_backend!(backend, |d| allow_list_forger(&d)),
        "fake-broker-importer" => on_backend!(backend, |d| fake_broker_importer(&d, backend)),
        "fake-broker" => on_backend!(backend, |d| fake_broker(&d)),
        "other-user-importer" => other_user_importer(),
        "other-user-exporter" => other_user_exporter(),
        "lease-exporter" => on_backend!(backend, |d| lease_exporter(&d, backend)),
        "lease-hog" => lease_hog(),
        "read-only-exporter" => on_backend!(backend, |d| read_only_exporter(&d, backend)),
        "read-only-attacker" => on_backend!(backend, |d| read_only_attacker(&d)),
        "truncation-importer" => truncation_importer(),
        "truncating-owner" => truncating_owner(),
        "toucher" => toucher(),
        other => panic!("unknown role {other}"),
    }
}

// --- shared code ---------------------------------------------------------------

const PAGES: u64 = 2;
const GOOD_SEED: u32 = 777;

fn desc<D: Device>(d: &D) -> AllocDesc {
    let page = d.info().page_size();
    let mut desc = if d.capabilities().contains(Capabilities::MEMORY_IS_HOST) {
        AllocDesc::host(PAGES * page)
    } else {
        AllocDesc::device(d.info().ordinal, PAGES * page)
    };
    desc.align = page;
    desc
}

/// An allocation filled with `pattern(seed)` and its export.
fn filled_export<D: Device>(d: &D, seed: u32, importers: Importers) -> (D::Allocation, Exported) {
    let a = d.allocate(&desc(d)).unwrap();
    a.write(0, &pattern(seed, a.len() as usize)).unwrap();
    let opts = ExportOptions {
        importers,
        ..ExportOptions::default()
    };
    let ex = d.export_memory(&a, &opts).unwrap();
    (a, ex)
}

#[track_caller]
fn assert_pattern(m: &impl Memory, seed: u32, what: &str) {
    let mut got = vec![0u8; m.len() as usize];
    m.read(0, &mut got).unwrap();
    assert!(got == pattern(seed, got.len()), "{what}: wrong bytes");
}

fn from_text(text: &str) -> SharedHandle {
    SharedHandle::from(exchange::decode(text).expect("a decodable handle text"))
}

/// A short description of an error: its kind, and for an invalid handle
/// its `HandleError` variant.
fn variant(e: &Error) -> String {
    match e {
        Error::InvalidHandle(h) => {
            let dbg = format!("{h:?}");
            let name = dbg.split(['(', ' ', '{']).next().unwrap_or("").to_string();
            format!("invalid-handle/{name}")
        }
        e => e.kind_name().to_string(),
    }
}

/// A memfd of `size` bytes with `seals` added (0: none).
fn memfd_sealed(size: u64, seals: i32) -> OwnedFd {
    let fd = os::memfd("hal-rel-hostile", size, None).unwrap();
    if seals != 0 {
        os::add_seals(fd.as_fd(), seals).unwrap();
    }
    fd
}

// --- 1. bad descriptors and garbage on the handle socket ------------------------

/// The bad inputs the sender tries, and the error each must give the
/// receiver: `(case, expected variant)`. `cpu_only` cases need named regions.
const SOCKET_CASES: &[(&str, &str)] = &[
    ("unsealed-memfd", "invalid-handle/Descriptors"),
    ("shrink-sealed-only", "invalid-handle/Descriptors"),
    ("regular-file", "invalid-handle/Descriptors"),
    ("pipe", "invalid-handle/Descriptors"),
    ("socket", "invalid-handle/Descriptors"),
    ("dev-null", "invalid-handle/Descriptors"),
    ("too-small-memfd", "invalid-handle/Descriptors"),
    ("read-only-fd-for-writable-handle", "permission-denied"),
    ("two-fds-for-one", "invalid-handle/Descriptors"),
    ("three-fds-for-one", "invalid-handle/Descriptors"),
    ("announced-two-sent-three", "invalid-handle/Descriptors"),
    ("beyond-max-fds", "io"),
    ("announces-beyond-max", "invalid-handle/OverBound"),
    ("garbage-bytes", "invalid-handle/Malformed"),
    ("bad-version", "invalid-handle/Malformed"),
    ("oversized-length", "invalid-handle/OverBound"),
    ("garbage-body", "invalid-handle/BadMagic"),
    ("flipped-byte", "invalid-handle/BadChecksum"),
    ("hang-up-mid-header", "closed"),
    ("hang-up-mid-body", "closed"),
    ("wrong-kind", "invalid-handle/WrongKind"),
    ("wrong-backend", "invalid-handle/WrongBackend"),
    ("named-other-user", "permission-denied"),
    ("named-traversal", "invalid-argument"),
    ("named-missing", "not-found"),
];

fn socket_receiver<D: Device>(d: &D, backend: &str) {
    if backend == "cpu" && !is_root() {
        hal_core::testing::not_run(
            "the `named-other-user` case needs a region of another uid, which only root can make \
             here; the other cases run",
        );
    }
    let name = unique("hostile-listen");
    let listener = HandleListener::bind_abstract(&name).unwrap();
    let mut sender = Kid::spawn(
        &format!("socket-sender:{backend}"),
        &[("name", name.clone()), ("foreign", unique("foreign"))],
    );
    sender.expect("ready");
    let cases: Vec<_> = SOCKET_CASES
        .iter()
        .filter(|(c, _)| backend == "cpu" || !c.starts_with("named-"))
        .filter(|(c, _)| is_root() || *c != "named-other-user")
        .collect();
    let mut census = None;
    for round in 0..=ROUNDS {
        for (case, want) in &cases {
            sender.tell(&format!("case {case}"));
            let stream = listener.accept_timeout(LONG).unwrap();
            stream.set_timeout(Some(LONG)).unwrap();
            let outcome = match stream.recv() {
                Err(e) => Err(("recv", e)),
                Ok((shared, _)) => match d.import_memory(shared, &ImportOptions::default()) {
                    Err(e) => Err(("import", e)),
                    Ok(_) => Ok(()),
                },
            };
            drop(stream);
            match outcome {
                Ok(()) => panic!("round {round}: the hostile case {case} was imported"),
                Err((stage, e)) => assert_eq!(
                    variant(&e),
                    *want,
                    "round {round}, case {case}, refused at {stage}: {e}"
                ),
            }
            sender.expect("sent");
            // Unaffected: the next, honest handle imports.
            sender.tell("good");
            let stream = listener.accept_timeout(LONG).unwrap();
            stream.set_timeout(Some(LONG)).unwrap();
            let (shared, _) = stream.recv().unwrap();
            let m = d.import_memory(shared, &ImportOptions::default()).unwrap();
            assert_pattern(&m, GOOD_SEED, "the honest import after a hostile one");
            drop(m);
            sender.expect("sent");
        }
        if round == 0 {
            census = Some(Census::take());
        }
    }
    census
        .unwrap()
        .assert_back("after the hostile sender's descriptors were refused");
    sender.tell("done");
    sender.finish();
    eprintln!(
        "note: {} hostile messages refused, {} honest imports",
        cases.len() as u32 * (ROUNDS + 1),
        cases.len() as u32 * (ROUNDS + 1)
    );
}

fn socket_sender<D: Device>(d: &D) {
    let name = arg("name");
    let (alloc, ex) = filled_export(d, GOOD_SEED, Importers::BackendDefault);
    let h = ex.handle().clone();
    let [data] = ex.fds() else {
        panic!("a memory export has one descriptor (the exporter keeps its leases)")
    };
    let size = alloc.len();
    // A named region of another user (root only).
    let foreign = is_root().then(|| {
        let r = named::create_named(&arg("foreign"), size, &NamedOptions::default()).unwrap();
        nix::unistd::fchown(
            r.fd().as_raw_fd(),
            Some(nix::unistd::Uid::from_raw(NOBODY)),
            Some(nix::unistd::Gid::from_raw(NOBODY)),
        )
        .unwrap();
        r
    });
    say("ready", "");
    loop {
        let line = hear();
        if line == "done" {
            break;
        }
        let s = UnixStream::connect_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
            .unwrap();
        let hs = || HandleStream::from_fd(OwnedFd::from(s.try_clone().unwrap())).unwrap();
        if line == "good" {
            hs().send_exported(&ex).unwrap();
            say("sent", "");
            continue;
        }
        let case = line.strip_prefix("case ").expect("a case");
        let raw = |bytes: &[u8], fds: &[RawFd]| send_raw(s.as_fd(), bytes, fds);
        let with_data = |fd: &OwnedFd| hs().send(&h, &[fd]).unwrap();
        match case {
            "unsealed-memfd" => with_data(&memfd_sealed(size, 0)),
            "shrink-sealed-only" => with_data(&memfd_sealed(size, libc::F_SEAL_SHRINK)),
            "regular-file" => {
                let path = std::env::temp_dir().join(unique("regular"));
                let f = File::options()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .unwrap();
                std::fs::remove_file(&path).unwrap();
                f.set_len(size).unwrap();
                with_data(&OwnedFd::from(f));
            }
            "pipe" => {
                let (r, _w) = nix::unistd::pipe().unwrap();
                with_data(&r);
            }
            "socket" => {
                let (a, _b) = UnixStream::pair().unwrap();
                with_data(&OwnedFd::from(a));
            }
            "dev-null" => with_data(&OwnedFd::from(File::open("/dev/null").unwrap())),
            "too-small-memfd" => with_data(&memfd_sealed(size / 2, os::EXPORT_SEALS)),
            "read-only-fd-for-writable-handle" => {
                let ro = File::open(format!("/proc/self/fd/{}", data.as_raw_fd())).unwrap();
                with_data(&OwnedFd::from(ro));
            }
            "two-fds-for-one" => {
                let mut two = h.clone();
                two.fds = FdSource::Attached { count: 2 };
                hs().send(&two, &[data, data]).unwrap();
            }
            "three-fds-for-one" => {
                let mut three = h.clone();
                three.fds = FdSource::Attached { count: 3 };
                hs().send(&three, &[data, data, data]).unwrap();
            }
            "announced-two-sent-three" => {
                let body = h.to_bytes();
                let mut f = frame_header(1, 1, 2, body.len() as u32);
                f.extend_from_slice(&body);
                raw(&f, &[data.as_raw_fd(); 3]);
            }
            "beyond-max-fds" => {
                let body = h.to_bytes();
                let mut f = frame_header(1, 1, 2, body.len() as u32);
                f.extend_from_slice(&body);
                raw(&f, &[data.as_raw_fd(); exchange::MAX_FDS + 8]);
            }
            "announces-beyond-max" => raw(&frame_header(1, 1, 200, 10), &[]),
            "garbage-bytes" => raw(&pattern(5, 64), &[data.as_raw_fd()]),
            "bad-version" => raw(&frame_header(9, 1, 0, 0), &[]),
            "oversized-length" => raw(&frame_header(1, 1, 0, u32::MAX), &[]),
            "garbage-body" => {
                let mut f = frame_header(1, 1, 0, 100);
                f.extend_from_slice(&pattern(6, 100));
                raw(&f, &[]);
            }
            "flipped-byte" => {
                let mut body = h.to_bytes();
                // A byte of the object id (offsets 69 to 84 in every wire
                // version): no field check can tell, only the checksum.
                body[77] ^= 0x40;
                let mut f = frame_header(1, 1, 0, body.len() as u32);
                f.extend_from_slice(&body);
                raw(&f, &[]);
            }
            "hang-up-mid-header" => raw(&frame_header(1, 1, 2, 300)[..7], &[data.as_raw_fd()]),
            "hang-up-mid-body" => {
                let mut f = frame_header(1, 1, 0, 300);
                f.extend_from_slice(&[1; 40]);
                raw(&f, &[]);
            }
            "wrong-kind" => {
                let mut k = h.clone();
                k.kind = HandleKind::Event;
                hs().send(&k, &[data]).unwrap();
            }
            "wrong-backend" => {
                let mut k = h.clone();
                k.backend = if k.backend == hal_core::BackendId::CpuShm {
                    hal_core::BackendId::MockCuda
                } else {
                    hal_core::BackendId::CpuShm
                };
                hs().send(&k, &[data]).unwrap();
            }
            "named-other-user" | "named-traversal" | "named-missing" => {
                let region = match case {
                    "named-other-user" => foreign.as_ref().unwrap().name().unwrap().to_string(),
                    "named-traversal" => "../../etc/passwd".to_string(),
                    _ => unique("missing"),
                };
                let mut n = h.clone();
                n.flags.insert(HandleFlags::NAMED);
                n.payload = region.into_bytes();
                n.fds = FdSource::None;
                hs().send::<OwnedFd>(&n, &[]).unwrap();
            }
            other => panic!("unknown case {other}"),
        }
        drop(s);
        say("sent", "");
    }
    drop(foreign);
    drop(ex);
    drop(alloc);
}

// --- 2. garbage on the broker socket ---------------------------------------------

/// What the garbler sends to the broker, and the reply status it must get
/// (`eof` when the broker hangs up without a reply, `-` when it does not
/// wait for one).
const BROKER_CASES: &[(&str, &str)] = &[
    ("empty", "eof"),
    ("three-bytes", "1"),
    ("random-24", "1"),
    ("version-9", "2"),
    ("op-4", "1"),
    ("reserved-set", "1"),
    ("long-100", "1"),
    ("unknown-object", "3"),
    ("reply-lookalike", "1"),
    ("request-with-fds", "0+1fds+lease"),
    ("connect-and-close", "-"),
    ("request-then-close", "-"),
];

fn broker_receiver() {
    let d = CpuShm::new().host();
    let (alloc, ex) = filled_export(&d, GOOD_SEED, Importers::Anyone);
    let text = ex.to_text();
    let mut garbler = Kid::spawn("broker-garbler", &[("handle", text.clone())]);
    let mut census = None;
    for round in 0..=ROUNDS {
        garbler.tell("round");
        for (case, want) in BROKER_CASES {
            let got = garbler.expect(case);
            assert_eq!(&got, want, "round {round}: the broker's answer to {case}");
        }
        // The garbler, then this process, import from the text: served.
        assert_eq!(garbler.expect("honest"), "ok");
        let m = d
            .import_memory(from_text(&text), &ImportOptions::default())
            .unwrap();
        assert_pattern(&m, GOOD_SEED, "an import after broker garbage");
        drop(m);
        // A request whose sender hangs up at once may have been served (a
        // lease for a live process that never reads its ticket): at most
        // one per round, all gone with the garbler.
        assert!(alloc.importers().unwrap() <= round as usize + 1);
        if round == 0 {
            census = Some(Census::take());
        }
    }
    census
        .unwrap()
        .assert_back("after garbage and descriptors sent to the broker");
    garbler.tell("done");
    garbler.finish();
    alloc.wait_unleased(Some(LONG)).unwrap();
    drop(ex);
}

fn broker_garbler() {
    let text = arg("handle");
    let h = exchange::decode(&text).unwrap();
    let FdSource::Broker { name, .. } = h.fds.clone() else {
        panic!("no broker in the handle")
    };
    let d = CpuShm::new().host();
    let request = broker_request;
    let (probe_r, probe_w) = nix::unistd::pipe().unwrap();
    loop {
        if hear() == "done" {
            break;
        }
        for (case, _) in BROKER_CASES {
            let fd = broker_connect(&name);
            let send = |bytes: &[u8], fds: &[RawFd]| send_raw(fd.as_fd(), bytes, fds);
            let mut wait_reply = true;
            match *case {
                "empty" => send(&[], &[]),
                "three-bytes" => send(b"HAL", &[]),
                "random-24" => send(&pattern(3, 24), &[]),
                "version-9" => {
                    let mut r = request(&h.object_id);
                    r[4] = 9;
                    send(&r, &[]);
                }
                "op-4" => {
                    let mut r = request(&h.object_id);
                    r[5] = 4;
                    send(&r, &[]);
                }
                "reserved-set" => {
                    let mut r = request(&h.object_id);
                    r[7] = 1;
                    send(&r, &[]);
                }
                "long-100" => {
                    let mut r = request(&h.object_id);
                    r.resize(100, 0);
                    send(&r, &[]);
                }
                "unknown-object" => send(&request(&os::random_id()), &[]),
                "reply-lookalike" => send(&reply_lookalike(), &[]),
                "request-with-fds" => {
                    // The write end of a pipe rides along: if the broker kept
                    // it, the read end below would never see end-of-file.
                    send(&request(&h.object_id), &[probe_w.as_raw_fd(); 3]);
                }
                "connect-and-close" => wait_reply = false,
                "request-then-close" => {
                    send(&request(&h.object_id), &[]);
                    wait_reply = false;
                }
                other => panic!("unknown case {other}"),
            }
            let answer = if wait_reply {
                broker_answer_at(fd.as_fd(), &name)
            } else {
                "-".to_string()
            };
            drop(fd);
            say(case, answer);
        }
        // The pipe's write end went only to the broker (and here): nobody
        // else holds it, so the broker closed what it was sent.
        // An honest import from the text alone.
        let r = d.import_memory(from_text(&text), &ImportOptions::default());
        let ok = match &r {
            Ok(m) => {
                assert_pattern(m, GOOD_SEED, "the garbler's honest import");
                "ok".to_string()
            }
            Err(e) => format!("{e}"),
        };
        drop(r);
        say("honest", ok);
    }
    drop(probe_w);
    // Every copy of the write end is closed now, the broker's included.
    let mut b = [0u8; 1];
    assert_eq!(
        File::from(probe_r).read(&mut b).unwrap(),
        0,
        "descriptors sent to the broker were kept"
    );
}

// --- 3. forged allow-lists --------------------------------------------------------

fn allow_list_exporter<D: Device>(d: &D, backend: &str) {
    let me = std::process::id();
    let importers = if d
        .capabilities()
        .contains(Capabilities::PID_ALLOW_LIST_DEFAULT_ON)
    {
        Importers::BackendDefault
    } else {
        Importers::Pids(vec![me])
    };
    let (alloc, mut ex) = filled_export(d, GOOD_SEED, importers);
    assert!(!ex.handle().allows(0) && !ex.handle().flags.contains(HandleFlags::ANY_IMPORTER));
    let mut forger = Kid::spawn(
        &format!("allow-list-forger:{backend}"),
        &[("handle", ex.to_text())],
    );
    let census = Census::take();
    for round in 0..=ROUNDS {
        forger.tell("round");
        for case in ["genuine", "any-importer", "own-pid", "both", "own-creator"] {
            assert_eq!(
                forger.expect(case),
                "permission-denied",
                "round {round}: a {case} handle must be refused by the broker"
            );
        }
        assert_eq!(alloc.importers().unwrap(), 0);
        // Unaffected: this process imports its own export from the text
        // (its broker always serves the exporting process itself).
        let m = d
            .import_memory(from_text(&ex.to_text()), &ImportOptions::default())
            .unwrap();
        assert_pattern(&m, GOOD_SEED, "the exporter's own import");
        drop(m);
    }
    census.assert_back("after the forged imports");
    // Once the exporter allows the pid, the genuine handle works.
    let pid = forger.pid();
    d.allow_importers(&mut ex, &[pid]).unwrap();
    forger.tell("allowed");
    assert_eq!(forger.expect("allowed"), "ok");
    forger.finish();
    drop(ex);
}

fn allow_list_forger<D: Device>(d: &D) {
    let genuine = exchange::decode(&arg("handle")).unwrap();
    let me = std::process::id();
    let (_, my_start) = os::self_identity();
    loop {
        let line = hear();
        if line == "allowed" {
            let r = d.import_memory(
                SharedHandle::from(genuine.clone()),
                &ImportOptions::default(),
            );
            if let Ok(m) = &r {
                assert_pattern(m, GOOD_SEED, "the allowed import");
            }
            say("allowed", kind(&r));
            break;
        }
        let forgeries = [
            ("genuine", genuine.clone()),
            ("any-importer", {
                let mut h = genuine.clone();
                h.flags.insert(HandleFlags::ANY_IMPORTER);
                h
            }),
            ("own-pid", {
                let mut h = genuine.clone();
                h.allowed_pids.push(me);
                h
            }),
            ("both", {
                let mut h = genuine.clone();
                h.flags.insert(HandleFlags::ANY_IMPORTER);
                h.allowed_pids = vec![me];
                h
            }),
            ("own-creator", {
                // "The exporting process itself is always served": claiming to
                // be the creator does not make this process the exporter.
                let mut h = genuine.clone();
                h.creator_pid = me;
                h.creator_start = my_start;
                h.flags.insert(HandleFlags::ANY_IMPORTER);
                h
            }),
        ];
        for (case, h) in forgeries {
            // Through the text form, as a forger would pass it around.
            let text = h.to_text();
            let r = d.import_memory(from_text(&text), &ImportOptions::default());
            say(case, kind(&r));
        }
    }
}

// --- 4. forged creators and hostile brokers -----------------------------------------

/// The fake brokers a hostile exporter runs, and what the importer must get.
const FAKE_BROKERS: &[(&str, &str)] = &[
    ("impersonates-a-live-exporter", "permission-denied"),
    ("unsealed-descriptors", "invalid-handle/Descriptors"),
    (
        "more-descriptors-than-announced",
        "invalid-handle/Descriptors",
    ),
    ("far-too-many-descriptors", "io"),
    ("fewer-than-announced", "invalid-handle/Descriptors"),
    ("garbage-reply", "io"),
    ("unknown-status", "io"),
    ("says-denied", "permission-denied"),
    ("hangs-up", "closed"),
];

fn fake_broker_importer<D: Device>(d: &D, backend: &str) {
    let mut exporter = Kid::spawn(&format!("fake-broker:{backend}"), &[]);
    let genuine = exporter.expect("genuine");
    let forged: Vec<(&str, &str, String)> = FAKE_BROKERS
        .iter()
        .map(|(case, want)| (*case, *want, exporter.expect(case)))
        .collect();
    let mut census = None;
    for round in 0..=ROUNDS {
        for (case, want, text) in &forged {
            let r = d.import_memory(from_text(text), &ImportOptions::default());
            match r {
                Ok(_) => panic!("round {round}: the {case} broker's descriptors were imported"),
                Err(e) => assert_eq!(variant(&e), *want, "round {round}, {case}: {e}"),
            }
            let m = d
                .import_memory(from_text(&genuine), &ImportOptions::default())
                .unwrap();
            assert_pattern(&m, GOOD_SEED, "the genuine import after a fake broker");
            drop(m);
        }
        if round == 0 {
            census = Some(Census::take());
        }
    }
    census
        .unwrap()
        .assert_back("after the hostile brokers' descriptors were refused");
    drop(exporter);
}

fn fake_broker<D: Device>(d: &D) {
    let (_alloc, ex) = filled_export(d, GOOD_SEED, Importers::Anyone);
    say("genuine", ex.to_text());
    let parent = nix::unistd::getppid().as_raw() as u32;
    let parent_start = os::process_start_time(parent).expect("the parent's start time");
    let [data] = ex.fds() else {
        panic!("a memory export has one descriptor")
    };
    let data = Arc::new(os::dup(data.as_fd()).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (case, _) in FAKE_BROKERS {
        let name = unique("fake-broker");
        let listener = socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        nix::sys::socket::bind(
            listener.as_raw_fd(),
            &UnixAddr::new_abstract(name.as_bytes()).unwrap(),
        )
        .unwrap();
        nix::sys::socket::listen(&listener, nix::sys::socket::Backlog::new(16).unwrap()).unwrap();
        let mut h = ex.handle().clone();
        h.object_id = os::random_id();
        h.fds = FdSource::Broker {
            count: 1,
            name: name.clone(),
        };
        if *case == "impersonates-a-live-exporter" {
            // The importer's own pid as the creator: a live process that is
            // not the one serving the socket.
            h.creator_pid = parent;
            h.creator_start = parent_start;
        }
        say(case, h.to_text());
        let (data, stop) = (Arc::clone(&data), Arc::clone(&stop));
        let case = case.to_string();
        threads.push(std::thread::spawn(move || {
            serve_fake(listener, &case, &data, &stop)
        }));
    }
    wait_for_eof();
    stop.store(true, Ordering::SeqCst);
    drop(threads);
}

fn serve_fake(listener: OwnedFd, case: &str, data: &OwnedFd, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        let Ok(raw) = nix::sys::socket::accept(listener.as_raw_fd()) else {
            continue;
        };
        // SAFETY: accept returned a new descriptor that nothing else owns.
        let conn: OwnedFd = unsafe { std::os::fd::FromRawFd::from_raw_fd(raw) };
        let mut buf = [0u8; 64];
        let _ = nix::unistd::read(conn.as_raw_fd(), &mut buf);
        let reply = |status: u8, announced: u8| {
            let mut r = b"HALR\x02".to_vec();
            r.extend_from_slice(&[status, announced, 0]);
            r.resize(40, 0);
            r
        };
        let send = |bytes: &[u8], fds: &[RawFd]| {
            let _ = std::panic::catch_unwind(|| send_raw(conn.as_fd(), bytes, fds));
        };
        match case {
            "impersonates-a-live-exporter" => send(&reply(0, 1), &[data.as_raw_fd()]),
            "unsealed-descriptors" => {
                let bad = memfd_sealed(PAGES * 4096, 0);
                send(&reply(0, 1), &[bad.as_raw_fd()]);
            }
            "more-descriptors-than-announced" => send(&reply(0, 1), &[data.as_raw_fd(); 5]),
            // More than the importer has room for: the kernel drops the rest.
            "far-too-many-descriptors" => send(&reply(0, 1), &[data.as_raw_fd(); 64]),
            "fewer-than-announced" => send(&reply(0, 2), &[data.as_raw_fd()]),
            "garbage-reply" => send(&pattern(9, 12), &[]),
            "unknown-status" => send(&reply(9, 0), &[]),
            "says-denied" => send(&reply(4, 0), &[]),
            "hangs-up" => {}
            other => panic!("unknown fake broker {other}"),
        }
        drop(conn);
    }
}

// --- 5. another user's exports ---------------------------------------------------------

fn other_user_importer() {
    let d = CpuShm::new().host();
    let (alloc, ex) = filled_export(&d, GOOD_SEED, Importers::Anyone);
    let (same_alloc, same) = filled_export(&d, GOOD_SEED, Importers::SameUser);
    let (_listed_alloc, listed_elsewhere) = filled_export(&d, GOOD_SEED, Importers::Pids(vec![1]));
    let setup = |cmd: &mut std::process::Command| {
        std::os::unix::process::CommandExt::uid(cmd, NOBODY);
        std::os::unix::process::CommandExt::gid(cmd, NOBODY);
    };
    let mut other = Kid::spawn_with("other-user-exporter", &[("handle", ex.to_text())], setup);
    let theirs = other.expect("export");
    // An export whose list names the other user's process.
    let (listed_alloc, listed) = filled_export(&d, GOOD_SEED, Importers::Pids(vec![other.id()]));
    let mut census = None;
    for round in 0..=ROUNDS {
        // Root does not take descriptors from another user's broker unless
        // it trusts that user.
        let r = d.import_memory(from_text(&theirs), &ImportOptions::default());
        assert_eq!(
            kind(&r),
            "permission-denied",
            "round {round}: {:?}",
            r.err()
        );
        drop(r);
        // ... though their broker serves root (by design: root can take any
        // process's memory anyway), as a raw request shows.
        let theirs_h = exchange::decode(&theirs).unwrap();
        let FdSource::Broker { name, .. } = &theirs_h.fds else {
            panic!("no broker in their handle")
        };
        let fd = broker_connect(name);
        send_raw(fd.as_fd(), &broker_request(&theirs_h.object_id), &[]);
        assert_eq!(
            broker_answer_at(fd.as_fd(), name),
            "0+1fds+lease",
            "round {round}"
        );
        drop(fd);
        // Root's exports to anyone and to a list naming the other user's
        // process reach it (it trusts root's broker, as every process
        // does); those to root's own processes, or to a list without it,
        // are refused.
        other.tell(&format!("import {}", ex.to_text()));
        assert_eq!(other.expect("import"), "ok", "round {round}: to anyone");
        other.tell(&format!("import {}", listed.to_text()));
        assert_eq!(other.expect("import"), "ok", "round {round}: listed");
        other.tell(&format!("import {}", same.to_text()));
        assert_eq!(other.expect("import"), "permission-denied", "round {round}");
        other.tell(&format!("import {}", listed_elsewhere.to_text()));
        assert_eq!(other.expect("import"), "permission-denied", "round {round}");
        // It learns nothing of what it may not have: a raw request for
        // root's export to its own user and for an id that does not exist
        // get the same answer.
        let (same_h, name) = (exchange::decode(&same.to_text()).unwrap(), ex.to_text());
        let FdSource::Broker {
            name: root_broker, ..
        } = &same_h.fds
        else {
            panic!("no broker in root's handle: {name}")
        };
        other.tell(&format!("probe {root_broker} {}", hex(&same_h.object_id)));
        assert_eq!(other.expect("probe"), "5 5", "round {round}: refused alike");
        assert_eq!(alloc.importers().unwrap(), 0);
        assert_eq!(listed_alloc.importers().unwrap(), 0);
        assert_eq!(same_alloc.importers().unwrap(), 0);
        // Unaffected.
        let m = d
            .import_memory(from_text(&ex.to_text()), &ImportOptions::default())
            .unwrap();
        assert_pattern(&m, GOOD_SEED, "root's own import");
        drop(m);
        if round == 0 {
            census = Some(Census::take());
        }
    }
    census
        .unwrap()
        .assert_back("after another user's handles were refused");
    // Trusting that user, root takes its export.
    assert!(exchange::trust_exporter_uid(NOBODY));
    let m = d
        .import_memory(from_text(&theirs), &ImportOptions::default())
        .expect("an import of a trusted user's export to anyone");
    assert_pattern(&m, 1, "the other user's export");
    drop(m);
    other.tell("done");
    other.finish();
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn other_user_exporter() {
    assert_eq!(nix::unistd::geteuid().as_raw(), NOBODY);
    let d = CpuShm::new().host();
    let (_alloc, ex) = filled_export(&d, 1, Importers::Anyone);
    say("export", ex.to_text());
    loop {
        let line = hear();
        let mut words = line.split(' ');
        match words.next() {
            Some("import") => {
                let text = words.next().expect("a handle");
                let r = d.import_memory(from_text(text), &ImportOptions::default());
                if let Ok(m) = &r {
                    assert_pattern(m, GOOD_SEED, "root's export, imported by another user");
                }
                say("import", kind(&r));
            }
            Some("probe") => {
                let name = words.next().expect("a broker");
                let id: Vec<u8> = (0..16)
                    .map(|i| {
                        u8::from_str_radix(&words.clone().next().unwrap()[2 * i..2 * i + 2], 16)
                            .unwrap()
                    })
                    .collect();
                let id: [u8; 16] = id.try_into().unwrap();
                let status = |id: &[u8; 16]| {
                    let fd = broker_connect(name);
                    send_raw(fd.as_fd(), &broker_request(id), &[]);
                    broker_answer_at(fd.as_fd(), name)
                };
                let missing = hal_core::kit::os::random_id();
                say("probe", format!("{} {}", status(&id), status(&missing)));
            }
            _ => break,
        }
    }
}

// --- 6. an importer that tries to pin the exporter's leases ----------------------------

fn lease_exporter<D: Device>(d: &D, backend: &str) {
    let mut census = None;
    let slots = hal_core::lease::DEFAULT_SLOTS as usize;
    for round in 0..=ROUNDS {
        let (alloc, ex) = filled_export(d, GOOD_SEED, Importers::Anyone);
        let text = ex.to_text();
        let mut hog = Kid::spawn(&format!("lease-hog:{backend}"), &[("handle", text.clone())]);
        // The importer got the data descriptor and nothing it could write
        // leases into; it holds every slot only as a live process the broker
        // served, one request at a time.
        assert_eq!(hog.expect("fetched"), "0+1fds+lease", "round {round}");
        assert_eq!(hog.expect("filled"), slots.to_string(), "round {round}");
        assert_eq!(alloc.importers().unwrap(), slots, "round {round}");
        let r = d.import_memory(from_text(&text), &ImportOptions::default());
        assert_eq!(kind(&r), "busy", "round {round}");
        drop(r);
        // Releases with tickets it was not given (other slots, other
        // tokens) free nothing.
        hog.tell("forge");
        assert_eq!(hog.expect("forged"), "0 released", "round {round}");
        assert_eq!(alloc.importers().unwrap(), slots, "round {round}");
        hog.kill();
        // Once that process is dead, none of its leases count.
        alloc
            .wait_unleased(Some(LONG))
            .expect("the dead importer's leases are freed");
        assert_eq!(alloc.importers().unwrap(), 0);
        let m = d
            .import_memory(from_text(&text), &ImportOptions::default())
            .unwrap();
        assert_eq!(alloc.importers().unwrap(), 1);
        assert_pattern(&m, GOOD_SEED, "an import after the hog died");
        drop(m);
        assert_eq!(
            alloc.importers().unwrap(),
            0,
            "a dropped import gives its lease back"
        );
        drop((ex, alloc));
        if round == 0 {
            census = Some(Census::take());
        }
    }
    census.unwrap().assert_back("after the lease hogs");
}

fn lease_hog() {
    let h = exchange::decode(&arg("handle")).unwrap();
    let FdSource::Broker { name, .. } = h.fds.clone() else {
        panic!("no broker in the handle")
    };
    let ask = |bytes: &[u8]| {
        let fd = broker_connect(&name);
        send_raw(fd.as_fd(), bytes, &[]);
        raw_reply(fd.as_fd()).expect("a reply")
    };
    // The raw fetch: what travels.
    let (status, fds, ticket) = ask(&broker_request(&h.object_id));
    let mut tickets = vec![ticket.clone().expect("a lease with the fetch")];
    say(
        "fetched",
        format!(
            "{status}+{fds}fds{}",
            if ticket.is_some() { "+lease" } else { "" }
        ),
    );
    // Leases until the table is full.
    loop {
        match ask(&lease_request(&h.object_id)) {
            (0, 0, Some(t)) => tickets.push(t),
            (7, 0, None) => break,
            other => panic!("unexpected lease answer {other:?}"),
        }
    }
    say("filled", tickets.len());
    assert_eq!(hear(), "forge");
    let mut released = 0;
    for (i, (table, slot, token)) in tickets.iter().enumerate() {
        let (other_slot, other_token) = if i % 2 == 0 {
            (slot.wrapping_add(1), *token)
        } else {
            (*slot, token.wrapping_add(7))
        };
        let (status, _, _) = ask(&release_request(table, other_slot, other_token));
        if status == 0 {
            released += 1;
        }
    }
    say("forged", format!("{released} released"));
    wait_for_eof();
}

// --- 7. an importer that tries to write a read-only export ---------------------------------

/// Exports a filled allocation read-only, lets an attacker process try every
/// way to write it, and checks that its bytes are unchanged, that it still
/// writes them itself, and that a writable export of it is refused.
fn read_only_exporter<D: Device>(d: &D, backend: &str) {
    let mut census = None;
    let read_only = ExportOptions {
        importers: Importers::Anyone,
        read_only: true,
        ..ExportOptions::default()
    };
    for round in 0..=ROUNDS {
        let a = d.allocate(&desc(d)).unwrap();
        a.write(0, &pattern(GOOD_SEED, a.len() as usize)).unwrap();
        let ex = d.export_memory(&a, &read_only).unwrap();
        let text = ex.to_text();
        let mut attacker = Kid::spawn(
            &format!("read-only-attacker:{backend}"),
            &[("handle", text.clone())],
        );
        let tried = attacker.expect("tried");
        attacker.finish();
        for entry in tried.split_whitespace() {
            let (what, result) = entry.split_once('=').expect("name=result");
            // The kernel checks no seal at open: a read-write reopen may
            // work, and then gives nothing (its attempts below fail).
            if what != "open-rw" {
                assert!(
                    result.starts_with("refused"),
                    "round {round}: {what} went through ({tried})"
                );
            }
        }
        assert!(tried.contains("received-mmap-write="), "{tried}");
        assert_pattern(&a, GOOD_SEED, "the exporter's bytes after the attacker");
        // The allocation stays read-only for every later export.
        let writable = ExportOptions {
            importers: Importers::Anyone,
            ..ExportOptions::default()
        };
        let r = d.export_memory(&a, &writable);
        assert_eq!(kind(&r), "permission-denied", "round {round}");
        drop(r);
        // The exporter's own mapping still writes, and importers see it.
        a.write(8, b"exporter").unwrap();
        let m = d
            .import_memory(from_text(&text), &ImportOptions::default())
            .unwrap();
        let mut got = [0u8; 8];
        m.read(8, &mut got).unwrap();
        assert_eq!(&got, b"exporter", "round {round}");
        drop((m, ex, a));
        if round == 0 {
            census = Some(Census::take());
        }
    }
    census.unwrap().assert_back("after the read-only attackers");
}

/// Imports the read-only handle text it is given, then tries to write the
/// memory behind it: through the library, through a read-write reopen of
/// the descriptor in `/proc/self/fd`, with a writable shared `mmap`, with
/// `pwrite`, hole punching, `ftruncate` and `mprotect`, on the descriptor it
/// was sent and on the reopened one. Reports each outcome on a `tried` line
/// (`name=refused(..)`, or `name=WENT-THROUGH`).
fn read_only_attacker<D: Device>(d: &D) {
    let text = arg("handle");
    let m = d
        .import_memory(from_text(&text), &ImportOptions::default())
        .unwrap();
    assert!(m.is_read_only(), "the import of a read-only export");
    let mut tried = vec![format!("library-write={}", outcome(m.write(0, b"hostile")))];
    // The descriptors themselves, as the exporter's broker serves them.
    let mut shared = from_text(&text);
    let fds = exchange::take_fds(&mut shared).unwrap();
    let data = fds[0].as_fd();
    assert_eq!(os::access_mode(data).unwrap(), os::AccessMode::ReadOnly);
    let len = os::fstat(data).unwrap().st_size as u64;
    let reopened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{}", data.as_raw_fd()));
    let opened = if reopened.is_ok() {
        "opened"
    } else {
        "refused"
    };
    tried.push(format!("open-rw={opened}"));
    let mut targets = vec![("received", data)];
    if let Ok(f) = &reopened {
        targets.push(("reopened", f.as_fd()));
    }
    for (name, fd) in targets {
        // A writable mapping that works is used, as an attacker would.
        let map = os::SharedMap::map(fd, len, 0, os::Prot::ReadWrite, None)
            .and_then(|w| w.write(0, b"hostile"));
        tried.push(format!("{name}-mmap-write={}", outcome(map)));
        let pw = nix::sys::uio::pwrite(fd, b"hostile", 0);
        tried.push(format!("{name}-pwrite={}", outcome(pw)));
        let punch = nix::fcntl::fallocate(
            fd.as_raw_fd(),
            nix::fcntl::FallocateFlags::FALLOC_FL_PUNCH_HOLE
                | nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
            0,
            len as i64,
        );
        tried.push(format!("{name}-punch-hole={}", outcome(punch)));
        tried.push(format!(
            "{name}-ftruncate={}",
            outcome(nix::unistd::ftruncate(fd, 0))
        ));
        let ro = os::SharedMap::map(fd, len, 0, os::Prot::Read, None).unwrap();
        let prot = ro
            .protect(0, len, os::Prot::ReadWrite)
            .and_then(|()| ro.write(0, b"hostile"));
        tried.push(format!("{name}-mprotect-write={}", outcome(prot)));
    }
    say("tried", tried.join(" "));
    wait_for_eof();
    drop(m);
}

/// `refused(why)` or `WENT-THROUGH`, without spaces.
fn outcome<T>(r: std::result::Result<T, impl std::fmt::Debug>) -> String {
    match r {
        Ok(_) => "WENT-THROUGH".into(),
        Err(e) => {
            let why = format!("{e:?}");
            let short: String = why
                .chars()
                .take(40)
                .map(|c| if c.is_whitespace() { '_' } else { c })
                .collect();
            format!("refused({short})")
        }
    }
}

// --- 8. a named region truncated by its owner --------------------------------------------

fn truncation_importer() {
    let d = CpuShm::new().host();
    let mut census = None;
    let mut sigbus = 0;
    for round in 0..=ROUNDS {
        let name = unique("truncated");
        let mut owner = Kid::spawn("truncating-owner", &[("name", name.clone())]);
        let text = owner.expect("handle");
        let m = d
            .import_memory(from_text(&text), &ImportOptions::default())
            .unwrap();
        let opened = named::open_named(&name, None).unwrap();
        assert_pattern(&m, GOOD_SEED, "a named import before the truncation");
        // A process that touches the mapping directly after the truncation.
        let mut toucher = Kid::spawn_with("toucher", &[("handle", text.clone())], |cmd| {
            // SAFETY: runs in the forked child before exec and only calls
            // setrlimit(2), which is async-signal-safe: no core file for the
            // expected SIGBUS.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(cmd, || {
                    let zero = libc::rlimit {
                        rlim_cur: 0,
                        rlim_max: 0,
                    };
                    libc::setrlimit(libc::RLIMIT_CORE, &zero);
                    Ok(())
                });
            }
        });
        toucher.expect("mapped");
        owner.tell("truncate");
        owner.expect("truncated");
        // The library's own accesses never fault: a typed error.
        let mut buf = [0u8; 16];
        assert_eq!(kind(&m.read(0, &mut buf)), "closed", "round {round}");
        assert_eq!(kind(&m.write(0, b"x")), "closed", "round {round}");
        assert_eq!(kind(&opened.read(0, &mut buf)), "closed", "round {round}");
        assert_eq!(kind(&opened.write(0, b"x")), "closed", "round {round}");
        // Direct loads through the mapping are the caller's: they fault.
        toucher.tell("touch");
        let status = toucher.wait();
        if std::os::unix::process::ExitStatusExt::signal(&status) == Some(libc::SIGBUS) {
            sigbus += 1;
        } else {
            panic!("round {round}: the toucher ended with {status}, not SIGBUS");
        }
        drop((m, opened));
        owner.finish();
        assert_no_shm(&name);
        if round == 0 {
            census = Some(Census::take());
        }
    }
    census.unwrap().assert_back("after the truncated regions");
    eprintln!("note: {sigbus} direct loads after a truncation died of SIGBUS, as documented");
}

fn truncating_owner() {
    let d = CpuShm::new().host();
    let name = arg("name");
    let r = named::create_named(&name, PAGES * 4096, &NamedOptions::default()).unwrap();
    r.write(0, &pattern(GOOD_SEED, r.len() as usize)).unwrap();
    let ex = d.export_memory(&r, &ExportOptions::default()).unwrap();
    say("handle", ex.to_text());
    assert_eq!(hear(), "truncate");
    // The owner (any process of its user) shrinks the object to nothing.
    os::set_len(r.fd(), 0).unwrap();
    say("truncated", "");
    wait_for_eof();
}

fn toucher() {
    let d = CpuShm::new().host();
    let m = d
        .import_memory(from_text(&arg("handle")), &ImportOptions::default())
        .unwrap();
    let p = m.host_ptr().unwrap();
    say("mapped", "");
    assert_eq!(hear(), "touch");
    // SAFETY: `p` is the first byte of a live mapping of this process. The
    // object behind it was truncated, so this load raises SIGBUS: that is
    // what this process exists to show (host_ptr accesses are not protected).
    let b = unsafe { std::ptr::read_volatile(p) };
    say("survived", b);
}
