//! Operating-system building blocks shared by the backends: sealed memfds,
//! shared mappings, futexes on shared memory, process identity and liveness,
//! random ids, and vendor runtime libraries loaded at run time.
//!
//! Every `unsafe` call of the crate that touches the OS lives here, each in a
//! small function with its `SAFETY:` argument.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use crate::error::{Error, Result};

#[allow(unsafe_code)]
mod as_user;
mod dead_names;
pub mod discard;
pub mod elf;
#[allow(unsafe_code)]
mod flock;
#[allow(unsafe_code)]
mod host;
#[allow(unsafe_code)]
mod ids;
#[allow(unsafe_code)]
pub mod library;
mod liveness;
pub mod lock;
#[allow(unsafe_code)]
mod map;
mod maps;
mod numa;
mod origin;
#[allow(unsafe_code)]
mod page;
mod peer_fd;
pub mod peer_region;
#[allow(unsafe_code)]
mod pidfd;
mod pins;
#[allow(unsafe_code)]
mod private_file;
#[allow(unsafe_code)]
mod quick_stat;
pub mod thread;
mod user_dir;

pub use crate::process::{pid, pid_namespace, process_start_time, self_identity};
pub use as_user::{as_fs_user, unlink_as};
pub use dead_names::{collect_dead_names, DeadName};
pub use flock::{lock_patiently, unlock};
pub use host::{is_mapped, HostRange, HostRegistry};
pub use ids::{random_id, unique_id};
pub use liveness::{process_alive, process_euid};
pub use map::{Prot, SharedMap};
pub use maps::maps_same_object;
pub use numa::numa_nodes;
pub use origin::Origin;
pub use page::page_size;
pub use peer_fd::{open_peer_fd, reach_memfd, Unreached};
pub use pidfd::{pidfd_alive, pidfd_getfd, pidfd_getfd_allowed, pidfd_open};
pub use pins::current_start_time;
pub use private_file::{
    collectable_names, private_names, private_path, private_path_of, PrivateFile, PrivateLock,
    MAX_PRIVATE_NAME,
};
pub use quick_stat::{holds_file, is_memfd, quick_stat, QuickStat};
pub use user_dir::{judge_user_dir, make_user_dir, user_dir, user_dirs, PRIVATE_DIR};

/// The seals an exported memfd carries: its size can never change again.
pub const EXPORT_SEALS: i32 = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// The seals that fix a memfd's size but leave room for more seals: what an
/// allocation carries before [`seal_for_export`] decides, at its first
/// export, whether it is also sealed against writes.
pub const SIZE_SEALS: i32 = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;

/// `F_SEAL_FUTURE_WRITE` (Linux 5.1): from now on nobody can create a
/// writable shared mapping of the memfd (`mmap` gives `EPERM`, `mprotect`
/// of a read-only shared mapping gives `EACCES`), `write(2)` and hole
/// punching fail, whatever descriptor is used, even one reopened read-write
/// through `/proc/PID/fd`. Writable shared mappings that already exist keep
/// working. This is what makes a read-only export hold against its importers.
pub const FUTURE_WRITE_SEAL: i32 = libc::F_SEAL_FUTURE_WRITE;

