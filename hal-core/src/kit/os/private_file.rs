//! A file private to its user, shared by that user's processes under a
//! name in the user's directory (`/dev/shm/.hal-UID`, [`user_dir`]): made whole before it is named (an unnamed file
//! is sized and its first bytes written, then linked in place), opened only
//! when this user owns it and nobody else may open it, judged and removed
//! under its lock (`flock`), by name only while the name still leads to it.
//! Groups and channels keep their shared state in one.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, FromRawFd as _};
use std::os::unix::fs::{FileExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Instant;

use nix::errno::Errno;

use super::user_dir::{judge_user_dir, kind_of, make_user_dir, user_dir, user_dirs};
use super::{lock_patiently, unlock};
use crate::{Error, Result};

/// The longest name of a private file's object, in bytes.
pub const MAX_PRIVATE_NAME: usize = 200;

/// The path of `kind`'s object `name` of the calling user:
/// `/dev/shm/.hal-UID/KIND.NAME` (in the user's directory,
/// [`user_dir`]). `name` is checked: printable ASCII without `/`, 1 to
/// [`MAX_PRIVATE_NAME`] bytes.
pub fn private_path(kind: &str, name: &str) -> Result<PathBuf> {
    private_path_of(kind, nix::unistd::geteuid().as_raw(), name)
}

/// The path of `kind`'s object `name` of user `uid`
/// (`/dev/shm/.hal-UID/KIND.NAME`), `name` checked as [`private_path`]
/// checks it.
pub fn private_path_of(kind: &str, uid: u32, name: &str) -> Result<PathBuf> {
    let bad = |why: &str| Err(Error::invalid(format!("{kind} name {name:?} {why}")));
    if name.is_empty() {
        return bad("is empty");
    }
    if name.len() > MAX_PRIVATE_NAME {
        return bad(&format!("is longer than {MAX_PRIVATE_NAME} bytes"));
    }
    if name.contains('/') {
        return bad("contains '/'");
    }
    if let Some(c) = name.chars().find(|c| !(' '..='~').contains(c)) {
        return bad(&format!("contains {c:?}: names are printable ASCII"));
    }
    Ok(user_dir(uid).join(format!("{kind}.{name}")))
}

/// The names of `kind`'s objects in `dir` (a user's directory, judged
/// already): every `KIND.NAME` whose `NAME` [`private_path`] takes, in name
/// order.
fn names_in(dir: &Path, kind: &str) -> Result<Vec<String>> {
    let prefix = format!("{kind}.");
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry
                .file_name()
                .to_str()?
                .strip_prefix(&prefix)?
                .to_string();
            private_path(kind, &name).is_ok().then_some(name)
        })
        .collect();
    names.sort();
    Ok(names)
}

/// The names of `kind`'s objects of the calling user, in name order: every
/// `KIND.NAME` in the user's directory whose `NAME` [`private_path`] takes.
/// Whose files they are is judged when they are opened
/// ([`PrivateFile::open`]).
pub fn private_names(kind: &str) -> Result<Vec<String>> {
    let uid = nix::unistd::geteuid().as_raw();
    let dir = user_dir(uid);
    if !judge_user_dir(&dir, uid)? {
        return Ok(Vec::new());
    }
    names_in(&dir, kind)
}

/// The names of `kind`'s objects that the calling user may collect, with
/// the uid of the directory each is in, in name order: root's are every
/// user's, another user's only its own. Only directories that are their
/// users' own count ([`user_dirs`]). Whose files they are is judged when
/// they are opened ([`PrivateFile::open_owned_by`]): a name counts only
/// when its file belongs to the uid of its directory.
pub fn collectable_names(kind: &str) -> Result<Vec<(u32, String)>> {
    let mut names = Vec::new();
    for (uid, dir) in user_dirs()? {
        names.extend(names_in(&dir, kind)?.into_iter().map(|name| (uid, name)));
    }
    names.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
    Ok(names)
}

/// True when `meta` is a regular file of `uid` that no other user may
/// open.
fn private_to(meta: &std::fs::Metadata, uid: u32) -> bool {
    meta.uid() == uid && meta.mode() & 0o077 == 0 && meta.file_type().is_file()
}

/// The refusal of what is at `path` (`meta`, not followed): not a private
/// file of `expected` (this user's, unless root's cleanup opens another
/// user's). It names the owner and says what to do.
fn not_private(path: &Path, meta: &std::fs::Metadata, expected: u32) -> Error {
    let euid = nix::unistd::geteuid().as_raw();
    let owner = meta.uid();
    if expected != euid {
        return Error::PermissionDenied {
            pid: None,
            reason: format!(
                "{} is not a private file of uid {expected} (a regular file of mode 0600 that \
                 uid owns): its owner is uid {owner}, its mode {:o}; it is left alone",
                path.display(),
                meta.mode() & 0o7777
            ),
        };
    }
    let what = kind_of(meta);
    let fix = if owner == euid {
        format!(
            "it is this user's own: remove it (rm {}) if no program of this user uses it, or \
             choose another name",
            path.display()
        )
    } else {
        format!(
            "another user (uid {owner}) put it in this user's directory: choose another name, \
             or have root remove {}",
            path.display()
        )
    };
    Error::PermissionDenied {
        pid: None,
        reason: format!(
            "{} is {what} of owner uid {owner} with mode {:o}, not a private file of this user \
             (uid {euid}, a regular file of mode 0600): {fix}",
            path.display(),
            meta.mode() & 0o7777
        ),
    }
}

