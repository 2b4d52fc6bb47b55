//! A hostile process attached to a channel's control region: a real
//! process of the same user (the only one the name's mode 0600 and the
//! region's `/proc` entry let in) writes forged words into the region, and
//! truncates or rewrites the name, while a publisher and a subscriber use
//! the channel. Each forgery makes the victims' calls fail or time out,
//! never hang past their timeout, read out of bounds, fault, or lose the
//! channel: once the words are put back, the channel carries samples again.
//!
//! The offsets are the documented layouts of the control region and of the
//! name's record (`hal_core::channel`'s `layout` and `record` modules,
//! which their own tests pin).

mod reliability;

use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::FileExt;
use std::sync::mpsc;
use std::time::Duration;

use hal_core::channel::{ChannelOptions, Mode, Publisher, SubscribeOptions, Subscriber};
use hal_core::{AllocDesc, Backend, Device, Error, ExportOptions, Importers, Location};
use hal_cpu_shm::CpuShm;
use reliability::*;

// --- the control file's layout ------------------------------------------------

/// Samples published so far (`u64`).
const PUBLISHED: u64 = 64;
/// How many subscribers sleep on the published word (`u32`).
const SUB_SLEEPERS: u64 = 72;
/// The bits of the active subscribers (`u32`).
const MASK: u64 = 76;
/// The length of the slots' handle text (`u32`).
const HANDLE_LEN: u64 = 136;
/// The slots' handle text.
const HANDLE: u64 = 256;
/// Slot `i`'s descriptor: its sample word (`u64`), then its length (`u64`).
fn slot_at(i: u64) -> u64 {
    256 + 4096 + 64 * i
}
/// Subscriber entry `i` of a channel of `slots` slots: pid (`u32`), state
/// (`u32`: 0 free, 1 joining, 2 active), start time (`u64`).
fn entry_at(slots: u64, i: u64) -> u64 {
    slot_at(slots) + 32 * i
}
/// A sample word: the tag (one more than the sequence's low 32 bits) above,
/// the pending subscribers' bits below.
fn word(tag: u32, pending: u32) -> u64 {
    (u64::from(tag) << 32) | u64::from(pending)
}

const SLOTS: u64 = 4;
/// The length of the record a channel's name holds: magic and version,
/// then the publisher's pid and the region's descriptor number at 8 and 12
/// (`u32` each), its start time at 16, the region's device and inode at 24
/// and 32 (`u64` each), the shape after.
const RECORD: usize = 64;

// --- tests -------------------------------------------------------------------

/// A sample length over the slot size is refused when the sample is
/// received (the bytes past the slot are never read), the slot goes back to
/// the publisher, and the next samples arrive.
#[test]
fn a_forged_sample_length_is_refused_and_its_slot_given_back() {
    let v = Victims::new("length", Mode::Broadcast, Duration::from_secs(30));
    let mut attacker = Attacker::spawn(&v.name);
    v.publish(0);
    attacker.write_u64(slot_at(0) + 8, v.slot_size + 1);
    let err = v.guarded_receive();
    assert!(
        matches!(&err, Err(Error::InvalidArgument { what }) if what.contains("written by another process")),
        "a sample longer than its slot: {err:?}"
    );
    // The refused sample's slot was given back: the publisher laps the pool
    // and the subscriber receives every later sample.
    for seq in 1..=2 * SLOTS {
        v.publish(seq);
        assert_eq!(v.guarded_receive().expect("a later sample"), seq);
    }
    attacker.finish();
    v.close();
}

/// Each subscriber's release takes its own bit out of the slot's pending
/// subscribers, whatever its index: with a second subscriber (entry 1)
/// that receives and drops every sample too, the publisher laps the pool
/// three times without waiting for a slot, and the slot words hold no
/// pending bit once both dropped their samples.
#[test]
fn a_second_subscribers_releases_give_its_own_bit_back() {
    let v = Victims::new("second-release", Mode::Broadcast, Duration::from_secs(5));
    let second = Subscriber::open(&device(), &v.name, &short()).expect("a second subscriber");
    let mut attacker = Attacker::spawn(&v.name);
    for seq in 0..3 * SLOTS {
        v.publish(seq);
        assert_eq!(v.guarded_receive().expect("the first subscriber's"), seq);
        let got = second.receive().expect("the second subscriber's sample");
        assert_eq!(got.sequence(), seq);
        drop(got);
        let pending = attacker.read_u64(slot_at(seq % SLOTS)) & 0xffff_ffff;
        assert_eq!(pending, 0, "sample {seq}'s slot is released by both");
    }
    attacker.finish();
    drop(second);
    v.close();
}

