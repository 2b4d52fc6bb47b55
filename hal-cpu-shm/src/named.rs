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

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hal_core::os::{self, Prot};
use hal_core::{Error, Placement, Result};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::info::fnv1a;
use crate::memory::CpuAllocation;
use crate::placement;
use crate::view::View;

/// The longest name, in bytes.
pub const MAX_NAME_LEN: usize = 200;
/// Where the system keeps POSIX shared memory objects.
pub const SHM_DIR: &str = "/dev/shm";
/// The prefix of metadata objects: `/dev/shm/.hal-meta.NAME`.
pub const META_PREFIX: &str = ".hal-meta.";

const META_MAGIC: &[u8; 8] = b"HALSHMD1";
const META_VERSION: u32 = 1;
const META_LEN: usize = 128;

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

/// A region this library created, as [`list_regions`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionInfo {
    /// The name (`/dev/shm/NAME`).
    pub name: String,
    /// The stable integer id of the name ([`region_id`]).
    pub id: u64,
    /// Size in bytes (the object's current size when it exists).
    pub size: u64,
    /// The owner's uid.
    pub uid: u32,
    /// The creating process.
    pub owner_pid: u32,
    /// The creating process's start time (clock ticks since boot).
    pub owner_start: u64,
    /// True while the creator runs, and when it cannot be judged (it lives
    /// in another pid namespace). Regions with a live owner are never
    /// collected.
    pub alive: bool,
    /// True when the region object exists and is the one the metadata
    /// describes; false for metadata left behind by a removed region.
    pub present: bool,
    /// When the region was created.
    pub created: SystemTime,
}

/// Check a region name (see the [module documentation](self#names)).
pub fn validate_name(name: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::invalid(format!("region name {name:?} {why}")));
    if name.is_empty() {
        return bad("is empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad(&format!("is longer than {MAX_NAME_LEN} bytes"));
    }
    if name.contains('/') {
        return bad("contains '/' (give the name without the leading slash)");
    }
    if name.contains("..") {
        return bad("contains \"..\"");
    }
    if name.starts_with('.') {
        return bad("starts with '.' (such names are kept for the library's metadata)");
    }
    if let Some(c) = name.chars().find(|c| !(' '..='~').contains(c)) {
        return bad(&format!(
            "contains {c:?}: names are printable ASCII (no NUL or control characters)"
        ));
    }
    Ok(())
}

/// The stable integer id of a region name: FNV-1a (64-bit) of its bytes.
///
/// ```
/// assert_eq!(hal_cpu_shm::named::region_id("a"), 0xaf63dc4c8601ec8c);
/// ```
pub fn region_id(name: &str) -> u64 {
    fnv1a(0xcbf2_9ce4_8422_2325, name.as_bytes())
}

fn shm_path(name: &str) -> String {
    format!("/{name}")
}

fn meta_path(name: &str) -> String {
    format!("{SHM_DIR}/{META_PREFIX}{name}")
}

fn what(name: &str) -> String {
    format!("shared memory region {name:?} ({SHM_DIR}/{name})")
}

fn shm_error(e: Errno, name: &str, action: &str) -> Error {
    match e {
        Errno::ENOENT => Error::NotFound { what: what(name) },
        Errno::EEXIST => Error::AlreadyExists { what: what(name) },
        Errno::EACCES | Errno::EPERM => Error::PermissionDenied {
            pid: None,
            reason: format!("{action} {} refused by the system ({e})", what(name)),
        },
        // shm_open does not follow links (O_NOFOLLOW): a link planted at the
        // name is refused like a link planted at a handle file's path.
        Errno::ELOOP => Error::PermissionDenied {
            pid: None,
            reason: format!(
                "{} is a symbolic link; regions are never opened through links (remove it)",
                what(name)
            ),
        },
        e => Error::errno(format!("{action} {}", what(name)), e),
    }
}

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

fn pid_namespace() -> u64 {
    static NS: OnceLock<u64> = OnceLock::new();
    *NS.get_or_init(|| {
        std::fs::read_link("/proc/self/ns/pid")
            .ok()
            .and_then(|p| {
                let s = p.to_string_lossy().into_owned();
                s.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
            })
            .unwrap_or(0)
    })
}

/// The named region behind a [`CpuAllocation`]: its descriptor, and for the
/// creator the record that lets its drop unlink the name.
#[derive(Debug)]
pub(crate) struct NamedRegion {
    fd: OwnedFd,
    name: String,
    owner: Option<Owner>,
}

