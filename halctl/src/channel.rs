//! A message channel between the demo's two processes: a `SOCK_SEQPACKET`
//! Unix socket on an abstract address (nothing on the filesystem), carrying
//! whole messages and, for the raw baselines, file descriptors (`SCM_RIGHTS`).
//!
//! The listening side checks the connecting peer's pid (`SO_PEERCRED`), so
//! another process that guesses the abstract name is refused.

use std::io::IoSlice;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{
    self, sockopt, AddressFamily, Backlog, ControlMessage, MsgFlags, SockFlag, SockType, UnixAddr,
};
use nix::sys::time::TimeVal;

use crate::fail::{CmdResult, Fail};

/// Largest message the channel carries.
const MAX_MESSAGE: usize = 64 * 1024;
/// Most descriptors one message carries.
const MAX_FDS: usize = 4;

fn sys(context: &str, e: Errno) -> Fail {
    Fail::failed(format!("{context}: {}", std::io::Error::from(e)))
}

fn seqpacket() -> CmdResult<OwnedFd> {
    socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| sys("socket(AF_UNIX, SOCK_SEQPACKET)", e))
}

/// A listening socket on a fresh abstract name.
#[derive(Debug)]
pub struct Listener {
    fd: OwnedFd,
    name: String,
}

impl Listener {
    /// Listen on `<prefix>-<pid>-<random>`.
    pub fn bind(prefix: &str) -> CmdResult<Listener> {
        let fd = seqpacket()?;
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            hal::kit::os::hex(&hal::kit::os::random_id()[..8])
        );
        let addr = UnixAddr::new_abstract(name.as_bytes())
            .map_err(|e| sys("abstract socket address", e))?;
        socket::bind(fd.as_raw_fd(), &addr).map_err(|e| sys("bind", e))?;
        let backlog = Backlog::new(8).map_err(|e| sys("listen backlog", e))?;
        socket::listen(&fd, backlog).map_err(|e| sys("listen", e))?;
        Ok(Listener { fd, name })
    }

    /// The abstract name (without the leading NUL).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Accept one connection from process `pid` within `timeout`. Connections
    /// from other processes are closed and ignored.
    pub fn accept_from(&self, pid: u32, timeout: Duration) -> CmdResult<Channel> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Fail::failed(format!(
                    "process {pid} did not connect within {timeout:?}"
                )));
            }
            let ms = PollTimeout::try_from(left.as_millis().max(1)).unwrap_or(PollTimeout::MAX);
            let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, ms) {
                Ok(0) => continue,
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(sys("poll", e)),
            }
            let raw = match socket::accept4(self.fd.as_raw_fd(), SockFlag::SOCK_CLOEXEC) {
                Ok(raw) => raw,
                Err(Errno::EINTR | Errno::EAGAIN | Errno::ECONNABORTED) => continue,
                Err(e) => return Err(sys("accept", e)),
            };
            // SAFETY: accept4 returned a fresh descriptor that nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            let chan = Channel { fd };
            if chan.peer_pid()? == pid {
                return Ok(chan);
            }
        }
    }
}

/// One connected end of a channel.
#[derive(Debug)]
pub struct Channel {
    fd: OwnedFd,
}

impl Channel {
    /// Connect to the listener named `name`.
    pub fn connect(name: &str) -> CmdResult<Channel> {
        let fd = seqpacket()?;
        let addr = UnixAddr::new_abstract(name.as_bytes())
            .map_err(|e| sys("abstract socket address", e))?;
        loop {
            match socket::connect(fd.as_raw_fd(), &addr) {
                Ok(()) => return Ok(Channel { fd }),
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(sys(&format!("connecting to @{name}"), e)),
            }
        }
    }

    /// The pid of the connected peer.
    pub fn peer_pid(&self) -> CmdResult<u32> {
        let cred = socket::getsockopt(&self.fd, sockopt::PeerCredentials)
            .map_err(|e| sys("SO_PEERCRED", e))?;
        Ok(cred.pid() as u32)
    }

    /// Give up on a receive after `timeout`.
    pub fn set_timeout(&self, timeout: Duration) -> CmdResult<()> {
        let tv = TimeVal::new(
            timeout.as_secs().min(i64::MAX as u64) as _,
            timeout.subsec_micros() as _,
        );
        socket::setsockopt(&self.fd, sockopt::ReceiveTimeout, &tv)
            .map_err(|e| sys("SO_RCVTIMEO", e))
    }

