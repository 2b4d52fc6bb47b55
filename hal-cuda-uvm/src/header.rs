//! The residency table: a shared page set beside a buffer that says, chunk
//! by chunk, where the current copy lives, every process reading and
//! writing it under one lock word.
//!
//! Layout (little-endian; the header is a shared managed buffer of its own):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `HALRES02` |
//! | 8 | 8 | chunk size |
//! | 16 | 8 | chunk count |
//! | 24 | 8 | lock word: 0 free, else the holder's pid (high 32 bits) and a count of its locks (low 32, never 0) |
//! | 32 | 8 | the holder's start time (`/proc/PID/stat` field 22); 0 while it is being written or the lock is free |
//! | 64 + 512·i | 4 | chunk i's state: 0 home, 1 device |
//! | 68 + 512·i | 4 | the pid that made the device copy |
//! | 72 + 512·i | 8 | generation: +1 at every prefetch and writeback |
//! | 80 + 512·i | 4 | CRC-32 of the home pages when the device copy was made; at home, of what the last writeback brought home |
//! | 84 + 512·i | 2 | length of the device chunk's handle text |
//! | 86 + 512·i | ≤ 426 | the device chunk's handle text |
//! | 512 + 512·i | 8 | the start time of the pid that made the device copy (0: unknown) |
//!
//! **Every attached process can write every byte here**, so each reader
//! validates what it reads and no writer can make another process hang:
//!
//! - The lock has a deadline: a live holder is waited for at most the
//!   caller's patience, then [`Error::Timeout`] names its pid. A holder
//!   whose process is gone (no such pid, or one that started at another
//!   time) is replaced at once; one that leaves its start time 0 past
//!   [`STAMP_GRACE`] is taken for gone. A word naming the caller's own
//!   process is believed only if a thread of that process took it: each
//!   process keeps the words it took (a pid and a count, unique per lock),
//!   and takes any other word in its name over at once.
//! - A slot whose bytes no writer of this crate writes (a state other than
//!   0 or 1, a handle text too long, not UTF-8, or no handle) reads as
//!   [`Slot::unreadable`]: a device copy whose server is gone, which
//!   `Residency::reclaim` gives up.
//!
//! - A live holder that does not map the header (its `/proc/PID/maps`
//!   lists no mapping of the header's file) cannot have taken the lock: a
//!   word forged in the name of a process that never exits (pid 1) is
//!   taken over as one of a gone holder is. A holder whose maps this
//!   process may not read (another user's process, one that is not
//!   dumpable: pid 1 of some containers) is believed, up to the caller's
//!   patience, by every call but `Residency::reclaim`, the operator's
//!   recovery, which breaks it ([`break_unproven`]).
//!
//! What a forger can still do is deny service while it runs (hold the lock
//! as itself, stamped: every call answers `Timeout` naming it) and corrupt
//! data the header describes; it cannot make a victim wait for ever, crash,
//! or silently lose the device writes of a chunk the victim serves
//! (`residency.rs`).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hal_core::{Error, Memory, Result};