/// An open private file and its identity.
#[derive(Debug)]
pub struct PrivateFile {
    file: File,
    path: PathBuf,
    /// The owner's uid.
    uid: u32,
    dev: u64,
    ino: u64,
}

impl PrivateFile {
    /// Open the file at `path`, or `None` where there is none. Refuses
    /// ([`Error::PermissionDenied`]) a file another user owns, one that
    /// others may open, and anything not a regular file (a link is not
    /// followed).
    pub fn open(path: &Path) -> Result<Option<PrivateFile>> {
        Self::open_owned_by(path, nix::unistd::geteuid().as_raw())
    }

    /// [`PrivateFile::open`] for a file of user `uid`: what a cleanup run
    /// as root opens of other users' names. Refuses
    /// ([`Error::PermissionDenied`]) a file that `uid` does not own, one
    /// that others may open, and anything not a regular file (a link is not
    /// followed).
    pub fn open_owned_by(path: &Path, uid: u32) -> Result<Option<PrivateFile>> {
        // The directory first: the user's own, or nothing is opened in it.
        if !judge_user_dir(path.parent().unwrap_or(Path::new("/")), uid)? {
            return Ok(None);
        }
        // The standard library opens with O_CLOEXEC. O_NOFOLLOW: a link at
        // the name is refused (ELOOP), never followed to another file.
        // O_NONBLOCK: a device node at the name cannot hold the open (a
        // FIFO opened read-write never blocks; the type is refused below).
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                // Another user's file of mode 0600 (EACCES), a link (ELOOP),
                // a directory (EISDIR): what is at the name is not this
                // user's private file, and says whose it is.
                if let Ok(meta) = std::fs::symlink_metadata(path) {
                    if !private_to(&meta, uid) {
                        return Err(not_private(path, &meta, uid));
                    }
                }
                return Err(Error::io(format!("opening {}", path.display()), e));
            }
        };
        let meta = file
            .metadata()
            .map_err(|e| Error::io(format!("fstat of {}", path.display()), e))?;
        if !private_to(&meta, uid) {
            return Err(not_private(path, &meta, uid));
        }
        Ok(Some(PrivateFile {
            file,
            path: path.to_path_buf(),
            uid,
            dev: meta.dev(),
            ino: meta.ino(),
        }))
    }

    /// Make a file of `len` bytes starting with `head`, mode 0600, then
    /// link it at `path` (a path in the calling user's directory, made
    /// where there is none); `None` when another process linked one there
    /// first.
    pub fn create(path: &Path, len: u64, head: &[u8]) -> Result<Option<PrivateFile>> {
        let dir = make_user_dir()?;
        if path.parent() != Some(dir.as_path()) {
            return Err(Error::invalid(format!(
                "{} is not in this user's directory {}",
                path.display(),
                dir.display()
            )));
        }
        let fd = nix::fcntl::open(
            &dir,
            nix::fcntl::OFlag::O_TMPFILE | nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .map_err(|e| Error::errno(format!("an unnamed file in {}", dir.display()), e))?;
        // SAFETY: `open` returned a new descriptor that nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len)
            .map_err(|e| Error::io(format!("sizing {} to {len} bytes", path.display()), e))?;
        file.write_all_at(head, 0)
            .map_err(|e| Error::io(format!("writing the start of {}", path.display()), e))?;
        let linked = nix::unistd::linkat(
            None,
            Path::new(&format!("/proc/self/fd/{fd}")),
            None,
            path,
            nix::fcntl::AtFlags::AT_SYMLINK_FOLLOW,
        );
        match linked {
            Ok(()) => {}
            Err(Errno::EEXIST) => return Ok(None),
            Err(e) => return Err(Error::errno(format!("linking {}", path.display()), e)),
        }
        let meta = file
            .metadata()
            .map_err(|e| Error::io(format!("fstat of {}", path.display()), e))?;
        Ok(Some(PrivateFile {
            file,
            path: path.to_path_buf(),
            uid: meta.uid(),
            dev: meta.dev(),
            ino: meta.ino(),
        }))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The uid of the file's owner.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// The file's size in bytes now.
    pub fn size(&self) -> Result<u64> {
        Ok(self
            .file
            .metadata()
            .map_err(|e| Error::io(format!("fstat of {}", self.path.display()), e))?
            .len())
    }

    /// Read up to `buf.len()` bytes from the start, fewer only where the
    /// file ends; how many were read.
    pub fn read_head(&self, buf: &mut [u8]) -> Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                // A read of a tmpfs file is not interrupted by signals.
                Err(e) => {
                    return Err(Error::io(format!("reading {}", self.path.display()), e));
                }
            }
        }
        Ok(done)
    }

    /// Write all of `bytes` at `offset`.
    pub fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<()> {
        self.file
            .write_all_at(bytes, offset)
            .map_err(|e| Error::io(format!("writing {}", self.path.display()), e))
    }

    /// True while the path still leads to this file.
    pub fn named(&self) -> bool {
        std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| m.dev() == self.dev && m.ino() == self.ino)
    }

    /// Remove the name, if it still leads to this file (hold the lock).
    pub fn unlink(&self) {
        if self.named() {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Remove the name as its owner ([`unlink_as`](super::unlink_as)), if
    /// it still leads to this file (hold the lock): true when it was
    /// removed. Acting as the owner, root's cleanup removes nothing that
    /// user could not remove itself.
    pub fn remove_name(&self) -> Result<bool> {
        if !self.named() {
            return Ok(false);
        }
        super::unlink_as(self.uid, &self.path)
    }

    /// Take the file's lock, waiting until `deadline`; `what` says why, in
    /// the timeout's error.
    pub fn lock(&self, deadline: Instant, what: &str) -> Result<PrivateLock<'_>> {
        let patience = deadline.saturating_duration_since(Instant::now());
        if lock_patiently(self.file.as_fd(), patience) {
            Ok(PrivateLock(self))
        } else {
            Err(Error::Timeout {
                after: patience,
                what: format!("the lock of {} ({what})", self.path.display()),
            })
        }
    }
}

