//! The residency table: a shared page set beside a buffer that says, chunk
//! by chunk, where the current copy lives, every process reading and
//! writing it under one lock word.
//!
//! Layout (little-endian; the header is a shared managed buffer of its own):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `HALRES01` |
//! | 8 | 8 | chunk size |
//! | 16 | 8 | chunk count |
//! | 24 | 4 | lock word: 0 free, else the holder's pid |
//! | 32 | 8 | the holder's start time (`/proc/PID/stat` field 22); 0 while it is being written or the lock is free |
//! | 64 + 512·i | 4 | chunk i's state: 0 home, 1 device |
//! | 68 + 512·i | 4 | the pid that made the device copy |
//! | 72 + 512·i | 8 | generation: +1 at every prefetch and writeback |
//! | 80 + 512·i | 4 | CRC-32 of the home pages when the device copy was made |
//! | 84 + 512·i | 2 | length of the device chunk's handle text |
//! | 86 + 512·i | ≤ 426 | the device chunk's handle text |
//! | 512 + 512·i | 8 | the start time of the pid that made the device copy (0: unknown) |

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use hal_core::{Error, Memory, Result};

/// The magic of a residency header.
pub const MAGIC: &[u8; 8] = b"HALRES01";
const FIRST: u64 = 64;
const SLOT: u64 = 512;
const TEXT_MAX: usize = 426;
/// Where a slot's server start time sits: after the longest handle text.
const STARTED: usize = 22 + TEXT_MAX;

/// The bytes a header for `chunks` chunks needs, in whole pages.
pub fn len(chunks: u64, page: u64) -> u64 {
    (FIRST + SLOT * chunks).div_ceil(page) * page
}

/// Where a chunk's current copy lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// True when the device copy is the current one.
    pub on_device: bool,
    /// The process that made the device copy (and serves its handle).
    pub owner: u32,
    /// `owner`'s start time (`/proc/PID/stat` field 22), by which a reused
    /// pid is told from the server; 0 where it is unknown.
    pub owner_started: u64,
    /// Bumped at every hand-over.
    pub generation: u64,
    /// CRC-32 of the home pages when the device copy was made.
    pub home_crc: u32,
    /// The device chunk's handle text (empty at home).
    pub text: String,
}

impl Slot {
    /// A chunk at home, at `generation`.
    pub(crate) fn home(generation: u64) -> Slot {
        Slot {
            on_device: false,
            owner: 0,
            owner_started: 0,
            generation,
            home_crc: 0,
            text: String::new(),
        }
    }

    /// True when the chunk is device-resident and the process that served
    /// its device copy is gone without writing it back: no process has its
    /// pid, or the one that has it started at another time. An unknown
    /// start time (0) proves nothing while the pid lives.
    pub fn server_gone(&self) -> bool {
        self.on_device && holder_is_gone(self.owner, self.owner_started)
    }
}