#[derive(Debug)]
struct Owner {
    ino: u64,
    dev: u64,
    unlink_on_drop: bool,
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
            if o.unlink_on_drop {
                remove_if(&self.name, o.ino, o.dev);
            }
        }
    }
}

/// Unlink region `name` if it still is the object (`ino`, `dev`), and its
/// metadata if that describes it.
fn remove_if(name: &str, ino: u64, dev: u64) {
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

#[derive(Debug, Clone, PartialEq, Eq)]
struct Meta {
    uid: u32,
    pid: u32,
    start: u64,
    size: u64,
    created: u64,
    ino: u64,
    dev: u64,
    pidns: u64,
}

impl Meta {
    fn encode(&self, name: &str) -> [u8; META_LEN] {
        let mut b = [0u8; META_LEN];
        b[0..8].copy_from_slice(META_MAGIC);
        b[8..12].copy_from_slice(&META_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.uid.to_le_bytes());
        b[16..20].copy_from_slice(&self.pid.to_le_bytes());
        b[24..32].copy_from_slice(&self.start.to_le_bytes());
        b[32..40].copy_from_slice(&self.size.to_le_bytes());
        b[40..48].copy_from_slice(&self.created.to_le_bytes());
        b[48..56].copy_from_slice(&self.ino.to_le_bytes());
        b[56..64].copy_from_slice(&self.dev.to_le_bytes());
        b[64..72].copy_from_slice(&self.pidns.to_le_bytes());
        b[72..80].copy_from_slice(&region_id(name).to_le_bytes());
        b
    }

    fn decode(b: &[u8; META_LEN]) -> Option<Meta> {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        if &b[0..8] != META_MAGIC || u32_at(8) != META_VERSION {
            return None;
        }
        Some(Meta {
            uid: u32_at(12),
            pid: u32_at(16),
            start: u64_at(24),
            size: u64_at(32),
            created: u64_at(40),
            ino: u64_at(48),
            dev: u64_at(56),
            pidns: u64_at(64),
        })
    }
}

/// An open metadata object: what it says, who owns the file, and which file
/// it is (so that it is removed only while its name still leads to it).
#[derive(Debug)]
struct MetaFile {
    file: std::fs::File,
    /// `None` when the file is not complete metadata of this version.
    meta: Option<Meta>,
    /// The owner of the metadata file.
    uid: u32,
    ino: u64,
    dev: u64,
}

/// Open the metadata of `name`: `Ok(None)` when there is none.
fn open_meta(name: &str) -> Result<Option<MetaFile>> {
    let f = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(meta_path(name))
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("opening {}", meta_path(name)), e)),
    };
    let m = f
        .metadata()
        .map_err(|e| Error::io(format!("stat of {}", meta_path(name)), e))?;
    let mut b = [0u8; META_LEN];
    let meta = if m.file_type().is_file() && m.len() == META_LEN as u64 {
        (&f).read_exact(&mut b).ok().and_then(|()| Meta::decode(&b))
    } else {
        None
    };
    Ok(Some(MetaFile {
        file: f,
        meta,
        uid: m.uid(),
        ino: m.ino(),
        dev: m.dev(),
    }))
}

/// Read the metadata of `name`: `Ok(None)` when there is none or it is not a
/// complete metadata object; also returns the metadata file's uid.
fn read_meta(name: &str) -> Result<Option<(Meta, u32)>> {
    Ok(open_meta(name)?.and_then(|mf| Some((mf.meta?, mf.uid))))
}

/// Metadata counts only when the user it names wrote it: the file's owner is
/// the uid recorded inside, and, for a process other than root, that uid is
/// this process's. (Anyone may create files in [`SHM_DIR`]; only this check
/// keeps a user from describing another user's object as theirs.)
fn meta_trusted(file_uid: u32, meta_uid: u32, me: u32) -> bool {
    file_uid == meta_uid && (me == 0 || meta_uid == me)
}

/// How long a creator waits for another process's hold on stale metadata
/// it wants to replace (removers hold it for a few system calls). The
/// cleanup does not wait: metadata that someone holds is being judged or
/// removed there, and waiting would let a user who holds locks on many files
/// of their own slow every cleanup down.
const META_LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// Take the lock every remover of metadata holds (`flock` on the metadata
/// file itself), then check that the name still leads to that file. While a
/// process holds it, nobody else removes the file, so the name cannot pass
/// to newer metadata (which is only ever linked exclusively, never put over
/// an existing file) until the holder has judged and removed the file it
/// read. False when the lock could not be had within `patience` or the name
/// has moved on.
fn lock_meta(name: &str, mf: &MetaFile, patience: Duration) -> bool {
    lock_patiently(mf.file.as_fd(), patience)
        && std::fs::symlink_metadata(meta_path(name))
            .is_ok_and(|m| m.ino() == mf.ino && m.dev() == mf.dev)
}

