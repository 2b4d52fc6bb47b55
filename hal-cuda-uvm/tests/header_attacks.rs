//! What a process attached to a residency header can do to the others by
//! writing forged bytes into it, tried with a real attacker process on the
//! simulator's CUDA-like profile: no forged lock hangs a victim (its calls
//! and its drop end, a live holder is named in a `Timeout`), no forged
//! slot makes a victim lose the device writes of a chunk it serves, and an
//! unreadable slot is a dead server that `reclaim` recovers.

use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::time::Duration;

use hal_core::{
    AllocDesc, Backend, Device, Error, ExportOptions, Handle, ImportOptions, Memory, SharedHandle,
};
use hal_cuda_uvm::{Residency, UvmBackend, UvmDevice};

mod child;

const MIB: u64 = 1 << 20;
/// The chunk size, and the buffers' three chunks.
const C: u64 = 2 * MIB;
const THREE: u64 = 3 * C;
const HEADER_VAR: &str = "HAL_UVM_ATTACK_HEADER";
/// The victim's patience with a live holder of its lock: past the grace
/// an unstamped holder is given (half a second), short of the default.
const PATIENCE: Duration = Duration::from_millis(1500);
/// Where slot `i` starts in the header, and its fields.
fn slot_at(i: u64) -> u64 {
    64 + 512 * i
}

type MockUvm = UvmDevice<hal_mock::MockDevice>;

fn mock() -> MockUvm {
    UvmBackend::over(hal_mock::MockBackend::cuda())
        .open(0)
        .unwrap()
}

fn pattern(len: u64) -> Vec<u8> {
    (0..len).map(|i| (i % 241) as u8).collect()
}

/// The attacker: attaches to the header's pages as any importer may, and
/// writes what its parent tells it, one line a command, answering `done`
/// after each.
///
/// * `lock PID STAMP`: the lock word names `PID` (with a count no lock of
///   the victim reaches soon), its
///   stamp is `STAMP`;
/// * `lock-self STAMPED`: the lock word names this process, stamped with
///   its true start time (`1`) or 0;
/// * `unlock`: the lock word and its stamp 0, as a release leaves them;
/// * `write OFFSET HEX`: the bytes `HEX` at `OFFSET`.
#[test]
#[ignore = "child entry point: run by its parent"]
fn attacker() {
    let header = std::env::var(HEADER_VAR).expect("run by its parent, with the header's handle");
    let dev = mock();
    let m = dev
        .import_memory(
            SharedHandle::from(Handle::from_text(&header).unwrap()),
            &ImportOptions::default(),
        )
        .unwrap();
    let lock = |pid: u32, stamp: u64| {
        m.write(24, &(u64::from(pid) << 32 | 0xdead_0007).to_le_bytes())
            .unwrap();
        m.write(32, &stamp.to_le_bytes()).unwrap();
    };
    for line in std::io::stdin().lines() {
        let line = line.unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["lock", pid, stamp] => lock(pid.parse().unwrap(), stamp.parse().unwrap()),
            ["unlock"] => {
                m.write(32, &0u64.to_le_bytes()).unwrap();
                m.write(24, &0u64.to_le_bytes()).unwrap();
            }
            ["lock-self", stamped] => {
                let (me, started) = hal_core::kit::os::self_identity();
                lock(me, if stamped == "1" { started } else { 0 });
            }
            ["write", at, hex] => {
                let bytes: Vec<u8> = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                    .collect();
                m.write(at.parse().unwrap(), &bytes).unwrap();
            }
            _ => panic!("an unknown command: {line}"),
        }
        println!("done");
    }
    println!("child done");
}