/// Create a memfd with `MFD_CLOEXEC | MFD_ALLOW_SEALING` of `size` bytes.
///
/// `huge_page` asks for explicit huge pages of that size (`MFD_HUGETLB`); the
/// error then says that none may be reserved (`/proc/sys/vm/nr_hugepages`).
pub fn memfd(name: &str, size: u64, huge_page: Option<u64>) -> Result<OwnedFd> {
    let cname = CString::new(name).map_err(|_| Error::invalid("memfd name contains NUL"))?;
    let mut flags = libc::MFD_CLOEXEC;
    match huge_page {
        None => flags |= libc::MFD_ALLOW_SEALING,
        Some(sz) => {
            let shift = match sz {
                0x20_0000 => libc::MFD_HUGE_2MB,
                0x4000_0000 => libc::MFD_HUGE_1GB,
                _ => {
                    return Err(Error::invalid(format!(
                        "huge page size {sz} is neither 2 MiB nor 1 GiB"
                    )))
                }
            };
            flags |= libc::MFD_HUGETLB | shift | libc::MFD_ALLOW_SEALING;
        }
    }
    // SAFETY: `cname` is a valid NUL-terminated string; memfd_create has no
    // other memory-safety preconditions.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), flags) };
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        if huge_page.is_some() {
            return Err(Error::OutOfMemory {
                requested: size,
                detail: format!(
                    "memfd_create(MFD_HUGETLB) failed ({err}): no explicit huge pages of that size \
                     are available; reserve some in /proc/sys/vm/nr_hugepages or use transparent huge pages"
                ),
            });
        }
        return Err(Error::io("memfd_create", err));
    }
    // SAFETY: memfd_create returned a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    set_len(fd.as_fd(), size).map_err(|e| match (huge_page, e) {
        (Some(_), Error::Io { source, .. }) => Error::OutOfMemory {
            requested: size,
            detail: format!(
                "sizing a huge-page memfd failed ({source}): not enough explicit huge pages are \
                 reserved (/proc/sys/vm/nr_hugepages)"
            ),
        },
        (_, e) => e,
    })?;
    Ok(fd)
}

/// `ftruncate` a descriptor to `size` bytes.
pub fn set_len(fd: BorrowedFd<'_>, size: u64) -> Result<()> {
    let len = i64::try_from(size).map_err(|_| Error::invalid("size over i64::MAX"))?;
    // SAFETY: ftruncate on a valid borrowed descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len) } != 0 {
        return Err(Error::last_os("ftruncate"));
    }
    Ok(())
}

/// Add `seals` to a memfd.
pub fn add_seals(fd: BorrowedFd<'_>, seals: i32) -> Result<()> {
    // SAFETY: fcntl(F_ADD_SEALS) on a valid borrowed descriptor takes an int.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(Error::last_os("fcntl(F_ADD_SEALS)"));
    }
    Ok(())
}

/// The seals of a descriptor (an error for anything that is not a memfd).
pub fn seals(fd: BorrowedFd<'_>) -> Result<i32> {
    // SAFETY: fcntl(F_GET_SEALS) on a valid borrowed descriptor.
    let s = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if s < 0 {
        return Err(Error::last_os("fcntl(F_GET_SEALS)"));
    }
    Ok(s)
}

/// The access mode a descriptor was opened with (`O_ACCMODE` of its file
/// status flags): what a mapping of it may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessMode {
    /// `O_RDONLY`: mappings may only read.
    ReadOnly,
    /// `O_WRONLY`: no mapping at all (a shared mapping must read).
    WriteOnly,
    /// `O_RDWR`: mappings may read and write.
    ReadWrite,
}

impl AccessMode {
    /// True for `O_RDONLY` and `O_RDWR`.
    pub fn readable(self) -> bool {
        matches!(self, AccessMode::ReadOnly | AccessMode::ReadWrite)
    }

    /// True for `O_WRONLY` and `O_RDWR`.
    pub fn writable(self) -> bool {
        matches!(self, AccessMode::WriteOnly | AccessMode::ReadWrite)
    }
}

/// The access mode of a descriptor (`fcntl(F_GETFL) & O_ACCMODE`): check it
/// before mapping a received descriptor, so that a read-only descriptor for
/// writable memory is refused with a clear error instead of the `mmap`
/// `EACCES`.
pub fn access_mode(fd: BorrowedFd<'_>) -> Result<AccessMode> {
    // SAFETY: fcntl(F_GETFL) on a valid borrowed descriptor takes no argument.
    let fl = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if fl < 0 {
        return Err(Error::last_os("fcntl(F_GETFL)"));
    }
    match fl & libc::O_ACCMODE {
        libc::O_RDONLY => Ok(AccessMode::ReadOnly),
        libc::O_WRONLY => Ok(AccessMode::WriteOnly),
        libc::O_RDWR => Ok(AccessMode::ReadWrite),
        other => Err(Error::invalid(format!(
            "the descriptor's access mode {other} is none of O_RDONLY, O_WRONLY, O_RDWR"
        ))),
    }
}

