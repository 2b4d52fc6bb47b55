//! Each user's directory of private files: `/dev/shm/.hal-UID`, mode 0700,
//! owned by that user. Its names cannot be taken by another user: nobody
//! else may create anything in it, and the sticky bit of `/dev/shm` keeps
//! anybody but its owner (and root) from renaming or removing it. It is
//! made on first use and kept while the machine runs (an empty directory;
//! removed, it could be taken by another user before the next use), and is
//! trusted only while it is a directory (not a link) of its user that no
//! other user may write or search.

use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Where users' directories live.
pub const PRIVATE_DIR: &str = "/dev/shm";

/// The directory of user `uid`'s private files: `/dev/shm/.hal-UID`.
pub fn user_dir(uid: u32) -> PathBuf {
    PathBuf::from(format!("{PRIVATE_DIR}/.hal-{uid}"))
}

/// What is at `dir` for user `uid`: `Ok(true)` for that user's directory,
/// `Ok(false)` where there is nothing, and [`Error::PermissionDenied`]
/// naming the owner and saying what to do for anything else (another
/// user's directory, a link, a file, a directory others may enter).
pub fn judge_user_dir(dir: &Path, uid: u32) -> Result<bool> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io(format!("looking at {}", dir.display()), e)),
    };
    if meta.file_type().is_dir() && meta.uid() == uid && meta.mode() & 0o077 == 0 {
        return Ok(true);
    }
    Err(not_a_user_dir(dir, &meta, uid))
}

/// The calling user's directory, made (mode 0700) where there is none:
/// what a process that names a new file calls first.
pub fn make_user_dir() -> Result<PathBuf> {
    let uid = nix::unistd::geteuid().as_raw();
    let dir = user_dir(uid);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::io(format!("making {}", dir.display()), e)),
    }
    if judge_user_dir(&dir, uid)? {
        Ok(dir)
    } else {
        // Only this user or root could remove it meanwhile.
        Err(Error::io(
            format!("making {}", dir.display()),
            std::io::Error::from(std::io::ErrorKind::NotFound),
        ))
    }
}

/// Every user directory the calling user may look into, with its uid:
/// root's are every user's, another user's only its own. A directory
/// counts only where [`judge_user_dir`] takes it for the uid its name
/// carries (written as [`user_dir`] writes it); others are left out.
pub fn user_dirs() -> Result<Vec<(u32, PathBuf)>> {
    let me = nix::unistd::geteuid();
    let entries = std::fs::read_dir(PRIVATE_DIR)
        .map_err(|e| Error::io(format!("listing {PRIVATE_DIR}"), e))?;
    let mut dirs: Vec<(u32, PathBuf)> = entries
        .flatten()
        .filter_map(|entry| {
            let file_name = entry.file_name();
            let uid = file_name.to_str()?.strip_prefix(".hal-")?;
            let uid_number: u32 = uid.parse().ok()?;
            if uid_number.to_string() != uid {
                return None;
            }
            if !me.is_root() && uid_number != me.as_raw() {
                return None;
            }
            let dir = user_dir(uid_number);
            matches!(judge_user_dir(&dir, uid_number), Ok(true)).then_some((uid_number, dir))
        })
        .collect();
    dirs.sort();
    Ok(dirs)
}

/// What `meta` (not followed) describes, for messages: "a file", "a
/// directory", "a symbolic link" or "a special file".
pub(super) fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    let kind = meta.file_type();
    if kind.is_file() {
        "a file"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else {
        "a special file"
    }
}

/// The refusal of what is at `dir` (`meta`, not followed) as user `uid`'s
/// directory. Another user's cannot be removed by this one (the sticky bit
/// of [`PRIVATE_DIR`]), only by its owner or root.
fn not_a_user_dir(dir: &Path, meta: &std::fs::Metadata, uid: u32) -> Error {
    let owner = meta.uid();
    let what = kind_of(meta);
    let fix = if owner == uid {
        format!(
            "it is that user's own: make it private (chmod 700 {}) or remove it",
            dir.display()
        )
    } else {
        format!(
            "another user took it first: have its owner (uid {owner}) or root remove {}; \
             until then no group or channel of uid {uid} can be named",
            dir.display()
        )
    };
    Error::PermissionDenied {
        pid: None,
        reason: format!(
            "{} is {what} of owner uid {owner} with mode {:o}, not the private directory of uid \
             {uid} (a directory of mode 0700 that uid owns, holding its group and channel names): \
             {fix}",
            dir.display(),
            meta.mode() & 0o7777
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    /// A fresh path in `/tmp` for this test, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let id = u64::from_le_bytes(crate::kit::os::random_id()[..8].try_into().unwrap());
            Scratch(PathBuf::from(format!("/tmp/hal-userdir-{tag}-{id:x}")))
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            if std::fs::remove_file(&self.0).is_err() {
                let _ = std::fs::remove_dir(&self.0);
            }
        }
    }

    fn me() -> u32 {
        nix::unistd::geteuid().as_raw()
    }

    #[test]
    fn nothing_at_the_path_is_no_directory_yet() {
        let at = Scratch::new("none");
        assert!(!judge_user_dir(&at.0, me()).unwrap());
    }

    #[test]
    fn a_path_that_cannot_be_looked_at_is_an_error_not_an_absent_directory() {
        let file = Scratch::new("notdir");
        std::fs::write(&file.0, b"").unwrap();
        // ENOTDIR: the path goes through a file.
        let err = judge_user_dir(&file.0.join("x"), me()).unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err:?}");
    }

    #[test]
    fn a_private_directory_of_the_user_is_taken() {
        let at = Scratch::new("mine");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&at.0)
            .unwrap();
        assert!(judge_user_dir(&at.0, me()).unwrap());
        let err = judge_user_dir(&at.0, me().wrapping_add(1)).unwrap_err();
        assert!(
            err.to_string().contains(&format!("owner uid {}", me())),
            "{err}"
        );
    }

    #[test]
    fn a_directory_others_may_enter_a_file_and_a_link_are_refused() {
        let open = Scratch::new("open");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&open.0)
            .unwrap();
        std::fs::set_permissions(&open.0, std::fs::Permissions::from_mode(0o711)).unwrap();
        let file = Scratch::new("file");
        std::fs::write(&file.0, b"").unwrap();
        let link = Scratch::new("link");
        std::os::unix::fs::symlink(&open.0, &link.0).unwrap();
        for (at, says) in [
            (&open.0, "chmod 700"),
            (&file.0, "is a file"),
            (&link.0, "is a symbolic link"),
        ] {
            match judge_user_dir(at, me()) {
                Err(Error::PermissionDenied { reason, .. }) => {
                    assert!(reason.contains(says), "{reason}");
                    assert!(reason.contains(&at.display().to_string()), "{reason}");
                }
                other => panic!("{} must be refused: {other:?}", at.display()),
            }
        }
    }

    #[test]
    fn the_users_directory_is_made_private_and_made_again_at_once() {
        let dir = make_user_dir().unwrap();
        assert_eq!(dir, user_dir(me()));
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.mode() & 0o077, 0);
        assert_eq!(make_user_dir().unwrap(), dir);
        assert!(user_dirs().unwrap().contains(&(me(), dir)));
    }
}