/// Slot words that claim newer samples than were ever published (a forger
/// that keeps moving them ahead) end a receive at once with an error, in
/// broadcast and in queue mode; they do not walk the subscriber past real
/// samples: once the words are put back, the next sample arrives.
#[test]
fn forged_newer_tags_end_a_receive_at_once() {
    for mode in [Mode::Broadcast, Mode::Queue] {
        let v = Victims::new("tags", mode, Duration::from_secs(30));
        let mut attacker = Attacker::spawn(&v.name);
        v.publish(0);
        assert_eq!(v.guarded_receive().expect("the first sample"), 0);
        let saved: Vec<u64> = (0..SLOTS).map(|i| attacker.read_u64(slot_at(i))).collect();
        attacker.tell(&format!("run-tags {SLOTS}"));
        attacker.expect("running");
        let err = v.guarded_receive();
        assert!(
            matches!(&err, Err(Error::InvalidArgument { what }) if what.contains("written by another process")),
            "{mode:?}: a receive among forged tags: {err:?}"
        );
        attacker.tell("stop");
        attacker.expect("stopped");
        for (i, w) in saved.iter().enumerate() {
            attacker.write_u64(slot_at(i as u64), *w);
        }
        v.publish(1);
        assert_eq!(
            v.guarded_receive()
                .expect("a sample after the words were put back"),
            1,
            "{mode:?}"
        );
        attacker.finish();
        v.close();
    }
}

/// The slots' handle swapped for another export of the same user whose
/// memory is smaller than the slots, a handle length over the most a
/// channel holds, and a handle that is not UTF-8: each makes a new
/// subscriber's open fail with an error that says so; the subscriber that
/// was there keeps receiving.
#[test]
fn a_swapped_or_forged_handle_is_refused_on_open() {
    let v = Victims::new("handle", Mode::Broadcast, Duration::from_secs(30));
    let mut attacker = Attacker::spawn(&v.name);
    let len = attacker.read_u32(HANDLE_LEN);
    let genuine = attacker.read(HANDLE, len as usize);
    let small = attacker.export_small();
    let forgeries: [(&str, u32, Vec<u8>, &str); 3] = [
        (
            "a smaller region",
            small.len() as u32,
            small.into_bytes(),
            "memory has",
        ),
        (
            "an oversized length",
            4097,
            Vec::new(),
            "a handle of 4097 bytes",
        ),
        (
            "bytes that are not UTF-8",
            4,
            vec![0xff, 0xfe, 0xfd, 0xfc],
            "not UTF-8",
        ),
    ];
    for (what, forged_len, text, says) in forgeries {
        attacker.write(HANDLE, &text);
        attacker.write_u32(HANDLE_LEN, forged_len);
        v.open_is_refused(what, says, true);
        attacker.write(HANDLE, &genuine);
        attacker.write_u32(HANDLE_LEN, len);
    }
    v.publish(0);
    assert_eq!(
        v.guarded_receive().expect("the subscriber that was there"),
        0
    );
    attacker.finish();
    v.close();
}

/// Pending bits forged onto the next slot: a bit of a free subscriber entry
/// is cleared by the publisher's reaping, and the loan succeeds; a bit of
/// an entry forged as active for a live process (the attacker) makes
/// `try_loan` answer `Busy` and `loan` time out; once that process is dead,
/// its slot returns and the loan succeeds.
#[test]
fn forged_pending_bits_are_reaped_or_time_out() {
    let v = Victims::new("pending", Mode::Broadcast, Duration::from_millis(300));
    let mut attacker = Attacker::spawn(&v.name);
    v.publish(0);
    assert_eq!(v.guarded_receive().expect("sample 0"), 0);
    // Slot 1 is the next in turn: a bit of free entry 20.
    attacker.write_u64(slot_at(1), word(0, 1 << 20));
    v.publish(1);
    assert_eq!(v.guarded_receive().expect("sample 1"), 1);
    // Entry 21 forged as the attacker's, active, and its bit on slot 2.
    let (pid, start) = attacker.identity();
    let e = entry_at(SLOTS, 21);
    attacker.write_u32(e, pid);
    attacker.write_u64(e + 8, start);
    attacker.write_u32(e + 4, 2);
    let mask = attacker.read_u32(MASK);
    attacker.write_u32(MASK, mask | 1 << 21);
    attacker.write_u64(slot_at(2), word(0, 1 << 21));
    {
        let mut p = v.publisher.lock().unwrap();
        match p.try_loan() {
            Err(Error::Busy { holders: 1, .. }) => {}
            other => panic!(
                "try_loan of a slot a live forged entry holds: {:?}",
                other.err()
            ),
        }
        match p.loan() {
            Err(Error::Timeout { .. }) => {}
            other => panic!(
                "loan of a slot a live forged entry holds: {:?}",
                other.err()
            ),
        }
    }
    drop(attacker.kill());
    v.publish(2);
    assert_eq!(v.guarded_receive().expect("sample 2"), 2);
    v.close();
}