/// `fstat` a descriptor.
pub fn fstat(fd: BorrowedFd<'_>) -> Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is valid for writes of one `stat`; the descriptor is valid.
    if unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(Error::last_os("fstat"));
    }
    // SAFETY: fstat succeeded and initialised `st`.
    Ok(unsafe { st.assume_init() })
}

/// Seal an allocation's memfd for export: against any change of size, and
/// against further seals (`F_SEAL_SEAL`), so that no importer can add seals
/// of its own. The first export decides, for every later export of the
/// memfd, whether it is also sealed against writes:
///
/// * a first export with `read_only` adds [`FUTURE_WRITE_SEAL`]: the
///   mappings that exist now (the exporter's) stay writable; no descriptor,
///   in any process, can write the memory from then on. A later writable
///   export of the memfd is refused with [`Error::PermissionDenied`].
/// * a first writable export seals without it. A later read-only export is
///   refused with [`Error::PermissionDenied`]: importers may already hold a
///   descriptor that writes, so read-only could not be enforced.
///
/// Concurrent first exports are decided by the kernel: one `F_ADD_SEALS`
/// wins, the other sees `F_SEAL_SEAL` and follows the winner's decision.
pub fn seal_for_export(fd: BorrowedFd<'_>, read_only: bool) -> Result<()> {
    let want = if read_only {
        EXPORT_SEALS | FUTURE_WRITE_SEAL
    } else {
        EXPORT_SEALS
    };
    match add_seals(fd, want) {
        Ok(()) => return Ok(()),
        // F_SEAL_SEAL is there: an earlier (or a concurrent) export decided.
        Err(Error::Io { source, .. }) if source.raw_os_error() == Some(libc::EPERM) => {}
        Err(Error::Io { source, .. }) => {
            return Err(Error::io(
                format!(
                    "sealing the memory for export (fcntl(F_ADD_SEALS, {want:#x}); \
                     F_SEAL_FUTURE_WRITE, for a read-only export, needs Linux 5.1 or later)"
                ),
                source,
            ))
        }
        Err(e) => return Err(e),
    }
    let s = seals(fd)?;
    if s & SIZE_SEALS != SIZE_SEALS {
        return Err(Error::invalid(format!(
            "the memory cannot be sealed for export (seals {s:#x}: a memfd created without \
             MFD_ALLOW_SEALING?), so a peer could truncate it; export memory this library \
             allocated"
        )));
    }
    match (read_only, s & FUTURE_WRITE_SEAL != 0) {
        (true, true) | (false, false) => Ok(()),
        (false, true) => Err(Error::PermissionDenied {
            pid: None,
            reason: "the allocation was first exported read-only, so its memory is sealed \
                     against writes through any new mapping or descriptor (F_SEAL_FUTURE_WRITE); \
                     export it read-only, or export another allocation writable"
                .into(),
        }),
        (true, false) => Err(Error::PermissionDenied {
            pid: None,
            reason: "the allocation was first exported writable, so its importers may hold \
                     descriptors that write it and a read-only export could not be enforced; \
                     export it writable, or copy the bytes into another allocation and export \
                     that one read-only first"
                .into(),
        }),
    }
}

/// Verify that a received descriptor is a memfd sealed against shrinking and
/// growing, of at least `min_size` bytes. Returns its size. This is what keeps
/// a hostile peer from making an importer die of `SIGBUS` by truncating.
pub fn verify_sealed_memfd(fd: BorrowedFd<'_>, min_size: u64) -> Result<u64> {
    verify_memfd_seals(fd, min_size, false)
}

/// As [`verify_sealed_memfd`], and also sealed against writes
/// ([`FUTURE_WRITE_SEAL`]): what the memory of a read-only export carries on
/// backends that promise it (`hal-cpu-shm` anonymous regions, the
/// simulator). A read-only handle backed by a memfd that another process
/// could still write (a forged handle, or an exporter that sealed it
/// otherwise) is refused with [`crate::HandleError::Descriptors`].
pub fn verify_read_only_memfd(fd: BorrowedFd<'_>, min_size: u64) -> Result<u64> {
    verify_memfd_seals(fd, min_size, true)
}

