//! Another process's memfd, opened again through `/proc/PID/fd/N` without
//! ever waiting on the file behind the number: a new open file description
//! of the same object, which the kernel grants a process of the same user
//! as long as the owner is dumpable (the access `ptrace` calls *read*,
//! which Yama's restrictions leave alone). How a channel's subscribers and
//! a group's joiners reach a region another process holds, and how the
//! direct import path takes an exporter's memfds.
//!
//! The number is chosen by whoever wrote the record that names it, who may
//! have put a file of a FUSE mount there, whose `open` would wait for the
//! daemon as long as it likes. So the link is first opened `O_PATH` (no
//! file system is asked), the file's device and type are read from what
//! the kernel knows ([`quick_stat`](super::quick_stat)), and only a memfd of
//! the expected identity is opened for real, again through this process's
//! own `/proc/self/fd` link of the `O_PATH` descriptor, so that it is that
//! very object. Closing an `O_PATH` descriptor never calls a file system.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

use super::{is_memfd, process_alive, quick_stat};
use crate::{Error, Result};

/// Why [`reach_memfd`] did not open a descriptor.
#[derive(Debug)]
pub enum Unreached {
    /// The process or its descriptor is gone.
    Gone,
    /// The kernel refused the open (another user, a process that is not
    /// dumpable, `hidepid`).
    Denied(io::Error),
    /// The descriptor is not a memfd (a file of another file system, a
    /// socket, a pipe, a device): refused without being opened.
    NotMemfd,
    /// A memfd, but not the object named.
    OtherObject,
    /// Another failure of the system calls.
    Failed(io::Error),
}

/// Open descriptor `fd` of process `pid` again, read-write (read-only
/// where the memfd is sealed against writes, or its mode allows no more),
/// if and only if it is a memfd
/// whose device and inode are `id` (see the module: nothing is asked of any
/// file system on the way). The caller checks that `pid` is still the
/// process it means after the open (a start time, a pidfd).
pub fn reach_memfd(pid: u32, fd: u32, id: (u64, u64)) -> std::result::Result<OwnedFd, Unreached> {
    let link = format!("/proc/{pid}/fd/{fd}");
    let path = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(&link)
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Unreached::Gone,
            io::ErrorKind::PermissionDenied => Unreached::Denied(e),
            _ => Unreached::Failed(e),
        })?;
    let st = quick_stat(path.as_fd()).map_err(|_| Unreached::NotMemfd)?;
    if !is_memfd(&st) {
        return Err(Unreached::NotMemfd);
    }
    if (st.dev, st.ino) != id {
        return Err(Unreached::OtherObject);
    }
    let again = format!("/proc/self/fd/{}", path.as_raw_fd());
    let open = |write: bool| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .custom_flags(libc::O_CLOEXEC)
            .open(&again)
    };
    let file = match open(true) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => open(false),
        other => other,
    }
    .map_err(Unreached::Failed)?;
    // A memfd sealed against writes is handed out read-only, as its owner
    // holds it (a read-only export).
    let write_sealed = libc::F_SEAL_WRITE | libc::F_SEAL_FUTURE_WRITE;
    let seals = nix::fcntl::fcntl(file.as_raw_fd(), nix::fcntl::FcntlArg::F_GET_SEALS);
    if seals.is_ok_and(|s| s & write_sealed != 0) {
        return open(false).map(Into::into).map_err(Unreached::Failed);
    }
    Ok(file.into())
}

