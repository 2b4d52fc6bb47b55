//! Unit tests of the residency header: its layout, its slots and its lock.

use super::*;
use hal_core::{AllocDesc, Device};

fn page() -> hal_cpu_shm::CpuAllocation {
    hal_cpu_shm::CpuShm::new()
        .host()
        .allocate(&AllocDesc::host(4096))
        .unwrap()
}

/// The text of a real handle: what a device-resident slot holds.
fn handle_text() -> String {
    let shm = hal_cpu_shm::CpuShm::new().host();
    let p = shm.allocate(&AllocDesc::host(4096)).unwrap();
    shm.export_memory(&p, &hal_core::ExportOptions::default())
        .unwrap()
        .to_text()
}

#[test]
fn slots_round_trip_and_a_bad_header_is_refused() {
    let p = page();
    assert!(geometry(&p).is_err(), "no magic yet");
    init(&p, 2 << 20, 3).unwrap();
    assert_eq!(geometry(&p).unwrap(), (2 << 20, 3));
    let s = Slot {
        on_device: true,
        owner: 42,
        owner_started: 0x0102_0304_0506_0708,
        generation: 7,
        home_crc: 0xdead_beef,
        text: handle_text(),
    };
    set_slot(&p, 2, &s).unwrap();
    assert_eq!(slot(&p, 2).unwrap(), s);
    assert!(!slot(&p, 1).unwrap().on_device);
    let long = Slot {
        text: "x".repeat(TEXT_MAX + 1),
        ..s
    };
    assert!(set_slot(&p, 0, &long).is_err());
}

/// Every slot no writer of this crate writes reads as a device copy
/// whose server is gone, keeping its generation and CRC: a state other
/// than 0 or 1, a text too long, not UTF-8, or no handle.
#[test]
fn an_unreadable_slot_reads_as_a_dead_server() {
    let p = page();
    init(&p, 2 << 20, 1).unwrap();
    let good = Slot {
        on_device: true,
        owner: std::process::id(),
        owner_started: my_start(),
        generation: 5,
        home_crc: 9,
        text: handle_text(),
    };
    let at = FIRST;
    let forged: [(&str, u64, Vec<u8>); 5] = [
        ("state 2", at, 2u32.to_le_bytes().to_vec()),
        ("state 0x100", at, 0x100u32.to_le_bytes().to_vec()),
        (
            "text too long",
            at + 20,
            (TEXT_MAX as u16 + 1).to_le_bytes().to_vec(),
        ),
        ("text not UTF-8", at + 22, vec![0xff]),
        ("text no handle", at + 22, b"x".to_vec()),
    ];
    for (what, offset, bytes) in forged {
        set_slot(&p, 0, &good).unwrap();
        assert!(!slot(&p, 0).unwrap().server_gone());
        p.write(offset, &bytes).unwrap();
        let s = slot(&p, 0).unwrap();
        assert_eq!(s, Slot::unreadable(5, 9), "{what}");
        assert!(s.is_unreadable() && s.server_gone(), "{what}");
    }
    // At home, the text is never read.
    set_slot(
        &p,
        0,
        &Slot {
            home_crc: 3,
            ..Slot::home(6)
        },
    )
    .unwrap();
    p.write(at + 22, &[0xff]).unwrap();
    p.write(at + 20, &u16::MAX.to_le_bytes()).unwrap();
    let home = slot(&p, 0).unwrap();
    assert_eq!(
        home,
        Slot {
            home_crc: 3,
            ..Slot::home(6)
        }
    );
    assert!(!home.is_unreadable() && !home.server_gone());
    assert!(!Slot::home(1).is_unreadable());
    assert!(!good.is_unreadable());
}

/// A header's pages seen shorter or read-only.
struct View<'a> {
    pages: &'a hal_cpu_shm::CpuAllocation,
    len: u64,
    read_only: bool,
}

impl Memory for View<'_> {
    fn addr(&self) -> u64 {
        self.pages.addr()
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn location(&self) -> hal_core::Location {
        self.pages.location()
    }
    fn host_ptr(&self) -> Option<*mut u8> {
        self.pages.host_ptr()
    }
    fn is_read_only(&self) -> bool {
        self.read_only
    }
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.pages.read(offset, dst)
    }
    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.pages.write(offset, src)
    }
}

#[test]
fn a_header_is_whole_pages_of_slots() {
    assert_eq!(len(0, 4096), 4096);
    assert_eq!(len(7, 4096), 4096, "64 + 7 slots of 512 fit a page");
    assert_eq!(len(8, 4096), 8192);
    assert_eq!(len(3, 1), 64 + 3 * 512);
}