/// `flock(LOCK_EX)` on `fd`, waiting at most `patience` for another holder.
/// The lock goes with the last descriptor of that open file.
fn lock_patiently(fd: BorrowedFd<'_>, patience: Duration) -> bool {
    let deadline = std::time::Instant::now() + patience;
    loop {
        // SAFETY: flock(2) on a descriptor this function borrows; it touches
        // no memory.
        let rc = unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        match if rc == 0 { Ok(()) } else { Err(Errno::last()) } {
            Ok(()) => return true,
            Err(Errno::EINTR) => {}
            Err(Errno::EWOULDBLOCK) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(_) => return false,
        }
    }
}

/// Remove what sits at the metadata path of `name` when it cannot be opened
/// to be judged (a symbolic link, a socket): never a regular file or a
/// directory. Such entries cannot be locked themselves, so their removers
/// hold the lock of [`SHM_DIR`] and check, under it, that the name still
/// leads to the entry they saw.
fn remove_junk_meta(name: &str) {
    let path = meta_path(name);
    let Ok(seen) = std::fs::symlink_metadata(&path) else {
        return;
    };
    if seen.file_type().is_file() || seen.file_type().is_dir() {
        return;
    }
    let Ok(dir) = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(SHM_DIR)
    else {
        return;
    };
    if lock_patiently(dir.as_fd(), META_LOCK_PATIENCE)
        && std::fs::symlink_metadata(&path)
            .is_ok_and(|m| m.ino() == seen.ino() && m.dev() == seen.dev())
    {
        let _ = std::fs::remove_file(&path);
    }
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
        }),
    };
    Ok(CpuAllocation::from_named(view, size, false, region))
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
/// [`open_named`] (a regular object of this process's effective uid), and
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
/// as for [`open_named`]: the handle then grants nothing beyond what the
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

/// Remove the name of region `name` (and its metadata). Existing mappings
/// stay valid until they are unmapped; see the [module documentation](self).
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

/// Every region this library created that this user can see, by name.
/// Regions without the library's metadata are not listed, nor are those
/// whose metadata file is not owned by the uid it records (anyone may create
/// files in [`SHM_DIR`]); a process other than root sees only its own user's.
pub fn list_regions() -> Result<Vec<RegionInfo>> {
    Ok(listed()?.into_iter().map(|(info, _)| info).collect())
}

/// [`list_regions`], with the metadata each entry was made from.
fn listed() -> Result<Vec<(RegionInfo, Meta)>> {
    let dir = match std::fs::read_dir(SHM_DIR) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("listing {SHM_DIR}"), e)),
    };
    let me = euid();
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str().and_then(|n| n.strip_prefix(META_PREFIX)) else {
            continue;
        };
        if validate_name(name).is_err() {
            continue;
        }
        let Ok(Some((meta, file_uid))) = read_meta(name) else {
            continue;
        };
        if !meta_trusted(file_uid, meta.uid, me) {
            continue;
        }
        out.push((info_of(name, &meta), meta));
    }
    out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    Ok(out)
}

fn info_of(name: &str, meta: &Meta) -> RegionInfo {
    let region = std::fs::symlink_metadata(format!("{SHM_DIR}/{name}")).ok();
    let present = region.as_ref().is_some_and(|m| {
        m.file_type().is_file() && m.ino() == meta.ino && m.dev() == meta.dev && m.uid() == meta.uid
    });
    let size = match (&region, present) {
        (Some(m), true) => m.len(),
        _ => meta.size,
    };
    let alive = if meta.pidns != 0 && meta.pidns != pid_namespace() {
        true
    } else {
        os::process_alive(meta.pid, meta.start)
    };
    RegionInfo {
        name: name.to_owned(),
        id: region_id(name),
        size,
        uid: meta.uid,
        owner_pid: meta.pid,
        owner_start: meta.start,
        alive,
        present,
        created: UNIX_EPOCH + Duration::from_secs(meta.created),
    }
}

