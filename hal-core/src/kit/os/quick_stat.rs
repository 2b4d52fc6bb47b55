//! What the kernel already knows of a descriptor's file, read without
//! asking its file system: `statx(AT_STATX_DONT_SYNC)`.
//!
//! A file another process hands over may live on a FUSE mount whose daemon
//! is hostile: `fstat` then sends the daemon `GETATTR`, an `open` sends
//! `OPEN`, and the last `close` of a descriptor sends `FLUSH`, which the
//! kernel waits for without any signal cutting it short once the daemon
//! read it. `statx` with `AT_STATX_DONT_SYNC` answers from the attributes
//! the kernel keeps (for FUSE, whatever the daemon said last) and never
//! waits; the device it answers is the kernel's, not the daemon's, so a
//! file that claims to be on the memfd file system cannot be.
//!
//! [`is_memfd`] tells the memfds, whose every operation the kernel does
//! itself: those may be opened, `fstat`ed and closed without waiting on
//! anyone.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// What [`quick_stat`] read of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuickStat {
    /// The device of the file's file system, as `fstat`'s `st_dev` encodes it.
    pub dev: u64,
    /// The inode number.
    pub ino: u64,
    /// The file type bits (`S_IFMT` of the mode).
    pub kind: u32,
}

/// `statx(dirfd, path, flags | AT_STATX_DONT_SYNC)`: what the kernel
/// knows of the file, without asking its file system.
fn statx_cached(dirfd: i32, path: &CStr, flags: i32) -> Result<QuickStat> {
    let mut sx = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: `path` is a NUL-terminated string and `sx` is valid for
    // writes of one `statx`, both alive for the call; `dirfd` is either
    // AT_FDCWD or a descriptor the caller borrows for the call.
    let r = unsafe {
        libc::statx(
            dirfd,
            path.as_ptr(),
            flags | libc::AT_STATX_DONT_SYNC,
            libc::STATX_TYPE | libc::STATX_INO,
            sx.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(Error::last_os("statx(AT_STATX_DONT_SYNC)"));
    }
    // SAFETY: zeroed, then filled by a successful statx.
    let sx = unsafe { sx.assume_init() };
    Ok(QuickStat {
        dev: libc::makedev(sx.stx_dev_major, sx.stx_dev_minor),
        ino: sx.stx_ino,
        kind: u32::from(sx.stx_mode) & libc::S_IFMT,
    })
}

/// `statx` of descriptor `fd` (any descriptor, `O_PATH` ones included) with
/// `AT_STATX_DONT_SYNC`: the kernel's cached device, inode and type of its
/// file, read without asking the file system (see the module).
pub fn quick_stat(fd: BorrowedFd<'_>) -> Result<QuickStat> {
    statx_cached(fd.as_raw_fd(), c"", libc::AT_EMPTY_PATH)
}

/// Whether process `pid` holds a descriptor of the file `id` (device,
/// inode): each of its descriptors' files read from what the kernel knows
/// (`statx(AT_STATX_DONT_SYNC)` through `/proc/PID/fd/N`, never asking a
/// file system). `None` when its descriptors cannot be listed (another
/// user's process, one that is not dumpable, `hidepid`).
pub fn holds_file(pid: u32, id: (u64, u64)) -> Option<bool> {
    use std::os::unix::ffi::OsStrExt;
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(dir.flatten().any(|e| {
        std::ffi::CString::new(e.path().as_os_str().as_bytes())
            .ok()
            .and_then(|c| statx_cached(libc::AT_FDCWD, &c, 0).ok())
            .is_some_and(|st| (st.dev, st.ino) == id)
    }))
}

/// A device learned once from a probe of this process's own; a failed
/// probe (at the open-file limit, say) is tried again at the next call.
fn learned(cell: &OnceLock<u64>, probe: impl FnOnce() -> Option<u64>) -> Option<u64> {
    if let Some(dev) = cell.get() {
        return Some(*dev);
    }
    let dev = probe()?;
    Some(*cell.get_or_init(|| dev))
}

/// The device of a new memfd of this process's own (`MFD_HUGETLB` of
/// `huge_page` bytes where given).
fn probe_memfd(huge_page: Option<u64>) -> Option<u64> {
    use nix::sys::memfd::{memfd_create, MemFdCreateFlag as F};
    let flags = match huge_page {
        None => F::MFD_CLOEXEC,
        Some(0x20_0000) => F::MFD_CLOEXEC | F::MFD_HUGETLB | F::MFD_HUGE_2MB,
        Some(_) => F::MFD_CLOEXEC | F::MFD_HUGETLB | F::MFD_HUGE_1GB,
    };
    let fd = memfd_create(c"hal-device-probe", flags).ok()?;
    quick_stat(std::os::fd::AsFd::as_fd(&fd))
        .ok()
        .map(|s| s.dev)
}

/// True when `st` is a memfd: a regular file of the kernel's one internal
/// shmem mount, where every memfd without `MFD_HUGETLB` lives, or of the
/// internal hugetlbfs mount of a huge page size (2 MiB, 1 GiB). The
/// devices are learned from memfds of this process's own.
pub fn is_memfd(st: &QuickStat) -> bool {
    static SHMEM: OnceLock<u64> = OnceLock::new();
    static HUGE_2M: OnceLock<u64> = OnceLock::new();
    static HUGE_1G: OnceLock<u64> = OnceLock::new();
    if st.kind != libc::S_IFREG {
        return false;
    }
    if learned(&SHMEM, || probe_memfd(None)) == Some(st.dev) {
        return true;
    }
    [(&HUGE_2M, 0x20_0000), (&HUGE_1G, 0x4000_0000)]
        .into_iter()
        .any(|(cell, size)| learned(cell, || probe_memfd(Some(size))) == Some(st.dev))
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;
    use crate::kit::os::{fstat, memfd};

    #[test]
    fn a_memfd_is_a_memory_file_and_reads_as_fstat_does() {
        let fd = memfd("quick-stat-test", 4096, None).unwrap();
        let q = quick_stat(fd.as_fd()).unwrap();
        let st = fstat(fd.as_fd()).unwrap();
        assert_eq!((q.dev, q.ino), (st.st_dev, st.st_ino));
        assert_eq!(q.kind, libc::S_IFREG);
        assert!(is_memfd(&q));
    }

    #[test]
    fn a_holder_of_a_file_is_seen() {
        let fd = memfd("quick-stat-test", 4096, None).unwrap();
        let st = fstat(fd.as_fd()).unwrap();
        let me = std::process::id();
        assert_eq!(holds_file(me, (st.st_dev, st.st_ino)), Some(true));
        assert_eq!(
            holds_file(me, (st.st_dev, (st.st_ino + 1) << 40)),
            Some(false)
        );
        drop(fd);
        assert_eq!(holds_file(me, (st.st_dev, st.st_ino)), Some(false));
        assert_eq!(holds_file(u32::MAX, (st.st_dev, st.st_ino)), None);
    }

    #[test]
    fn memfds_of_huge_pages_are_memory_files_too() {
        use nix::sys::memfd::{memfd_create, MemFdCreateFlag as F};
        let shmem = quick_stat(memfd("quick-stat-test", 4096, None).unwrap().as_fd()).unwrap();
        for (what, size) in [("2 MiB", F::MFD_HUGE_2MB), ("1 GiB", F::MFD_HUGE_1GB)] {
            // No page is reserved: the file is made, never sized nor mapped.
            let flags = F::MFD_CLOEXEC | F::MFD_HUGETLB | size;
            let fd = match memfd_create(c"quick-stat-test-huge", flags) {
                Ok(fd) => fd,
                Err(e) => {
                    crate::testing::not_run(&format!("no memfd of {what} pages here: {e}"));
                    continue;
                }
            };
            let q = quick_stat(fd.as_fd()).unwrap();
            assert_ne!(q.dev, shmem.dev, "{what}: the hugetlbfs mount, not shmem's");
            assert_eq!(q.kind, libc::S_IFREG, "{what}");
            assert!(is_memfd(&q), "{what}");
        }
    }

    #[test]
    fn other_files_are_not_memfds() {
        let dir = std::fs::File::open("/").unwrap();
        let q = quick_stat(dir.as_fd()).unwrap();
        assert_eq!(q.kind, libc::S_IFDIR);
        assert!(!is_memfd(&q));
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let q = quick_stat(a.as_fd()).unwrap();
        assert_eq!(q.kind, libc::S_IFSOCK);
        assert!(!is_memfd(&q));
        let exe = std::fs::File::open("/proc/self/exe").unwrap();
        let q = quick_stat(exe.as_fd()).unwrap();
        assert!(!is_memfd(&q), "a file of a disk file system");
    }
}