#[test]
fn a_geometry_that_does_not_fit_its_header_is_refused() {
    let p = page();
    init(&p, 2 << 20, 7).unwrap();
    assert_eq!(
        geometry(&p).unwrap(),
        (2 << 20, 7),
        "seven slots fit a page"
    );
    for (chunk, chunks) in [
        (2 << 20, 8),
        (2 << 20, u64::MAX / 256),
        (2 << 20, u64::MAX),
        (0, 1),
    ] {
        init(&p, chunk, chunks).unwrap();
        assert!(geometry(&p).is_err(), "{chunks} chunks of {chunk:#x}");
    }
}

#[test]
fn a_slot_holds_handle_text_up_to_its_size() {
    let p = page();
    init(&p, 2 << 20, 1).unwrap();
    let full = Slot {
        on_device: true,
        owner: 1,
        owner_started: u64::MAX,
        generation: 1,
        home_crc: 1,
        // Whitespace around a handle's text is no part of it.
        text: format!("{:<TEXT_MAX$}", handle_text()),
    };
    set_slot(&p, 0, &full).unwrap();
    assert_eq!(slot(&p, 0).unwrap(), full);
    // The next slot starts right after: the start time stays inside.
    set_slot(&p, 1, &Slot::home(9)).unwrap();
    assert_eq!(slot(&p, 0).unwrap(), full);
    assert_eq!(slot(&p, 1).unwrap(), Slot::home(9));
}

#[test]
fn the_lock_needs_writable_pages_that_hold_it() {
    let p = page();
    init(&p, 2 << 20, 1).unwrap();
    let read_only = View {
        pages: &p,
        len: 4096,
        read_only: true,
    };
    assert!(lock(&read_only, PATIENCE).is_err(), "read-only pages");
    let short = View {
        pages: &p,
        len: 32,
        read_only: false,
    };
    assert!(
        lock(&short, PATIENCE).is_err(),
        "pages too short for the lock's words"
    );
    for len in [FIRST, 4096] {
        let enough = View {
            pages: &p,
            len,
            read_only: false,
        };
        drop(lock(&enough, PATIENCE).unwrap());
    }
}

#[test]
fn a_geometry_that_fills_its_header_exactly_fits() {
    let p = page();
    init(&p, 2 << 20, 1).unwrap();
    let exact = View {
        pages: &p,
        len: FIRST + SLOT,
        read_only: false,
    };
    assert_eq!(geometry(&exact).unwrap(), (2 << 20, 1));
    let short = View {
        len: FIRST + SLOT - 1,
        ..exact
    };
    assert!(geometry(&short).is_err());
}

#[test]
fn a_lock_held_by_a_dead_process_is_taken_over() {
    let p = page();
    init(&p, 2 << 20, 1).unwrap();
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    p.write(24, &(u64::from(pid) << 32 | 1).to_le_bytes())
        .unwrap();
    // Unstamped, but gone: taken over at the first look, with no grace.
    let held = lock(&p, Duration::ZERO).unwrap();
    assert_eq!(pid_of(u64_at(&p, 24).unwrap()), std::process::id());
    drop(held);
    assert_eq!(u64_at(&p, 24).unwrap(), 0, "released on drop");
    assert_eq!(u64_at(&p, 32).unwrap(), 0, "and its stamp");
}

/// A live process that is not this one and maps what this one maps (a
/// forked child that only waits), killed when dropped.
struct Live(libc::pid_t);

impl Live {
    /// Fork it; the caller's pages (the header among them) are mapped in
    /// the child too.
    fn new() -> Live {
        // SAFETY: the child calls nothing but `pause`, which is
        // async-signal-safe, until it is killed; it touches no lock of the
        // parent's threads.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            loop {
                // SAFETY: waits for a signal; the parent's SIGKILL ends it.
                unsafe { libc::pause() };
            }
        }
        Live(pid)
    }
    fn pid(&self) -> u32 {
        self.0 as u32
    }
    fn start(&self) -> u64 {
        hal_core::kit::os::process_start_time(self.pid()).unwrap()
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        // SAFETY: kills and reaps the child this value forked.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            libc::waitpid(self.0, std::ptr::null_mut(), 0);
        }
    }
}

/// A live process that maps nothing of this one's (`sleep`), killed when
/// dropped.
struct Stranger(std::process::Child);

impl Stranger {
    fn new() -> Stranger {
        Stranger(
            std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap(),
        )
    }
}

