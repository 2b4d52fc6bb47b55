//! Operating-system building blocks shared by the backends: sealed memfds,
//! shared mappings, futexes on shared memory, process identity and liveness,
//! and random ids.
//!
//! Every `unsafe` call of the crate that touches the OS lives here, each in a
//! small function with its `SAFETY:` argument.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::sync::OnceLock;
use std::time::Duration;

use crate::error::{Error, Result};

/// The seals an exported memfd carries: its size can never change again.
pub const EXPORT_SEALS: i32 = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

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

/// Verify that a received descriptor is a memfd sealed against shrinking and
/// growing, of at least `min_size` bytes. Returns its size. This is what keeps
/// a hostile peer from making an importer die of `SIGBUS` by truncating.
pub fn verify_sealed_memfd(fd: BorrowedFd<'_>, min_size: u64) -> Result<u64> {
    let st = fstat(fd)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(crate::HandleError::Descriptors(
            "the descriptor is not a memory file (a pipe, socket or device was sent)".into(),
        )
        .into());
    }
    let s = seals(fd).map_err(|_| {
        Error::from(crate::HandleError::Descriptors(
            "the descriptor is not a sealable memfd (a regular file was sent?)".into(),
        ))
    })?;
    let need = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
    if s & need != need {
        return Err(crate::HandleError::Descriptors(format!(
            "the memfd is not sealed against shrinking and growing (seals {s:#x}); \
             refusing it so that a truncation cannot raise SIGBUS here"
        ))
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

/// Protection of a shared mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prot {
    /// Read only.
    Read,
    /// Read and write.
    ReadWrite,
    /// No access (a reservation).
    None,
}

impl Prot {
    fn bits(self) -> i32 {
        match self {
            Prot::Read => libc::PROT_READ,
            Prot::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
            Prot::None => libc::PROT_NONE,
        }
    }
}

/// A `MAP_SHARED` mapping of a descriptor (or an anonymous `PROT_NONE`
/// reservation), unmapped on drop.
#[derive(Debug)]
pub struct SharedMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; concurrent access
// from several threads is governed by the users of the bytes (atomics or
// copies), exactly as for memory shared with another process.
unsafe impl Send for SharedMap {}
// SAFETY: see `Send`; `&SharedMap` only hands out raw pointers.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// Map `len` bytes of `fd` at `offset`.
    ///
    /// With `at`, the mapping goes exactly there (`MAP_FIXED_NOREPLACE`) and
    /// fails with [`Error::AlreadyExists`] when that range is taken.
    pub fn map(
        fd: BorrowedFd<'_>,
        len: u64,
        offset: u64,
        prot: Prot,
        at: Option<u64>,
    ) -> Result<SharedMap> {
        Self::mmap(Some(fd), len, offset, prot, at, 0)
    }

    /// Reserve `len` bytes of address space with no access and no memory.
    pub fn reserve(len: u64, at: Option<u64>) -> Result<SharedMap> {
        Self::mmap(None, len, 0, Prot::None, at, libc::MAP_NORESERVE)
    }

    fn mmap(
        fd: Option<BorrowedFd<'_>>,
        len: u64,
        offset: u64,
        prot: Prot,
        at: Option<u64>,
        extra: i32,
    ) -> Result<SharedMap> {
        let len_us = usize::try_from(len).map_err(|_| Error::invalid("mapping too large"))?;
        if len_us == 0 {
            return Err(Error::invalid("cannot map zero bytes"));
        }
        let off = libc::off_t::try_from(offset).map_err(|_| Error::invalid("offset too large"))?;
        let mut flags = extra
            | if fd.is_some() {
                libc::MAP_SHARED
            } else {
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS
            };
        if at.is_some() {
            flags |= libc::MAP_FIXED_NOREPLACE;
        }
        let hint = at.unwrap_or(0) as usize as *mut libc::c_void;
        let raw = fd.map_or(-1, |f| f.as_raw_fd());
        // SAFETY: a fresh mapping: with MAP_FIXED_NOREPLACE the kernel refuses
        // to replace existing mappings, so no memory of this process changes
        // under anyone's feet.
        let p = unsafe { libc::mmap(hint, len_us, prot.bits(), flags, raw, off) };
        if p == libc::MAP_FAILED {
            let err = std::io::Error::last_os_error();
            if at.is_some() && err.raw_os_error() == Some(libc::EEXIST) {
                return Err(Error::AlreadyExists {
                    what: format!(
                        "address range {:#x}+{len:#x} is already mapped in this process",
                        at.unwrap_or(0)
                    ),
                });
            }
            if err.raw_os_error() == Some(libc::ENOMEM) {
                return Err(Error::OutOfMemory {
                    requested: len,
                    detail: format!("mmap: {err}"),
                });
            }
            return Err(Error::io("mmap", err));
        }
        if let Some(want) = at {
            if p as u64 != want {
                // Kernels before 4.17 ignore MAP_FIXED_NOREPLACE and treat it as a hint.
                let _ = SharedMap {
                    // SAFETY: mmap succeeded, so p is non-null.
                    ptr: unsafe { NonNull::new_unchecked(p.cast()) },
                    len: len_us,
                };
                return Err(Error::AlreadyExists {
                    what: format!("address {want:#x} is not free in this process"),
                });
            }
        }
        Ok(SharedMap {
            // SAFETY: mmap succeeded, so p is non-null.
            ptr: unsafe { NonNull::new_unchecked(p.cast()) },
            len: len_us,
        })
    }

    /// Map `len` bytes of `fd` over part of this mapping (`MAP_FIXED`), for
    /// VMM-style reservations. `offset` is relative to this mapping.
    pub fn map_over(
        &self,
        offset: u64,
        fd: BorrowedFd<'_>,
        fd_offset: u64,
        len: u64,
        prot: Prot,
    ) -> Result<()> {
        self.check_sub(offset, len)?;
        let off =
            libc::off_t::try_from(fd_offset).map_err(|_| Error::invalid("offset too large"))?;
        // SAFETY: the target range lies inside this mapping, which this value
        // owns; MAP_FIXED replaces only those pages.
        let p = unsafe {
            libc::mmap(
                self.ptr.as_ptr().add(offset as usize).cast(),
                len as usize,
                prot.bits(),
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd.as_raw_fd(),
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::last_os("mmap(MAP_FIXED)"));
        }
        Ok(())
    }

    /// Return part of this mapping to a no-access reservation.
    pub fn unmap_part(&self, offset: u64, len: u64) -> Result<()> {
        self.check_sub(offset, len)?;
        // SAFETY: the range lies inside this mapping, which this value owns.
        let p = unsafe {
            libc::mmap(
                self.ptr.as_ptr().add(offset as usize).cast(),
                len as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::last_os("mmap(MAP_FIXED) to unmap"));
        }
        Ok(())
    }

    /// Change the protection of part of this mapping.
    pub fn protect(&self, offset: u64, len: u64, prot: Prot) -> Result<()> {
        self.check_sub(offset, len)?;
        // SAFETY: the range lies inside this mapping, which this value owns.
        let r = unsafe {
            libc::mprotect(
                self.ptr.as_ptr().add(offset as usize).cast(),
                len as usize,
                prot.bits(),
            )
        };
        if r != 0 {
            return Err(Error::last_os("mprotect"));
        }
        Ok(())
    }

    fn check_sub(&self, offset: u64, len: u64) -> Result<()> {
        crate::device::check_bounds(offset, len, self.len as u64)
    }

    /// First byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty (never, for a successful map).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A reference to a `u32` atomic at `offset` (4-byte aligned, in bounds).
    pub fn atomic_u32(&self, offset: usize) -> Result<&AtomicU32> {
        if offset % 4 != 0 || offset.checked_add(4).is_none_or(|e| e > self.len) {
            return Err(Error::invalid(format!(
                "atomic at {offset} outside the mapping"
            )));
        }
        // SAFETY: in bounds and aligned (page-aligned base + multiple of 4);
        // AtomicU32 has the layout of u32 and the memory lives as long as `self`.
        Ok(unsafe { &*self.ptr.as_ptr().add(offset).cast::<AtomicU32>() })
    }

    /// A reference to a `u64` atomic at `offset` (8-byte aligned, in bounds).
    pub fn atomic_u64(&self, offset: usize) -> Result<&std::sync::atomic::AtomicU64> {
        if offset % 8 != 0 || offset.checked_add(8).is_none_or(|e| e > self.len) {
            return Err(Error::invalid(format!(
                "atomic at {offset} outside the mapping"
            )));
        }
        // SAFETY: in bounds and aligned; AtomicU64 has the layout of u64 and
        // the memory lives as long as `self`.
        Ok(unsafe { &*self.ptr.as_ptr().add(offset).cast() })
    }

    /// Copy out of the mapping.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.check_sub(offset, dst.len() as u64)?;
        // SAFETY: the source range is inside the mapping; `dst` is a distinct
        // exclusive buffer. Another process may write concurrently: the bytes
        // read are then some mix, never undefined behaviour for plain u8 data
        // copied without references into the shared region.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset as usize),
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
        Ok(())
    }

    /// Copy into the mapping.
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.check_sub(offset, src.len() as u64)?;
        // SAFETY: the destination range is inside the mapping; `src` does not
        // overlap it (it is a Rust slice borrowed elsewhere).
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.ptr.as_ptr().add(offset as usize),
                src.len(),
            )
        };
        Ok(())
    }

    /// `madvise` part of the mapping.
    pub fn advise(&self, offset: u64, len: u64, advice: i32) -> Result<()> {
        self.check_sub(offset, len)?;
        // SAFETY: the range is inside this mapping; madvise does not change
        // memory contents for the advices backends use (HUGEPAGE, WILLNEED,
        // POPULATE_WRITE).
        let r = unsafe {
            libc::madvise(
                self.ptr.as_ptr().add(offset as usize).cast(),
                len as usize,
                advice,
            )
        };
        if r != 0 {
            return Err(Error::last_os("madvise"));
        }
        Ok(())
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: the range was mapped by this value and nothing borrows it
        // any more (borrows are tied to `&self`).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
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

/// This process's pid.
pub fn pid() -> u32 {
    std::process::id()
}

/// The start time of process `pid` in clock ticks since boot (field 22 of
/// `/proc/PID/stat`), or `None` when no such process exists.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields
    // resume after its last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// This process's (pid, start time), computed once per process.
pub fn self_identity() -> (u32, u64) {
    static ID: OnceLock<(u32, u64)> = OnceLock::new();
    let pid = pid();
    let &(cached_pid, start) =
        ID.get_or_init(|| (pid, process_start_time(pid).unwrap_or_default()));
    if cached_pid == pid {
        (pid, start)
    } else {
        // A forked child inherits the cache; recompute.
        (pid, process_start_time(pid).unwrap_or_default())
    }
}

/// True when the process `pid` that started at `start` is still alive (a
/// zombie, or a process already in its exit path, counts as dead).
/// `start == 0` means unknown and trusts the pid alone.
pub fn process_alive(pid: u32, start: u64) -> bool {
    if pid == 0 {
        return false;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(close) = stat.rfind(')') else {
        return false;
    };
    // Fields after the command name: state (field 3), ..., flags (field 9),
    // ..., start time (field 22).
    let fields: Vec<&str> = stat[close + 1..].split_ascii_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return false;
    }
    // A process being torn down (PF_EXITING, set at the start of the kernel's
    // exit path, before its descriptors are closed and before it shows as a
    // zombie) counts as dead too: otherwise a peer that sees the dying
    // process's sockets close reads it as alive and misreports the cause
    // (for example an exporter killed during a broker fetch gave NotFound
    // instead of Closed).
    const PF_EXITING: u64 = 0x4;
    if fields
        .get(6)
        .and_then(|s| s.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_EXITING != 0)
    {
        return false;
    }
    start == 0 || fields.get(19).and_then(|s| s.parse::<u64>().ok()) == Some(start)
}

/// 16 random bytes from the kernel (`getrandom`).
pub fn random_id() -> [u8; 16] {
    let mut buf = [0u8; 16];
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: the destination is the unfilled tail of `buf`.
        let n =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n > 0 {
            filled += n as usize;
        } else if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // getrandom cannot fail on Linux >= 3.17 once the pool is ready;
            // fall back on time and pid rather than panic.
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos();
            buf[..16].copy_from_slice(&(t ^ ((pid() as u128) << 64)).to_le_bytes());
            break;
        }
    }
    buf
}

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The page size of this machine.
pub fn page_size() -> u64 {
    static PS: OnceLock<u64> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PS.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as u64,
        _ => 4096,
    })
}

/// Duplicate a descriptor (`F_DUPFD_CLOEXEC`).
pub fn dup(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    fd.try_clone_to_owned()
        .map_err(|e| Error::io("dup of a descriptor", e))
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
}