/// A subscriber asleep on the published word, whose sleeper count a forger
/// sets to 0 (so that a publish makes no wake-up call): it still receives
/// the next sample, from its next look.
#[test]
fn a_zeroed_sleeper_count_delays_a_sample_but_never_loses_it() {
    let v = Victims::new("sleepers", Mode::Broadcast, Duration::from_secs(30));
    let mut attacker = Attacker::spawn(&v.name);
    std::thread::scope(|s| {
        let receiver = s.spawn(|| {
            v.subscriber
                .receive_timeout(Some(LONG))
                .map(|x| x.sequence())
        });
        let slept = (0..3000).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            attacker.read_u32(SUB_SLEEPERS) == 1
        });
        assert!(slept, "the subscriber never counted itself asleep");
        attacker.write_u32(SUB_SLEEPERS, 0);
        v.publish(0);
        assert_eq!(receiver.join().unwrap().expect("the sample"), 0);
    });
    attacker.finish();
    v.close();
}

/// The control region cannot be truncated or grown (it is a sealed memfd:
/// the attacker gets `EPERM`), so no member can be made to fault; a name
/// truncated to nothing, or rewritten to lead to an unsealed memfd or to
/// another object than the channel's, makes a new subscriber's open fail
/// with an error that says so, and the members that are there go on.
#[test]
fn the_control_region_cannot_be_truncated_and_a_forged_name_is_refused() {
    let v = Victims::new("truncate", Mode::Broadcast, Duration::from_secs(30));
    let mut attacker = Attacker::spawn(&v.name);
    attacker.tell("truncate-region");
    assert_eq!(
        attacker.expect("truncated"),
        format!("errno-{}", libc::EPERM),
        "the control region's size is sealed"
    );
    v.publish(0);
    assert_eq!(v.guarded_receive().expect("a sample after the attempt"), 0);
    let refusals: [(&str, &str, &str); 3] = [
        (
            "truncate-name",
            "a name of no bytes",
            "not a channel's name",
        ),
        (
            "forge-name unsealed",
            "a name that leads to an unsealed memfd",
            "not sealed",
        ),
        (
            "forge-name sealed",
            "a name that leads to another memfd",
            "another object",
        ),
    ];
    for (seq, (command, what, says)) in (1..).zip(refusals) {
        attacker.tell(command);
        attacker.expect("done");
        v.open_is_refused(what, says, command != "forge-name unsealed");
        v.publish(seq);
        assert_eq!(
            v.guarded_receive().expect("the subscriber that was there"),
            seq
        );
        attacker.tell("restore-name");
        attacker.expect("done");
    }
    let again =
        Subscriber::open(&device(), &v.name, &short()).expect("an open once the name is back");
    drop(again);
    attacker.finish();
    v.close();
}

/// A name that leads to a file of a FUSE file system whose daemon answers
/// nobody (an `open` of it would wait for as long as the daemon likes): a
/// subscriber's open never opens it, and is refused at once as no memfd,
/// without a single request reaching the daemon.
#[test]
fn fuse_file_behind_a_channel_name_does_not_hang_the_subscriber() {
    if !nix::unistd::geteuid().is_root() || !std::path::Path::new("/dev/fuse").exists() {
        hal_core::testing::not_run("mounting a FUSE file system needs root and /dev/fuse");
        return;
    }
    let v = Victims::new("fuse", Mode::Broadcast, Duration::from_secs(30));
    let mut attacker = Attacker::spawn(&v.name);
    let dir = tempfile::Builder::new()
        .prefix("hal-test-fuse-")
        .tempdir()
        .expect("a temporary directory");
    attacker.tell(&format!("forge-name fuse {}", dir.path().display()));
    let forged = attacker.expect("done");
    if let Some(why) = forged.strip_prefix("cannot ") {
        attacker.kill();
        hal_core::testing::not_run(why);
        return;
    }
    let (tx, rx) = mpsc::channel();
    let name = v.name.clone();
    std::thread::spawn(move || {
        let got = Subscriber::open(&device(), &name, &short()).map(drop);
        let _ = tx.send(got);
    });
    let got = rx.recv_timeout(LONG);
    attacker.tell(&format!("fuse-requests {}", std::process::id()));
    let asked = attacker.expect("requests");
    // Whatever happened, the daemon lets go before the test judges.
    attacker.tell("fuse-stop");
    attacker.expect("stopped");
    match got {
        Ok(Err(e @ Error::InvalidArgument { .. })) => {
            assert!(e.to_string().contains("no memfd"), "{e}")
        }
        Ok(other) => panic!("a subscriber's open of a name that leads to a FUSE file: {other:?}"),
        Err(_) => panic!("a subscriber's open waited {LONG:?} on the FUSE file's daemon"),
    }
    assert_eq!(
        asked, "none",
        "requests of the subscriber reached the FUSE daemon"
    );
    attacker.tell("restore-name");
    attacker.expect("done");
    v.publish(0);
    assert_eq!(v.guarded_receive().expect("the channel still works"), 0);
    attacker.finish();
    v.close();
}