impl Drop for Stranger {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A lock word that names a live process which does not map the header
/// (forged in its name: pid 1, which never exits, or any other), with its
/// true start time, is taken over at once rather than waited on for the
/// caller's whole patience.
#[test]
fn a_lock_word_naming_a_process_that_does_not_map_the_header_is_taken_over() {
    let p = page();
    init(&p, 2 << 20, 1).unwrap();
    let stranger = Stranger::new();
    let pid = stranger.0.id();
    let start = hal_core::kit::os::process_start_time(pid).unwrap();
    held_by(&p, pid, start);
    let held = lock(&p, std::time::Duration::from_secs(30)).expect("taken over");
    drop(held);
    // Pid 1, where its maps can be read (root, and a pid 1 that is
    // dumpable; a holder whose maps cannot be read is believed, see the
    // module).
    if std::fs::read_to_string("/proc/1/maps").is_ok() {
        held_by(&p, 1, hal_core::kit::os::process_start_time(1).unwrap());
        drop(lock(&p, std::time::Duration::from_secs(30)).expect("taken over from pid 1"));
    }
}

/// Write `pid` and `stamp` as the lock's holder.
fn held_by(p: &hal_cpu_shm::CpuAllocation, pid: u32, stamp: u64) {
    let word = if pid == 0 {
        0
    } else {
        u64::from(pid) << 32 | 0xdead_0007
    };
    p.write(24, &word.to_le_bytes()).unwrap();
    p.write(32, &stamp.to_le_bytes()).unwrap();
}

#[test]
fn a_server_is_gone_when_its_pid_is_or_was_reused() {
    let live = Live::new();
    let served = |owner, owner_started| Slot {
        on_device: true,
        owner,
        owner_started,
        generation: 1,
        home_crc: 0,
        text: "x".into(),
    };
    assert!(!served(live.pid(), live.start()).server_gone());
    assert!(
        !served(live.pid(), 0).server_gone(),
        "an unknown start time proves nothing while the pid lives"
    );
    assert!(
        served(live.pid(), live.start() + 1).server_gone(),
        "the pid was reused"
    );
    // This process, as itself, unstamped, or as an earlier process
    // whose pid it has now.
    let me = std::process::id();
    assert!(!served(me, my_start()).server_gone());
    assert!(!served(me, 0).server_gone());
    assert!(
        served(me, my_start() + 1).server_gone(),
        "a server with this process's pid that started at another time"
    );
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let pid = dead.id();
    dead.wait().unwrap();
    assert!(served(pid, 0).server_gone(), "no such process");
    assert!(
        !Slot::home(3).server_gone(),
        "a chunk at home has no server"
    );
    assert!(
        !Slot {
            on_device: false,
            ..served(pid, 0)
        }
        .server_gone(),
        "only a device-resident chunk has a server"
    );
}

#[test]
fn a_lock_whose_holders_pid_was_reused_is_taken_over() {
    let p = page();
    init(&p, 2 << 20, 1).unwrap();
    // The pid is alive, but its process started at another time than
    // the holder that stamped the lock: the holder is gone.
    let other = Live::new();
    held_by(&p, other.pid(), other.start() + 1);
    let held = lock(&p, Duration::ZERO).unwrap();
    assert_eq!(pid_of(u64_at(&p, 24).unwrap()), std::process::id());
    assert_eq!(
        Some(u64_at(&p, 32).unwrap()),
        hal_core::kit::os::process_start_time(std::process::id()),
        "stamped with the new holder's start time"
    );
    drop(held);
}

#[test]
fn a_holder_that_dies_while_others_wait_is_replaced() {
    let p = page();
    init(&p, 2 << 20, 1).unwrap();
    let holder = Live::new();
    held_by(&p, holder.pid(), holder.start());
    std::thread::scope(|s| {
        s.spawn(|| {
            // Long after the waiter began: it has looked many times.
            std::thread::sleep(std::time::Duration::from_millis(100));
            drop(holder);
        });
        let held = lock(&p, PATIENCE).unwrap();
        assert_eq!(pid_of(u64_at(&p, 24).unwrap()), std::process::id());
        drop(held);
    });
}

#[test]
fn a_live_holder_keeps_the_lock_until_it_lets_go() {
    use std::sync::atomic::AtomicBool;
    let p = page();
    init(&p, 2 << 20, 1).unwrap();
    let holder = Live::new();
    // Stamped with its own start time (a holder not stamped yet is
    // given a grace: `an_unstamped_live_holder_is_given_a_grace`).
    held_by(&p, holder.pid(), holder.start());
    let released = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // Long enough for many looks at the holder.
            std::thread::sleep(std::time::Duration::from_millis(100));
            released.store(true, Ordering::SeqCst);
            held_by(&p, 0, 0);
        });
        let held = lock(&p, PATIENCE).unwrap();
        assert!(
            released.load(Ordering::SeqCst),
            "the lock was taken from a live holder"
        );
        drop(held);
    });
}