/// The parent's side of the attacker process.
struct Attacker {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Attacker {
    fn spawn(header: &str) -> Attacker {
        let mut child = child::command("attacker")
            .env(HEADER_VAR, header)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Attacker {
            child,
            stdin,
            lines,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Run one command and wait until it is done.
    fn run(&mut self, command: &str) {
        writeln!(self.stdin.as_mut().unwrap(), "{command}").unwrap();
        assert!(
            self.lines.any(|l| l.is_ok_and(|l| l.contains("done"))),
            "the attacker did not do `{command}`"
        );
    }

    /// Write `bytes` at `offset` of the header.
    fn write(&mut self, offset: u64, bytes: &[u8]) {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        self.run(&format!("write {offset} {hex}"));
    }

    /// Close its input and require that it ended well.
    fn finish(mut self) {
        drop(self.stdin.take());
        assert!(
            self.lines
                .any(|l| l.is_ok_and(|l| l.contains("child done"))),
            "the attacker did not finish"
        );
        assert!(self.child.wait().unwrap().success());
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A buffer of three chunks with a pattern, its export, and a residency
/// over it whose lock waits `patience`.
fn victim(
    dev: &MockUvm,
    patience: Duration,
) -> (
    hal_cuda_uvm::UvmAllocation<hal_mock::MockDevice>,
    hal_core::Exported,
    Residency<'_, hal_mock::MockDevice>,
) {
    let a = dev.allocate(&AllocDesc::managed(THREE)).unwrap();
    a.write(0, &pattern(THREE)).unwrap();
    let ex = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let mut r = Residency::create(dev, &a, C).unwrap();
    r.set_lock_patience(patience);
    (a, ex, r)
}

fn home(a: &dyn Memory, offset: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    a.read(offset, &mut b).unwrap();
    b
}

#[test]
fn residency_forged_lock_does_not_hang() {
    // 'static, so that the residency can be dropped on a thread that the
    // test may have to leave behind.
    let dev: &'static MockUvm = Box::leak(Box::new(mock()));
    let (a, ex, mut r) = victim(dev, PATIENCE);
    r.prefetch(0, 1).unwrap();
    r.write_device(0, b"victim").unwrap();
    // A second attachment, which outlives the first.
    let mapping = dev
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let mut second = Residency::attach(dev, &mapping, r.header_text()).unwrap();
    let mut attacker = Attacker::spawn(r.header_text());
    // A second attacker, attached now, used at the end.
    let mut forger = Attacker::spawn(r.header_text());
    let me = std::process::id();
    let mut got = [0u8; 6];

    // The victim's own pid, in a lock no thread of it took, stamped with
    // its true start time or not at all: taken over at once.
    for stamp in [hal_core::kit::os::self_identity().1, 0] {
        attacker.run(&format!("lock {me} {stamp}"));
        r.read(0, &mut got).unwrap();
        assert_eq!(&got, b"victim");
        assert!(r.slot(0).unwrap().on_device);
    }

    // A live process that never stamps the lock: taken over after a grace.
    attacker.run("lock-self 0");
    r.read(0, &mut got).unwrap();
    assert_eq!(&got, b"victim");

    // A live process, stamped as a true holder: every call answers a
    // timeout naming it, and nothing changes.
    attacker.run("lock-self 1");
    let holder = attacker.pid().to_string();
    let mut tail = [0u8; 4];
    for (what, result) in [
        ("slot", r.slot(0).map(|_| ())),
        ("read", r.read(0, &mut got)),
        ("write", r.write(C, b"host")),
        ("write_device", r.write_device(0, b"dev")),
        ("device_addr", r.device_addr(0).map(|_| ())),
        ("prefetch", r.prefetch(C, 1)),
        ("writeback", r.writeback(0, THREE).map(|_| ())),
        ("reclaim", r.reclaim(0, THREE).map(|_| ())),
        ("read at home", r.read(2 * C, &mut tail)),
    ] {
        match result {
            Err(e @ Error::Timeout { .. }) => {
                let text = e.to_string();
                let Error::Timeout { after, .. } = e else {
                    unreachable!()
                };
                assert_eq!(after, PATIENCE, "{what}: the patience set");
                assert!(
                    text.contains(&format!("process {holder}")) && text.contains("end it"),
                    "{what}: {text}"
                );
            }
            other => panic!("{what} under a forged live lock: {other:?}"),
        }
    }
    assert_eq!(home(&a, C, 4), &pattern(THREE)[C as usize..][..4]);

    // Its drop ends too (bounded by the patience); the chunk it serves and
    // could not write back stays exported for others.
    let (dropped, returned) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(r);
        let _ = dropped.send(());
    });
    assert!(
        returned.recv_timeout(Duration::from_secs(60)).is_ok(),
        "dropping a residency under a forged lock hung"
    );

    // The attacker ends: its lock is a dead holder's, taken over; the
    // victim's device writes are still reachable and come home.
    attacker.finish();
    assert!(second.writeback(0, THREE).unwrap().is_empty());
    assert_eq!(home(&a, 0, 6), b"victim");
    assert!(!second.slot(0).unwrap().on_device);

    // A lock word in the name of pid 1 (which never exits), with its true
    // start time, left by a process that then exited: the calls believe it
    // where pid 1's maps cannot be read (and take it over where they can);
    // the operator's recovery breaks it either way, and the calls go on.
    let start = hal_core::kit::os::process_start_time(1).unwrap_or(0);
    forger.run(&format!("lock 1 {start}"));
    forger.finish();
    assert!(
        second.reclaim(0, THREE).unwrap().is_empty(),
        "nothing to give up"
    );
    second.read(0, &mut got).unwrap();
    assert_eq!(&got, b"victim");
}

/// A chunk's slot set to home (state 0) at generation `generation`.
fn forge_home(attacker: &mut Attacker, i: u64, generation: u64) {
    attacker.write(slot_at(i), &0u32.to_le_bytes());
    attacker.write(slot_at(i) + 8, &generation.to_le_bytes());
}

#[test]
fn residency_writeback_keeps_own_device_writes() {
    let dev = mock();
    let (a, ex, mut r) = victim(&dev, Duration::from_secs(10));
    let before = pattern(THREE);
    r.prefetch(0, THREE).unwrap();
    r.write_device(0, b"first").unwrap();
    r.write_device(C, b"second").unwrap();
    r.write_device(2 * C, b"third").unwrap();
    let mut attacker = Attacker::spawn(r.header_text());

    // Chunk 0 said home at the next generation: the victim still reads its
    // device writes, which are written home.
    forge_home(&mut attacker, 0, 2);
    let mut got = [0u8; 5];
    r.read(0, &mut got).unwrap();
    assert_eq!(&got, b"first");
    assert_eq!(home(&a, 0, 5), b"first");
    let slot = r.slot(0).unwrap();
    assert!(!slot.on_device && slot.generation == 3, "{slot:?}");

    // Chunk 1 said home at an older generation: the writeback writes it
    // home all the same.
    forge_home(&mut attacker, 1, 0);
    assert!(r.writeback(C, 1).unwrap().is_empty());
    assert_eq!(home(&a, C, 6), b"second");
    assert!(!r.slot(1).unwrap().on_device);

    // Chunk 2 said home at a generation that may follow a hand-over and
    // newer writes: the device copy is not written over them, and the loss
    // is reported, not silent.
    forge_home(&mut attacker, 2, 9);
    match r.writeback(2 * C, 1) {
        Err(Error::Closed { what }) => {
            assert!(what.contains("chunk 2") && what.contains("lost"), "{what}")
        }
        other => panic!("a writeback after a forged later generation: {other:?}"),
    }
    assert_eq!(home(&a, 2 * C, 5), &before[2 * C as usize..][..5]);
    // The chunk is usable again.
    r.prefetch(2 * C, 1).unwrap();
    assert!(r.writeback(0, THREE).unwrap().is_empty());
    attacker.finish();

    // Not an attack: another attachment brings a chunk this process serves
    // home, and writes its home pages after. The server lets its copy go
    // and writes nothing over them.
    r.prefetch(0, 1).unwrap();
    r.write_device(0, b"served").unwrap();
    let mapping = dev
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let mut other = Residency::attach(&dev, &mapping, r.header_text()).unwrap();
    assert!(other.writeback(0, THREE).unwrap().is_empty());
    assert_eq!(home(&a, 0, 6), b"served");
    other.write(0, b"newer").unwrap();
    assert!(r.writeback(0, THREE).unwrap().is_empty());
    assert_eq!(home(&a, 0, 6), b"newerd");
    let mut got = [0u8; 6];
    r.read(0, &mut got).unwrap();
    assert_eq!(&got, b"newerd");
    // And its drop writes nothing either.
    other.write(0, b"latest").unwrap();
    drop(r);
    assert_eq!(home(&a, 0, 6), b"latest");
}

#[test]
fn residency_bad_slot_is_reclaimed() {
    let dev = mock();
    let (a, ex, mut server) = victim(&dev, Duration::from_secs(10));
    let before = pattern(THREE);
    server.prefetch(0, C).unwrap();
    server.write_device(0, b"served").unwrap();
    // Another attachment that does not map the device copy.
    let mapping = dev
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let mut other = Residency::attach(&dev, &mapping, server.header_text()).unwrap();
    let mut attacker = Attacker::spawn(server.header_text());
    // One byte of the handle text that is not UTF-8.
    attacker.write(slot_at(0) + 22, &[0xff]);
    attacker.finish();

    let slot = other.slot(0).unwrap();
    assert!(
        slot.is_unreadable() && slot.server_gone(),
        "an unreadable slot is a dead server: {slot:?}"
    );
    let mut got = [0u8; 6];
    match other.read(0, &mut got) {
        Err(Error::Closed { what }) => {
            assert!(
                what.contains("unreadable") && what.contains("reclaim"),
                "{what}"
            )
        }
        other => panic!("a read of an unreadable slot: {other:?}"),
    }
    assert_eq!(other.reclaim(0, THREE).unwrap(), vec![0], "recovered");
    other.read(0, &mut got).unwrap();
    assert_eq!(&got[..], &before[..6], "the home pages, current again");
    other.write(100, b"home").unwrap();

    // The server, alive, still has its device writes: its next call on the
    // chunk writes them home (the reclaim's slot is no hand-over of them).
    assert!(server.writeback(0, THREE).unwrap().is_empty());
    assert_eq!(home(&a, 0, 6), b"served");
    other.read(0, &mut got).unwrap();
    assert_eq!(&got, b"served");
    assert!(other.reclaim(0, THREE).unwrap().is_empty(), "nothing more");
}

/// Not an attack: a process that holds the lock for a while (as itself,
/// stamped) and lets go. A drop waits for it, within its patience, and
/// writes the chunk it serves back.
#[test]
fn a_drop_waits_for_a_live_holder_within_its_patience() {
    let dev: &'static MockUvm = Box::leak(Box::new(mock()));
    let (a, _ex, mut r) = victim(dev, Duration::from_secs(30));
    r.prefetch(0, 1).unwrap();
    r.write_device(0, b"dropped").unwrap();
    let mut holder = Attacker::spawn(r.header_text());
    holder.run("lock-self 1");
    let (dropped, returned) = std::sync::mpsc::channel();
    let dropping = std::thread::spawn(move || {
        drop(r);
        let _ = dropped.send(());
    });
    // Held a little while the drop waits, then let go.
    std::thread::sleep(Duration::from_millis(200));
    holder.run("unlock");
    assert!(
        returned.recv_timeout(Duration::from_secs(60)).is_ok(),
        "the drop never returned"
    );
    dropping.join().unwrap();
    holder.finish();
    assert_eq!(home(&a, 0, 7), b"dropped", "written back at the drop");
}

/// One field of a served chunk's slot forged at a time (its state, its
/// generation, its owner): the slot no longer names the server's copy, and
/// the server's next call writes the copy home and mends the slot.
#[test]
fn residency_each_forged_field_of_a_served_slot_is_mended() {
    let dev = mock();
    let (a, _ex, mut r) = victim(&dev, Duration::from_secs(10));
    r.prefetch(0, THREE).unwrap();
    for (i, word) in [(0u64, b"state"), (1, b"gener"), (2, b"owner")] {
        r.write_device(i * C, word).unwrap();
    }
    let mut attacker = Attacker::spawn(r.header_text());
    attacker.write(slot_at(0), &0u32.to_le_bytes());
    attacker.write(slot_at(1) + 8, &2u64.to_le_bytes());
    attacker.write(slot_at(2) + 4, &attacker.pid().to_le_bytes());
    for (i, word) in [(0u64, b"state"), (1, b"gener"), (2, b"owner")] {
        let mut got = [0u8; 5];
        r.read(i * C, &mut got).unwrap();
        assert_eq!(&got, word, "chunk {i}");
        assert_eq!(home(&a, i * C, 5), word, "chunk {i} written home");
        let slot = r.slot(i).unwrap();
        assert!(!slot.on_device, "chunk {i}: {slot:?}");
    }
    attacker.finish();
}
