//! The machine under the bench: CPUs, pinning, descriptor limits, and a
//! small random generator.

use std::time::Duration;

use crate::fail::{CmdResult, Fail};

/// A small deterministic generator for picking regions.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new() -> Rng {
        let seed = u64::from_le_bytes(hal::kit::os::random_id()[..8].try_into().unwrap_or([7; 8]));
        Rng(seed | 1)
    }

    pub(super) fn below(&mut self, n: usize) -> usize {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1) as u64) as usize
    }
}

pub(super) fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// Raise the open-file limit to at least `need` if the hard limit allows
/// (or the process may raise that too); returns the limit in force.
pub(super) fn raise_nofile(need: u64) -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft >= need {
        return soft;
    }
    if need <= hard && setrlimit(Resource::RLIMIT_NOFILE, need, hard).is_ok() {
        return need;
    }
    // Raising the hard limit needs CAP_SYS_RESOURCE; try, then settle.
    if setrlimit(Resource::RLIMIT_NOFILE, need, need.max(hard)).is_ok() {
        return need;
    }
    if setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// The CPUs this process may run on.
pub(super) fn allowed_cpus() -> Vec<usize> {
    use nix::sched::{sched_getaffinity, CpuSet};
    use nix::unistd::Pid;
    match sched_getaffinity(Pid::from_raw(0)) {
        Ok(set) => (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Pin the calling thread (and the threads it starts later) to `cpu`.
pub(crate) fn pin_to(cpu: usize) -> CmdResult {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    set.set(cpu)
        .map_err(|e| Fail::usage(format!("CPU {cpu}: {e}")))?;
    sched_setaffinity(Pid::from_raw(0), &set)
        .map_err(|e| Fail::failed(format!("pinning to CPU {cpu}: {e}")))
}

/// Let every thread of this process run on any of `cpus` again (the
/// descriptor broker's thread was started pinned).
pub(super) fn unpin_all(cpus: &[usize]) {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    for &c in cpus {
        let _ = set.set(c);
    }
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            if let Some(tid) = t.file_name().to_str().and_then(|n| n.parse().ok()) {
                let _ = sched_setaffinity(Pid::from_raw(tid), &set);
            }
        }
    }
}

/// Pin this process to the first CPU it may use and return it with the
/// second, for the consumer; `None` (nothing pinned) with fewer than two.
pub(super) fn pin_pair() -> Option<(usize, usize)> {
    let cpus = allowed_cpus();
    let (&a, &b) = (cpus.first()?, cpus.get(1)?);
    pin_to(a).ok()?;
    Some((a, b))
}

/// Descriptors open in this process now.
pub(super) fn open_files() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(64, |d| d.count() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_stays_in_range() {
        let mut r = Rng::new();
        for n in [1, 2, 10_000] {
            for _ in 0..1000 {
                assert!(r.below(n) < n);
            }
        }
    }
}