#[test]
fn an_unstamped_live_holder_is_given_a_grace() {
    let p = page();
    init(&p, 2 << 20, 1).unwrap();
    let holder = Live::new();
    held_by(&p, holder.pid(), 0);
    // A waiter that gives up at its first look has not seen the grace
    // pass: the holder keeps the lock, and is named.
    match lock(&p, Duration::ZERO) {
        Err(Error::Timeout { after, what }) => {
            assert_eq!(after, Duration::ZERO);
            assert!(
                what.contains(&format!("process {}", holder.pid())),
                "{what}"
            );
        }
        other => panic!(
            "an unstamped holder at the first look: {:?}",
            other.map(|_| ())
        ),
    }
    assert_eq!(pid_of(u64_at(&p, 24).unwrap()), holder.pid());
    // Nor does one whose patience ends well inside the grace (a fifth
    // of it): it looks many times, and the holder is not taken for gone
    // before the grace has passed since the first look.
    assert!(matches!(
        lock(&p, STAMP_GRACE / 5),
        Err(Error::Timeout { .. })
    ));
    assert_eq!(pid_of(u64_at(&p, 24).unwrap()), holder.pid());
    // A waiter that waits past the grace takes it.
    let held = lock(&p, PATIENCE).unwrap();
    assert_eq!(pid_of(u64_at(&p, 24).unwrap()), std::process::id());
    drop(held);
    assert_eq!(u64_at(&p, 24).unwrap(), 0);
}

#[test]
fn a_stamped_live_holder_keeps_the_lock_past_a_waiters_patience() {
    let p = page();
    init(&p, 2 << 20, 1).unwrap();
    let holder = Live::new();
    held_by(&p, holder.pid(), holder.start());
    let word = u64_at(&p, 24).unwrap();
    let patience = Duration::from_millis(600);
    match lock(&p, patience) {
        Err(e @ Error::Timeout { .. }) => {
            let Error::Timeout { after, ref what } = e else {
                unreachable!()
            };
            assert_eq!(after, patience);
            assert!(
                what.contains(&format!("held by process {}", holder.pid()))
                    && what.contains("set_lock_patience"),
                "{what}"
            );
        }
        other => panic!("a live stamped holder: {:?}", other.map(|_| ())),
    }
    assert_eq!(u64_at(&p, 24).unwrap(), word, "the holder keeps it");
    assert_eq!(u64_at(&p, 32).unwrap(), holder.start());
    assert!(!ours().contains(&word));
}

#[test]
fn a_word_in_this_processs_name_that_no_thread_took_is_taken_over() {
    let p = page();
    init(&p, 2 << 20, 1).unwrap();
    for stamp in [my_start(), 0] {
        held_by(&p, std::process::id(), stamp);
        let forged = u64_at(&p, 24).unwrap();
        // Taken over at the first look, long before any grace or
        // patience: a waiter that gives up at once still gets it.
        let held = lock(&p, Duration::ZERO).unwrap();
        let word = u64_at(&p, 24).unwrap();
        assert_ne!(word, forged);
        assert_eq!(pid_of(word), std::process::id());
        assert!(ours().contains(&word));
        assert_eq!(u64_at(&p, 32).unwrap(), my_start());
        drop(held);
        assert!(!ours().contains(&word), "forgotten at the release");
        assert_eq!(u64_at(&p, 24).unwrap(), 0);
    }
}

#[test]
fn threads_of_one_process_exclude_each_other() {
    use std::sync::atomic::AtomicBool;
    let p = page();
    init(&p, 2 << 20, 1).unwrap();
    let held = lock(&p, PATIENCE).unwrap();
    let released = AtomicBool::new(false);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            // The word names this process and is one it took: waited for.
            let held = lock(&p, PATIENCE).unwrap();
            assert!(
                released.load(Ordering::SeqCst),
                "a thread took the lock another thread of its process holds"
            );
            drop(held);
        });
        // Long enough for many looks, and past the grace.
        std::thread::sleep(STAMP_GRACE * 2);
        released.store(true, Ordering::SeqCst);
        drop(held);
        waiter.join().unwrap();
    });
    assert_eq!(u64_at(&p, 24).unwrap(), 0);
}

