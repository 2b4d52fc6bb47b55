//! Two more floors for an import, beside the descriptor received over a new
//! connection ([`crate::raw`]):
//!
//! - a named region: `shm_open` + `fstat` + `mmap` + first touch of a POSIX
//!   shared memory object the exporter created (the cheapest way another
//!   process of the same user maps the same bytes);
//! - a descriptor already received: `recvmsg` of a sealed memfd the
//!   exporter queued on a socket beforehand + seals check + `mmap` + first
//!   touch (the floor of any descriptor-passing import).

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hal::kit::os::{self, Prot, SharedMap};
use nix::fcntl::OFlag;
use nix::sys::socket::{self, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType};
use nix::sys::stat::Mode;

use crate::fail::{CmdResult, Context, Fail};
use crate::raw::RAW_MARKER;

/// Named regions `/{prefix}{i}` of `size` bytes, their first byte
/// [`RAW_MARKER`]; unlinked on drop.
pub struct ShmSet {
    prefix: String,
    count: usize,
}

impl ShmSet {
    pub fn new(size: u64, count: usize) -> CmdResult<ShmSet> {
        let prefix = format!(
            "halctl-bench-{}-{}-",
            std::process::id(),
            os::hex(&os::random_id()[..4])
        );
        let mut set = ShmSet { prefix, count: 0 };
        for i in 0..count {
            let name = set.name(i);
            let fd = nix::sys::mman::shm_open(
                name.as_str(),
                OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR | OFlag::O_CLOEXEC,
                Mode::S_IRUSR | Mode::S_IWUSR,
            )
            .map_err(|e| Fail::failed(format!("shm_open {name}: {e}")))?;
            set.count = i + 1;
            let file = File::from(fd);
            file.set_len(size)
                .map_err(|e| Fail::failed(format!("sizing {name}: {e}")))?;
            file.write_all_at(&[RAW_MARKER], 0)
                .map_err(|e| Fail::failed(format!("writing {name}: {e}")))?;
        }
        Ok(set)
    }

    /// The prefix the consumer opens `/{prefix}{i}` with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn name(&self, i: usize) -> String {
        format!("/{}{i}", self.prefix)
    }
}

impl Drop for ShmSet {
    fn drop(&mut self) {
        for i in 0..self.count {
            let _ = nix::sys::mman::shm_unlink(self.name(i).as_str());
        }
    }
}

/// Consumer: `shm_open` + `fstat` + `mmap` + first touch of `/{prefix}{i}`.
pub fn shm_import(prefix: &str, i: usize, size: u64) -> CmdResult<(Duration, u8)> {
    let name = format!("/{prefix}{i}");
    let t0 = Instant::now();
    let fd = nix::sys::mman::shm_open(
        name.as_str(),
        OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Fail::failed(format!("shm_open {name}: {e}")))?;
    let st = os::fstat(fd.as_fd()).ctx("fstat of a named region")?;
    if (st.st_size as u64) < size {
        return Err(Fail::failed("a named region of the baseline is short"));
    }
    let map = SharedMap::map(fd.as_fd(), size, 0, Prot::Read, None).ctx("mmap")?;
    let first = std::hint::black_box(touch(&map));
    let elapsed = t0.elapsed();
    drop(map);
    Ok((elapsed, first))
}

/// The exporter's side of the received-descriptor baseline: `count` sealed
/// memfds, written one per message on a socket whose other end goes to
/// the consumer (a thread writes them, ahead of the consumer's reads).
pub struct RecvQueue {
    fds: Vec<OwnedFd>,
    mine: OwnedFd,
    theirs: Option<OwnedFd>,
}

impl RecvQueue {
    pub fn new(size: u64, count: usize) -> CmdResult<RecvQueue> {
        let (mine, theirs) = socket::socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| Fail::failed(format!("socketpair: {e}")))?;
        let fds = crate::raw::sealed_probes(size, count)?;
        Ok(RecvQueue {
            fds,
            mine,
            theirs: Some(theirs),
        })
    }

    /// The consumer's end (sent with the command).
    pub fn take_theirs(&mut self) -> CmdResult<OwnedFd> {
        self.theirs
            .take()
            .ok_or_else(|| Fail::failed("the queue's end was already taken"))
    }

    /// Write every descriptor, one per message, on a thread.
    pub fn feed(self) -> JoinHandle<CmdResult<()>> {
        std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            for fd in &self.fds {
                let raw = [fd.as_raw_fd()];
                let cmsg = [ControlMessage::ScmRights(&raw)];
                let iov = [std::io::IoSlice::new(b"F")];
                socket::sendmsg::<()>(
                    self.mine.as_raw_fd(),
                    &iov,
                    &cmsg,
                    MsgFlags::MSG_NOSIGNAL,
                    None,
                )
                .map_err(|e| Fail::failed(format!("queueing a descriptor: {e}")))?;
            }
            Ok(())
        })
    }
}

/// Consumer: `recvmsg` of a queued descriptor + seals check + `mmap` +
/// first touch.
pub fn recv_import(queue: &OwnedFd, size: u64) -> CmdResult<(Duration, u8)> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let t0 = Instant::now();
    let mut buf = [0u8; 8];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let msg = socket::recvmsg::<()>(
        queue.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(|e| Fail::failed(format!("recvmsg of a queued descriptor: {e}")))?;
    let mut fd = None;
    for c in msg
        .cmsgs()
        .map_err(|e| Fail::failed(format!("control messages: {e}")))?
    {
        if let socket::ControlMessageOwned::ScmRights(r) = c {
            for raw in r {
                // SAFETY: the kernel installed this descriptor for this
                // reception; nothing else owns it.
                fd = Some(unsafe { OwnedFd::from_raw_fd(raw) });
            }
        }
    }
    let fd = fd.ok_or_else(|| Fail::failed("a queued descriptor did not arrive"))?;
    os::verify_sealed_memfd(fd.as_fd(), size).ctx("seals of a queued memfd")?;
    let map = SharedMap::map(fd.as_fd(), size, 0, Prot::Read, None).ctx("mmap")?;
    let first = std::hint::black_box(touch(&map));
    let elapsed = t0.elapsed();
    drop(map);
    Ok((elapsed, first))
}

fn touch(map: &SharedMap) -> u8 {
    let mut b = [0u8; 1];
    let _ = map.read(0, &mut b);
    b[0]
}
