//! The shared memory object itself: the region behind a named
//! allocation, opened with its checks (for an open by name and for the import
//! of a named handle), and unlinked.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use hal_core::kit::os;
use hal_core::{Error, Result};
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::meta::read_meta;
use super::name::{euid, meta_path, shm_error, shm_path, validate_name, what, SHM_DIR};

/// The named region behind a [`CpuAllocation`](crate::CpuAllocation): its
/// descriptor, and for the creator the record that lets its drop unlink the
/// name.
#[derive(Debug)]
pub(crate) struct NamedRegion {
    pub(super) fd: OwnedFd,
    pub(super) name: String,
    pub(super) owner: Option<Owner>,
}

#[derive(Debug)]
pub(super) struct Owner {
    pub(super) ino: u64,
    pub(super) dev: u64,
    pub(super) unlink_on_drop: bool,
    /// The process that created the region: a child forked from it drops
    /// its copy of the allocation without unlinking its parent's name.
    pub(super) origin: hal_core::kit::os::Origin,
}

impl NamedRegion {
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for NamedRegion {
    fn drop(&mut self) {
        if let Some(o) = &self.owner {
            if o.unlink_on_drop && !o.origin.forked() {
                remove_if(&self.name, o.ino, o.dev);
            }
        }
    }
}

/// Unlink region `name` if it still is the object (`ino`, `dev`), and its
/// metadata if that describes it.
pub(super) fn remove_if(name: &str, ino: u64, dev: u64) {
    if let Ok(m) = std::fs::symlink_metadata(format!("{SHM_DIR}/{name}")) {
        if m.ino() == ino && m.dev() == dev {
            let _ = nix::sys::mman::shm_unlink(shm_path(name).as_str());
        }
    }
    if let Ok(Some((meta, _))) = read_meta(name) {
        if meta.ino == ino && meta.dev == dev {
            let _ = std::fs::remove_file(meta_path(name));
        }
    }
}

/// Open region `name` (read-write or read-only) after checking that it is a
/// regular object of this user; returns the descriptor and the size.
pub(crate) fn open_fd(name: &str, read_only: bool) -> Result<(OwnedFd, u64)> {
    validate_name(name)?;
    let flags = if read_only {
        OFlag::O_RDONLY
    } else {
        OFlag::O_RDWR
    };
    // O_NONBLOCK: a FIFO planted at the name would otherwise block a
    // read-only open until some process opened it for writing (forever).
    // Nothing is read before the type check below, which refuses it.
    let fd = nix::sys::mman::shm_open(
        shm_path(name).as_str(),
        flags | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| shm_error(e, name, "opening"))?;
    let st = os::fstat(fd.as_fd())?;
    // (A socket cannot be opened at all, and /dev/shm holds no devices.)
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => None,
        libc::S_IFIFO => Some("a FIFO (named pipe)"),
        libc::S_IFDIR => Some("a directory"),
        _ => Some("not a regular file"),
    };
    if let Some(kind) = kind {
        return Err(Error::invalid(format!(
            "{} is {kind}, not a shared memory object; it is not opened (remove it if it \
             does not belong there)",
            what(name)
        )));
    }
    let me = euid();
    if st.st_uid != me {
        return Err(Error::PermissionDenied {
            pid: None,
            reason: format!(
                "{} belongs to uid {}, not to this process's uid {me}; regions of other users \
                 are not opened",
                what(name),
                st.st_uid
            ),
        });
    }
    nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(flags))
        .map_err(|e| Error::errno(format!("clearing O_NONBLOCK on {}", what(name)), e))?;
    Ok((fd, st.st_size as u64))
}

/// Open the region a named handle names, for its import: the checks of
/// [`open_named`](super::open_named) (a regular object of this process's effective uid), and
/// one more that binds the name to the handle's creator.
///
/// What holds, exactly: when the process the handle names as its creator
/// (`creator_pid`, with `creator_start` as its start time; a start time of 0
/// trusts the pid alone) is alive and its `/proc/PID/status` is readable
/// here, the region's owner must be that process's effective uid, else the
/// import is refused with [`Error::PermissionDenied`]. Together with the
/// first check, a process of another user that names itself as the creator
/// cannot make this process open, and write, one of its own regions by
/// naming it. When the creator has exited (or cannot be seen: another pid
/// namespace, `/proc` mounted with `hidepid`), only the first check holds,
/// as for [`open_named`](super::open_named): the handle then grants nothing beyond what the
/// name does to any process of this user. The creator fields are not
/// authenticated: a peer that names a dead process, or a live process of this
/// user, as the creator passes this check; what it reaches is then still
/// only a region of this user, which every process of this user can open by
/// name anyway. A creator in another pid namespace whose pid happens to name
/// a live process of another user here is refused.
pub(crate) fn open_for_import(
    name: &str,
    read_only: bool,
    creator_pid: u32,
    creator_start: u64,
) -> Result<(OwnedFd, u64)> {
    let (fd, size) = open_fd(name, read_only)?;
    if let Some(creator_uid) = live_uid(creator_pid, creator_start) {
        let owner = os::fstat(fd.as_fd())?.st_uid;
        if owner != creator_uid {
            return Err(Error::PermissionDenied {
                pid: Some(creator_pid),
                reason: format!(
                    "the handle names {} as its region, but its creator, pid {creator_pid}, \
                     runs as uid {creator_uid} and the region belongs to uid {owner}: a \
                     process may hand over only regions of its own user",
                    what(name)
                ),
            });
        }
    }
    Ok((fd, size))
}

/// The effective uid of process `pid` that started at `start`, when it is
/// alive and visible here.
fn live_uid(pid: u32, start: u64) -> Option<u32> {
    if pid == 0 {
        return None;
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_ascii_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    // Checked after the read: if the process still runs with that start
    // time, the status read was its own and not a recycled pid's.
    os::process_alive(pid, start).then_some(uid)
}

/// Remove the name of region `name` (and its metadata). Existing mappings
/// stay valid until they are unmapped; see the [module documentation](super).
/// A region of another user is refused with [`Error::PermissionDenied`].
pub fn unlink_named(name: &str) -> Result<()> {
    drop(open_fd(name, true)?);
    nix::sys::mman::shm_unlink(shm_path(name).as_str())
        .map_err(|e| shm_error(e, name, "unlinking"))?;
    match std::fs::remove_file(meta_path(name)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io(format!("removing {}", meta_path(name)), e))
        }
        _ => Ok(()),
    }
}
