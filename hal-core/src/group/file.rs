//! The file a group's name stands for: `/dev/shm/.hal-group.UID.NAME`,
//! mode 0600, made whole before it is given its name (an unnamed file is
//! sized and its header written, then linked in place), found again by its
//! name, replaced when nobody alive is a member of it, and removed by the
//! last member to leave.
//!
//! Whoever judges or changes who is in a file holds its lock (`flock`),
//! and checks under it that the name still leads to that file: a joiner
//! never takes a slot in a file that another process is removing.

use std::fs::{File, OpenOptions};
use std::io::Read as _;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;

use super::layout::{self, Board, Shape, SlotState, MAGIC, VERSION};
use crate::os::{self, Prot, SharedMap};
use crate::{Error, Result};

/// Where group files live.
const DIR: &str = "/dev/shm";
/// The prefix of a group's file name, before the user's id and the name.
pub(super) const PREFIX: &str = ".hal-group.";
/// The longest group name, in bytes.
pub(super) const MAX_NAME_LEN: usize = 200;

/// Check a group name: printable ASCII without `/`, at most
/// [`MAX_NAME_LEN`] bytes.
pub(super) fn validate_name(name: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::invalid(format!("group name {name:?} {why}")));
    if name.is_empty() {
        return bad("is empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad(&format!("is longer than {MAX_NAME_LEN} bytes"));
    }
    if name.contains('/') {
        return bad("contains '/'");
    }
    if let Some(c) = name.chars().find(|c| !(' '..='~').contains(c)) {
        return bad(&format!("contains {c:?}: names are printable ASCII"));
    }
    Ok(())
}

/// The path of the group `name` of the calling user.
pub(super) fn path(name: &str) -> PathBuf {
    PathBuf::from(format!("{DIR}/{PREFIX}{}.{name}", nix::unistd::geteuid()))
}

/// An open group file, its identity, and the mapping of it.
#[derive(Debug)]
pub(super) struct GroupFile {
    file: File,
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl GroupFile {
    /// True while the path still leads to this file.
    fn named(&self) -> bool {
        std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| m.dev() == self.dev && m.ino() == self.ino)
    }

    /// Remove the name, if it still leads to this file (the caller holds the lock).
    fn unlink(&self) {
        if self.named() {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Take the lock, waiting until `deadline`.
    fn lock(&self, deadline: Instant, what: &str) -> Result<Locked<'_>> {
        let patience = deadline.saturating_duration_since(Instant::now());
        if os::lock_patiently(self.file.as_fd(), patience) {
            Ok(Locked(self))
        } else {
            Err(Error::Timeout {
                after: patience,
                what: format!("the lock of {} ({what})", self.path.display()),
            })
        }
    }
}

/// The lock of a group file, given back on drop.
struct Locked<'a>(&'a GroupFile);

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        os::unlock(self.0.file.as_fd());
    }
}