    /// Send one message with optional descriptors.
    pub fn send(&self, msg: &[u8], fds: &[BorrowedFd<'_>]) -> CmdResult<()> {
        if msg.is_empty() || msg.len() > MAX_MESSAGE || fds.len() > MAX_FDS {
            return Err(Fail::failed("internal: message size out of range"));
        }
        let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
        let cmsg = [ControlMessage::ScmRights(&raw)];
        let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &cmsg };
        let iov = [IoSlice::new(msg)];
        loop {
            match socket::sendmsg::<()>(
                self.fd.as_raw_fd(),
                &iov,
                cmsgs,
                MsgFlags::MSG_NOSIGNAL,
                None,
            ) {
                Ok(_) => return Ok(()),
                Err(Errno::EINTR) => continue,
                Err(Errno::EPIPE | Errno::ECONNRESET) => {
                    return Err(Fail::failed("the peer process closed the channel"))
                }
                Err(e) => return Err(sys("sendmsg", e)),
            }
        }
    }

    /// Receive one message and the descriptors that came with it. Every
    /// descriptor the kernel installed is owned here, so that a refused
    /// message (truncated: more descriptors than [`MAX_FDS`], or a longer
    /// body) closes them all.
    pub fn recv(&self) -> CmdResult<(Vec<u8>, Vec<OwnedFd>)> {
        let mut buf = vec![0u8; MAX_MESSAGE];
        loop {
            let (n, fds, flags) = match recv_with_fds(self.fd.as_fd(), &mut buf) {
                Ok(got) => got,
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => {
                    return Err(Fail::failed("timed out waiting for the peer process"))
                }
                Err(e) => return Err(sys("recvmsg", e)),
            };
            if flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
                drop(fds);
                return Err(Fail::failed(format!(
                    "a message from the peer was truncated (more than {MAX_FDS} descriptors, \
                     or more than {MAX_MESSAGE} bytes); the descriptors that came were closed"
                )));
            }
            if n == 0 {
                return Err(Fail::failed("the peer process closed the channel"));
            }
            buf.truncate(n);
            return Ok((buf, fds));
        }
    }

    /// Send a value as JSON.
    pub fn send_json<T: serde::Serialize>(
        &self,
        value: &T,
        fds: &[BorrowedFd<'_>],
    ) -> CmdResult<()> {
        let bytes = serde_json::to_vec(value)
            .map_err(|e| Fail::failed(format!("encoding a message: {e}")))?;
        self.send(&bytes, fds)
    }

    /// Receive a JSON value.
    pub fn recv_json<T: serde::de::DeserializeOwned>(&self) -> CmdResult<(T, Vec<OwnedFd>)> {
        let (bytes, fds) = self.recv()?;
        let value = serde_json::from_slice(&bytes)
            .map_err(|e| Fail::failed(format!("malformed message from the peer: {e}")))?;
        Ok((value, fds))
    }
}

