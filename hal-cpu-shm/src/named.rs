//! Named regions: POSIX shared memory objects that processes find by name.
//!
//! # Names
//!
//! A region named `X` is the POSIX shared memory object `/X`, the file
//! `/dev/shm/X`: C's `shm_open("/X", ...)` and Python's
//! `multiprocessing.shared_memory.SharedMemory("X")` reach the same bytes.
//! A name is 1 to [`MAX_NAME_LEN`] bytes of printable ASCII (space to `~`),
//! without `/`, without `..`, and not starting with `.` (names starting with a
//! dot are kept for the library's metadata). See [`validate_name`].
//!
//! Names map onto the device model like this: every named region lives on the
//! host device (backend `cpu-shm`, ordinal 0, DLPack `kDLCPU` device 0); the
//! name identifies the region within it, and [`region_id`] turns the name
//! into a stable 64-bit integer (FNV-1a of the name bytes: the same in every
//! process, language and run) for frameworks that want integer ids.
//!
//! # Create, open, unlink
//!
//! [`create_named`] is exclusive (`O_CREAT | O_EXCL`): it fails with
//! [`Error::AlreadyExists`] when the name is taken. The object gets mode 0600
//! whatever the umask. [`open_named`] takes an existing region: it refuses
//! one owned by another user (even when running as root, so that a root
//! service does not trust another user's bytes) and, when asked, one of an
//! unexpected size; the size is checked before anything is mapped.
//!
//! [`unlink_named`] removes the name: later opens fail with
//! [`Error::NotFound`] and the name may be created again, while existing
//! mappings (here and in every other process) stay valid until they are
//! unmapped; the memory is freed with the last mapping. A region created by
//! [`create_named`] is unlinked when its [`CpuAllocation`] drops, unless it
//! was created with [`NamedOptions::keep`].
//!
//! # Metadata and cleanup
//!
//! Every region this library creates gets a small metadata object beside it,
//! `/dev/shm/.hal-meta.X` (mode 0600), never inside the region's bytes (so
//! other languages see exactly the bytes they expect). It holds a magic, the
//! owner's uid, pid, process start time and pid namespace, the region's size,
//! inode and device, and the creation time (128 bytes, little-endian).
//! A region is created unnamed, its complete metadata is put in place, and
//! only then does the region get its name, so a creator killed at any point
//! leaves nothing that [`collect_garbage`] cannot remove.
//! [`list_regions`] lists the regions that have such metadata; regions
//! created by other programs are never listed. [`collect_garbage`] removes
//! the regions whose creator has died (its pid is gone or now belongs to a
//! process with another start time): never a live creator's region, never a
//! region without metadata, never a region whose inode or owner differs from
//! its metadata (a region re-created under the same name by someone else),
//! and never one whose creator lives in another pid namespace (its liveness
//! cannot be judged from here).
//!
//! # What is protected and what is not
//!
//! Named regions cannot be sealed (`shm_open` objects are not memfds), so any
//! process of the owning user can truncate one while others map it; loads
//! and stores through the mapping past the new end then raise `SIGBUS`.
//! The library checks the size before it maps, and its own
//! [`Memory::read`](hal_core::Memory::read) and
//! [`Memory::write`](hal_core::Memory::write) go through the descriptor
//! (`pread`/`pwrite`), which never fault: after a truncation they return
//! [`Error::Closed`]. A write racing a truncation may grow the object back
//! (with zeros), never crash. What remains: direct accesses through
//! [`Memory::host_ptr`](hal_core::Memory::host_ptr) are the caller's, and
//! fault after such a truncation. Use anonymous regions (sealed memfds) when
//! peers are not trusted. Likewise a full `/dev/shm` makes the first touch of
//! a page fault; [`NamedOptions::allocate_now`] reserves the space at
//! creation instead and reports a clear [`Error::OutOfMemory`].
//!
//! # In short
//!
//! A region named `X` is the POSIX object `/X`, reachable from C's
//! `shm_open` and Python's `multiprocessing.shared_memory`. Create is
//! exclusive with mode 0600; open refuses other users' regions and
//! unexpected sizes. The ownership metadata lives outside the region's bytes
//! in `/dev/shm/.hal-meta.X`, which [`list_regions`] and [`collect_garbage`]
//! use to find and remove the regions of crashed creators, and only those.
//! Named regions export as handles that carry the name (no descriptors).

use std::fs::OpenOptions;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::time::{SystemTime, UNIX_EPOCH};

use hal_core::kit::os::{self, Prot};
use hal_core::{Error, Placement, Result};
use nix::errno::Errno;

use crate::memory::CpuAllocation;
use crate::placement;
use crate::view::View;

mod gc;
mod meta;
mod name;
pub(crate) mod region;