/// True when no live process is a member of `board`'s group.
fn abandoned(board: &Board) -> Result<bool> {
    for i in 0..board.members() {
        if board.state(i)? == SlotState::Joined {
            let (pid, start) = board.member(i)?;
            if os::process_alive(pid, start) {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Join the group `name` of `shape`: open its file, or make it where there
/// is none or where nobody alive is a member of the one there, and take a
/// free slot. Answers the file, its mapping and the slot taken.
pub(super) fn join(
    name: &str,
    shape: Shape,
    deadline: Instant,
) -> Result<(GroupFile, Board, usize)> {
    let path = path(name);
    let (pid, start) = os::self_identity();
    loop {
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                after: Duration::ZERO,
                what: format!("a slot in group {name:?} ({})", path.display()),
            });
        }
        let gf = match open(&path)? {
            Some(gf) => gf,
            None => match create(&path, shape)? {
                Some(gf) => gf,
                // Another process linked its file first: open that one.
                None => continue,
            },
        };
        let locked = gf.lock(deadline, "joining")?;
        if !gf.named() {
            // Removed or replaced since it was opened.
            continue;
        }
        let board = map(&gf, name)?;
        let Some(board) = board else {
            return Err(Error::invalid(format!(
                "{} is not a group's file of this version of hal (magic, version or length \
                 differ): remove it if no older program uses it",
                path.display()
            )));
        };
        if abandoned(&board)? && (board.shape() != shape || !untouched(&board)?) {
            // What is left of a group whose members all left or died (a
            // file nobody took a slot in yet is a group being formed).
            gf.unlink();
            continue;
        }
        if board.shape() != shape {
            return Err(Error::invalid(format!(
                "group {name:?} has {} members posting up to {} bytes a round; this join asks \
                 for {} members and {} bytes (every member passes the same size and \
                 GroupOptions::max_payload)",
                board.shape().members,
                board.shape().capacity,
                shape.members,
                shape.capacity
            )));
        }
        for i in 0..board.members() {
            if board.state(i)? == SlotState::Free && board.claim(i, pid, start)? {
                drop(locked);
                return Ok((gf, board, i));
            }
        }
        let pids = (0..board.members())
            .map(|i| board.member(i).map(|(p, _)| p.to_string()))
            .collect::<Result<Vec<_>>>()?;
        return Err(Error::Busy {
            what: format!(
                "group {name:?}: its {} members (pids {}) joined already; wait until they all \
                 leave, or choose another name",
                board.members(),
                pids.join(", ")
            ),
            holders: board.members(),
        });
    }
}

/// True when no slot was ever taken.
fn untouched(board: &Board) -> Result<bool> {
    for i in 0..board.members() {
        if board.state(i)? != SlotState::Free {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Open the file at `path`, or `None` where there is none. Refuses a file
/// another user owns or others may open.
fn open(path: &Path) -> Result<Option<GroupFile>> {
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
    };
    let meta = file
        .metadata()
        .map_err(|e| Error::io(format!("fstat of {}", path.display()), e))?;
    let euid = nix::unistd::geteuid().as_raw();
    if meta.uid() != euid || meta.mode() & 0o077 != 0 || !meta.file_type().is_file() {
        return Err(Error::PermissionDenied {
            pid: None,
            reason: format!(
                "{} belongs to uid {} with mode {:o}, not to this user (uid {euid}) alone: a \
                 group is private to its user; remove the file or choose another name",
                path.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ),
        });
    }
    Ok(Some(GroupFile {
        file,
        path: path.to_path_buf(),
        dev: meta.dev(),
        ino: meta.ino(),
    }))
}

/// Make the file of a new group whole, unnamed, then link it at `path`;
/// `None` when another process linked one there first.
fn create(path: &Path, shape: Shape) -> Result<Option<GroupFile>> {
    let fd = nix::fcntl::open(
        DIR,
        nix::fcntl::OFlag::O_TMPFILE | nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .map_err(|e| Error::errno(format!("an unnamed file in {DIR} for a group"), e))?;
    // SAFETY: `open` returned a new descriptor that nothing else owns.
    let file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    file.set_len(shape.file_len()).map_err(|e| {
        Error::io(
            format!("sizing a group's file to {} bytes", shape.file_len()),
            e,
        )
    })?;
    std::os::unix::fs::FileExt::write_all_at(&file, &layout::new_header(shape), 0)
        .map_err(|e| Error::io("writing a group's header", e))?;
    let linked = nix::unistd::linkat(
        None,
        std::path::Path::new(&format!("/proc/self/fd/{fd}")),
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
    Ok(Some(GroupFile {
        file,
        path: path.to_path_buf(),
        dev: meta.dev(),
        ino: meta.ino(),
    }))
}

/// Map `gf` after checking its header: `None` when the file is no group's
/// file of this version (wrong magic or version, or a length that differs
/// from what its header says).
fn map(gf: &GroupFile, name: &str) -> Result<Option<Board>> {
    let mut head = [0u8; 64];
    let len = gf
        .file
        .metadata()
        .map_err(|e| Error::io(format!("fstat of {}", gf.path.display()), e))?
        .len();
    let read = (&gf.file)
        .take(64)
        .read(&mut head)
        .map_err(|e| Error::io(format!("reading group {name:?}'s header"), e))?;
    let Some(header) = layout::read_header(&head[..read]) else {
        return Ok(None);
    };
    let shape = header.shape;
    if header.magic != MAGIC
        || header.version != VERSION
        || shape.members == 0
        || shape.members > layout::MAX_MEMBERS as u32
        || shape.capacity as usize > layout::MAX_PAYLOAD
        || shape.file_len() != len
    {
        return Ok(None);
    }
    let map = SharedMap::map(gf.file.as_fd(), len, 0, Prot::ReadWrite, None)?;
    Board::new(map, shape).map(Some)
}

/// Leave slot `slot` of `board`: mark it left, and remove the file when no
/// live process is a member any more. A leave never waits long for the
/// lock: without it the slot is still marked, and the next joiner of the
/// name replaces the file.
pub(super) fn leave(gf: &GroupFile, board: &Board, slot: usize) {
    let locked = gf.lock(Instant::now() + Duration::from_secs(2), "leaving");
    let _ = board.leave(slot);
    if locked.is_ok() && abandoned(board).unwrap_or(false) {
        gf.unlink();
    }
}
