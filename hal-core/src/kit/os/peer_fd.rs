//! Another process's descriptor, opened again through `/proc/PID/fd/N`: a
//! new open file description of the same object, which the kernel grants a
//! process of the same user as long as the owner is dumpable (the access
//! `ptrace` calls *read*, which Yama's restrictions leave alone). How a
//! channel's subscribers reach the publisher's sealed control region.

use std::os::fd::OwnedFd;

use super::process_alive;
use crate::{Error, Result};

/// Open descriptor `fd` of process `pid`, whose start time is `start`,
/// read-write. [`Error::Closed`] when the process or its descriptor is gone
/// (the process is checked again after the open, so that a reused pid's
/// descriptor is never returned as the original's);
/// [`Error::PermissionDenied`] when the kernel refuses.
pub fn open_peer_fd(pid: u32, start: u64, fd: u32) -> Result<OwnedFd> {
    let path = format!("/proc/{pid}/fd/{fd}");
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path);
    let gone = || Error::Closed {
        what: format!("descriptor {fd} of process {pid}: the process or its descriptor is gone"),
    };
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(gone()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(Error::PermissionDenied {
                pid: Some(pid),
                reason: format!(
                    "opening {path} was refused ({e}): the process is not dumpable (it changed \
                     its credentials, or set PR_SET_DUMPABLE to 0) or /proc hides other \
                     processes (hidepid)"
                ),
            })
        }
        Err(e) => return Err(Error::io(format!("opening {path}"), e)),
    };
    if !process_alive(pid, start) {
        return Err(gone());
    }
    Ok(file.into())
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsFd, AsRawFd};

    use super::*;
    use crate::kit::os::{fstat, memfd, self_identity};

    #[test]
    fn a_descriptor_opens_again_as_the_same_object() {
        let fd = memfd("peer-fd-test", 4096, None).unwrap();
        let (pid, start) = self_identity();
        let again = open_peer_fd(pid, start, fd.as_raw_fd() as u32).unwrap();
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
        assert!(closed(open_peer_fd(pid, start + 1, number)), "a reused pid");
        // A child holds only its standard descriptors (the others are
        // close-on-exec); a number this process reuses any time is no test.
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let child_start = crate::kit::os::process_start_time(sleeper.id()).unwrap();
        let held = open_peer_fd(sleeper.id(), child_start, 200);
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        assert!(closed(held), "a descriptor the process does not hold");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        assert!(closed(open_peer_fd(dead, 1, 0)), "a process that is gone");
    }

    #[test]
    fn a_descriptor_that_is_no_file_is_an_io_error_not_a_gone_one() {
        // A socket cannot be opened through /proc (ENXIO).
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (pid, start) = self_identity();
        let got = open_peer_fd(pid, start, a.as_raw_fd() as u32);
        assert!(matches!(got, Err(Error::Io { .. })), "{:?}", got.err());
    }

    /// The variables that tell [`__opener`] what to open.
    const PEER: [&str; 3] = ["HAL_PEER_PID", "HAL_PEER_START", "HAL_PEER_FD"];

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
        let values = [
            pid.to_string(),
            start.to_string(),
            fd.as_raw_fd().to_string(),
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