#[test]
fn a_release_clears_only_its_own_word_and_stamp() {
    let p = page();
    init(&p, 2 << 20, 1).unwrap();
    let held = lock(&p, PATIENCE).unwrap();
    // Written over by another process meanwhile: left as it is.
    let other = Live::new();
    held_by(&p, other.pid(), other.start());
    drop(held);
    assert_eq!(pid_of(u64_at(&p, 24).unwrap()), other.pid());
    assert_eq!(u64_at(&p, 32).unwrap(), other.start());
    // Its own: cleared, stamp first.
    held_by(&p, 0, 0);
    let held = lock(&p, PATIENCE).unwrap();
    assert_eq!(u64_at(&p, 32).unwrap(), my_start());
    drop(held);
    assert_eq!((u64_at(&p, 24).unwrap(), u64_at(&p, 32).unwrap()), (0, 0));
}

#[test]
fn each_lock_has_a_word_of_its_own() {
    let (a, b) = (fresh_word(), fresh_word());
    assert_ne!(a, b);
    for w in [a, b] {
        assert_eq!(pid_of(w), std::process::id());
        assert_ne!(w & 0xffff_ffff, 0);
    }
    assert_eq!(pid_of(0x0000_0007_ffff_ffff), 7);
    ours().push(a);
    ours().push(b);
    forget(a);
    assert!(!ours().contains(&a) && ours().contains(&b));
    forget(b);
    assert!(!ours().contains(&b));
}

/// The grace of an unstamped holder, on a clock the test sets: it runs
/// from the first look at a word, starts again for a new word, and
/// ends strictly after `STAMP_GRACE`.
#[test]
fn the_grace_runs_per_word_from_the_first_look() {
    // The header first, so that the live holder maps it too.
    let p = page();
    let live = Live::new();
    let header = p.host_ptr().unwrap() as *const u8;
    let new_watch = || Watch {
        unstamped: None,
        header,
        attached: None,
    };
    let word = |n: u64| u64::from(live.pid()) << 32 | n;
    let t0 = Instant::now();
    let mut watch = new_watch();
    assert!(!watch.forged_or_gone(word(1), 0, t0));
    assert!(!watch.forged_or_gone(word(1), 0, t0 + STAMP_GRACE));
    assert!(watch.forged_or_gone(word(1), 0, t0 + STAMP_GRACE * 2));
    // Another word (a new holder): its own grace, from its first look.
    assert!(!watch.forged_or_gone(word(2), 0, t0 + STAMP_GRACE * 3));
    assert!(!watch.forged_or_gone(word(2), 0, t0 + STAMP_GRACE * 4));
    assert!(watch.forged_or_gone(word(2), 0, t0 + STAMP_GRACE * 5));
    // Stamped, the holder is judged by its stamp, and the grace starts
    // again once it is unstamped.
    assert!(!watch.forged_or_gone(word(2), live.start(), t0 + STAMP_GRACE * 6));
    assert!(!watch.forged_or_gone(word(2), 0, t0 + STAMP_GRACE * 7));
    assert!(watch.forged_or_gone(word(2), live.start() + 1, t0 + STAMP_GRACE * 7));
    // A gone holder needs no grace.
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let pid = dead.id();
    dead.wait().unwrap();
    let mut fresh = new_watch();
    assert!(fresh.forged_or_gone(u64::from(pid) << 32 | 1, 0, t0));
    let mut again = new_watch();
    assert!(!again.forged_or_gone(word(3), 0, t0));
    assert!(again.forged_or_gone(u64::from(pid) << 32 | 1, 0, t0));
}

/// A lock word in the name of a live process that is not seen to map the
/// header (a `sleep`; pid 1, whose maps may be unreadable) is broken by
/// the recovery; a holder that maps it, and this process's own lock, are
/// left alone.
#[test]
fn the_recovery_breaks_a_lock_no_mapper_holds() {
    let p = page();
    init(&p, 2 << 20, 1).unwrap();
    let stranger = Stranger::new();
    let pid = stranger.0.id();
    held_by(&p, pid, hal_core::kit::os::process_start_time(pid).unwrap());
    assert!(break_unproven(&p).unwrap(), "a holder that maps nothing");
    assert_eq!(u64_at(&p, 24).unwrap(), 0);
    held_by(&p, 1, hal_core::kit::os::process_start_time(1).unwrap_or(0));
    assert!(break_unproven(&p).unwrap(), "pid 1, whatever its maps");
    let holder = Live::new();
    held_by(&p, holder.pid(), holder.start());
    assert!(
        !break_unproven(&p).unwrap(),
        "a holder that maps the header"
    );
    held_by(&p, 0, 0);
    let mine = lock(&p, PATIENCE).unwrap();
    assert!(!break_unproven(&p).unwrap(), "this process's own lock");
    drop(mine);
}
