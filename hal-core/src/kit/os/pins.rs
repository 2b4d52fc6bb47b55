//! The start times of processes an exporter allows, kept with a pidfd each:
//! allowing the same live process again (an export per region, to the same
//! importer) costs one `poll` instead of reading `/proc/PID/stat`.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Mutex, TryLockError};

use crate::process::process_start_time;

/// Most processes kept.
const KEPT: usize = 64;

static PINS: Mutex<Option<HashMap<u32, (u64, OwnedFd)>>> = Mutex::new(None);

/// A pidfd of process `pid`, or `None` where the kernel has none (before
/// Linux 5.3) or refuses it.
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    super::pidfd::pidfd_open(pid).ok()
}

/// True while the process of `pidfd` has not exited.
fn alive(pidfd: &OwnedFd) -> bool {
    super::pidfd::pidfd_alive(pidfd.as_fd())
}

/// The start time of the process that has pid `pid` now, as
/// [`process_start_time`] reads it, or `None` when no process has it. A
/// process seen before is answered from the kept value while its pidfd says
/// it lives: a live process keeps its pid, so the value is still its own.
pub fn current_start_time(pid: u32) -> Option<u64> {
    if pid == 0 {
        return None;
    }
    let mut guard = match PINS.try_lock() {
        Ok(g) => g,
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        // Another thread holds it (or held it at fork): read /proc.
        Err(TryLockError::WouldBlock) => return process_start_time(pid),
    };
    let pins = guard.get_or_insert_with(HashMap::new);
    if let Some((start, fd)) = pins.get(&pid) {
        if alive(fd) {
            return Some(*start);
        }
        pins.remove(&pid);
    }
    let Some(fd) = pidfd_open(pid) else {
        return process_start_time(pid);
    };
    let start = process_start_time(pid)?;
    // The pidfd was opened first: if its process still lives now, the start
    // time read in between is its own.
    if !alive(&fd) {
        return process_start_time(pid);
    }
    if pins.len() >= KEPT {
        let gone: Vec<u32> = pins
            .iter()
            .filter(|(_, (_, f))| !alive(f))
            .map(|(&p, _)| p)
            .collect();
        for p in gone {
            pins.remove(&p);
        }
        if pins.len() >= KEPT {
            if let Some(&p) = pins.keys().next() {
                pins.remove(&p);
            }
        }
    }
    log::trace!("pinned pid {pid} with pidfd {}", fd.as_raw_fd());
    pins.insert(pid, (start, fd));
    Some(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_start_time_is_the_live_processs_and_a_dead_one_is_dropped() {
        let me = crate::kit::os::pid();
        assert_eq!(current_start_time(me), process_start_time(me));
        assert_eq!(current_start_time(me), process_start_time(me), "kept");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        assert!(
            current_start_time(pid).is_some(),
            "the child lives until reaped"
        );
        child.wait().unwrap();
        // Reaped: no process has the pid (or a newer one does): the kept
        // value is not used.
        assert_eq!(current_start_time(pid), process_start_time(pid));
        assert_eq!(current_start_time(0x7fff_fff0), None);
    }
}
