//! The raw spin baseline: an atomic ping-pong on two words of a shared memfd,
//! both sides busy polling (no system call at all), and the CPU time of this
//! process, for the idle-waiter figure.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use hal::kit::os::{self, Prot, SharedMap};

use crate::fail::{CmdResult, Context, Fail};

/// Two words on separate cache lines (128 bytes apart, beyond the adjacent
/// line prefetcher): the exporter writes `ping`, the consumer `pong`.
const PING: usize = 0;
const PONG: usize = 128;
/// Polls between two looks at the clock.
const POLLS_PER_CLOCK: u32 = 1024;

/// Two spin words in a shared memfd; each counts rounds.
pub struct SpinPair {
    map: SharedMap,
}

impl SpinPair {
    /// Create the pair; returns it and the memfd to send to the peer.
    pub fn create() -> CmdResult<(SpinPair, OwnedFd)> {
        let len = os::page_size();
        let fd = os::memfd("halctl-raw-spin", len, None).ctx("spin memfd")?;
        os::add_seals(fd.as_fd(), os::EXPORT_SEALS).ctx("spin memfd seals")?;
        let map = SharedMap::map(fd.as_fd(), len, 0, Prot::ReadWrite, None).ctx("spin mmap")?;
        Ok((SpinPair { map }, fd))
    }

    /// Open the pair from the memfd received from the exporter.
    pub fn open(fd: &OwnedFd) -> CmdResult<SpinPair> {
        let len = os::verify_sealed_memfd(fd.as_fd(), os::page_size()).ctx("spin memfd")?;
        let map = SharedMap::map(fd.as_fd(), len, 0, Prot::ReadWrite, None).ctx("spin mmap")?;
        Ok(SpinPair { map })
    }

    /// The shared page's first byte and length (to register it with a GPU).
    pub fn page(&self) -> (*mut u8, usize) {
        (self.map.as_ptr(), self.map.len())
    }

    /// The addresses of the ping and pong words in a view of the page that
    /// starts at `base` (a GPU's address of the registered page).
    pub fn word_addrs(base: u64) -> (u64, u64) {
        (base + PING as u64, base + PONG as u64)
    }

    fn word(&self, at: usize) -> CmdResult<&AtomicU32> {
        self.map.atomic_u32(at).ctx("spin word")
    }

    /// Exporter: one round trip, number `round` (1, 2, ...).
    pub fn ping(&self, round: u32, timeout: Duration) -> CmdResult<()> {
        self.word(PING)?.store(round, Ordering::Release);
        spin_for(self.word(PONG)?, round, timeout)
    }

    /// Consumer: answer round `round`.
    pub fn pong(&self, round: u32, timeout: Duration) -> CmdResult<()> {
        spin_for(self.word(PING)?, round, timeout)?;
        self.word(PONG)?.store(round, Ordering::Release);
        Ok(())
    }
}

/// Busy-poll `word` until it holds `want`.
fn spin_for(word: &AtomicU32, want: u32, timeout: Duration) -> CmdResult<()> {
    let start = Instant::now();
    loop {
        for _ in 0..POLLS_PER_CLOCK {
            if word.load(Ordering::Acquire) == want {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        if start.elapsed() > timeout {
            return Err(Fail::failed(format!(
                "the peer did not answer the raw spin ping-pong within {timeout:?}"
            )));
        }
    }
}

/// CPU time (user + system) this process has used so far.
pub fn process_cpu() -> CmdResult<Duration> {
    use nix::sys::resource::{getrusage, UsageWho};
    let u =
        getrusage(UsageWho::RUSAGE_SELF).map_err(|e| Fail::failed(format!("getrusage: {e}")))?;
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec().max(0) as u64)
            + Duration::from_micros(t.tv_usec().max(0) as u64)
    };
    Ok(tv(u.user_time()) + tv(u.system_time()))
}
