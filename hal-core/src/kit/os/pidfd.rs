//! Process file descriptors: `pidfd_open(2)` to hold on to a process
//! whatever happens to its pid, and `pidfd_getfd(2)` to take a duplicate of
//! one of its descriptors (which needs ptrace access to it).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// A pidfd of process `pid` (Linux 5.3). Errors as the kernel gives them:
/// `ESRCH` for no such process (or one of a pid namespace this process
/// cannot see), `ENOSYS` before Linux 5.3, `EPERM` where a seccomp filter
/// refuses the call.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    if pid == 0 || pid > i32::MAX as u32 {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor
    // or -1; nothing else is read or written.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A duplicate, in this process (close-on-exec), of the descriptor `fd` of
/// the process of `pidfd` (Linux 5.6). Errors as the kernel gives them:
/// `EPERM` without ptrace access to that process (Yama, another user, a
/// seccomp filter), `EBADF` when it has no descriptor `fd`, `ESRCH` when
/// it has exited, `ENOSYS` before Linux 5.6.
pub fn pidfd_getfd(pidfd: BorrowedFd<'_>, fd: u32) -> io::Result<OwnedFd> {
    if fd > i32::MAX as u32 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: pidfd_getfd takes a pidfd, a descriptor number in the target
    // process and flags (0), and returns a new descriptor or -1; no memory
    // of this process is read or written.
    let got = unsafe {
        libc::syscall(
            libc::SYS_pidfd_getfd,
            pidfd.as_raw_fd() as libc::c_int,
            fd as libc::c_int,
            0 as libc::c_uint,
        )
    };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(got as RawFd) })
}

/// Whether this process may take descriptors of the process of `pidfd`
/// ([`pidfd_getfd`]), asked without taking any: the kernel checks ptrace
/// access before it looks the descriptor up, so a number no process can
/// have answers `EBADF` where the access is granted. Otherwise the
/// kernel's refusal (`EPERM`, `ESRCH`, `ENOSYS`).
pub fn pidfd_getfd_allowed(pidfd: BorrowedFd<'_>) -> io::Result<()> {
    // Above the kernel's largest `nr_open` (1,073,741,816).
    const NO_SUCH_FD: u32 = i32::MAX as u32;
    match pidfd_getfd(pidfd, NO_SUCH_FD) {
        Err(e) if e.raw_os_error() == Some(libc::EBADF) => Ok(()),
        Err(e) => Err(e),
        Ok(_) => Err(io::Error::other(
            "pidfd_getfd took a descriptor no process can have",
        )),
    }
}

/// True while the process of `pidfd` has not exited (a pidfd becomes
/// readable when its process exits).
pub fn pidfd_alive(pidfd: BorrowedFd<'_>) -> bool {
    let mut p = [nix::poll::PollFd::new(
        pidfd.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    matches!(nix::poll::poll(&mut p, nix::poll::PollTimeout::ZERO), Ok(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_of_this_process_is_taken_through_its_pidfd() {
        let me = pidfd_open(crate::kit::os::pid()).unwrap();
        assert!(pidfd_alive(me.as_fd()));
        let file = crate::kit::os::memfd("hal-pidfd-test", 4096, None).unwrap();
        // Root, or a process taking its own descriptor: ptrace access holds.
        let copy = pidfd_getfd(me.as_fd(), file.as_raw_fd() as u32).unwrap();
        let (a, b) = (
            crate::kit::os::fstat(file.as_fd()).unwrap(),
            crate::kit::os::fstat(copy.as_fd()).unwrap(),
        );
        assert_eq!((a.st_dev, a.st_ino), (b.st_dev, b.st_ino));
        assert_ne!(copy.as_raw_fd(), file.as_raw_fd());
        let closed = copy.as_raw_fd() as u32;
        drop(copy);
        let e = pidfd_getfd(me.as_fd(), closed).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
        assert_eq!(pidfd_open(0).unwrap_err().raw_os_error(), Some(libc::ESRCH));
        // Past the pids the kernel can number (a negative pid_t would ask
        // for something else).
        assert_eq!(
            pidfd_open(u32::MAX).unwrap_err().raw_os_error(),
            Some(libc::ESRCH)
        );
        // Past the descriptors the kernel can number: refused, never a
        // negative descriptor passed on.
        assert_eq!(
            pidfd_getfd(me.as_fd(), u32::MAX)
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EBADF)
        );
    }

    /// In a process whose standard input is closed (a daemon's), the new
    /// descriptors are numbered 0: a pidfd and a taken descriptor there are
    /// descriptors like any other, not failures. Run in a child of its own
    /// (the standard library opens /dev/null on a closed standard input at
    /// start, so the child closes it itself).
    fn descriptors_numbered_zero() {
        // SAFETY: closing this child's standard input, which nothing in it
        // reads, and asking whether number 0 is open, read no memory.
        let zero_free = unsafe { libc::close(0) == 0 && libc::fcntl(0, libc::F_GETFD) == -1 };
        println!("@pidfd@ zero-free {zero_free}");
        let me = pidfd_open(crate::kit::os::pid());
        println!(
            "@pidfd@ open {:?}",
            me.as_ref().map(|fd| fd.as_raw_fd()).map_err(|e| e.kind())
        );
        let Ok(me) = me else { return };
        let file = crate::kit::os::memfd("hal-pidfd-zero", 4096, None).unwrap();
        // Hold the pidfd under another number and free 0 again, so that the
        // copy pidfd_getfd makes is the one numbered 0.
        let held = crate::kit::os::dup(me.as_fd()).unwrap();
        drop(me);
        let copy = pidfd_getfd(held.as_fd(), file.as_raw_fd() as u32);
        println!(
            "@pidfd@ getfd {:?}",
            copy.as_ref().map(|fd| fd.as_raw_fd()).map_err(|e| e.kind())
        );
    }

    #[test]
    fn a_descriptor_numbered_zero_is_no_failure() {
        const ROLE: &str = "HAL_PIDFD_TEST_CHILD";
        if std::env::var_os(ROLE).is_some() {
            descriptors_numbered_zero();
            return;
        }
        let lines = crate::kit::os::child_test_lines(
            "kit::os::pidfd::tests::a_descriptor_numbered_zero_is_no_failure",
            ROLE,
            "@pidfd@ ",
        );
        assert_eq!(lines, ["zero-free true", "open Ok(0)", "getfd Ok(0)"]);
    }
}
