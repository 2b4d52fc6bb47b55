//! Acting on the file system as another user: what a cleanup run as root
//! does to remove another user's names in `/dev/shm`. The work runs on a
//! short-lived thread whose file-system uid is that user's, so the kernel
//! checks it against that user rather than against root's powers: the
//! sticky bit of `/dev/shm` then refuses the unlink of any object of a
//! third user that took the name meanwhile.

use std::path::Path;

use nix::errno::Errno;

use crate::{Error, Result};

/// Run `f` on a short-lived thread whose file-system uid is `uid`, so that
/// the kernel checks its unlinks against `uid` rather than against root's
/// powers. (`setfsuid` changes only the calling thread; the thread sets it
/// back before it ends, and ends right after `f`.) When `uid` is already
/// this process's effective uid, `f` runs here. `what` says what `f` does,
/// in the errors of the thread itself.
pub fn as_fs_user<T: Send>(
    uid: u32,
    what: &str,
    f: impl FnOnce() -> Result<T> + Send,
) -> Result<T> {
    let me = nix::unistd::geteuid().as_raw();
    if uid == me {
        return f();
    }
    std::thread::scope(|s| {
        let worker = super::thread::spawn_scoped(s, "hal-as-user", move || {
            set_fsuid(uid, what)?;
            let r = f();
            let back = set_fsuid(me, what);
            r.and_then(|v| back.map(|()| v))
        })
        .map_err(|e| Error::io(format!("starting a thread for {what} as uid {uid}"), e))?;
        worker.join().unwrap_or_else(|_| {
            Err(Error::io(
                format!("{what} as uid {uid}"),
                std::io::Error::other("the thread acting as that user panicked"),
            ))
        })
    })
}

/// Remove the name `path` as user `uid` ([`as_fs_user`]): `Ok(true)` when
/// it was removed, `Ok(false)` when there was none or the kernel refused
/// (the name leads to an object `uid` may not remove: another user's, in a
/// sticky directory).
pub fn unlink_as(uid: u32, path: &Path) -> Result<bool> {
    let what = format!("removing {}", path.display());
    as_fs_user(uid, &what, || match nix::unistd::unlink(path) {
        Ok(()) => Ok(true),
        Err(Errno::ENOENT | Errno::EPERM | Errno::EACCES) => Ok(false),
        Err(e) => Err(Error::errno(what.clone(), e)),
    })
}

/// Set this thread's file-system uid, and check that it took.
fn set_fsuid(uid: u32, what: &str) -> Result<()> {
    // SAFETY: setfsuid(2) takes an integer and changes only the calling
    // thread's file-system uid; it touches no memory.
    unsafe { libc::setfsuid(uid) };
    // It returns the previous value whether or not it succeeded; an invalid
    // uid (-1) changes nothing and returns the current one.
    // SAFETY: as above.
    let now = unsafe { libc::setfsuid(u32::MAX) } as u32;
    if now == uid {
        Ok(())
    } else {
        Err(Error::PermissionDenied {
            pid: None,
            reason: format!(
                "cannot act as uid {uid} for {what} (setfsuid needs CAP_SETUID); run it as \
                 that user"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file in `/dev/shm` owned by `uid`, removed when dropped.
    struct Planted(std::path::PathBuf);

    impl Planted {
        fn new(tag: &str, uid: u32) -> Planted {
            let path = std::path::PathBuf::from(format!(
                "{}/hal-unit-{}-{tag}",
                super::super::PRIVATE_DIR,
                std::process::id()
            ));
            std::fs::write(&path, b"x").unwrap();
            nix::unistd::chown(&path, Some(uid.into()), None).unwrap();
            Planted(path)
        }
    }

    impl Drop for Planted {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn unlink(path: &Path) -> Result<()> {
        nix::unistd::unlink(path)
            .map_err(|e| Error::errno(format!("unlinking {}", path.display()), e))
    }

    #[test]
    fn removal_as_the_owner_is_checked_by_the_kernel() {
        if !nix::unistd::geteuid().is_root() {
            crate::testing::not_run("acting as another uid needs root here");
            return;
        }
        // Root's file: a thread acting as uid 65534 cannot unlink it.
        let roots = Planted::new("fsuid-root", 0);
        let e = as_fs_user(65534, "a test", || unlink(&roots.0)).unwrap_err();
        assert!(e.to_string().contains("not permitted"), "{e}");
        assert!(roots.0.exists());
        assert!(!unlink_as(65534, &roots.0).unwrap(), "refused");
        assert!(roots.0.exists());
        // That user's own file: it can.
        let theirs = Planted::new("fsuid-theirs", 65534);
        as_fs_user(65534, "a test", || unlink(&theirs.0)).unwrap();
        assert!(!theirs.0.exists());
        let again = Planted::new("fsuid-again", 65534);
        assert!(unlink_as(65534, &again.0).unwrap());
        assert!(!again.0.exists());
        assert!(!unlink_as(65534, &again.0).unwrap(), "none left");
        // This thread's file-system uid did not change.
        // SAFETY: setfsuid(-1) reads the calling thread's value, changes nothing.
        assert_eq!(unsafe { libc::setfsuid(u32::MAX) }, 0);
        // As this process's own uid, it runs here.
        let here = std::thread::current().id();
        let ran_on = as_fs_user(0, "a test", || Ok(std::thread::current().id())).unwrap();
        assert_eq!(ran_on, here);
    }
}