use gc::info_of;
use meta::{lock_meta, open_meta, pid_namespace, remove_junk_meta, Meta, META_LOCK_PATIENCE};
use name::{meta_path, shm_error, what};
use region::{open_fd, remove_if, NamedRegion, Owner};

pub use gc::{
    collect_garbage, collect_garbage_named, collect_garbage_prefix, list_regions, Collected,
    RegionInfo,
};
pub use name::{region_id, validate_name, MAX_NAME_LEN, META_PREFIX, SHM_DIR};
pub use region::unlink_named;

/// Options of [`create_named`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamedOptions {
    /// Leave the region when the creating [`CpuAllocation`] drops (it is
    /// then removed by [`unlink_named`], or by [`collect_garbage`] once the
    /// creator has exited). Default: unlink on drop.
    pub keep: bool,
    /// Reserve the memory now (`posix_fallocate`), so that a full `/dev/shm`
    /// fails here with [`Error::OutOfMemory`] instead of faulting on the first
    /// touch. It then costs its full size at once.
    pub allocate_now: bool,
    /// NUMA and huge-page hints, as for anonymous regions (explicit huge
    /// pages are not available for named regions).
    pub placement: Placement,
}

/// An unnamed file in [`SHM_DIR`] (`O_TMPFILE`, mode 0600): it gets a name
/// only through [`link_unnamed`], and vanishes with its descriptors if the
/// process dies first, so a crash never leaves a half-made object behind.
fn unnamed_file(what_for: &str) -> Result<std::fs::File> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(SHM_DIR)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL) => Error::unsupported(
                crate::id::BACKEND,
                "create_named",
                format!(
                    "{SHM_DIR} does not support unnamed files (O_TMPFILE, Linux 3.11 and \
                     later on tmpfs), which named regions are created with ({e})"
                ),
            ),
            _ => Error::io(format!("creating {what_for} in {SHM_DIR}"), e),
        })?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io(format!("chmod 0600 of {what_for}"), e))?;
    Ok(f)
}

/// Give the unnamed file `fd` the name `path`, exclusively: `EEXIST` when
/// the name is taken (`linkat` never replaces).
fn link_unnamed(fd: BorrowedFd<'_>, path: &str) -> std::result::Result<(), Errno> {
    let proc_path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    nix::unistd::linkat(
        None,
        proc_path.as_str(),
        None,
        path,
        nix::fcntl::AtFlags::AT_SYMLINK_FOLLOW,
    )
}

/// Put the complete metadata of `name` in place, exclusively. Metadata
/// already there is replaced only when it is stale: its region is gone (or
/// is another object) and its creator is dead; otherwise the name is taken
/// (or being created by a live process) and this is [`Error::AlreadyExists`].
fn place_meta(name: &str, meta: &Meta) -> Result<()> {
    let path = meta_path(name);
    let mut f = unnamed_file("region metadata")?;
    f.write_all(&meta.encode(name))
        .map_err(|e| Error::io(format!("writing the metadata of {}", what(name)), e))?;
    for _ in 0..3 {
        match link_unnamed(f.as_fd(), &path) {
            Ok(()) => return Ok(()),
            Err(Errno::EEXIST) => {
                let old = match open_meta(name) {
                    Ok(Some(old)) => old,
                    // Gone in the meantime: try again.
                    Ok(None) => continue,
                    // A link or a socket: remove it. Another user's metadata
                    // that this process cannot read stays (the link fails
                    // again and says the name is taken).
                    Err(_) => {
                        remove_junk_meta(name);
                        continue;
                    }
                };
                if let Some(m) = &old.meta {
                    let info = info_of(name, m);
                    if info.present || info.alive {
                        return Err(Error::AlreadyExists { what: what(name) });
                    }
                }
                // Stale, or not metadata this version can read: replace it,
                // but only that file. Judging it and then removing whatever
                // the name leads to by then would remove the metadata another
                // creator put in place meanwhile, leaving its region without
                // metadata.
                if lock_meta(name, &old, META_LOCK_PATIENCE) {
                    let _ = std::fs::remove_file(&path);
                }
            }
            Err(e) => return Err(Error::errno(format!("naming {path}"), e)),
        }
    }
    Err(Error::AlreadyExists { what: what(name) })
}

/// Removes what a failed [`create_named`] made (only the objects it made:
/// see [`remove_if`]) unless disarmed.
struct CreateGuard<'a> {
    name: &'a str,
    ino: u64,
    dev: u64,
    armed: bool,
}

impl Drop for CreateGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            remove_if(self.name, self.ino, self.dev);
        }
    }
}