/// A channel's name while its publisher lives, and once it was killed: a
/// second publisher of the name is refused (`AlreadyExists`, naming the
/// live one); once it is dead, a subscriber's open is told so (`Closed`) and
/// removes the name, and a new publisher replaces a name left by a killed
/// one.
#[test]
fn a_live_publishers_name_is_kept_and_a_dead_ones_replaced() {
    let name = unique("channel-names");
    let _sweep = ShmSweep(format!(".hal-{}/channel.{name}", nix::unistd::geteuid()));
    let dev = device();
    let options = ChannelOptions::default().slots(2).slot_size(64);
    let path = hal_core::kit::os::private_path("channel", &name).unwrap();
    let mut first = Kid::spawn("publisher", &[("name", name.clone())]);
    first.expect("ready");
    match Publisher::create(&dev, &name, &options) {
        Err(Error::AlreadyExists { what }) => {
            assert!(what.contains(&format!("pid {}", first.pid())), "{what}")
        }
        other => panic!("a second publisher of a live one's name: {:?}", other.err()),
    }
    drop(Subscriber::open(&dev, &name, &short()).expect("a subscriber of the live publisher"));
    drop(first.kill());
    match Subscriber::open(&dev, &name, &short()) {
        Err(Error::Closed { what }) => assert!(what.contains("is gone"), "{what}"),
        other => panic!("a subscriber of a killed publisher: {:?}", other.err()),
    }
    assert!(
        !path.exists(),
        "the open that found the publisher gone removed its name"
    );
    let mut second = Kid::spawn("publisher", &[("name", name.clone())]);
    second.expect("ready");
    drop(second.kill());
    assert!(path.exists(), "a killed publisher leaves its name");
    let replacing =
        Publisher::create(&dev, &name, &options).expect("a publisher replacing a killed one");
    drop(Subscriber::open(&dev, &name, &short()).expect("a subscriber of the new publisher"));
    drop(replacing);
    assert!(!path.exists(), "the publisher removed its name");
}

/// Another user tries to take a user's channel names first. A name in
/// the user's directory (`/dev/shm/.hal-UID`, mode 0700) cannot be taken:
/// a real process of uid [`NOBODY`] fails to make a file or a directory at
/// root's name, and root's publisher and subscriber of that name work. What
/// another user can take is the directory of a user who has none yet: it
/// makes `/dev/shm/.hal-X` (a directory, or a link) for an unused uid X;
/// a real process of uid X is then refused with `PermissionDenied` naming
/// the owner and the path and saying what to do (root removes it), not
/// `Io`, and no channel of X's is named elsewhere.
#[test]
fn squatted_channel_name_is_permission_denied() {
    if !is_root() {
        hal_core::testing::not_run("a process of another uid needs root to start");
        return;
    }
    let dev = device();
    let options = ChannelOptions::default().slots(2).slot_size(64);
    hal_core::kit::os::make_user_dir().expect("root's directory");
    for (tag, how) in [
        ("file", "umask 077 && : > \"$1\""),
        ("dir", "mkdir -m 700 \"$1\""),
    ] {
        let name = unique(&format!("squatted-{tag}"));
        let path = hal_core::kit::os::private_path("channel", &name).unwrap();
        assert!(
            !squat(how, &path).success(),
            "{tag}: uid {NOBODY} made {} in root's directory",
            path.display()
        );
        let publisher = Publisher::create(&dev, &name, &options).expect("the publisher");
        drop(Subscriber::open(&dev, &name, &short()).expect("the subscriber"));
        drop(publisher);
        assert!(!path.exists(), "the publisher removed its name");
    }
    for (tag, how) in [
        ("dir", "mkdir -m 700 \"$1\""),
        ("link", "ln -s /tmp \"$1\""),
    ] {
        let victim = unused_uid();
        let dir = hal_core::kit::os::user_dir(victim);
        let _squat = Squat::new(how, &dir);
        let name = unique(&format!("squatted-{tag}"));
        let mut kid = Kid::spawn_with("squatted", &[("name", name)], |c| {
            use std::os::unix::process::CommandExt as _;
            c.uid(victim).gid(victim);
        });
        let kind = kid.expect("kind");
        let reason = kid.expect("reason");
        kid.finish();
        assert_eq!(kind, "PermissionDenied", "{tag}: {reason}");
        for says in [
            format!("owner uid {NOBODY}"),
            dir.display().to_string(),
            format!("not the private directory of uid {victim}"),
            "root remove".to_string(),
        ] {
            assert!(reason.contains(&says), "{tag}: {reason}");
        }
    }
}

