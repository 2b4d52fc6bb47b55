//! The flows of the examples 01 to 03 across two real processes, on every
//! backend compiled in, through the registry and the dynamic layer.
//!
//! Each test re-executes this test binary for the other side (`--exact
//! <test> --nocapture --test-threads=1`, with the role in an environment
//! variable). Handles travel as text down the child's stdin; the child
//! answers with lines that start with `@@hal@@ ` on its stdout (the test harness
//! prints its own lines there too).

use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hal::dynamic::{DynBackend, DynDevice};
use hal::{compiled_in, AllocDesc, Capabilities, DeviceInfo, Error, EventFlags, ExportOptions};
use hal::{Handle, ImportOptions, Importers, Registry, SharedHandle, WaitOptions};
use hal_core::kit::os::lock::lock;

const ROLE: &str = "HAL_TWO_PROCESS_ROLE";
/// Starts a protocol line of the peer on its stdout.
const MARK: &str = "@@hal@@ ";
const SIZE: u64 = 2 << 20;
const TIMEOUT: Duration = Duration::from_secs(20);

/// This process's role when it was started as the other side of a test.
fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

struct Peer {
    child: Arc<Mutex<std::process::Child>>,
    pid: u32,
    to: Option<ChildStdin>,
    from: Lines<BufReader<ChildStdout>>,
}

/// A peer still running after this long is killed, so that a hung peer
/// fails the test instead of hanging it.
const WATCHDOG: Duration = Duration::from_secs(120);