/// Remove the regions (and metadata) this library created whose creator has
/// died; with `dry_run`, only say which. Returns what was (or would be)
/// removed. Never touches a live creator's region, a region without the
/// library's metadata, or a region that is not the object its metadata
/// describes (only the stale metadata goes then).
///
/// Run as root, it removes the regions of every user, each as that user: a
/// region and its metadata are removed only when both files belong to the
/// uid the metadata records, and the removal runs with the file-system uid
/// set to that uid, so that the kernel (the sticky bit of [`SHM_DIR`])
/// refuses it should the name pass to another user's object in the
/// meantime. Metadata that another user planted beside someone's object
/// therefore never gets that object removed. Metadata that another process
/// holds locked (a creator replacing it, another cleanup) is left for a
/// later run.
pub fn collect_garbage(dry_run: bool) -> Result<Vec<RegionInfo>> {
    collect_garbage_prefix("", dry_run)
}

/// [`collect_garbage`] restricted to the regions whose name starts with
/// `prefix` (an application's own namespace).
pub fn collect_garbage_prefix(prefix: &str, dry_run: bool) -> Result<Vec<RegionInfo>> {
    collect_where(dry_run, |name| name.starts_with(prefix))
}

/// [`collect_garbage`] restricted to the regions named in `names`.
pub fn collect_garbage_named(names: &[String], dry_run: bool) -> Result<Vec<RegionInfo>> {
    for n in names {
        validate_name(n)?;
    }
    collect_where(dry_run, |name| names.iter().any(|n| n == name))
}

fn collect_where(dry_run: bool, chosen: impl Fn(&str) -> bool) -> Result<Vec<RegionInfo>> {
    let me = euid();
    let mut removed = Vec::new();
    for (info, meta) in listed()? {
        if info.alive || !chosen(&info.name) {
            continue;
        }
        if !dry_run && !remove_stale(&info.name, &meta, me)? {
            continue;
        }
        removed.push(info);
    }
    Ok(removed)
}

/// Remove region `name` and its metadata, or the metadata alone when the
/// region is not the object it describes, if the metadata still is `listed`
/// and its creator is dead. False when something changed since the listing
/// (or the kernel refused): nothing was removed then.
fn remove_stale(name: &str, listed: &Meta, me: u32) -> Result<bool> {
    let Ok(Some(mf)) = open_meta(name) else {
        return Ok(false);
    };
    match &mf.meta {
        Some(m) if m == listed && meta_trusted(mf.uid, m.uid, me) => {}
        _ => return Ok(false),
    }
    if !lock_meta(name, &mf, Duration::ZERO) {
        return Ok(false);
    }
    // Judged again under the lock, from the file the name leads to.
    let now = info_of(name, listed);
    if now.alive {
        return Ok(false);
    }
    as_fs_user(listed.uid, || {
        if now.present {
            match nix::sys::mman::shm_unlink(shm_path(name).as_str()) {
                Ok(()) | Err(Errno::ENOENT) => {}
                // The name passed to an object of another user since the
                // check: the kernel refused for us.
                Err(Errno::EPERM | Errno::EACCES) => return Ok(false),
                Err(e) => return Err(shm_error(e, name, "unlinking")),
            }
        }
        match nix::unistd::unlink(meta_path(name).as_str()) {
            Ok(()) | Err(Errno::ENOENT) => Ok(true),
            Err(e) => Err(Error::errno(format!("removing {}", meta_path(name)), e)),
        }
    })
}

/// Run `f` on a short-lived thread whose file-system uid is `uid`, so that
/// the kernel checks its unlinks against `uid` rather than against root's
/// powers. (`setfsuid` changes only the calling thread; the thread sets it
/// back before it ends, and ends right after `f`.) When `uid` is already this
/// process's effective uid, `f` runs here.
fn as_fs_user<T: Send>(uid: u32, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    let me = euid();
    if uid == me {
        return f();
    }
    std::thread::scope(|s| {
        let worker = std::thread::Builder::new()
            .name("hal-shm-gc".into())
            .spawn_scoped(s, move || {
                set_fsuid(uid)?;
                let r = f();
                let back = set_fsuid(me);
                r.and_then(|v| back.map(|()| v))
            })
            .map_err(|e| Error::io("starting a thread to remove a region as its owner", e))?;
        worker.join().unwrap_or_else(|_| {
            Err(Error::io(
                "removing a region as its owner",
                std::io::Error::other("the removing thread panicked"),
            ))
        })
    })
}