/// The checks of a received data descriptor, in an order that matters:
/// `F_GET_SEALS` first, which fails at once (`EINVAL`) for anything that is
/// not a memfd (a regular file, a pipe, a socket, a device), and only then
/// `fstat`, which for a file of a FUSE mount asks the file system daemon
/// (`getattr`) and may stall as long as the daemon likes.
fn verify_memfd_seals(fd: BorrowedFd<'_>, min_size: u64, write_sealed: bool) -> Result<u64> {
    let seals = seals(fd).map_err(|_| {
        Error::from(crate::HandleError::Descriptors(
            "the descriptor is not a sealable memfd (F_GET_SEALS refused it: a regular file, \
             pipe, socket or device was sent)"
                .into(),
        ))
    })?;
    let facts = FileFacts {
        seals,
        stat: fstat(fd)?,
    };
    verify_memfd_facts(&facts, min_size, write_sealed)
}

/// What the checks of a descriptor read, in the order that matters (see
/// [`file_facts`]): its seals, then its `fstat`.
#[derive(Clone, Copy)]
pub struct FileFacts {
    /// `F_GET_SEALS`.
    pub seals: i32,
    /// `fstat`.
    pub stat: libc::stat,
}

impl std::fmt::Debug for FileFacts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileFacts")
            .field("seals", &format_args!("{:#x}", self.seals))
            .field("dev", &self.stat.st_dev)
            .field("ino", &self.stat.st_ino)
            .field("size", &self.stat.st_size)
            .finish()
    }
}

/// The seals of `fd` (`F_GET_SEALS`, which fails at once for anything that
/// is not a memfd) and only then its `fstat` (which, for a file of a FUSE
/// mount, waits for the file system's daemon): an error from the first
/// means the descriptor is no memfd, and nothing waited on it.
pub fn file_facts(fd: BorrowedFd<'_>) -> Result<FileFacts> {
    let seals = seals(fd)?;
    Ok(FileFacts {
        seals,
        stat: fstat(fd)?,
    })
}

/// [`verify_sealed_memfd`] (`write_sealed` false) or
/// [`verify_read_only_memfd`] on what [`file_facts`] read of a descriptor:
/// the descriptor's size, or the same errors.
pub fn verify_memfd_facts(facts: &FileFacts, min_size: u64, write_sealed: bool) -> Result<u64> {
    let s = facts.seals;
    if s & SIZE_SEALS != SIZE_SEALS {
        return Err(crate::HandleError::Descriptors(format!(
            "the memfd is not sealed against shrinking and growing (seals {s:#x}); \
             refusing it so that a truncation cannot raise SIGBUS here"
        ))
        .into());
    }
    if write_sealed && s & FUTURE_WRITE_SEAL == 0 {
        return Err(crate::HandleError::Descriptors(format!(
            "the handle is read-only but its memfd is not sealed against writes (seals {s:#x}, \
             no F_SEAL_FUTURE_WRITE): other processes could still write it; the handle was \
             forged or altered, or the exporter did not seal it"
        ))
        .into());
    }
    let st = &facts.stat;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(crate::HandleError::Descriptors(
            "the sealable descriptor is not a regular memory file".into(),
        )
        .into());
    }
    let size = st.st_size as u64;
    if size < min_size {
        return Err(crate::HandleError::Descriptors(format!(
            "the memfd holds {size} bytes, fewer than the {min_size} the handle names"
        ))
        .into());
    }
    Ok(size)
}

/// A new open file description of `fd`'s object, read-only (through
/// `/proc/self/fd`): mappings of it can never be made writable, not even
/// with `mprotect`. The object itself is untouched: whoever holds it can
/// reopen it read-write the same way unless it is sealed against writes
/// ([`FUTURE_WRITE_SEAL`]).
pub fn reopen_read_only(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .open(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| Error::io("reopening a memfd read-only through /proc/self/fd", e))?;
    Ok(f.into())
}