impl Peer {
    /// Start this test binary as the other side of `test`, in `role`.
    fn start(test: &str, role: &str) -> Peer {
        let mut child = Command::new(std::env::current_exe().expect("current_exe"))
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawning the peer");
        let to = child.stdin.take();
        let from = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let pid = child.id();
        let child = Arc::new(Mutex::new(child));
        let watched = Arc::downgrade(&child);
        std::thread::spawn(move || {
            let deadline = Instant::now() + WATCHDOG;
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
                if watched.strong_count() == 0 {
                    return;
                }
            }
            if let Some(child) = watched.upgrade() {
                let mut child = lock(&child);
                if let Ok(None) = child.try_wait() {
                    eprintln!("peer {pid} ran past {WATCHDOG:?}: killing it");
                    let _ = child.kill();
                }
            }
        });
        Peer {
            child,
            pid,
            to,
            from,
        }
    }

    fn pid(&self) -> u32 {
        self.pid
    }

    fn send(&mut self, line: &str) {
        let to = self.to.as_mut().expect("stdin still open");
        writeln!(to, "{line}").expect("writing to the peer");
        to.flush().expect("flushing to the peer");
    }

    /// The next protocol line of the peer.
    fn recv(&mut self) -> String {
        for line in self.from.by_ref() {
            let line = line.expect("reading from the peer");
            // The harness may have started the line ("test name ... ").
            if let Some((_, msg)) = line.split_once(MARK) {
                return msg.to_string();
            }
        }
        panic!("the peer exited without answering");
    }

    /// Close its stdin and check that it succeeded.
    fn finish(mut self) {
        drop(self.to.take());
        for line in self.from.by_ref() {
            let _ = line;
        }
        let status = loop {
            let mut child = lock(&self.child);
            if let Some(status) = child.try_wait().expect("waiting for the peer") {
                break status;
            }
            drop(child);
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(status.success(), "the peer failed: {status}");
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // On a failed test: stop the peer and reap it.
        let mut child = lock(&self.child);
        if let Ok(None) = child.try_wait() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The child's side of the pipe.
struct Parent {
    lines: Lines<std::io::StdinLock<'static>>,
}

impl Parent {
    fn new() -> Parent {
        Parent {
            lines: std::io::stdin().lock().lines(),
        }
    }

    fn recv(&mut self) -> Option<String> {
        self.lines.next().map(|l| l.expect("reading stdin"))
    }

    fn handle(&mut self) -> Handle {
        let text = self.recv().expect("the parent sent no handle");
        hal::exchange::decode(&text).expect("decoding the handle")
    }

    fn send(&self, msg: &str) {
        let mut out = std::io::stdout().lock();
        writeln!(out, "\n{MARK}{msg}").expect("stdout");
        out.flush().expect("stdout");
    }
}

fn desc(info: &DeviceInfo, size: u64) -> AllocDesc {
    if info.capabilities.contains(Capabilities::MEMORY_IS_HOST) {
        AllocDesc::host(size)
    } else {
        AllocDesc::device(info.ordinal, size)
    }
}

/// Export options for `pid` alone where the backend keeps allow-lists.
fn only(device: &dyn DynDevice, pid: u32) -> ExportOptions {
    let importers = if device.capabilities().contains(Capabilities::PID_ALLOW_LIST) {
        Importers::Pids(vec![pid])
    } else {
        Importers::BackendDefault
    };
    ExportOptions {
        importers,
        ..Default::default()
    }
}

/// The backends compiled in that are usable here and can share what the
/// test shares (`caps`): CUDA needs its driver, and shares nothing yet.
fn sharing(registry: &Registry, caps: Capabilities) -> Vec<&'static str> {
    compiled_in()
        .iter()
        .copied()
        .filter(|name| {
            registry
                .open(name)
                .and_then(|b| b.devices())
                .is_ok_and(|d| d.first().is_some_and(|i| i.capabilities.contains(caps)))
        })
        .collect()
}

fn open(registry: &Registry, name: &str) -> (Box<dyn DynBackend>, Box<dyn DynDevice>) {
    let backend = registry
        .open(name)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let device = backend.open(0).unwrap_or_else(|e| panic!("{name}: {e}"));
    (backend, device)
}

/// The importer's device for `handle`, found through the registry.
fn device_for(handle: &Handle) -> Box<dyn DynDevice> {
    let backend = Registry::new().for_handle(handle).expect("for_handle");
    backend.open(handle.device).expect("open")
}

fn pattern(seed: u8, i: u64) -> u8 {
    (i.wrapping_mul(31) as u8).wrapping_add(seed)
}

fn check(data: &[u8], seed: u8) {
    if let Some(bad) = (0..).zip(data).position(|(i, &b)| b != pattern(seed, i)) {
        panic!("byte {bad} differs from what the exporter wrote");
    }
}

// --- 01: a buffer ---------------------------------------------------------

#[test]
fn share_buffer() {
    match role().as_deref() {
        Some("buffer-consumer") => return buffer_consumer(),
        Some("buffer-intruder") => return buffer_intruder(),
        Some(other) => panic!("unknown role {other}"),
        None => {}
    }
    let registry = Registry::new();
    for name in sharing(&registry, Capabilities::IPC_MEMORY) {
        let (_backend, device) = open(&registry, name);
        let buffer = device.allocate(&desc(device.info(), SIZE)).unwrap();
        let data: Vec<u8> = (0..SIZE).map(|i| pattern(3, i)).collect();
        buffer.write(0, &data).unwrap();

        let mut peer = Peer::start("share_buffer", "buffer-consumer");
        let exported = device
            .export_memory(&*buffer, &only(&*device, peer.pid()))
            .unwrap();
        peer.send(&exported.to_text());
        assert_eq!(peer.recv(), "verified", "{name}");
        assert_eq!(
            buffer.importers().unwrap(),
            1,
            "{name}: the consumer holds a lease"
        );
        peer.send("release");
        peer.finish();

        let mut answer = [0u8; 8];
        buffer.read(0, &mut answer).unwrap();
        assert_eq!(&answer, b"answered", "{name}");
        buffer.wait_unleased(Some(TIMEOUT)).unwrap();
        assert_eq!(buffer.importers().unwrap(), 0, "{name}");

        // A process left off the allow-list is refused by the exporter.
        if device.capabilities().contains(Capabilities::PID_ALLOW_LIST) {
            let mut intruder = Peer::start("share_buffer", "buffer-intruder");
            intruder.send(&exported.to_text());
            assert_eq!(intruder.recv(), "refused", "{name}");
            intruder.finish();
        }
    }
}

fn buffer_consumer() {
    let mut parent = Parent::new();
    let handle = parent.handle();
    let device = device_for(&handle);
    let mapping = device
        .import_memory(SharedHandle::from(handle), &ImportOptions::default())
        .expect("import");
    assert_eq!(mapping.len(), SIZE);
    let mut data = vec![0u8; SIZE as usize];
    mapping.read(0, &mut data).unwrap();
    check(&data, 3);
    mapping.write(0, b"answered").unwrap();
    parent.send("verified");
    assert_eq!(parent.recv().as_deref(), Some("release"));
}

fn buffer_intruder() {
    let mut parent = Parent::new();
    let handle = parent.handle();
    let device = device_for(&handle);
    match device.import_memory(SharedHandle::from(handle), &ImportOptions::default()) {
        Err(Error::PermissionDenied { .. }) => parent.send("refused"),
        Err(e) => parent.send(&format!("wrong error: {e}")),
        Ok(_) => parent.send("imported"),
    }
}

// --- 02: an event -----------------------------------------------------------

#[test]
fn event_orders_the_importer() {
    match role().as_deref() {
        Some("event-consumer") => return event_consumer(),
        Some(other) => panic!("unknown role {other}"),
        None => {}
    }
    let registry = Registry::new();
    for name in sharing(
        &registry,
        Capabilities::IPC_MEMORY.union(Capabilities::IPC_EVENT),
    ) {
        let (_backend, device) = open(&registry, name);
        let buffer = device.allocate(&desc(device.info(), SIZE)).unwrap();
        let event = device
            .create_event(EventFlags {
                interprocess: true,
                timing: false,
            })
            .unwrap();
        let stream = device.create_stream().unwrap();
        let mut peer = Peer::start("event_orders_the_importer", "event-consumer");
        let opts = only(&*device, peer.pid());
        // The exports stay alive while the peer imports (their broker
        // registrations go with them).
        let buffer_export = device.export_memory(&*buffer, &opts).unwrap();
        // Ascend keeps no allow-list for events: whoever has the handle may
        // import it, so events go with the backend's default.
        let event_export = device
            .export_event(&*event, &ExportOptions::default())
            .unwrap();
        peer.send(&buffer_export.to_text());
        peer.send(&event_export.to_text());
        for round in 1..=3u8 {
            let data: Vec<u8> = (0..SIZE).map(|i| pattern(round, i)).collect();
            buffer.write(0, &data).unwrap();
            device.record_event(&stream, &*event).unwrap();
            peer.send(&round.to_string());
            assert_eq!(peer.recv(), format!("ok {round}"), "{name}");
        }
        peer.finish();
    }
}

fn event_consumer() {
    let mut parent = Parent::new();
    let buffer_handle = parent.handle();
    let event_handle = parent.handle();
    let device = device_for(&buffer_handle);
    let opts = ImportOptions::default();
    let buffer = device
        .import_memory(SharedHandle::from(buffer_handle), &opts)
        .expect("import memory");
    let event = device
        .import_event(SharedHandle::from(event_handle), &opts)
        .expect("import event");
    let stream = device.create_stream().unwrap();
    while let Some(line) = parent.recv() {
        let round: u8 = line.parse().expect("round");
        device.stream_wait_event(&stream, &*event).unwrap();
        device.synchronize(&stream, Some(TIMEOUT)).unwrap();
        event.wait(WaitOptions::timeout(TIMEOUT)).unwrap();
        match event.query() {
            Ok(done) => assert!(done, "the event completed but does not say so"),
            Err(e) => assert!(
                e.is_unsupported()
                    && !device
                        .capabilities()
                        .contains(Capabilities::IPC_EVENT_QUERY),
                "query: {e}"
            ),
        }
        let mut data = vec![0u8; SIZE as usize];
        buffer.read(0, &mut data).unwrap();
        check(&data, round);
        parent.send(&format!("ok {round}"));
    }
}

// --- 03: a notify ping-pong -------------------------------------------------

const ROUNDS: usize = 200;

#[test]
fn notify_ping_pong() {
    match role().as_deref() {
        Some("notify-consumer") => return notify_consumer(),
        Some(other) => panic!("unknown role {other}"),
        None => {}
    }
    let registry = Registry::new();
    for name in sharing(&registry, Capabilities::IPC_NOTIFY) {
        let (_backend, device) = open(&registry, name);
        // Each side waits only on the notify it created (Ascend's rule).
        let ping = device.create_notify().unwrap();
        let mut peer = Peer::start("notify_ping_pong", "notify-consumer");
        let exported = device
            .export_notify(&*ping, &only(&*device, peer.pid()))
            .unwrap();
        peer.send(&exported.to_text());
        let pong = hal::exchange::decode(&peer.recv()).unwrap();
        let pong = device
            .import_notify(SharedHandle::from(pong), &ImportOptions::default())
            .unwrap();
        let stream = device.create_stream().unwrap();
        for _ in 0..ROUNDS {
            device.record_notify(&stream, &*pong).unwrap();
            ping.wait(WaitOptions::timeout(TIMEOUT)).unwrap();
        }
        assert_eq!(peer.recv(), format!("done {ROUNDS}"), "{name}");
        peer.finish();
    }
}

fn notify_consumer() {
    let mut parent = Parent::new();
    let handle = parent.handle();
    let device = device_for(&handle);
    let ping = device
        .import_notify(SharedHandle::from(handle), &ImportOptions::default())
        .expect("import notify");
    let pong = device.create_notify().unwrap();
    let exported = device
        .export_notify(&*pong, &only(&*device, std::os::unix::process::parent_id()))
        .unwrap();
    parent.send(&exported.to_text());
    for _ in 0..ROUNDS {
        pong.wait(WaitOptions::timeout(TIMEOUT)).unwrap();
        ping.signal().unwrap();
    }
    parent.send(&format!("done {ROUNDS}"));
    if device
        .capabilities()
        .contains(Capabilities::CREATOR_ONLY_NOTIFY_WAIT)
    {
        // The importer of a creator-only notify may signal, not wait.
        assert!(matches!(
            ping.wait(WaitOptions::timeout(Duration::from_millis(10))),
            Err(Error::PermissionDenied { .. })
        ));
    }
}