/// The magic of a residency header.
pub const MAGIC: &[u8; 8] = b"HALRES02";
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

    /// What an unreadable slot reads as: a device copy that nobody serves
    /// (owner 0, no handle text), at the generation and CRC it held.
    pub fn unreadable(generation: u64, home_crc: u32) -> Slot {
        Slot {
            on_device: true,
            owner: 0,
            owner_started: 0,
            generation,
            home_crc,
            text: String::new(),
        }
    }

    /// True for a slot whose bytes were unreadable: a state other than home
    /// or device, or a handle text that is too long, not UTF-8 or no
    /// handle; such a slot reads as a device copy whose server is gone.
    pub fn is_unreadable(&self) -> bool {
        self.on_device && self.owner == 0
    }

    /// True when the chunk is device-resident and the process that served
    /// its device copy is gone without writing it back: no process has its
    /// pid, or the one that has it started at another time; or the slot was
    /// unreadable. An unknown start time (0) proves nothing while the pid
    /// lives.
    pub fn server_gone(&self) -> bool {
        self.on_device && (self.owner == 0 || holder_is_gone(self.owner, self.owner_started))
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

/// Read slot `i`, validated: a slot whose bytes no writer of this crate
/// writes (a state other than 0 or 1, a handle text too long, not UTF-8
/// or no handle) reads as [`Slot::unreadable`], a device copy whose server
/// is gone, which [`Residency::reclaim`](crate::Residency::reclaim) gives
/// up.
pub fn slot(m: &dyn Memory, i: u64) -> Result<Slot> {
    let at = FIRST + SLOT * i;
    let mut b = [0u8; 2];
    m.read(at + 20, &mut b)?;
    let n = usize::from(u16::from_le_bytes(b));
    let mut text = vec![0u8; n.min(TEXT_MAX)];
    m.read(at + 22, &mut text)?;
    let state = u32_at(m, at)?;
    let generation = u64_at(m, at + 8)?;
    let home_crc = u32_at(m, at + 16)?;
    if state == 0 {
        return Ok(Slot {
            home_crc,
            ..Slot::home(generation)
        });
    }
    let text = match String::from_utf8(text) {
        Ok(t) if state == 1 && n <= TEXT_MAX && hal_core::Handle::from_text(&t).is_ok() => t,
        _ => return Ok(Slot::unreadable(generation, home_crc)),
    };
    Ok(Slot {
        on_device: true,
        owner: u32_at(m, at + 4)?,
        owner_started: u64_at(m, at + STARTED as u64)?,
        generation,
        home_crc,
        text,
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
fn words(m: &dyn Memory) -> Result<(&AtomicU64, &AtomicU64)> {
    let base = m
        .host_ptr()
        .ok_or_else(|| Error::invalid("a residency header without a host address"))?;
    if m.is_read_only() || m.len() < FIRST {
        return Err(Error::invalid(
            "a residency header must be writable shared pages",
        ));
    }
    // SAFETY: offsets 24 and 32 of a page-aligned, writable shared mapping
    // at least 64 bytes long (checked): in bounds and aligned for a u64;
    // the mapping outlives the borrow of `m`; the atomics have the layout
    // of their integers.
    Ok(unsafe {
        (
            &*base.add(24).cast::<AtomicU64>(),
            &*base.add(32).cast::<AtomicU64>(),
        )
    })
}

/// The pid in a lock word.
fn pid_of(word: u64) -> u32 {
    (word >> 32) as u32
}

/// The lock words this process has taken or is taking, by any thread and
/// through any mapping of any header: the in-process truth against which a
/// word that names this process is judged. A word with this pid that is not
/// listed here was written by another process.
static OURS: Mutex<Vec<u64>> = Mutex::new(Vec::new());

fn ours() -> std::sync::MutexGuard<'static, Vec<u64>> {
    // The list is whole after any panic: a push or a remove.
    OURS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A lock word of this process that no earlier lock of it used: the pid
/// above, a count below (never 0, so that the word is never 0 either).
fn fresh_word() -> u64 {
    static COUNT: AtomicU32 = AtomicU32::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed).wrapping_add(1).max(1);
    (u64::from(hal_core::kit::os::pid()) << 32) | u64::from(n)
}

/// Forget `word` as one of this process's.
fn forget(word: u64) {
    let mut ours = ours();
    if let Some(at) = ours.iter().position(|&w| w == word) {
        ours.swap_remove(at);
    }
}

/// The lock over the header, released on drop.
pub struct Locked<'a> {
    word: &'a AtomicU64,
    started: &'a AtomicU64,
    mine: u64,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // The stamp goes first: whoever sees the lock free or newly taken
        // never sees this holder's start time. Only this holder's word is
        // cleared: a word another process wrote over it stays.
        let _ = self
            .started
            .compare_exchange(my_start(), 0, Ordering::AcqRel, Ordering::Relaxed);
        let _ = self
            .word
            .compare_exchange(self.mine, 0, Ordering::AcqRel, Ordering::Relaxed);
        forget(self.mine);
    }
}

/// This process's start time, as `/proc/PID/stat` says it; 0 where it
/// cannot be read, a stamp by which nobody judges this holder.
pub(crate) fn my_start() -> u64 {
    hal_core::kit::os::self_identity().1
}

/// True when the process that holds the lock as `holder` is gone: no
/// process has its pid, or the process that has it now started at another
/// time than the holder did (the pid was reused). A stamp of 0 (being
/// written, or never) proves nothing here; the lock's waiter gives such a
/// holder a grace instead.
fn holder_is_gone(holder: u32, stamp: u64) -> bool {
    let (me, started) = hal_core::kit::os::self_identity();
    if holder == me && (stamp == 0 || stamp == started) {
        // This process: alive, and no need to ask /proc.
        return false;
    }
    match hal_core::kit::os::process_start_time(holder) {
        None => true,
        Some(now) => stamp != 0 && now != stamp,
    }
}

/// Looks at a held lock before a waiter naps between looks.
const SPINS_BEFORE_SLEEP: u32 = 1 << 16;
/// A waiter's nap between looks at a lock held for long.
const NAP: Duration = Duration::from_micros(200);
/// How long a holder may leave its start time unwritten (0) before it is
/// taken for gone. A true holder writes it right after taking the word.
pub const STAMP_GRACE: Duration = Duration::from_millis(500);
/// How long [`lock`] waits for a live holder by default.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// What a waiter has seen of the word it waits on.
struct Watch {
    /// The word, and since when it has held it with a stamp of 0.
    unstamped: Option<(u64, Instant)>,
    /// The header's address in this process, by which a holder's maps are
    /// searched for it.
    header: *const u8,
    /// The last word whose holder was looked for among the header's
    /// mappers, and whether it maps the header.
    attached: Option<(u64, bool)>,
}

impl Watch {
    /// True when the live process `holder` (of `word`) does not map the
    /// header, so cannot have taken its lock: a word forged in its name
    /// (pid 1, say, which never exits). Asked once per word; a holder whose
    /// maps cannot be read (another user's process) is believed.
    fn not_attached(&mut self, word: u64, holder: u32) -> bool {
        match self.attached {
            Some((w, attached)) if w == word => !attached,
            _ => {
                let attached =
                    hal_core::kit::os::maps_same_object(holder, self.header) != Some(false);
                self.attached = Some((word, attached));
                !attached
            }
        }
    }

    /// True when `word`, stamped `stamp`, names a holder that is not
    /// holding the lock: a word with this process's pid that this process
    /// never took, a holder that is gone, or one whose stamp stayed 0 past
    /// [`STAMP_GRACE`].
    fn forged_or_gone(&mut self, word: u64, stamp: u64, now: Instant) -> bool {
        let holder = pid_of(word);
        if holder == hal_core::kit::os::pid() {
            return !ours().contains(&word);
        }
        if stamp != 0 {
            self.unstamped = None;
            return holder_is_gone(holder, stamp) || self.not_attached(word, holder);
        }
        match self.unstamped {
            Some((seen, since)) if seen == word => {
                now.duration_since(since) > STAMP_GRACE || holder_is_gone(holder, 0)
            }
            _ => {
                self.unstamped = Some((word, now));
                holder_is_gone(holder, 0)
            }
        }
    }
}

/// Take the header's lock, waiting at most `patience` for its holder. A
/// holder whose process has died is replaced (also when its pid has been
/// reused by another process since), so is one whose stamp stays 0 past
/// [`STAMP_GRACE`], and so is a word that names this process where no
/// thread of it holds the lock. A live holder that keeps it past `patience`
/// is answered with [`Error::Timeout`], naming its pid.
pub fn lock(m: &dyn Memory, patience: Duration) -> Result<Locked<'_>> {
    let (word, started) = words(m)?;
    let mine = fresh_word();
    ours().push(mine);
    let begun = Instant::now();
    let taken = || {
        started.store(my_start(), Ordering::Release);
        Ok(Locked {
            word,
            started,
            mine,
        })
    };
    let mut watch = Watch {
        unstamped: None,
        header: word as *const AtomicU64 as *const u8,
        attached: None,
    };
    let mut spins = 0u32;
    loop {
        match word.compare_exchange(0, mine, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => return taken(),
            Err(holder) => {
                spins = spins.saturating_add(1);
                let napping = spins > SPINS_BEFORE_SLEEP;
                if napping || spins % 1024 == 0 {
                    let now = Instant::now();
                    if taken_over(word, started, holder, mine, &mut watch, now) {
                        log::warn!(
                            "process {} held a residency lock it could not hold (gone, never \
                             stamped, or a word forged in this process's name); taken over",
                            pid_of(holder)
                        );
                        return taken();
                    }
                    if now.duration_since(begun) >= patience {
                        forget(mine);
                        return Err(busy(holder, patience));
                    }
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

/// Break the lock when its holder cannot be shown to hold it: gone, or
/// alive but not seen to map the header (its `/proc/PID/maps` lists no
/// mapping of the header's file, or cannot be read: another user's
/// process, one that is not dumpable, pid 1 of some containers). A lock
/// word that [`lock`] would believe for the caller's whole patience,
/// broken on purpose by the operator's recovery (`Residency::reclaim`).
/// This process's own locks and holders seen to map the header are left
/// alone. True when a lock was broken.
pub fn break_unproven(m: &dyn Memory) -> Result<bool> {
    let (word, started) = words(m)?;
    let holder = word.load(Ordering::Acquire);
    if holder == 0 || ours().contains(&holder) {
        return Ok(false);
    }
    let pid = pid_of(holder);
    let stamp = started.load(Ordering::Acquire);
    let header = word as *const AtomicU64 as *const u8;
    let proven = !holder_is_gone(pid, stamp)
        && hal_core::kit::os::maps_same_object(pid, header) == Some(true);
    if proven {
        return Ok(false);
    }
    let broken = started
        .compare_exchange(stamp, 0, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
        && word
            .compare_exchange(holder, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
    if broken {
        log::warn!(
            "a residency lock held in the name of process {pid}, which is not seen to map the \
             header, was broken by a reclaim"
        );
    }
    Ok(broken)
}

/// What a waiter answers when the lock's live holder kept it past the
/// waiter's `patience`.
fn busy(holder: u64, patience: Duration) -> Error {
    let pid = pid_of(holder);
    Error::Timeout {
        after: patience,
        what: format!(
            "the lock of a residency header, held by process {pid}, which is alive: retry \
             later; if process {pid} is stopped or does not use this buffer, it holds the lock \
             wrongly (any attached process can write the lock word): end it, and the next \
             call takes the lock over, or, if it cannot be ended (pid 1), call \
             Residency::reclaim, which breaks a lock whose holder is not seen to map the \
             header; Residency::set_lock_patience waits longer for a slow holder"
        ),
    }
}

/// Take the lock over from `holder` if it cannot be holding it (see
/// [`Watch::forged_or_gone`]).
fn taken_over(
    word: &AtomicU64,
    started: &AtomicU64,
    holder: u64,
    mine: u64,
    watch: &mut Watch,
    now: Instant,
) -> bool {
    let stamp = started.load(Ordering::Acquire);
    word.load(Ordering::Acquire) == holder
        && watch.forged_or_gone(holder, stamp, now)
        // The old holder's stamp goes before its lock is taken over, so
        // that nobody judges the new holder by it; a stamp that changed
        // meanwhile means a new holder.
        && started
            .compare_exchange(stamp, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        && word
            .compare_exchange(holder, mine, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
}

#[cfg(test)]
mod tests;
