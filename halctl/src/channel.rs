//! A message channel between the demo's two processes: a `SOCK_SEQPACKET`
//! Unix socket on an abstract address (nothing on the filesystem), carrying
//! whole messages and, for the raw baselines, file descriptors (`SCM_RIGHTS`).
//!
//! The listening side checks the connecting peer's pid (`SO_PEERCRED`), so
//! another process that guesses the abstract name is refused.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{
    self, sockopt, AddressFamily, Backlog, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag,
    SockType, UnixAddr,
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
            hal::os::hex(&hal::os::random_id()[..8])
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

    /// Receive one message and the descriptors that came with it.
    pub fn recv(&self) -> CmdResult<(Vec<u8>, Vec<OwnedFd>)> {
        let mut buf = vec![0u8; MAX_MESSAGE];
        let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
        loop {
            let mut iov = [IoSliceMut::new(&mut buf)];
            let r = socket::recvmsg::<()>(
                self.fd.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            );
            let msg = match r {
                Ok(m) => m,
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => {
                    return Err(Fail::failed("timed out waiting for the peer process"))
                }
                Err(e) => return Err(sys("recvmsg", e)),
            };
            let mut fds = Vec::new();
            if let Ok(cmsgs) = msg.cmsgs() {
                for c in cmsgs {
                    if let ControlMessageOwned::ScmRights(list) = c {
                        for raw in list {
                            // SAFETY: SCM_RIGHTS installed a fresh descriptor
                            // in this process that nothing else owns.
                            fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
                        }
                    }
                }
            }
            let n = msg.bytes;
            let truncated = msg
                .flags
                .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC);
            if truncated {
                return Err(Fail::failed("a message from the peer was truncated"));
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