/// A uid no process and no directory of `/dev/shm` uses: a victim that
/// has no directory yet.
fn unused_uid() -> u32 {
    let base = 3_000_000_000 + (std::process::id() % 100_000) * 1000;
    (base..base + 1000)
        .find(|uid| !hal_core::kit::os::user_dir(*uid).exists())
        .expect("an unused uid")
}

/// Run the shell command `how` (`$1` is `path`) as uid [`NOBODY`].
fn squat(how: &str, path: &std::path::Path) -> std::process::ExitStatus {
    use std::os::unix::process::CommandExt as _;
    std::process::Command::new("/bin/sh")
        .args(["-c", how, "squatter"])
        .arg(path)
        .stderr(std::process::Stdio::null())
        .uid(NOBODY)
        .gid(NOBODY)
        .status()
        .expect("starting a shell of uid 65534")
}

/// What a process of uid [`NOBODY`] made at `path` with the shell command
/// `how` (`$1` is the path), removed when dropped.
struct Squat(std::path::PathBuf);

impl Squat {
    fn new(how: &str, path: &std::path::Path) -> Squat {
        let status = squat(how, path);
        assert!(status.success(), "the squatter failed: {status}");
        Squat(path.to_path_buf())
    }
}

impl Drop for Squat {
    fn drop(&mut self) {
        if std::fs::remove_file(&self.0).is_err() {
            let _ = std::fs::remove_dir(&self.0);
        }
    }
}

/// The child entry point: a role in a child process its parent started.
#[test]
#[ignore = "child entry point: run by its parent"]
fn __child() {
    match child_role().as_str() {
        "attacker" => attacker(),
        "publisher" => {
            let dev = device();
            let options = ChannelOptions::default().slots(2).slot_size(64);
            let _p = Publisher::create(&dev, &arg("name"), &options).expect("a publisher");
            say("ready", "");
            wait_for_eof();
        }
        // Publish a channel: say how it was refused.
        "squatted" => {
            let options = ChannelOptions::default().slots(2).slot_size(64);
            match Publisher::create(&device(), &arg("name"), &options) {
                Ok(_) => say("kind", "Ok"),
                Err(Error::PermissionDenied { reason, .. }) => {
                    say("kind", "PermissionDenied");
                    say("reason", reason);
                }
                Err(e) => say("kind", format!("{e:?}")),
            }
        }
        other => panic!("unknown role {other}"),
    }
}

// --- the victims ------------------------------------------------------------

fn device() -> hal_cpu_shm::CpuDevice {
    CpuShm::new().open(0).expect("the cpu-shm host device")
}

/// Subscribe options whose receives give up after 200 ms.
fn short() -> SubscribeOptions {
    SubscribeOptions::default()
        .timeout(Some(Duration::from_millis(200)))
        .spin(Duration::ZERO)
}

/// A publisher and a subscriber of a channel of [`SLOTS`] slots in this
/// process.
struct Victims {
    name: String,
    slot_size: u64,
    publisher: std::sync::Mutex<Publisher>,
    subscriber: Subscriber,
    _sweep: ShmSweep,
}