/// Create the named region `name` of `size` bytes, exclusively, mode 0600,
/// with its metadata. The new region reads as zeros.
///
/// Fails with [`Error::AlreadyExists`] when the name is taken.
pub fn create_named(name: &str, size: u64, opts: &NamedOptions) -> Result<CpuAllocation> {
    validate_name(name)?;
    if size == 0 {
        return Err(Error::invalid("a named region needs at least one byte"));
    }
    if let hal_core::HugePages::Explicit(_) = opts.placement.huge_pages {
        return Err(Error::unsupported(
            crate::id::BACKEND,
            "create_named with explicit huge pages",
            "POSIX shared memory objects live on /dev/shm, which has no explicit huge pages; \
             use an anonymous region or transparent huge pages",
        ));
    }
    let len = i64::try_from(size).map_err(|_| Error::invalid("size over i64::MAX"))?;
    if let Ok(vfs) = nix::sys::statvfs::statvfs(SHM_DIR) {
        // The field types are narrower on 32-bit targets.
        #[allow(clippy::unnecessary_cast)]
        let cap = (vfs.blocks() as u64).saturating_mul(vfs.fragment_size() as u64);
        if cap != 0 && size > cap {
            return Err(Error::OutOfMemory {
                requested: size,
                detail: format!("{SHM_DIR} holds at most {cap} bytes"),
            });
        }
    }
    // The region is made unnamed, sized, described by complete metadata put
    // in place first, and only then named: a creator killed at any point
    // leaves either nothing, or metadata (whose region is absent) that
    // collect_garbage removes, or a complete pair that it removes. (Naming
    // the region first, as shm_open(O_CREAT | O_EXCL) does, leaves a region
    // without metadata, which no cleanup may touch, when the creator dies
    // before writing it.) The object is the same file /dev/shm/NAME that
    // shm_open reaches.
    let fd: OwnedFd = unnamed_file(&what(name))?.into();
    os::set_len(fd.as_fd(), size)?;
    if opts.allocate_now {
        nix::fcntl::posix_fallocate(fd.as_raw_fd(), 0, len).map_err(|e| match e {
            Errno::ENOSPC => Error::OutOfMemory {
                requested: size,
                detail: format!("{SHM_DIR} is full"),
            },
            e => Error::errno(format!("reserving the memory of {}", what(name)), e),
        })?;
    }
    let st = os::fstat(fd.as_fd())?;
    let (pid, start) = os::self_identity();
    let meta = Meta {
        uid: st.st_uid,
        pid,
        start,
        size,
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        ino: st.st_ino,
        dev: st.st_dev,
        pidns: pid_namespace(),
    };
    place_meta(name, &meta)?;
    let mut guard = CreateGuard {
        name,
        ino: meta.ino,
        dev: meta.dev,
        armed: true,
    };
    link_unnamed(fd.as_fd(), &format!("{SHM_DIR}/{name}"))
        .map_err(|e| shm_error(e, name, "creating"))?;
    let view = View::map(fd.as_fd(), size, 0, Prot::ReadWrite, 0, View::page(), None)?;
    placement::apply(&view, &opts.placement)?;
    guard.armed = false;
    let region = NamedRegion {
        fd,
        name: name.to_owned(),
        owner: Some(Owner {
            ino: meta.ino,
            dev: meta.dev,
            unlink_on_drop: !opts.keep,
            origin: hal_core::kit::os::Origin::here(),
        }),
    };
    Ok(CpuAllocation::from_named(view, size, false, region))
}

fn open_impl(name: &str, expected_size: Option<u64>, read_only: bool) -> Result<CpuAllocation> {
    let (fd, size) = open_fd(name, read_only)?;
    if let Some(want) = expected_size {
        if size != want {
            return Err(Error::invalid(format!(
                "{} holds {size} bytes, not the expected {want}",
                what(name)
            )));
        }
    }
    if size == 0 {
        return Err(Error::invalid(format!(
            "{} is empty (is its creator still sizing it?)",
            what(name)
        )));
    }
    let prot = if read_only {
        Prot::Read
    } else {
        Prot::ReadWrite
    };
    let view = View::map(fd.as_fd(), size, 0, prot, 0, View::page(), None)?;
    let region = NamedRegion {
        fd,
        name: name.to_owned(),
        owner: None,
    };
    Ok(CpuAllocation::from_named(view, size, read_only, region))
}

/// Open the existing region `name` read-write. With `expected_size`, a
/// region of another size is refused before it is mapped. Regions of another
/// user are refused with [`Error::PermissionDenied`]; a missing one is
/// [`Error::NotFound`]. Regions created by other programs (C, Python) open too.
pub fn open_named(name: &str, expected_size: Option<u64>) -> Result<CpuAllocation> {
    open_impl(name, expected_size, false)
}

/// Open the existing region `name` read-only: the mapping cannot be written,
/// and writes through [`Memory::write`](hal_core::Memory::write) fail with
/// [`Error::PermissionDenied`].
pub fn open_named_read_only(name: &str, expected_size: Option<u64>) -> Result<CpuAllocation> {
    open_impl(name, expected_size, true)
}
