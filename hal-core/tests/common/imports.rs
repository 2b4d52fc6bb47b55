//! What the import tests share: handles of this process's memory, memfds
//! holding a few bytes, and imports of handle texts that read them back.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;

use hal_core::exchange::{self, Lease};
use hal_core::kit::os;
use hal_core::{
    BackendId, Error, FdSource, Handle, HandleFlags, HandleKind, Location, PidKind, SharedHandle,
};

/// A handle of 4096 bytes of host memory (cpu-shm) created by this
/// process, open as `flags` and `allowed` say, carrying `payload`.
pub fn memory_handle(flags: HandleFlags, allowed: Vec<u32>, payload: &[u8]) -> Handle {
    let (pid, start) = os::self_identity();
    Handle {
        kind: HandleKind::Memory,
        backend: BackendId::CpuShm,
        device: 0,
        device_uuid: [0x33; 16],
        location: Location::Host,
        size: 4096,
        offset: 0,
        address: 0,
        creator_pid: pid,
        creator_start: start,
        creator_pid_ns: os::pid_namespace(),
        object_id: os::random_id(),
        flags,
        pid_kind: PidKind::Os,
        allowed_pids: allowed,
        fds: FdSource::None,
        payload: payload.to_vec(),
    }
}

/// A memfd of 4096 bytes that begins with `bytes`.
pub fn memfd_with(bytes: &[u8]) -> OwnedFd {
    let fd = os::memfd("hal-import-test", 4096, None).expect("memfd");
    File::from(os::dup(fd.as_fd()).expect("dup"))
        .write_all_at(bytes, 0)
        .expect("write memfd");
    fd
}

/// The first three bytes of `fd`, as text.
pub fn read_fd(fd: &OwnedFd) -> String {
    let mut buf = vec![0u8; 3];
    File::from(os::dup(fd.as_fd()).expect("dup"))
        .read_exact_at(&mut buf, 0)
        .expect("read memfd");
    String::from_utf8(buf).expect("utf-8")
}

/// This process's open descriptors.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

/// The handle of `text`, as an importer holds it.
pub fn shared(text: &str) -> SharedHandle {
    SharedHandle::from(exchange::decode(text).expect("decode"))
}

/// Import `text` with a lease: the first bytes and the lease.
pub fn import(text: &str) -> Result<(String, Option<Lease>), Error> {
    let taken = exchange::take_fds_leased(&mut shared(text))?;
    Ok((read_fd(&taken.fds[0]), taken.lease))
}