fn u64_at(m: &dyn Memory, at: u64) -> Result<u64> {
    let mut b = [0u8; 8];
    m.read(at, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn u32_at(m: &dyn Memory, at: u64) -> Result<u32> {
    let mut b = [0u8; 4];
    m.read(at, &mut b)?;
    Ok(u32::from_le_bytes(b))
}

/// Write a new header for `chunks` chunks of `chunk` bytes, all at home.
pub fn init(m: &dyn Memory, chunk: u64, chunks: u64) -> Result<()> {
    let mut fields = [0u8; 24];
    fields[..8].copy_from_slice(MAGIC);
    fields[8..16].copy_from_slice(&chunk.to_le_bytes());
    fields[16..24].copy_from_slice(&chunks.to_le_bytes());
    m.write(0, &fields)
}

/// The chunk size and count of an existing header, checked.
pub fn geometry(m: &dyn Memory) -> Result<(u64, u64)> {
    let mut magic = [0u8; 8];
    m.read(0, &mut magic)?;
    if &magic != MAGIC {
        return Err(Error::invalid(
            "not a residency header (bad magic): pass the header handle Residency::header_text gave",
        ));
    }
    let (chunk, chunks) = (u64_at(m, 8)?, u64_at(m, 16)?);
    // Checked: the numbers come from pages other processes write.
    let needs = chunks.checked_mul(SLOT).and_then(|b| b.checked_add(FIRST));
    if chunk == 0 || chunk.checked_mul(chunks).is_none() || needs.is_none_or(|n| n > m.len()) {
        return Err(Error::invalid(
            "a residency header whose geometry does not fit it",
        ));
    }
    Ok((chunk, chunks))
}

/// Read slot `i`.
pub fn slot(m: &dyn Memory, i: u64) -> Result<Slot> {
    let at = FIRST + SLOT * i;
    let n = {
        let mut b = [0u8; 2];
        m.read(at + 20, &mut b)?;
        usize::from(u16::from_le_bytes(b)).min(TEXT_MAX)
    };
    let mut text = vec![0u8; n];
    m.read(at + 22, &mut text)?;
    Ok(Slot {
        on_device: u32_at(m, at)? == 1,
        owner: u32_at(m, at + 4)?,
        owner_started: u64_at(m, at + STARTED as u64)?,
        generation: u64_at(m, at + 8)?,
        home_crc: u32_at(m, at + 16)?,
        text: String::from_utf8(text)
            .map_err(|_| Error::invalid("a residency slot whose handle text is not UTF-8"))?,
    })
}

/// Write slot `i`.
pub fn set_slot(m: &dyn Memory, i: u64, s: &Slot) -> Result<()> {
    if s.text.len() > TEXT_MAX {
        return Err(Error::invalid(
            "a chunk handle text longer than a residency slot holds",
        ));
    }
    let mut b = vec![0u8; STARTED + 8];
    b[..4].copy_from_slice(&u32::from(s.on_device).to_le_bytes());
    b[4..8].copy_from_slice(&s.owner.to_le_bytes());
    b[8..16].copy_from_slice(&s.generation.to_le_bytes());
    b[16..20].copy_from_slice(&s.home_crc.to_le_bytes());
    b[20..22].copy_from_slice(&(s.text.len() as u16).to_le_bytes());
    b[22..22 + s.text.len()].copy_from_slice(s.text.as_bytes());
    b[STARTED..].copy_from_slice(&s.owner_started.to_le_bytes());
    m.write(FIRST + SLOT * i, &b)
}

/// The header's lock word and its holder's start time.
fn words(m: &dyn Memory) -> Result<(&AtomicU32, &AtomicU64)> {
    let base = m
        .host_ptr()
        .ok_or_else(|| Error::invalid("a residency header without a host address"))?;
    if m.is_read_only() || m.len() < FIRST {
        return Err(Error::invalid(
            "a residency header must be writable shared pages",
        ));
    }
    // SAFETY: offsets 24 and 32 of a page-aligned, writable shared mapping
    // at least 64 bytes long (checked): in bounds and aligned for a u32 and
    // a u64; the mapping outlives the borrow of `m`; the atomics have the
    // layout of their integers.
    Ok(unsafe {
        (
            &*base.add(24).cast::<AtomicU32>(),
            &*base.add(32).cast::<AtomicU64>(),
        )
    })
}

/// The lock over the header, released on drop.
pub struct Locked<'a> {
    word: &'a AtomicU32,
    started: &'a AtomicU64,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // The stamp goes first: whoever sees the lock free or newly taken
        // never sees this holder's start time.
        self.started.store(0, Ordering::Release);
        self.word.store(0, Ordering::Release);
    }
}

/// This process's start time, as `/proc/PID/stat` says it; 0 where it
/// cannot be read, a stamp by which nobody judges this holder.
pub(crate) fn my_start() -> u64 {
    hal_core::os::self_identity().1
}

/// True when the process that holds the lock as `holder` is gone: no
/// process has its pid, or the process that has it now started at another
/// time than the holder did (the pid was reused). A stamp of 0 (being
/// written) proves nothing.
fn holder_is_gone(holder: u32, stamp: u64) -> bool {
    let (me, started) = hal_core::os::self_identity();
    if holder == me && (stamp == 0 || stamp == started) {
        // This process: alive, and no need to ask /proc.
        return false;
    }
    match hal_core::os::process_start_time(holder) {
        None => true,
        Some(now) => stamp != 0 && now != stamp,
    }
}

/// Looks at a held lock before a waiter naps between looks.
const SPINS_BEFORE_SLEEP: u32 = 1 << 16;
/// A waiter's nap between looks at a lock held for long.
const NAP: std::time::Duration = std::time::Duration::from_micros(200);

