//! Whether another process lives, and whose it is, read from `/proc`.

use crate::process::stat_fields;

/// The effective uid of process `pid` (`/proc/PID/status`, `Uid:`), or
/// `None` when it cannot be read.
pub fn process_euid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_ascii_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// True when the process `pid` that started at `start` is still alive (a
/// zombie, or a process already in its exit path, counts as dead).
/// `start == 0` means unknown and trusts the pid alone.
pub fn process_alive(pid: u32, start: u64) -> bool {
    if pid == 0 {
        return false;
    }
    let mut buf = [0u8; 1024];
    let Some(rest) = stat_fields(pid, &mut buf) else {
        return false;
    };
    // Fields after the command name: state (field 3), ..., flags (field 9),
    // ..., start time (field 22).
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return false;
    }
    // A process being torn down (PF_EXITING, set at the start of the kernel's
    // exit path, before its descriptors are closed and before it shows as a
    // zombie) counts as dead too: otherwise a peer that sees the dying
    // process's sockets close reads it as alive and misreports the cause
    // (for example an exporter killed during a broker fetch gave NotFound
    // instead of Closed).
    const PF_EXITING: u64 = 0x4;
    if fields
        .get(6)
        .and_then(|s| s.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_EXITING != 0)
    {
        return false;
    }
    start == 0 || fields.get(19).and_then(|s| s.parse::<u64>().ok()) == Some(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_processs_effective_uid_is_read() {
        let me = process_euid(std::process::id());
        assert_eq!(me, Some(nix::unistd::geteuid().as_raw()));
        assert_eq!(process_euid(u32::MAX), None);
    }

    #[test]
    fn a_process_is_alive_until_it_is_reaped_or_another_took_its_pid() {
        let (me, start) = crate::process::self_identity();
        assert!(process_alive(me, start));
        assert!(process_alive(me, 0));
        assert!(!process_alive(me, start + 1));
        assert!(!process_alive(0, 0));
    }
}