/// One `recvmsg` into `buf` with room for [`MAX_FDS`] descriptors (installed
/// close-on-exec): the bytes received, every descriptor the kernel installed,
/// and the message flags. Written against libc because `nix` refuses to walk
/// the control messages of a reception flagged `MSG_CTRUNC`, which would
/// leave the descriptors that did arrive open.
fn recv_with_fds(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<(usize, Vec<OwnedFd>, i32), Errno> {
    let fd_bytes = (MAX_FDS * std::mem::size_of::<RawFd>()) as u32;
    // SAFETY: CMSG_SPACE is pure arithmetic on its argument.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
    // u64 words keep the control buffer aligned for `cmsghdr`.
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data for which all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` points at `iov` (which covers `buf`) and at `control`
    // (`space` bytes); all three outlive the call.
    let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(Errno::last());
    }
    let mut fds = Vec::new();
    let end = control.as_ptr() as usize + (msg.msg_controllen as usize).min(space);
    // SAFETY: the kernel wrote `msg_controllen` bytes of well-formed control
    // messages into `control`; CMSG_FIRSTHDR / CMSG_NXTHDR never step past
    // them, and every descriptor read is checked to end inside them.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                let len = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    let p = data.add(i);
                    if p as usize + std::mem::size_of::<RawFd>() > end {
                        break;
                    }
                    // The kernel installed this descriptor for this
                    // reception; nothing else owns it.
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(p)));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, fds, msg.msg_flags))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many of this process's descriptors name the memfd `name`.
    fn open_copies(name: &str) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter(|e| {
                std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().contains(name))
            })
            .count()
    }

    #[test]
    fn descriptors_of_a_truncated_message_are_all_closed() {
        let name = format!("halctl-ctrunc-{}", std::process::id());
        let memfd = hal::kit::os::memfd(&name, 4096, None).unwrap();
        let listener = Listener::bind("halctl-test-ctrunc").unwrap();
        let sender = Channel::connect(listener.name()).unwrap();
        let receiver = listener
            .accept_from(std::process::id(), Duration::from_secs(30))
            .unwrap();
        assert_eq!(open_copies(&name), 1, "only the memfd itself");
        // Twice the descriptors a message may carry: the kernel installs
        // those that fit and flags MSG_CTRUNC.
        let raw = vec![memfd.as_raw_fd(); 2 * MAX_FDS];
        let iov = [IoSlice::new(b"too many")];
        socket::sendmsg::<()>(
            sender.fd.as_raw_fd(),
            &iov,
            &[ControlMessage::ScmRights(&raw)],
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .unwrap();
        let e = receiver.recv().unwrap_err();
        assert!(format!("{e:?}").contains("truncated"), "{e:?}");
        assert_eq!(
            open_copies(&name),
            1,
            "descriptors of the truncated message are still open"
        );
        // The channel goes on working, descriptors included.
        sender.send(b"fine", &[memfd.as_fd()]).unwrap();
        let (msg, fds) = receiver.recv().unwrap();
        assert_eq!((msg.as_slice(), fds.len()), (&b"fine"[..], 1));
        assert_eq!(open_copies(&name), 2);
        drop(fds);
        assert_eq!(open_copies(&name), 1);
    }

    fn pair(tag: &str) -> (Listener, Channel, Channel) {
        let listener =
            Listener::bind(&format!("halctl-test-{tag}-{}", std::process::id())).unwrap();
        let sender = Channel::connect(listener.name()).unwrap();
        let receiver = listener
            .accept_from(std::process::id(), Duration::from_secs(30))
            .unwrap();
        (listener, sender, receiver)
    }

    #[test]
    fn messages_and_descriptors_up_to_the_bounds_go_through() {
        let (_l, sender, receiver) = pair("bounds");
        let name = format!("halctl-bounds-{}", std::process::id());
        let memfd = hal::kit::os::memfd(&name, 4096, None).unwrap();
        // The largest message (64 KiB), with the most descriptors.
        assert_eq!(MAX_MESSAGE, 64 * 1024);
        let big = vec![7u8; 64 * 1024];
        let fds = vec![memfd.as_fd(); MAX_FDS];
        sender.send(&big, &fds).unwrap();
        let (msg, got) = receiver.recv().unwrap();
        assert_eq!(msg, big);
        assert_eq!(got.len(), MAX_FDS);
        for fd in &got {
            assert_eq!(hal::kit::os::fstat(fd.as_fd()).unwrap().st_size, 4096);
        }
        drop(got);
        // Past either bound, or empty: refused before anything is sent.
        let past = vec![7u8; MAX_MESSAGE + 1];
        assert!(sender.send(&past, &[]).is_err(), "a message over the bound");
        assert!(sender.send(&[], &[]).is_err(), "an empty message");
        let too_many = vec![memfd.as_fd(); MAX_FDS + 1];
        assert!(
            sender.send(b"x", &too_many).is_err(),
            "descriptors over the bound"
        );
        // The channel still works.
        sender.send(b"after", &[]).unwrap();
        assert_eq!(receiver.recv().unwrap().0, b"after");
    }

    #[test]
    fn a_closed_peer_is_reported_as_closed() {
        let (_l, sender, receiver) = pair("closed");
        drop(sender);
        let e = receiver.recv().unwrap_err();
        assert!(format!("{e:?}").contains("closed the channel"), "{e:?}");
    }
}
