//! `flock(LOCK_EX)` with patience: the lock a process holds on a shared
//! file while it judges or changes it, never waited for without end.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;

/// `flock(LOCK_EX)` on `fd`, waiting at most `patience` for another holder.
/// The lock goes with the last descriptor of that open file. False when
/// another holder kept it past `patience`, or `fd` cannot be locked.
pub fn lock_patiently(fd: BorrowedFd<'_>, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    loop {
        // SAFETY: flock(2) on a descriptor this function borrows; it touches
        // no memory.
        let rc = unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        match if rc == 0 { Ok(()) } else { Err(Errno::last()) } {
            Ok(()) => return true,
            Err(Errno::EINTR) => {}
            Err(Errno::EWOULDBLOCK) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(_) => return false,
        }
    }
}

/// Give back a lock [`lock_patiently`] took on `fd` (closing the last
/// descriptor of the open file does too).
pub fn unlock(fd: BorrowedFd<'_>) {
    // SAFETY: flock(2) on a borrowed descriptor; it touches no memory.
    unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_UN) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_second_open_file_waits_then_gives_up() {
        let dir = tempfile_dir();
        let path = dir.join("lock");
        let a = std::fs::File::create(&path).unwrap();
        let b = std::fs::File::open(&path).unwrap();
        assert!(lock_patiently(a.as_fd(), Duration::ZERO));
        assert!(!lock_patiently(b.as_fd(), Duration::from_millis(20)));
        unlock(a.as_fd());
        assert!(lock_patiently(b.as_fd(), Duration::ZERO));
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "hal-flock-{}-{:x}",
            std::process::id(),
            u128::from_le_bytes(crate::kit::os::random_id())
        ));
        std::fs::create_dir(&dir).unwrap();
        dir
    }
}
