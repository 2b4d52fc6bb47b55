//! Crashed peers: real processes killed with `SIGKILL` at chosen points.
//!
//! Each test starts a dedicated *survivor* process, which in a loop starts
//! *victim* processes, lets each reach a chosen point (after create, after
//! export, holding a mapping, asleep on a notify, growing a buffer, holding a
//! socket), kills it with `SIGKILL` and checks that the survivor keeps
//! working or gets a typed error (never a hang, never `SIGBUS`), that leases
//! count the dead as gone, and, after cleanup, that nothing is left: no
//! `/dev/shm` entry, and the survivor's descriptor and shared-mapping counts
//! back to what they were after the first (warm-up) round.
//!
//! The scenarios run on `hal-cpu-shm` and, where the simulator does the
//! operation, on `hal-mock` with the CUDA-like profile.

use hal_core::DeviceExt;
mod reliability;

use std::os::fd::{AsFd, AsRawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::time::Duration;

use hal_core::exchange::{self, HandleListener, HandleStream};
use hal_core::growable::{GrowableBuffer, GrowableView};
use hal_core::{
    AllocDesc, Allocation, Backend, Capabilities, Device, Error, EventFlags, ExportOptions,
    ImportOptions, Memory, Notify, SharedHandle, Vmm, WaitOptions,
};
use hal_cpu_shm::{named, CpuShm, NamedOptions};
use nix::sys::signal::Signal;
use reliability::*;

// --- tests (the parent side) --------------------------------------------------

#[test]
fn killed_after_create_cpu() {
    run_scenario("after-create", "cpu");
}

#[test]
fn killed_after_create_mock() {
    run_scenario("after-create", "mock");
}

#[test]
fn killed_after_export_cpu() {
    run_scenario("after-export", "cpu");
}

#[test]
fn killed_after_export_mock() {
    run_scenario("after-export", "mock");
}

#[test]
fn killed_importer_is_not_counted_cpu() {
    run_scenario("importer-killed", "cpu");
}

#[test]
fn killed_importer_is_not_counted_mock() {
    run_scenario("importer-killed", "mock");
}

#[test]
fn killed_waiter_on_notify_cpu() {
    run_scenario("waiter-killed", "cpu");
}

#[test]
fn killed_waiter_on_notify_mock() {
    run_scenario("waiter-killed", "mock");
}

#[test]
fn killed_while_growing_cpu() {
    run_scenario("growing", "cpu");
}

#[test]
fn killed_while_growing_mock() {
    run_scenario("growing", "mock");
}

#[test]
fn killed_holding_exchange_sockets() {
    run_scenario("sockets", "cpu");
}

#[test]
fn killed_holding_broker_connections() {
    run_scenario("broker", "cpu");
}

#[test]
fn killed_while_creating_and_dropping_named_regions() {
    run_scenario("churn", "cpu");
}

/// The child entry point: a role in a child process its parent started.
#[test]
#[ignore = "child entry point: run by its parent"]
fn __child() {
    let role = child_role();
    let (what, backend) = role.split_once(':').unwrap_or((role.as_str(), "cpu"));
    match what {
        "after-create" => on_backend!(backend, |d| after_create(&d, backend)),
        "after-export" => on_backend!(backend, |d| after_export(&d, backend)),
        "importer-killed" => on_backend!(backend, |d| importer_killed(&d, backend)),
        "waiter-killed" => on_backend!(backend, |d| waiter_killed(&d, backend)),
        "growing" => on_backend!(backend, |d| growing(&d, backend)),
        "sockets" => sockets(),
        "broker" => broker(),
        "churn" => churn(),
        "victim-churn" => victim_churn(),
        "victim-create" => on_backend!(backend, |d| victim_create(&d)),
        "victim-export" => on_backend!(backend, |d| victim_export(&d)),
        "victim-import" => on_backend!(backend, |d| victim_import(&d)),
        "victim-wait" => on_backend!(backend, |d| victim_wait(&d)),
        "victim-grow" => on_backend!(backend, |d| victim_grow(&d)),
        "victim-partial-sender" => victim_partial_sender(),
        "victim-listener" => victim_listener(),
        "honest-sender" => honest_sender(),
        "victim-broker-hog" => victim_broker_hog(),
        other => panic!("unknown role {other}"),
    }
}

// --- shared code --------------------------------------------------------------

const PAGES: u64 = 2;

/// Two pages where the device keeps its memory (host memory on host-visible
/// devices), page-aligned so that the whole allocation exports.
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

fn read_all(m: &impl Memory) -> Vec<u8> {
    let mut v = vec![0u8; m.len() as usize];
    m.read(0, &mut v).expect("read");
    v
}

#[track_caller]
fn assert_pattern(m: &impl Memory, seed: u32, what: &str) {
    let got = read_all(m);
    assert!(
        got == pattern(seed, got.len()),
        "{what}: the bytes are not the pattern {seed}"
    );
}

fn from_text(text: &str) -> SharedHandle {
    SharedHandle::from(exchange::decode(text).expect("a decodable handle text"))
}

#[track_caller]
fn expect_kind<T>(r: Result<T, Error>, want: &str, what: &str) {
    let got = kind(&r);
    if let Err(e) = &r {
        assert_eq!(got, want, "{what}: {e}");
    } else {
        assert_eq!(got, want, "{what}: it succeeded");
    }
}

fn wait_opts(timeout: Duration) -> WaitOptions {
    WaitOptions {
        timeout: Some(timeout),
        spin: Duration::ZERO,
    }
}

/// No `/dev/shm` entry names one of `pids` as its creator.
#[track_caller]
fn assert_no_shm_of(pids: &[u32]) {
    for pid in pids {
        assert_no_shm(&format!("hal-rel-{pid}-"));
    }
}

// --- killed after create ------------------------------------------------------

fn after_create<D: Device>(d: &D, backend: &str) {
    let cpu = backend == "cpu";
    let prefix = unique("create-");
    let size = PAGES * d.info().page_size();
    let mut census = None;
    let mut victims = Vec::new();
    for i in 0..=ROUNDS {
        let name = format!("{prefix}{i}");
        let mut victim = Kid::spawn(
            &format!("victim-create:{backend}"),
            &[("name", name.clone()), ("seed", i.to_string())],
        );
        let vpid = victim.pid();
        victims.push(vpid);
        victim.expect("created");
        if cpu {
            // A live creator's region is never collected.
            assert!(named::collect_garbage_prefix(&prefix, false)
                .unwrap()
                .is_empty());
            let info = named::list_regions()
                .unwrap()
                .into_iter()
                .find(|r| r.name == name)
                .expect("the victim's region is listed");
            assert!(
                info.alive && info.present && info.owner_pid == vpid,
                "{info:?}"
            );
        }
        victim.kill();
        if cpu {
            let info = named::list_regions()
                .unwrap()
                .into_iter()
                .find(|r| r.name == name)
                .expect("the dead creator's region is listed");
            assert!(!info.alive && info.present, "{info:?}");
            // The orphan still works for whoever opens it.
            let orphan = named::open_named(&name, Some(size)).unwrap();
            assert_pattern(&orphan, i, "the orphaned named region");
            let would = named::collect_garbage_prefix(&prefix, true).unwrap();
            assert_eq!(would.len(), 1, "{would:?}");
            assert_eq!(shm_entries(&name).len(), 2, "a dry run removes nothing");
            let removed = named::collect_garbage_prefix(&prefix, false).unwrap();
            assert_eq!(
                removed.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
                [name.as_str()]
            );
            assert_no_shm(&name);
            // A mapping opened before the cleanup stays valid (unlink semantics).
            assert_pattern(&orphan, i, "a mapping of a collected region");
            drop(orphan);
            expect_kind(named::open_named(&name, None), "not-found", "open after gc");
        }
        assert_no_shm_of(&victims);
        if i == 0 {
            census = Some(Census::take());
        }
    }
    census
        .unwrap()
        .assert_back("after 20 victims killed after create");
}

fn victim_create<D: Device>(d: &D) {
    let seed: u32 = arg_as("seed");
    let a = d.allocate(&desc(d)).unwrap();
    a.write(0, &pattern(seed, a.len() as usize)).unwrap();
    let _n = d.create_notify().unwrap();
    let _e = d
        .create_event(EventFlags {
            interprocess: true,
            timing: false,
        })
        .unwrap();
    let _named = if d.info().backend == hal_core::BackendId::CpuShm {
        let r = named::create_named(&arg("name"), a.len(), &NamedOptions::default()).unwrap();
        r.write(0, &pattern(seed, a.len() as usize)).unwrap();
        Some(r)
    } else {
        None
    };
    say("created", "");
    wait_for_eof();
}

// --- killed after export --------------------------------------------------------

fn after_export<D: Device>(d: &D, backend: &str) {
    let cpu = backend == "cpu";
    let prefix = unique("export-");
    let mut census = None;
    for i in 0..=ROUNDS {
        let name = format!("{prefix}{i}");
        let mut args = vec![("seed", i.to_string())];
        if cpu {
            args.push(("name", name.clone()));
        }
        let mut victim = Kid::spawn(&format!("victim-export:{backend}"), &args);
        let text = victim.expect("anon");
        let named_text = cpu.then(|| victim.expect("named"));
        let m = d
            .import_memory(from_text(&text), &ImportOptions::default())
            .unwrap();
        assert_pattern(&m, i, "an import of a live exporter");
        let nm = named_text.as_ref().map(|t| {
            let nm = d
                .import_memory(from_text(t), &ImportOptions::default())
                .unwrap();
            assert_pattern(&nm, i + 1000, "a named import of a live exporter");
            nm
        });
        victim.kill();
        // What was mapped keeps working: sealed memory outlives its exporter.
        assert_pattern(&m, i, "an import after its exporter was killed");
        m.write(0, b"after").unwrap();
        let mut back = [0u8; 5];
        m.read(0, &mut back).unwrap();
        assert_eq!(&back, b"after");
        drop(m);
        if let Some(nm) = nm {
            assert_pattern(
                &nm,
                i + 1000,
                "a named import after its exporter was killed",
            );
            drop(nm);
        }
        // A new import needs the exporter's broker, which died with it.
        expect_kind(
            d.import_memory(from_text(&text), &ImportOptions::default()),
            "closed",
            "importing from a killed exporter",
        );
        if let Some(t) = &named_text {
            // The name outlives its creator until cleanup.
            let again = d
                .import_memory(from_text(t), &ImportOptions::default())
                .unwrap();
            assert_pattern(&again, i + 1000, "a named import after the kill");
            drop(again);
            assert_eq!(
                named::collect_garbage_prefix(&prefix, false).unwrap().len(),
                1
            );
            expect_kind(
                d.import_memory(from_text(t), &ImportOptions::default()),
                "not-found",
                "a named import after cleanup",
            );
            assert_no_shm(&name);
        }
        if i == 0 {
            census = Some(Census::take());
        }
    }
    census.unwrap().assert_back("after 20 exporters killed");
}

fn victim_export<D: Device>(d: &D) {
    let seed: u32 = arg_as("seed");
    let a = d.allocate(&desc(d)).unwrap();
    a.write(0, &pattern(seed, a.len() as usize)).unwrap();
    let ex = d.export_memory(&a, &ExportOptions::default()).unwrap();
    say("anon", ex.to_text());
    let mut keep = None;
    if let Ok(name) = std::env::var(format!("{ARG_PREFIX}NAME")) {
        let r = named::create_named(&name, a.len(), &NamedOptions::default()).unwrap();
        r.write(0, &pattern(seed + 1000, a.len() as usize)).unwrap();
        let dev = CpuShm::new().host();
        let nex = dev.export_memory(&r, &ExportOptions::default()).unwrap();
        say("named", nex.to_text());
        keep = Some((r, nex));
    }
    wait_for_eof();
    drop(keep);
}

// --- an importer killed while it holds a mapping --------------------------------

fn importer_killed<D: Device>(d: &D, backend: &str) {
    let mut census = None;
    for i in 0..=ROUNDS {
        let alloc = d.allocate(&desc(d)).unwrap();
        alloc.write(0, &pattern(i, alloc.len() as usize)).unwrap();
        let exported = d.export_memory(&alloc, &ExportOptions::default()).unwrap();
        // This process holds a lease too: the live are counted, the dead not.
        let own = d
            .import_memory(exported.share().unwrap(), &ImportOptions::default())
            .unwrap();
        let mut victim = Kid::spawn(
            &format!("victim-import:{backend}"),
            &[("handle", exported.to_text()), ("seed", i.to_string())],
        );
        victim.expect("mapped");
        assert_eq!(alloc.importers().unwrap(), 2, "round {i}");
        // Freeing under importers is refused where the vendor says so (the
        // simulator's CUDA and Ascend rules); the allocation comes back.
        // (cpu-shm frees by dropping: the memory lives on for the importers.)
        let alloc = if backend == "mock" {
            match alloc.free() {
                Ok(()) => panic!("free() under two importers succeeded"),
                Err(e) => {
                    assert!(
                        matches!(e.error, Error::Busy { holders: 2, .. }),
                        "{:?}",
                        e.error
                    );
                    e.resource
                }
            }
        } else {
            alloc
        };
        drop(own);
        assert_eq!(alloc.importers().unwrap(), 1);
        // The exporter waits for its importers; the importer is killed.
        std::thread::scope(|s| {
            let waiter = s.spawn(|| alloc.wait_unleased(Some(LONG)));
            victim.kill();
            waiter
                .join()
                .expect("the waiter thread")
                .expect("wait_unleased returns once the importer is dead");
        });
        assert_eq!(alloc.importers().unwrap(), 0);
        // What the importer wrote before it died is there.
        let page = d.info().page_size();
        let mut stamp = vec![0u8; 16];
        alloc.read(page, &mut stamp).unwrap();
        assert_eq!(stamp, format!("stamp-{i:010}").into_bytes());
        alloc
            .free()
            .map_err(|e| e.error)
            .expect("free after the importer died");
        drop(exported);
        if i == 0 {
            census = Some(Census::take());
        }
    }
    census.unwrap().assert_back("after 20 importers killed");
}

fn victim_import<D: Device>(d: &D) {
    let seed: u32 = arg_as("seed");
    let m = d
        .import_memory(from_text(&arg("handle")), &ImportOptions::default())
        .unwrap();
    assert_pattern(&m, seed, "the importer's view");
    let page = d.info().page_size();
    m.write(page, format!("stamp-{seed:010}").as_bytes())
        .unwrap();
    say("mapped", "");
    wait_for_eof();
}

// --- a waiter killed while asleep on a notify --------------------------------------

fn waiter_killed<D: Device>(d: &D, backend: &str) {
    let notify = d.create_notify().unwrap();
    let exported = d.export_notify(&notify, &ExportOptions::default()).unwrap();
    let text = exported.to_text();
    let mut census = None;
    let mut asleep = 0;
    for i in 0..=ROUNDS {
        let mut victim = Kid::spawn(
            &format!("victim-wait:{backend}"),
            &[("handle", text.clone()), ("live", "0".into())],
        );
        victim.expect("waiting");
        if await_thread_in_syscall(victim.pid(), "rel-waiter", libc::SYS_futex) {
            asleep += 1;
        }
        victim.kill();
        // The dead sleeper took nothing with it: a signal is still seen ...
        notify.signal().unwrap();
        notify.wait(wait_opts(LONG)).unwrap();
        // ... and consumed once, so the next wait times out, typed.
        expect_kind(
            notify.wait(wait_opts(Duration::from_millis(20))),
            "timeout",
            "a wait with nothing signalled",
        );
        if i == 0 {
            census = Some(Census::take());
        }
    }
    // A live waiter in another process is still woken.
    let mut live = Kid::spawn(
        &format!("victim-wait:{backend}"),
        &[("handle", text.clone()), ("live", "1".into())],
    );
    live.expect("waiting");
    await_thread_in_syscall(live.pid(), "rel-waiter", libc::SYS_futex);
    notify.signal().unwrap();
    assert_eq!(live.expect("woken"), "ok");
    live.finish();
    eprintln!(
        "note: {asleep} of {} victims were seen asleep in futex(2) when killed",
        ROUNDS + 1
    );
    census
        .unwrap()
        .assert_back("after 20 sleeping waiters killed");
    drop(exported);
}

fn victim_wait<D: Device>(d: &D) {
    let n = d
        .import_notify(from_text(&arg("handle")), &ImportOptions::default())
        .unwrap();
    let live = arg("live") == "1";
    std::thread::scope(|s| {
        let t = std::thread::Builder::new()
            .name("rel-waiter".into())
            .spawn_scoped(s, || n.wait(wait_opts(LONG)))
            .unwrap();
        say("waiting", "");
        let r = t.join().unwrap();
        say("woken", kind(&r));
    });
    if !live {
        wait_for_eof();
    }
}

// --- an exporter killed in the middle of growing a buffer ----------------------------

/// Bytes of each chunk the victim fills with its pattern.
const PIECE: usize = 4096;

fn growing<D: Vmm>(d: &D, backend: &str) {
    let chunk = d.info().granularity_min;
    let mut census = None;
    let (mut mid, mut closed) = (0, 0);
    for i in 0..=ROUNDS {
        let mut victim = Kid::spawn(
            &format!("victim-grow:{backend}"),
            &[("seed", i.to_string())],
        );
        let text = victim.expect("growable");
        let mut view = GrowableView::open(d, from_text(&text), &ImportOptions::default()).unwrap();
        victim.tell("go");
        let mut written: Vec<u64> = Vec::new();
        for _ in 0..1 + i % 5 {
            written.push(victim.expect("wrote").parse().unwrap());
        }
        // While the exporter lives, following it works.
        view.refresh().expect("refresh while the exporter grows");
        let rest = victim.kill();
        let mut full = false;
        for line in rest {
            if let Some(j) = line.strip_prefix("wrote ") {
                written.push(j.parse().unwrap());
            } else if line.starts_with("full") {
                full = true;
            }
        }
        if !full {
            mid += 1;
        }
        // After the kill: chunks already published but not yet mapped here
        // need the dead exporter's broker: a typed error, or nothing to do.
        match view.refresh() {
            Ok(_) => {}
            Err(Error::Closed { .. }) => closed += 1,
            Err(e) => panic!("refresh after the exporter was killed: {e} ({e:?})"),
        }
        // Everything mapped and fully written before the kill is intact.
        let mut buf = vec![0u8; PIECE];
        for &j in written.iter().filter(|&&j| (j + 1) * chunk <= view.len()) {
            view.read(j * chunk, &mut buf).unwrap();
            assert!(
                buf == pattern(i * 1000 + j as u32, PIECE),
                "chunk {j} of round {i} is corrupted"
            );
        }
        drop(view);
        if i == 0 {
            census = Some(Census::take());
        }
    }
    eprintln!(
        "note: {mid} of {} exporters were killed before their buffer was full; {closed} refreshes \
         after the kill found chunks they could no longer fetch",
        ROUNDS + 1
    );
    census
        .unwrap()
        .assert_back("after 20 growing exporters killed");
}

fn victim_grow<D: Vmm>(d: &D) {
    let seed: u32 = arg_as("seed");
    let chunk = d.info().granularity_min;
    let chunks = if d.info().backend == hal_core::BackendId::CpuShm {
        512
    } else {
        32
    };
    let mut gb =
        GrowableBuffer::create(d, chunks * chunk, chunk, ExportOptions::default()).unwrap();
    say("growable", gb.handle().to_text());
    assert_eq!(hear(), "go");
    while gb.len() < gb.capacity() {
        gb.grow_to(gb.len() + chunk).unwrap();
        let j = gb.len() / chunk - 1;
        gb.write(j * chunk, &pattern(seed * 1000 + j as u32, PIECE))
            .unwrap();
        say("wrote", j);
    }
    say("full", "");
    wait_for_eof();
}

// --- processes killed while holding handle-exchange sockets ------------------------

fn sockets() {
    let d = CpuShm::new().host();
    let alloc = d.allocate(&desc(&d)).unwrap();
    let exported = d.export_memory(&alloc, &ExportOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let listen_name = unique("listen");
    let listener = HandleListener::bind_abstract(&listen_name).unwrap();
    let mut census = None;
    let me = std::process::id();
    for i in 0..=ROUNDS {
        // 1. A sender killed in the middle of a message, with a descriptor
        //    attached to its first bytes, while this process waits for the rest.
        let mut victim = Kid::spawn("victim-partial-sender", &[("name", listen_name.clone())]);
        victim.expect("sent");
        let stream = listener.accept_timeout(LONG).unwrap();
        stream.set_timeout(Some(LONG)).unwrap();
        let recv = named_thread("rel-recv", move || kind(&stream.recv()));
        await_thread_in_syscall(me, "rel-recv", libc::SYS_recvmsg);
        victim.kill();
        assert_eq!(
            recv.join().unwrap(),
            "closed",
            "a sender killed mid-message"
        );

        // 2. A receiver killed while this process waits on it, then sends to it.
        let vname = unique("victim-listen");
        let path = dir.path().join(format!("sock-{i}"));
        let mut victim = Kid::spawn(
            "victim-listener",
            &[
                ("name", vname.clone()),
                ("path", path.display().to_string()),
            ],
        );
        victim.expect("listening");
        let stream = HandleStream::connect_abstract(&vname).unwrap();
        stream.set_timeout(Some(LONG)).unwrap();
        victim.expect("accepted");
        let stream = std::sync::Arc::new(stream);
        let s2 = std::sync::Arc::clone(&stream);
        let recv = named_thread("rel-recv", move || kind(&s2.recv()));
        await_thread_in_syscall(me, "rel-recv", libc::SYS_recvmsg);
        victim.kill();
        assert_eq!(
            recv.join().unwrap(),
            "closed",
            "a receiver killed while we wait"
        );
        // Sending to the dead peer: a typed error, no SIGPIPE.
        expect_kind(
            stream.send_exported(&exported),
            "closed",
            "sending to a killed receiver",
        );
        drop(stream);
        // Its socket file stays behind (a path listener cannot remove it when
        // killed); it refuses connections and blocks a new bind until removed.
        expect_kind(
            HandleStream::connect(&path),
            "closed",
            "connecting to a stale socket",
        );
        expect_kind(
            HandleListener::bind(&path),
            "already-exists",
            "binding over a stale socket",
        );
        std::fs::remove_file(&path).unwrap();
        drop(HandleListener::bind(&path).unwrap());
        assert!(!path.exists());

        // 3. An exporter killed while this process waits for its broker.
        let mut victim = Kid::spawn("victim-export:cpu", &[("seed", i.to_string())]);
        let text = victim.expect("anon");
        victim.signal(Signal::SIGSTOP);
        await_stopped(victim.pid());
        let fetch = named_thread("rel-fetch", move || {
            let d = CpuShm::new().host();
            kind(&d.import_memory(from_text(&text), &ImportOptions::default()))
        });
        await_thread_in_syscall(me, "rel-fetch", libc::SYS_recvmsg);
        victim.kill();
        assert_eq!(
            fetch.join().unwrap(),
            "closed",
            "an import from an exporter killed while serving it"
        );
        if i == 0 {
            census = Some(Census::take());
        }
    }
    // The listener still works: an honest peer's handle arrives with its
    // descriptors and imports.
    let mut honest = Kid::spawn("honest-sender", &[("name", listen_name.clone())]);
    let stream = listener.accept_timeout(LONG).unwrap();
    stream.set_timeout(Some(LONG)).unwrap();
    let (shared, peer) = stream.recv().unwrap();
    assert_eq!(peer.pid, honest.pid());
    assert_eq!(shared.fds.len(), 1);
    let m = d.import_memory(shared, &ImportOptions::default()).unwrap();
    assert_pattern(&m, 99, "an honest peer's region");
    drop(m);
    drop(stream);
    honest.expect("sent");
    honest.finish();
    census.unwrap().assert_back("after 60 socket peers killed");
    drop(listener);
    drop(exported);
}

fn victim_partial_sender() {
    let addr = SocketAddr::from_abstract_name(arg("name").as_bytes()).unwrap();
    let s = UnixStream::connect_addr(&addr).unwrap();
    // The header of a 100-byte handle message with one descriptor, and 8
    // bytes of its body; then silence until killed.
    let mut frame = frame_header(1, 1, 1, 100);
    frame.extend_from_slice(&[7u8; 8]);
    let fd = hal_core::kit::os::memfd("hal-rel-partial", 4096, None).unwrap();
    send_raw(s.as_fd(), &frame, &[fd.as_raw_fd()]);
    say("sent", "");
    wait_for_eof();
}

fn honest_sender() {
    let d = CpuShm::new().host();
    let a = d.allocate(&desc(&d)).unwrap();
    a.write(0, &pattern(99, a.len() as usize)).unwrap();
    let ex = d.export_memory(&a, &ExportOptions::default()).unwrap();
    let s = HandleStream::connect_abstract(&arg("name")).unwrap();
    s.send_exported(&ex).unwrap();
    say("sent", "");
    // The receiver asks this process's broker for its lease: keep the
    // export until it is done.
    wait_for_eof();
}

fn victim_listener() {
    let l = HandleListener::bind_abstract(&arg("name")).unwrap();
    let _file = HandleListener::bind(arg("path")).unwrap();
    say("listening", "");
    let _s = l.accept_timeout(LONG).unwrap();
    say("accepted", "");
    wait_for_eof();
}

// --- importers killed while connected to this process's broker ------------------------

fn broker() {
    let d = CpuShm::new().host();
    let alloc = d.allocate(&desc(&d)).unwrap();
    alloc.write(0, &pattern(7, alloc.len() as usize)).unwrap();
    let exported = d.export_memory(&alloc, &ExportOptions::default()).unwrap();
    let text = exported.to_text();
    let mut census = None;
    for i in 0..=ROUNDS {
        // A peer connects to the broker and says nothing (the broker drops
        // it after a second) ...
        let mut victim = Kid::spawn("victim-broker-hog", &[("handle", text.clone())]);
        victim.expect("connected");
        // ... while the broker serves everyone else ...
        let m = d
            .import_memory(from_text(&text), &ImportOptions::default())
            .unwrap();
        assert_pattern(&m, 7, "an import while a silent peer holds a connection");
        drop(m);
        // ... and the silent peer is killed there.
        victim.kill();
        // The broker goes on serving: an import from the text alone works.
        let m = d
            .import_memory(from_text(&text), &ImportOptions::default())
            .unwrap();
        assert_pattern(&m, 7, "an import after a hog was killed");
        drop(m);
        assert_eq!(alloc.importers().unwrap(), 0);
        if i == 0 {
            census = Some(Census::take());
        }
    }
    // Another process imports from the text too.
    let mut importer = Kid::spawn(
        "victim-import:cpu",
        &[("handle", text.clone()), ("seed", "7".into())],
    );
    importer.expect("mapped");
    importer.finish();
    census
        .unwrap()
        .assert_back("after 20 broker connections killed");
    drop(exported);
}

fn victim_broker_hog() {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let h = exchange::decode(&arg("handle")).unwrap();
    let hal_core::FdSource::Broker { name, .. } = &h.fds else {
        panic!("the handle names no broker");
    };
    let fd = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    connect(
        fd.as_raw_fd(),
        &UnixAddr::new_abstract(name.as_bytes()).unwrap(),
    )
    .unwrap();
    say("connected", "");
    wait_for_eof();
}

// --- killed while creating and dropping named regions ---------------------------

fn churn() {
    let prefix = unique("churn-");
    let mut census = None;
    let mut leftovers = 0;
    for i in 0..=ROUNDS {
        let mut victim = Kid::spawn("victim-churn", &[("prefix", format!("{prefix}{i}-"))]);
        // Let it create and drop a few regions, then kill it wherever it is.
        for _ in 0..1 + i % 7 {
            victim.expect("cycle");
        }
        victim.kill();
        let collected = named::collect_garbage_prefix(&prefix, false).unwrap();
        let left = shm_entries(&prefix);
        if !left.is_empty() {
            leftovers += 1;
            eprintln!("note: round {i}: after cleanup {left:?} remain (collected {collected:?})");
        }
        if i == 0 {
            census = Some(Census::take());
        }
    }
    census
        .unwrap()
        .assert_back("after the churning creators were killed");
    assert_eq!(
        leftovers, 0,
        "rounds that left objects in /dev/shm after cleanup"
    );
}

fn victim_churn() {
    let prefix = arg("prefix");
    for n in 0u64.. {
        let r =
            named::create_named(&format!("{prefix}{n}"), 4096, &NamedOptions::default()).unwrap();
        drop(r);
        say("cycle", n);
    }
}