/// Set this thread's file-system uid, and check that it took.
fn set_fsuid(uid: u32) -> Result<()> {
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
                "cannot act as uid {uid} to remove its regions (setfsuid needs CAP_SETUID); \
                 run the cleanup as that user"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_round_trips_and_rejects_foreign_bytes() {
        let m = Meta {
            uid: 1000,
            pid: 4242,
            start: 123_456,
            size: 1 << 30,
            created: 1_700_000_000,
            ino: 77,
            dev: 0x2a,
            pidns: 4_026_531_836,
        };
        let b = m.encode("region");
        assert_eq!(Meta::decode(&b), Some(m));
        assert_eq!(&b[72..80], &region_id("region").to_le_bytes());
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(Meta::decode(&bad), None);
        let mut newer = b;
        newer[8] = 2;
        assert_eq!(Meta::decode(&newer), None);
    }

    /// A file in [`SHM_DIR`] owned by `uid`, removed when dropped.
    struct Planted(String);

    impl Planted {
        fn new(tag: &str, uid: u32) -> Planted {
            let path = format!("{SHM_DIR}/hal-unit-{}-{tag}", std::process::id());
            std::fs::write(&path, b"x").unwrap();
            nix::unistd::chown(path.as_str(), Some(uid.into()), None).unwrap();
            Planted(path)
        }
    }

    impl Drop for Planted {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn unlink(path: &str) -> Result<()> {
        nix::unistd::unlink(path).map_err(|e| Error::errno(format!("unlinking {path}"), e))
    }

    #[test]
    fn removal_as_the_owner_is_checked_by_the_kernel() {
        if euid() != 0 {
            eprintln!("NOT RUN: acting as another uid needs root here");
            return;
        }
        // Root's file: a thread acting as uid 65534 cannot unlink it.
        let roots = Planted::new("fsuid-root", 0);
        let e = as_fs_user(65534, || unlink(&roots.0)).unwrap_err();
        assert!(e.to_string().contains("not permitted"), "{e}");
        assert!(std::path::Path::new(&roots.0).exists());
        // That user's own file: it can.
        let theirs = Planted::new("fsuid-theirs", 65534);
        as_fs_user(65534, || unlink(&theirs.0)).unwrap();
        assert!(!std::path::Path::new(&theirs.0).exists());
        // This thread's file-system uid did not change.
        // SAFETY: setfsuid(-1) reads the calling thread's value, changes nothing.
        assert_eq!(unsafe { libc::setfsuid(u32::MAX) }, 0);
        // As this process's own uid, it runs here.
        let here = std::thread::current().id();
        let ran_on = as_fs_user(0, || Ok(std::thread::current().id())).unwrap();
        assert_eq!(ran_on, here);
    }

    #[test]
    fn metadata_is_removed_only_while_the_name_leads_to_it() {
        let name = format!("hal-unit-{}-moved", std::process::id());
        let path = meta_path(&name);
        let meta = Meta {
            uid: euid(),
            pid: 0,
            start: 0,
            size: 4096,
            created: 0,
            ino: 1,
            dev: 1,
            pidns: 0,
        };
        std::fs::write(&path, meta.encode(&name)).unwrap();
        let old = open_meta(&name).unwrap().unwrap();
        assert_eq!(old.meta.as_ref(), Some(&meta));
        // Another file takes the name: the lock on the old one is worth nothing.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, meta.encode(&name)).unwrap();
        assert!(!lock_meta(&name, &old, Duration::ZERO));
        let new = open_meta(&name).unwrap().unwrap();
        assert!(lock_meta(&name, &new, Duration::ZERO));
        // The gc does not remove metadata that differs from what it listed.
        let other = Meta {
            size: 1,
            ..meta.clone()
        };
        drop(new);
        assert!(!remove_stale(&name, &other, euid()).unwrap());
        assert!(std::path::Path::new(&path).exists());
        // Nor metadata whose file is not owned by the uid it records.
        let foreign = Meta {
            uid: euid() ^ 1,
            ..meta.clone()
        };
        std::fs::write(&path, foreign.encode(&name)).unwrap();
        assert!(!remove_stale(&name, &foreign, 0).unwrap());
        assert!(!remove_stale(&name, &foreign, euid()).unwrap());
        assert!(std::path::Path::new(&path).exists());
        std::fs::write(&path, meta.encode(&name)).unwrap();
        assert!(remove_stale(&name, &meta, euid()).unwrap());
        assert!(!std::path::Path::new(&path).exists());
    }

    #[test]
    fn name_rules() {
        for ok in [
            "a",
            "psm_0123abcd",
            "with space",
            "x~y",
            &"n".repeat(MAX_NAME_LEN),
        ] {
            validate_name(ok).unwrap();
        }
        for bad in ["", ".", "..", "a..b", "a/b", ".x", "a\0", "a\n", "\u{e9}"] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        assert!(validate_name(&"n".repeat(MAX_NAME_LEN + 1)).is_err());
    }
}