impl Victims {
    fn new(tag: &str, mode: Mode, publisher_timeout: Duration) -> Victims {
        let name = unique(&format!("channel-{tag}"));
        let dev = device();
        let slot_size = Device::info(&dev).page_size();
        let options = ChannelOptions::default()
            .slots(SLOTS as usize)
            .slot_size(slot_size)
            .mode(mode)
            .location(Location::Host)
            .timeout(publisher_timeout);
        let publisher = Publisher::create(&dev, &name, &options).expect("a publisher");
        let subscriber = Subscriber::open(&dev, &name, &short()).expect("a subscriber");
        Victims {
            _sweep: ShmSweep(format!(".hal-{}/channel.{name}", nix::unistd::geteuid())),
            name,
            slot_size,
            publisher: std::sync::Mutex::new(publisher),
            subscriber,
        }
    }

    /// Publish sample `seq` (its sequence in its first 8 bytes).
    #[track_caller]
    fn publish(&self, seq: u64) {
        let mut p = self.publisher.lock().unwrap();
        let loan = p.loan().expect("a loan");
        loan.write(0, &seq.to_le_bytes())
            .expect("a write into the loan");
        assert_eq!(loan.publish(8).expect("a publish"), seq);
    }

    /// A receive of at most 200 ms, run on a thread that this one waits
    /// for at most [`LONG`] (a hang fails the test): the sample's sequence,
    /// checked against its bytes.
    #[track_caller]
    fn guarded_receive(&self) -> Result<u64, Error> {
        std::thread::scope(|s| {
            let (tx, rx) = mpsc::channel();
            s.spawn(move || {
                let got = self.subscriber.receive().map(|x| {
                    let mut b = [0u8; 8];
                    x.read(0, &mut b).expect("reading a sample in its slot");
                    assert_eq!(u64::from_le_bytes(b), x.sequence(), "a sample's bytes");
                    x.sequence()
                });
                let _ = tx.send(got);
            });
            match rx.recv_timeout(LONG) {
                Ok(got) => got,
                Err(_) => {
                    // The receive hangs: fail loudly rather than join it.
                    eprintln!("a receive of 200 ms did not return within {LONG:?}");
                    std::process::abort();
                }
            }
        })
    }

    /// Require that a new subscriber's open fails with an error that says
    /// `says` (`InvalidArgument` where `invalid`); `what` names the forgery.
    #[track_caller]
    fn open_is_refused(&self, what: &str, says: &str, invalid: bool) {
        match Subscriber::open(&device(), &self.name, &short()) {
            Err(e @ Error::InvalidArgument { .. }) if e.to_string().contains(says) => {}
            Err(e) if !invalid && e.to_string().contains(says) => {}
            other => panic!("{what}: a subscriber's open gave {:?}", other.err()),
        }
    }

    /// Close the channel and check that its file went.
    fn close(self) {
        let name = self.name.clone();
        drop(self);
        assert_no_shm(&format!(".hal-{}/channel.{name}", nix::unistd::geteuid()));
    }
}

// --- the attacker ------------------------------------------------------------

/// The parent's side of the attacker process.
struct Attacker(Kid);

impl Attacker {
    fn spawn(name: &str) -> Attacker {
        let mut kid = Kid::spawn("attacker", &[("name", name.to_string())]);
        kid.expect("ready");
        Attacker(kid)
    }

    fn tell(&mut self, line: &str) {
        self.0.tell(line);
    }

    fn expect(&mut self, tag: &str) -> String {
        self.0.expect(tag)
    }

    fn write(&mut self, at: u64, bytes: &[u8]) {
        self.0.tell(&format!("write {at} {}", hex(bytes)));
        self.0.expect("done");
    }

    fn write_u32(&mut self, at: u64, v: u32) {
        self.write(at, &v.to_le_bytes());
    }

    fn write_u64(&mut self, at: u64, v: u64) {
        self.write(at, &v.to_le_bytes());
    }

    fn read(&mut self, at: u64, len: usize) -> Vec<u8> {
        self.0.tell(&format!("read {at} {len}"));
        unhex(&self.0.expect("bytes"))
    }

    fn read_u32(&mut self, at: u64) -> u32 {
        u32::from_le_bytes(self.read(at, 4).try_into().unwrap())
    }

    fn read_u64(&mut self, at: u64) -> u64 {
        u64::from_le_bytes(self.read(at, 8).try_into().unwrap())
    }

    /// The attacker's pid and start time.
    fn identity(&mut self) -> (u32, u64) {
        self.0.tell("identity");
        let line = self.0.expect("identity");
        let (pid, start) = line.split_once(' ').unwrap();
        (pid.parse().unwrap(), start.parse().unwrap())
    }