/// The lock of a [`PrivateFile`], given back on drop.
#[derive(Debug)]
#[must_use = "the lock is given back when this value drops"]
pub struct PrivateLock<'a>(&'a PrivateFile);

impl Drop for PrivateLock<'_> {
    fn drop(&mut self) {
        unlock(self.0.file.as_fd());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn unique(tag: &str) -> String {
        format!(
            "test-{tag}-{}-{:x}",
            std::process::id(),
            u64::from_le_bytes(crate::kit::os::random_id()[..8].try_into().unwrap())
        )
    }

    #[test]
    fn a_name_of_the_longest_length_is_taken_and_one_byte_more_is_not() {
        let longest = "n".repeat(MAX_PRIVATE_NAME);
        assert!(private_path("t", &longest).is_ok());
        assert!(private_path("t", &format!("{longest}n")).is_err());
        assert!(private_path("t", "").is_err());
        assert!(private_path("t", "a/b").is_err());
        assert!(private_path("t", "tab\there").is_err());
    }

    #[test]
    fn a_file_is_made_whole_mode_0600_and_opened_again() {
        let path = private_path("t", &unique("made")).unwrap();
        let made = PrivateFile::create(&path, 8192, b"head").unwrap().unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(meta.len(), 8192);
        assert!(
            PrivateFile::create(&path, 8192, b"other")
                .unwrap()
                .is_none(),
            "taken"
        );
        let opened = PrivateFile::open(&path).unwrap().unwrap();
        let mut head = [0u8; 4];
        assert_eq!(opened.read_head(&mut head).unwrap(), 4);
        assert_eq!(&head, b"head");
        assert_eq!(opened.size().unwrap(), 8192);
        made.unlink();
        assert!(!path.exists());
        assert!(PrivateFile::open(&path).unwrap().is_none());
    }

    #[test]
    fn a_link_at_the_name_is_not_followed() {
        let path = private_path("t", &unique("link")).unwrap();
        let target = private_path("t", &unique("target")).unwrap();
        let made = PrivateFile::create(&target, 4096, b"").unwrap().unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let opened = PrivateFile::open(&path);
        std::fs::remove_file(&path).unwrap();
        made.unlink();
        match opened {
            Err(Error::PermissionDenied { reason, .. }) => {
                assert!(reason.contains("a symbolic link"), "{reason}");
            }
            other => panic!("a link at the name must be refused, not followed: {other:?}"),
        }
    }

    #[test]
    fn a_fifo_at_the_name_is_refused_at_once() {
        let path = private_path("t", &unique("fifo")).unwrap();
        make_user_dir().unwrap();
        nix::unistd::mkfifo(
            &path,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .unwrap();
        // Without O_NONBLOCK the open would wait for a writer for ever.
        let opened = PrivateFile::open(&path);
        std::fs::remove_file(&path).unwrap();
        assert!(
            matches!(opened, Err(Error::PermissionDenied { .. })),
            "{opened:?}"
        );
    }

    #[test]
    fn unlink_leaves_a_file_that_took_the_name_since() {
        let path = private_path("t", &unique("moved")).unwrap();
        let old = PrivateFile::create(&path, 4096, b"old").unwrap().unwrap();
        std::fs::remove_file(&path).unwrap();
        let new = PrivateFile::create(&path, 4096, b"new").unwrap().unwrap();
        assert!(!old.named() && new.named());
        old.unlink();
        assert!(path.exists(), "the newer file under the name was removed");
        new.unlink();
        assert!(!path.exists());
    }
}