/// Open descriptor `fd` of process `pid`, whose start time is `start`, as
/// the memfd `id` (device, inode; see [`reach_memfd`]).
/// [`Error::Closed`] when the process or its descriptor is gone (the
/// process is checked again after the open, so that a reused pid's
/// descriptor is never returned as the original's);
/// [`Error::PermissionDenied`] when the kernel refuses;
/// [`Error::InvalidArgument`] when the descriptor is no memfd or another
/// one than `id`, saying that `what` (which named the descriptor) was
/// written by another process.
pub fn open_peer_fd(pid: u32, start: u64, fd: u32, id: (u64, u64), what: &str) -> Result<OwnedFd> {
    let gone = || Error::Closed {
        what: format!("descriptor {fd} of process {pid}: the process or its descriptor is gone"),
    };
    let forged = |which: &str| {
        Error::invalid(format!(
            "{what} leads to descriptor {fd} of process {pid}, which is {which}: {what} was \
             written by another process"
        ))
    };
    let file = match reach_memfd(pid, fd, id) {
        Ok(f) => f,
        Err(Unreached::Gone) => return Err(gone()),
        Err(Unreached::Denied(e)) => {
            return Err(Error::PermissionDenied {
                pid: Some(pid),
                reason: format!(
                    "opening /proc/{pid}/fd/{fd} was refused ({e}): the process is not dumpable \
                     (it changed its credentials, or set PR_SET_DUMPABLE to 0) or /proc hides \
                     other processes (hidepid)"
                ),
            })
        }
        Err(Unreached::NotMemfd) => return Err(forged("no memfd (it was not opened)")),
        Err(Unreached::OtherObject) => return Err(forged("another object than the one named")),
        Err(Unreached::Failed(e)) => {
            return Err(Error::io(format!("opening /proc/{pid}/fd/{fd}"), e))
        }
    };
    if !process_alive(pid, start) {
        return Err(gone());
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsFd, AsRawFd};

    use super::*;
    use crate::kit::os::{fstat, memfd, self_identity};

    fn id(fd: &OwnedFd) -> (u64, u64) {
        let st = fstat(fd.as_fd()).unwrap();
        (st.st_dev, st.st_ino)
    }

    #[test]
    fn a_descriptor_opens_again_as_the_same_object() {
        let fd = memfd("peer-fd-test", 4096, None).unwrap();
        let (pid, start) = self_identity();
        let again = open_peer_fd(pid, start, fd.as_raw_fd() as u32, id(&fd), "a test").unwrap();
        let (a, b) = (fstat(fd.as_fd()).unwrap(), fstat(again.as_fd()).unwrap());
        assert_eq!((a.st_dev, a.st_ino), (b.st_dev, b.st_ino));
        assert_ne!(fd.as_raw_fd(), again.as_raw_fd());
    }

    #[test]
    fn a_closed_descriptor_another_start_time_or_a_dead_process_is_gone() {
        let fd = memfd("peer-fd-test", 4096, None).unwrap();
        let (pid, start) = self_identity();
        let number = fd.as_raw_fd() as u32;
        let closed = |r: Result<OwnedFd>| matches!(r, Err(Error::Closed { .. }));
        let open = |pid, start, number| open_peer_fd(pid, start, number, id(&fd), "a test");
        assert!(closed(open(pid, start + 1, number)), "a reused pid");
        // A child holds only its standard descriptors (the others are
        // close-on-exec); a number this process reuses any time is no test.
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let child_start = crate::kit::os::process_start_time(sleeper.id()).unwrap();
        let held = open(sleeper.id(), child_start, 200);
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        assert!(closed(held), "a descriptor the process does not hold");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        assert!(closed(open(dead, 1, 0)), "a process that is gone");
    }

    #[test]
    fn a_descriptor_that_is_no_memfd_is_refused_unopened() {
        let (pid, start) = self_identity();
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let a = OwnedFd::from(a);
        let got = open_peer_fd(pid, start, a.as_raw_fd() as u32, id(&a), "a test");
        let err = got.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        assert!(err.to_string().contains("no memfd"), "{err}");
        let disk = OwnedFd::from(std::fs::File::open("/proc/self/exe").unwrap());
        let got = reach_memfd(pid, disk.as_raw_fd() as u32, id(&disk));
        assert!(matches!(got, Err(Unreached::NotMemfd)), "{got:?}");
    }

    #[test]
    fn another_memfd_than_the_one_named_is_refused() {
        let (pid, start) = self_identity();
        let (one, two) = (
            memfd("peer-fd-test", 4096, None).unwrap(),
            memfd("peer-fd-test", 4096, None).unwrap(),
        );
        let got = open_peer_fd(pid, start, one.as_raw_fd() as u32, id(&two), "a test");
        let err = got.unwrap_err();
        assert!(err.to_string().contains("another object"), "{err}");
    }

    fn access(fd: &OwnedFd) -> crate::kit::os::AccessMode {
        crate::kit::os::access_mode(fd.as_fd()).unwrap()
    }

    #[test]
    fn a_memfd_sealed_against_writes_is_reopened_read_only_and_others_read_write() {
        use crate::kit::os::{add_seals, AccessMode, FUTURE_WRITE_SEAL};
        let (pid, start) = self_identity();
        let reopen = |fd: &OwnedFd| {
            open_peer_fd(pid, start, fd.as_raw_fd() as u32, id(fd), "a test").unwrap()
        };
        let open = memfd("peer-fd-test-unsealed", 4096, None).unwrap();
        assert_eq!(access(&reopen(&open)), AccessMode::ReadWrite, "no seal");
        let sized = memfd("peer-fd-test-sized", 4096, None).unwrap();
        add_seals(sized.as_fd(), libc::F_SEAL_SHRINK | libc::F_SEAL_GROW).unwrap();
        assert_eq!(
            access(&reopen(&sized)),
            AccessMode::ReadWrite,
            "seals of the size only"
        );
        for (what, seal) in [
            ("F_SEAL_WRITE", libc::F_SEAL_WRITE),
            ("F_SEAL_FUTURE_WRITE", FUTURE_WRITE_SEAL),
        ] {
            let fd = memfd("peer-fd-test-sealed", 4096, None).unwrap();
            add_seals(fd.as_fd(), seal).unwrap();
            assert_eq!(access(&reopen(&fd)), AccessMode::ReadOnly, "{what}");
        }
    }

    /// The child entry point: make a memfd of its own whose mode grants
    /// its owner reading only, reach it through `/proc/self` and print the
    /// access mode the descriptor got.
    #[test]
    #[ignore = "child entry point: run by its parent"]
    fn __reopener_of_a_read_only_mode() {
        let fd = memfd("peer-fd-test-mode", 4096, None).unwrap();
        // SAFETY: fchmod(2) on an open descriptor this function owns.
        assert_eq!(unsafe { libc::fchmod(fd.as_raw_fd(), 0o400) }, 0);
        let got = reach_memfd(std::process::id(), fd.as_raw_fd() as u32, id(&fd));
        let outcome = match got {
            Ok(again) => format!("{:?}", access(&again)),
            Err(e) => format!("unreached {e:?}"),
        };
        println!("\n@outcome@ {outcome}");
    }

    #[test]
    fn a_memfd_whose_mode_refuses_writing_is_reopened_read_only() {
        use std::os::unix::process::CommandExt as _;
        if !nix::unistd::geteuid().is_root() {
            crate::testing::not_run("a child without CAP_DAC_OVERRIDE is made by root");
            return;
        }
        // As another user than root, whose opens the mode does not bind.
        let out = crate::testing::child("kit::os::peer_fd::tests::__reopener_of_a_read_only_mode")
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let outcome = stdout
            .lines()
            .find_map(|l| l.strip_prefix("@outcome@ "))
            .unwrap_or_else(|| panic!("the reopener said nothing: {stdout}"));
        assert_eq!(outcome, "ReadOnly");
    }

    /// The variables that tell [`__opener`] what to open.
    const PEER: [&str; 5] = [
        "HAL_PEER_PID",
        "HAL_PEER_START",
        "HAL_PEER_FD",
        "HAL_PEER_DEV",
        "HAL_PEER_INO",
    ];

    /// The child entry point: open the descriptor its parent names and print
    /// which way it went.
    #[test]
    #[ignore = "child entry point: run by its parent"]
    fn __opener() {
        let var = |k: &str| std::env::var(k).expect("run by its parent");
        let got = open_peer_fd(
            var(PEER[0]).parse().unwrap(),
            var(PEER[1]).parse().unwrap(),
            var(PEER[2]).parse().unwrap(),
            (var(PEER[3]).parse().unwrap(), var(PEER[4]).parse().unwrap()),
            "a test",
        );
        let outcome = match got {
            Ok(_) => "opened".to_string(),
            Err(Error::PermissionDenied { reason, .. }) => format!("denied {reason}"),
            Err(e) => format!("other {e}"),
        };
        println!("\n@outcome@ {outcome}");
    }

    #[test]
    fn another_users_process_is_refused_with_permission_denied() {
        use std::os::unix::process::CommandExt as _;
        if !nix::unistd::geteuid().is_root() {
            crate::testing::not_run("running a child as another user needs root");
            return;
        }
        let fd = memfd("peer-fd-test", 4096, None).unwrap();
        let (pid, start) = self_identity();
        let (dev, ino) = id(&fd);
        let values = [
            pid.to_string(),
            start.to_string(),
            fd.as_raw_fd().to_string(),
            dev.to_string(),
            ino.to_string(),
        ];
        let out = crate::testing::child("kit::os::peer_fd::tests::__opener")
            .envs(PEER.iter().zip(values))
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let outcome = stdout
            .lines()
            .find_map(|l| l.strip_prefix("@outcome@ "))
            .unwrap_or_else(|| panic!("the opener said nothing: {stdout}"));
        assert!(
            outcome.starts_with("denied") && outcome.contains("not dumpable"),
            "{outcome}"
        );
    }
}