    /// The handle text of a one-page region the attacker exports to anyone.
    fn export_small(&mut self) -> String {
        self.0.tell("export-small");
        self.0.expect("exported")
    }

    fn finish(self) {
        self.0.finish();
    }

    fn kill(self) -> Vec<String> {
        self.0.kill()
    }
}

fn hex(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "-".into();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    if s == "-" {
        return Vec::new();
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The attacker: opens the channel's control file as any process of its
/// user may, and does what its parent says, one line a command:
///
/// * `write OFFSET HEX`: write the bytes at `OFFSET` (answers `done`);
/// * `read OFFSET LEN`: answers `bytes HEX`;
/// * `identity`: answers `identity PID START`;
/// * `export-small`: exports a one-page cpu-shm region to anyone, kept
///   until the end, and answers `exported HANDLE`;
/// * `run-tags SLOTS`: from now on, every 20 ms, writes every slot's word
///   with no pending bits and a tag 2^26 further ahead than the last,
///   newer than any sample published (answers `running`);
/// * `stop`: stops that (answers `stopped`);
/// * `truncate-region`: tries to truncate the control region to 0 and grow
///   it to twice its size (answers `truncated done`, or `truncated errno-N`);
/// * `truncate-name`, `restore-name`: truncate the name to 0 bytes, and
///   write the record back (answer `done`);
/// * `forge-name unsealed|sealed`: makes a memfd of the region's size with
///   the region's head and writes a record naming it into the name:
///   unsealed with its own identity, or sealed with the genuine region's
///   identity (answers `done`);
/// * `forge-name fuse DIR`: mounts a hostile FUSE file system at `DIR`
///   ([`hal_tests::fuse`]) and writes a record naming its file (answers
///   `done`, or `done cannot …`); `fuse-requests PID` answers `requests`
///   with the opcodes process `PID` sent its daemon (or `none`), and
///   `fuse-stop` lets go of every held request (answers `stopped`).
fn attacker() {
    let path = hal_core::kit::os::private_path("channel", &arg("name")).expect("a channel name");
    let name = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("opening the channel's name");
    let mut record = [0u8; RECORD];
    name.read_exact_at(&mut record, 0)
        .expect("reading the record");
    let pid = u32::from_le_bytes(record[8..12].try_into().unwrap());
    let fd = u32::from_le_bytes(record[12..16].try_into().unwrap());
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/fd/{fd}"))
        .expect("opening the control region through /proc");
    let dev = device();
    let mut kept = Vec::new();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut forger = None;
    let mut forgeries = Vec::new();
    let mut fuse: Option<hal_tests::fuse::Fuse> = None;
    say("ready", "");
    loop {
        let line = match std::panic::catch_unwind(hear) {
            Ok(line) => line,
            Err(_) => break,
        };
        let mut parts = line.split(' ');
        match parts.next().unwrap_or("") {
            "write" => {
                let at: u64 = parts.next().unwrap().parse().unwrap();
                file.write_all_at(&unhex(parts.next().unwrap()), at)
                    .expect("writing the control file");
                say("done", "");
            }
            "read" => {
                let at: u64 = parts.next().unwrap().parse().unwrap();
                let len: usize = parts.next().unwrap().parse().unwrap();
                let mut b = vec![0u8; len];
                file.read_exact_at(&mut b, at)
                    .expect("reading the control file");
                say("bytes", hex(&b));
            }
            "identity" => {
                let (pid, start) = hal_core::kit::os::self_identity();
                say("identity", format!("{pid} {start}"));
            }
            "export-small" => {
                let page = Device::info(&dev).page_size();
                let a = Device::allocate(&dev, &AllocDesc::host(page)).expect("a page");
                let ex = Device::export_memory(
                    &dev,
                    &a,
                    &ExportOptions {
                        importers: Importers::Anyone,
                        ..ExportOptions::default()
                    },
                )
                .expect("an export");
                say("exported", ex.to_text());
                kept.push((a, ex));
            }
            "run-tags" => {
                let slots: u64 = parts.next().unwrap().parse().unwrap();
                let f = file.try_clone().expect("a second descriptor");
                let stop = std::sync::Arc::clone(&stop);
                forger = Some(std::thread::spawn(move || forge_tags(&f, slots, &stop)));
                say("running", "");
            }
            "truncate-region" => {
                let len = file.metadata().unwrap().len();
                let outcome = match file.set_len(0).and_then(|_| file.set_len(len * 2)) {
                    Ok(()) => "done".to_string(),
                    Err(e) => e
                        .raw_os_error()
                        .map_or(e.to_string(), |n| format!("errno-{n}")),
                };
                say("truncated", outcome);
            }
            "truncate-name" => {
                name.set_len(0).expect("truncating the name");
                say("done", "");
            }
            "restore-name" => {
                name.set_len(RECORD as u64).expect("sizing the name");
                name.write_all_at(&record, 0).expect("writing the record");
                say("done", "");
            }
            "forge-name" if line.starts_with("forge-name fuse ") => {
                // A file of a FUSE file system this process serves, whose
                // daemon holds every other process's request, named by the
                // record with its true identity.
                let dir = parts.nth(1).expect("a directory");
                match hal_tests::fuse::Fuse::mount(dir) {
                    Ok(f) => {
                        let file = f.file().as_fd();
                        let st = hal_core::kit::os::quick_stat(file).unwrap();
                        let mut forged = record;
                        let (me, start) = hal_core::kit::os::self_identity();
                        forged[8..12].copy_from_slice(&me.to_le_bytes());
                        forged[12..16].copy_from_slice(&(file.as_raw_fd() as u32).to_le_bytes());
                        forged[16..24].copy_from_slice(&start.to_le_bytes());
                        forged[24..32].copy_from_slice(&st.dev.to_le_bytes());
                        forged[32..40].copy_from_slice(&st.ino.to_le_bytes());
                        name.write_all_at(&forged, 0)
                            .expect("writing the forged record");
                        fuse = Some(f);
                        say("done", "");
                    }
                    Err(e) => say("done", format!("cannot mount a FUSE file system: {e}")),
                }
            }
            "fuse-requests" => {
                let pid: u32 = parts.next().unwrap().parse().unwrap();
                let ops = fuse
                    .as_ref()
                    .map(|f| f.requests_from(pid))
                    .unwrap_or_default();
                say(
                    "requests",
                    if ops.is_empty() {
                        "none".to_string()
                    } else {
                        format!("{ops:?}")
                    },
                );
            }
            "fuse-stop" => {
                if let Some(mut f) = fuse.take() {
                    f.stop();
                }
                say("stopped", "");
            }
            "forge-name" => {
                // A memfd of this process's, of the region's size, named by
                // the record: unsealed, or sealed but given the genuine
                // region's identity.
                let sealed = parts.next() == Some("sealed");
                let len = file.metadata().unwrap().len();
                let own = hal_core::kit::os::memfd("forged-channel", len, None).unwrap();
                let mut head = vec![0u8; 4096];
                file.read_exact_at(&mut head, 0).unwrap();
                let copy = File::from(own.try_clone().unwrap());
                copy.write_all_at(&head, 0).unwrap();
                let mut forged = record;
                let (me, start) = hal_core::kit::os::self_identity();
                forged[8..12].copy_from_slice(&me.to_le_bytes());
                forged[12..16].copy_from_slice(&(own.as_raw_fd() as u32).to_le_bytes());
                forged[16..24].copy_from_slice(&start.to_le_bytes());
                if sealed {
                    hal_core::kit::os::add_seals(
                        own.as_fd(),
                        libc::F_SEAL_SHRINK | libc::F_SEAL_GROW,
                    )
                    .unwrap();
                } else {
                    let st = hal_core::kit::os::fstat(own.as_fd()).unwrap();
                    forged[24..32].copy_from_slice(&st.st_dev.to_le_bytes());
                    forged[32..40].copy_from_slice(&st.st_ino.to_le_bytes());
                }
                name.write_all_at(&forged, 0)
                    .expect("writing the forged record");
                forgeries.push(own);
                say("done", "");
            }
            "stop" => {
                stop.store(true, std::sync::atomic::Ordering::SeqCst);
                if let Some(t) = forger.take() {
                    t.join().unwrap();
                }
                say("stopped", "");
            }
            other => panic!("unknown command {other:?}"),
        }
    }
}

/// Keep every slot's tag ahead of anything published, moving it 2^26
/// further every 20 ms, until `stop`.
fn forge_tags(file: &File, slots: u64, stop: &std::sync::atomic::AtomicBool) {
    let mut b = [0u8; 8];
    file.read_exact_at(&mut b, PUBLISHED).unwrap();
    let mut tag = (u64::from_le_bytes(b) as u32).wrapping_add(1 << 26);
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        for i in 0..slots {
            file.write_all_at(&word(tag, 0).to_le_bytes(), slot_at(i))
                .unwrap();
        }
        tag = tag.wrapping_add(1 << 26);
        std::thread::sleep(Duration::from_millis(20));
    }
}
