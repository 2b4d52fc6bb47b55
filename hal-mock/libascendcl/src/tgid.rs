//! Bare tgids: the process ids the runtime's allow-lists hold
//! (`aclrtDeviceGetBareTgid`). On a real host they are the host's pids,
//! which inside a container differ from the pids the process sees; here
//! they always differ from the OS pid (the pid plus [`TGID_OFFSET`], above
//! any `pid_max`), so that a backend which passes an OS pid where a bare
//! tgid belongs is refused, as it would be in a container.

/// What a bare tgid adds to the OS pid (2^24, above Linux's largest
/// `pid_max`, 2^22).
pub const TGID_OFFSET: u32 = 1 << 24;

/// The bare tgid of the process with OS pid `pid`.
pub fn bare_tgid(pid: u32) -> u32 {
    pid + TGID_OFFSET
}

/// The OS pid of the bare tgid `tgid`; `None` for a value that is no bare
/// tgid (an OS pid given by mistake), which then allows nobody.
pub fn os_pid(tgid: i32) -> Option<u32> {
    u32::try_from(tgid)
        .ok()
        .and_then(|t| t.checked_sub(TGID_OFFSET))
        .filter(|&p| p > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tgids_and_pids_never_coincide() {
        let me = std::process::id();
        assert_ne!(bare_tgid(me), me);
        assert_eq!(os_pid(bare_tgid(me) as i32), Some(me));
        assert_eq!(os_pid(me as i32), None, "an OS pid is no bare tgid");
        assert_eq!(os_pid(-1), None);
    }
}