/// The outcome of a futex wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FutexWait {
    /// Woken, or the value had already changed.
    Woken,
    /// The timeout passed.
    TimedOut,
}

/// Sleep while `word == expected` (a shared, cross-process futex), at most `timeout`.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> FutexWait {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call; the
    // timespec pointer is null or points to a live value. FUTEX_WAIT (not
    // PRIVATE) works across processes sharing the page.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            tsp,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT) {
        FutexWait::TimedOut
    } else {
        FutexWait::Woken
    }
}

/// Wake up to `n` waiters sleeping on `word` in any process.
pub fn futex_wake(word: &AtomicU32, n: u32) {
    // SAFETY: `word` is a valid, aligned u32; FUTEX_WAKE does not access
    // memory beyond the futex word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            n.min(i32::MAX as u32),
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        )
    };
}

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Duplicate a descriptor (`F_DUPFD_CLOEXEC`; never onto 0, 1 or 2).
pub fn dup(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    fd.try_clone_to_owned()
        .map_err(|e| Error::io("dup of a descriptor", e))
}

/// Duplicate a descriptor onto the lowest free number, 0 included, as a C
/// library's `dup` does: what a vendor's library hands out where the
/// process closed its standard input (the stand-in drivers do the same).
pub fn dup_lowest(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) on a valid borrowed descriptor takes
    // an int, the lowest number it may use.
    let raw = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
    if raw < 0 {
        return Err(Error::last_os("fcntl(F_DUPFD_CLOEXEC)"));
    }
    // SAFETY: the call returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Run the unit test `test` of this test binary again in a child process