/// Take the header's lock. A holder whose process has died is replaced,
/// also when its pid has been reused by another process since.
pub fn lock(m: &dyn Memory) -> Result<Locked<'_>> {
    let (word, started) = words(m)?;
    let me = hal_core::os::pid();
    let taken = || {
        started.store(my_start(), Ordering::Release);
        Ok(Locked { word, started })
    };
    let mut spins = 0u32;
    loop {
        match word.compare_exchange(0, me, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => return taken(),
            Err(holder) => {
                spins = spins.saturating_add(1);
                let napping = spins > SPINS_BEFORE_SLEEP;
                if (napping || spins % 1024 == 0) && taken_over(word, started, holder, me) {
                    log::warn!("process {holder} died holding a residency lock; taken over");
                    return taken();
                }
                if napping {
                    // A holder that runs this long is stopped or descheduled:
                    // waiting on it costs no more than a timer.
                    std::thread::sleep(NAP);
                } else if spins % 64 == 0 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

/// Take the lock over from `holder` if its process is gone.
fn taken_over(word: &AtomicU32, started: &AtomicU64, holder: u32, me: u32) -> bool {
    let stamp = started.load(Ordering::Acquire);
    word.load(Ordering::Acquire) == holder
        && holder_is_gone(holder, stamp)
        // The dead holder's stamp goes before its lock is taken over, so
        // that nobody judges the new holder by it; a stamp that changed
        // meanwhile means a new holder.
        && started
            .compare_exchange(stamp, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        && word
            .compare_exchange(holder, me, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hal_core::{AllocDesc, Device};

    fn page() -> hal_cpu_shm::CpuAllocation {
        hal_cpu_shm::CpuShm::new()
            .host()
            .allocate(&AllocDesc::host(4096))
            .unwrap()
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
            text: "hal1.example".into(),
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
            text: "x".repeat(TEXT_MAX),
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
        assert!(lock(&read_only).is_err(), "read-only pages");
        let short = View {
            pages: &p,
            len: 32,
            read_only: false,
        };
        assert!(
            lock(&short).is_err(),
            "pages too short for the lock's words"
        );
        for len in [FIRST, 4096] {
            let enough = View {
                pages: &p,
                len,
                read_only: false,
            };
            drop(lock(&enough).unwrap());
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
        p.write(24, &pid.to_le_bytes()).unwrap();
        let held = lock(&p).unwrap();
        assert_eq!(u32_at(&p, 24).unwrap(), std::process::id());
        drop(held);
        assert_eq!(u32_at(&p, 24).unwrap(), 0, "released on drop");
        assert_eq!(u64_at(&p, 32).unwrap(), 0, "and its stamp");
    }

    /// A live process that is not this one, killed when dropped.
    struct Live(std::process::Child);

    impl Live {
        fn new() -> Live {
            Live(
                std::process::Command::new("sleep")
                    .arg("30")
                    .spawn()
                    .unwrap(),
            )
        }
        fn pid(&self) -> u32 {
            self.0.id()
        }
        fn start(&self) -> u64 {
            hal_core::os::process_start_time(self.pid()).unwrap()
        }
    }

    impl Drop for Live {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Write `pid` and `stamp` as the lock's holder.
    fn held_by(p: &hal_cpu_shm::CpuAllocation, pid: u32, stamp: u64) {
        p.write(24, &pid.to_le_bytes()).unwrap();
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
        let held = lock(&p).unwrap();
        assert_eq!(u32_at(&p, 24).unwrap(), std::process::id());
        assert_eq!(
            Some(u64_at(&p, 32).unwrap()),
            hal_core::os::process_start_time(std::process::id()),
            "stamped with the new holder's start time"
        );
        drop(held);
    }

    #[test]
    fn a_holder_that_dies_while_others_wait_is_replaced() {
        let p = page();
        init(&p, 2 << 20, 1).unwrap();
        let mut holder = Live::new();
        held_by(&p, holder.pid(), holder.start());
        std::thread::scope(|s| {
            s.spawn(|| {
                // Long after the waiter began: it has looked many times.
                std::thread::sleep(std::time::Duration::from_millis(100));
                holder.0.kill().unwrap();
                holder.0.wait().unwrap();
            });
            let held = lock(&p).unwrap();
            assert_eq!(u32_at(&p, 24).unwrap(), std::process::id());
            drop(held);
        });
    }

    #[test]
    fn a_live_holder_keeps_the_lock_until_it_lets_go() {
        use std::sync::atomic::AtomicBool;
        let p = page();
        init(&p, 2 << 20, 1).unwrap();
        let holder = Live::new();
        // Stamped with its own start time, and not stamped yet (0).
        for stamp in [holder.start(), 0] {
            held_by(&p, holder.pid(), stamp);
            let released = AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    // Long enough for many looks at the holder.
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    released.store(true, Ordering::SeqCst);
                    held_by(&p, 0, 0);
                });
                let held = lock(&p).unwrap();
                assert!(
                    released.load(Ordering::SeqCst),
                    "the lock was taken from a live holder (stamp {stamp})"
                );
                drop(held);
            });
        }
    }
}