/// of its own, with the variable `role` set (the test's child part), and
/// return the lines it printed after `tag`; panics unless the child passed.
#[cfg(test)]
pub(crate) fn child_test_lines(test: &str, role: &str, tag: &str) -> Vec<String> {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(role, "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the child ended with {} after:\n{text}",
        out.status
    );
    text.lines()
        .filter_map(|l| l.split_once(tag).map(|(_, r)| r.to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn sealed_memfd_is_verified_and_unsealed_refused() {
        let fd = memfd("hal-test", 8192, None).unwrap();
        assert!(verify_sealed_memfd(fd.as_fd(), 8192).is_err());
        add_seals(fd.as_fd(), EXPORT_SEALS).unwrap();
        assert_eq!(verify_sealed_memfd(fd.as_fd(), 8192).unwrap(), 8192);
        assert!(verify_sealed_memfd(fd.as_fd(), 8193).is_err());
        assert!(set_len(fd.as_fd(), 4096).is_err(), "shrink must be refused");
    }

    /// The error of a verification as text (the size on success).
    fn verdict(r: Result<u64>) -> String {
        match r {
            Ok(size) => format!("ok {size}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn descriptors_that_are_not_memfds_are_refused_by_their_seals_first() {
        // Every one of these passes fstat; F_GET_SEALS refuses each, and the
        // verification asks it first (an fstat first would call the pipe
        // and the socket "not a memory file", and could stall on a FUSE
        // file, whose getattr goes to its daemon).
        let (pipe_r, pipe_w) = nix::unistd::pipe().unwrap();
        let (sock, _peer) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::Stream,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        let null = std::fs::File::open("/dev/null").unwrap();
        let cases: [(&str, BorrowedFd<'_>); 5] = [
            ("pipe read end", pipe_r.as_fd()),
            ("pipe write end", pipe_w.as_fd()),
            ("socket", sock.as_fd()),
            ("regular file", file.as_fd()),
            ("/dev/null", null.as_fd()),
        ];
        for (what, fd) in cases {
            assert!(fstat(fd).is_ok(), "{what}: fstat works on it");
            for v in [verify_sealed_memfd(fd, 0), verify_read_only_memfd(fd, 0)] {
                let e = verdict(v);
                assert!(
                    e.contains("F_GET_SEALS refused it"),
                    "{what}: refused by something else first: {e}"
                );
            }
        }
    }

    #[test]
    fn read_only_first_export_seals_against_every_later_write() {
        let fd = memfd("hal-test", 8192, None).unwrap();
        add_seals(fd.as_fd(), SIZE_SEALS).unwrap();
        let mine = SharedMap::map(fd.as_fd(), 8192, 0, Prot::ReadWrite, None).unwrap();
        assert!(
            verdict(verify_read_only_memfd(fd.as_fd(), 8192)).contains("F_SEAL_FUTURE_WRITE"),
            "a memfd that is not write-sealed passes as read-only"
        );
        seal_for_export(fd.as_fd(), true).unwrap();
        assert_eq!(
            seals(fd.as_fd()).unwrap(),
            EXPORT_SEALS | FUTURE_WRITE_SEAL,
            "seals of a read-only first export"
        );
        assert_eq!(verdict(verify_read_only_memfd(fd.as_fd(), 8192)), "ok 8192");
        assert_eq!(verdict(verify_sealed_memfd(fd.as_fd(), 8192)), "ok 8192");
        // The exporter's mapping, made before, still writes.
        mine.write(0, b"exporter").unwrap();
        // Nobody else can, not even through a read-write reopen.
        let rw = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .unwrap();
        assert_eq!(access_mode(rw.as_fd()).unwrap(), AccessMode::ReadWrite);
        for f in [fd.as_fd(), rw.as_fd()] {
            let e = SharedMap::map(f, 8192, 0, Prot::ReadWrite, None).unwrap_err();
            assert!(
                matches!(&e, Error::Io { source, .. } if source.raw_os_error() == Some(libc::EPERM)),
                "{e}"
            );
            assert!(
                nix::sys::uio::pwrite(f, b"x", 0).is_err(),
                "pwrite went through"
            );
        }
        let ro = SharedMap::map(rw.as_fd(), 8192, 0, Prot::Read, None).unwrap();
        assert!(
            ro.protect(0, 4096, Prot::ReadWrite).is_err(),
            "mprotect made it writable"
        );
        let mut got = [0u8; 8];
        ro.read(0, &mut got).unwrap();
        assert_eq!(&got, b"exporter");
        // Later exports follow the first: read-only again is fine, writable
        // is refused.
        seal_for_export(fd.as_fd(), true).unwrap();
        let e = seal_for_export(fd.as_fd(), false).unwrap_err();
        assert!(
            matches!(&e, Error::PermissionDenied { reason, .. } if reason.contains("first exported read-only")),
            "{e}"
        );
    }

    #[test]
    fn writable_first_export_refuses_a_later_read_only_one() {
        let fd = memfd("hal-test", 4096, None).unwrap();
        add_seals(fd.as_fd(), SIZE_SEALS).unwrap();
        seal_for_export(fd.as_fd(), false).unwrap();
        assert_eq!(seals(fd.as_fd()).unwrap(), EXPORT_SEALS);
        seal_for_export(fd.as_fd(), false).unwrap();
        let e = seal_for_export(fd.as_fd(), true).unwrap_err();
        assert!(
            matches!(&e, Error::PermissionDenied { reason, .. } if reason.contains("first exported writable")),
            "{e}"
        );
        assert!(verify_read_only_memfd(fd.as_fd(), 4096).is_err());
        assert_eq!(verdict(verify_sealed_memfd(fd.as_fd(), 4096)), "ok 4096");
        // Still writable by a new mapping: the export did not seal writes.
        let m = SharedMap::map(fd.as_fd(), 4096, 0, Prot::ReadWrite, None).unwrap();
        m.write(0, b"w").unwrap();
        // An unsealable descriptor is an error, not a decision.
        let (r, w) = nix::unistd::pipe().unwrap();
        for read_only in [false, true] {
            // F_ADD_SEALS: EPERM for a descriptor not open for writing (as
            // for a sealed memfd), then F_GET_SEALS refuses it.
            assert!(seal_for_export(r.as_fd(), read_only).is_err());
            // EINVAL for one that is: refused at once.
            let e = seal_for_export(w.as_fd(), read_only).unwrap_err();
            assert!(
                e.to_string().contains("sealing the memory for export"),
                "{e}"
            );
        }
        // So is a memfd made without MFD_ALLOW_SEALING (born with F_SEAL_SEAL).
        let unsealable = nix::sys::memfd::memfd_create(
            c"hal-test",
            nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC,
        )
        .unwrap();
        for read_only in [false, true] {
            let e = seal_for_export(unsealable.as_fd(), read_only).unwrap_err();
            assert!(e.to_string().contains("MFD_ALLOW_SEALING"), "{e}");
        }
    }

    #[test]
    fn access_mode_of_read_write_and_read_only_descriptors() {
        let fd = memfd("hal-test", 4096, None).unwrap();
        let rw = access_mode(fd.as_fd()).unwrap();
        assert_eq!(rw, AccessMode::ReadWrite);
        assert!(rw.readable() && rw.writable());
        let ro = std::fs::File::open(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
        let mode = access_mode(ro.as_fd()).unwrap();
        assert_eq!(mode, AccessMode::ReadOnly);
        assert!(mode.readable() && !mode.writable());
    }

    #[test]
    fn map_read_write_and_fixed_address_conflict() {
        let fd = memfd("hal-test", 4096, None).unwrap();
        let a = SharedMap::map(fd.as_fd(), 4096, 0, Prot::ReadWrite, None).unwrap();
        a.write(10, b"hello").unwrap();
        let b = SharedMap::map(fd.as_fd(), 4096, 0, Prot::Read, None).unwrap();
        let mut out = [0u8; 5];
        b.read(10, &mut out).unwrap();
        assert_eq!(&out, b"hello");
        let e = SharedMap::map(fd.as_fd(), 4096, 0, Prot::Read, Some(a.as_ptr() as u64));
        assert!(matches!(e, Err(Error::AlreadyExists { .. })), "{e:?}");
        assert!(a.read(4095, &mut out).is_err());
    }

    /// The child half of `shared_map_refuses_write_to_read_only`: every
    /// access a protection forbids, each of which faulted before the
    /// protection was kept. Prints what each gave.
    fn forbidden_accesses() {
        let fd = memfd("hal-test", 8192, None).unwrap();
        let ro = SharedMap::map(fd.as_fd(), 8192, 0, Prot::Read, None).unwrap();
        let none = SharedMap::reserve(8192, None).unwrap();
        let kind = |r: Result<()>| r.map_or_else(|e| e.kind_name().to_string(), |()| "ok".into());
        let mut buf = [0u8; 4];
        println!("@os@ write {}", kind(ro.write(8, b"boom")));
        println!(
            "@os@ atomic32 {}",
            kind(ro.atomic_u32(0).map(|a| a.store(1, Ordering::SeqCst)))
        );
        println!(
            "@os@ atomic64 {}",
            kind(ro.atomic_u64(8).map(|a| a.store(1, Ordering::SeqCst)))
        );
        println!("@os@ read-none {}", kind(none.read(0, &mut buf)));
        println!("@os@ write-none {}", kind(none.write(0, b"boom")));
        println!("@os@ done");
    }

    #[test]
    fn shared_map_refuses_write_to_read_only() {
        const ROLE: &str = "HAL_OS_TEST_CHILD";
        if std::env::var_os(ROLE).is_some() {
            forbidden_accesses();
            return;
        }
        // In a child process of its own, so that a fault shows as its death
        // rather than killing the test run.
        let lines = child_test_lines(
            "kit::os::tests::shared_map_refuses_write_to_read_only",
            ROLE,
            "@os@ ",
        );
        assert_eq!(
            lines,
            [
                "write permission-denied",
                "atomic32 permission-denied",
                "atomic64 permission-denied",
                "read-none permission-denied",
                "write-none permission-denied",
                "done"
            ]
        );
    }

    #[test]
    fn protections_follow_protect_map_over_and_unmap_part() {
        let page = page_size();
        let fd = memfd("hal-test", 4 * page, None).unwrap();
        let m = SharedMap::reserve(8 * page, None).unwrap();
        assert_eq!(m.protection_at(0), Some(Prot::None));
        assert_eq!(m.protection_at(8 * page), None);
        // Pages 2..6 read-write, then page 3 read-only, page 5 unmapped.
        m.map_over(2 * page, fd.as_fd(), 0, 4 * page, Prot::ReadWrite)
            .unwrap();
        m.protect(3 * page, page, Prot::Read).unwrap();
        m.unmap_part(5 * page, page).unwrap();
        let expect = [
            Prot::None,
            Prot::None,
            Prot::ReadWrite,
            Prot::Read,
            Prot::ReadWrite,
            Prot::None,
            Prot::None,
            Prot::None,
        ];
        for (i, p) in expect.iter().enumerate() {
            let at = i as u64 * page;
            assert_eq!(m.protection_at(at), Some(*p), "page {i}");
            assert_eq!(m.protection_at(at + page - 1), Some(*p), "end of page {i}");
            let mut b = [0u8; 1];
            assert_eq!(m.read(at, &mut b).is_ok(), p.readable(), "read page {i}");
            assert_eq!(m.write(at, b"w").is_ok(), p.writable(), "write page {i}");
        }
        let mut two = vec![0u8; 2 * page as usize];
        // Copies that span pages need every page to allow them.
        m.write(2 * page + 1, b"ab").unwrap();
        assert!(
            m.write(3 * page - 1, b"ab").is_err(),
            "into the read-only page"
        );
        m.read(2 * page, &mut two).unwrap();
        assert!(
            m.read(4 * page, &mut two).is_err(),
            "into the unmapped page"
        );
        assert!(m.read(page, &mut two).is_err(), "from the reserved page");
        // Zero bytes need nothing.
        m.read(0, &mut []).unwrap();
        m.write(3 * page, &[]).unwrap();
        // Back to read-write all over pages 2..5: one piece again.
        m.protect(3 * page, page, Prot::ReadWrite).unwrap();
        m.write(2 * page, &vec![7u8; 3 * page as usize]).unwrap();
        // A failed protection change records nothing.
        assert!(
            m.protect(page + 1, page, Prot::ReadWrite).is_err(),
            "mprotect of an unaligned range"
        );
        assert_eq!(m.protection_at(page + 1), Some(Prot::None));
        assert!(
            m.protect(7 * page, 2 * page, Prot::Read).is_err(),
            "out of bounds"
        );
        // Once an atomic is handed out, protections stay as they are.
        let a = m.atomic_u32(2 * page as usize).unwrap();
        a.store(5, Ordering::SeqCst);
        let e = m.protect(2 * page, page, Prot::None).unwrap_err();
        assert!(e.to_string().contains("atomic"), "{e}");
        assert!(m.unmap_part(2 * page, page).is_err());
        assert!(m
            .map_over(2 * page, fd.as_fd(), 0, page, Prot::None)
            .is_err());
        assert_eq!(m.protection_at(2 * page), Some(Prot::ReadWrite));
        assert_eq!(a.load(Ordering::SeqCst), 5);
    }

    #[test]
    fn futex_times_out_and_wakes() {
        let w = AtomicU32::new(0);
        assert_eq!(
            futex_wait(&w, 0, Some(Duration::from_millis(5))),
            FutexWait::TimedOut
        );
        assert_eq!(futex_wait(&w, 1, None), FutexWait::Woken);
        w.store(1, Ordering::SeqCst);
        futex_wake(&w, 1);
    }

    #[test]
    fn identity_and_liveness() {
        let (pid, start) = self_identity();
        assert!(start > 0);
        assert!(process_alive(pid, start));
        assert!(!process_alive(pid, start + 1));
        assert!(!process_alive(0, 0));
        assert_ne!(random_id(), random_id());
    }

    #[test]
    fn pid_namespace_is_the_inode_of_proc_self_ns_pid() {
        let link = std::fs::read_link("/proc/self/ns/pid").unwrap();
        let link = link.to_string_lossy();
        let inode: u64 = link
            .strip_prefix("pid:[")
            .and_then(|s| s.strip_suffix(']'))
            .unwrap()
            .parse()
            .unwrap();
        assert_ne!(inode, 0);
        assert_eq!(pid_namespace(), inode);
        assert_eq!(pid_namespace(), pid_namespace());
    }
}
