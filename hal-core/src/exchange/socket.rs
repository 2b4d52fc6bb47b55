//! Handles over Unix stream sockets, with their descriptors (`SCM_RIGHTS`)
//! and the peer's credentials (`SO_PEERCRED`, `SCM_CREDENTIALS`).
//!
//! The messages' wire format, and its limits, are in `frame`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::limits::{dropped_descriptors, MAX_FDS};
use super::peer::PeerCred;
use super::sys;
use crate::error::{Error, HandleError, Result};
use crate::handle::{FdSource, Handle, HandleFlags, SharedHandle};
use crate::kit::export::Exported;
use crate::kit::os;
use crate::kit::os::discard::Untrusted;
use crate::kit::os::lock::lock;

mod frame;

pub use frame::MAX_FRAME;
use frame::{parse_header, push_header, Frame, HEADER_LEN, KIND_HANDLE, KIND_HELLO};

/// A Unix socket that accepts [`HandleStream`]s, on a file-system path or an
/// abstract name.
#[derive(Debug)]
#[must_use = "the listener is closed, and a socket file it made removed, when this value drops"]
pub struct HandleListener {
    inner: UnixListener,
    /// The socket file this listener made, removed on drop if still its own.
    path: Option<(PathBuf, u64, u64)>,
}

impl HandleListener {
    /// Listen on a socket file at `path` (mode `0600`, removed again when the
    /// listener is dropped). [`Error::AlreadyExists`] when something is there,
    /// for example the socket of a process that crashed: remove it first.
    /// For the short time between `bind` and `chmod` the file has the mode
    /// the umask gives; put it in a directory only its users can enter.
    pub fn bind(path: impl AsRef<Path>) -> Result<HandleListener> {
        let path = path.as_ref();
        let inner = UnixListener::bind(path).map_err(|e| bind_error(&path.display(), e))?;
        let meta = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) => {
                let _ = std::fs::remove_file(path);
                return Err(Error::io(
                    format!("inspecting the socket `{}`", path.display()),
                    e,
                ));
            }
        };
        let listener = HandleListener {
            inner,
            path: Some((path.to_path_buf(), meta.dev(), meta.ino())),
        };
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .map_err(|e| Error::io(format!("setting the mode of `{}`", path.display()), e))?;
        Ok(listener)
    }

    /// Listen on the abstract socket `name` (Linux; nothing on the file
    /// system; reachable from this network namespace only, by any process in
    /// it: check [`HandleStream::peer`]).
    pub fn bind_abstract(name: &str) -> Result<HandleListener> {
        let addr = abstract_addr(name)?;
        let inner =
            UnixListener::bind_addr(&addr).map_err(|e| bind_error(&format!("@{name}"), e))?;
        Ok(HandleListener { inner, path: None })
    }

    /// The socket file, for a listener made by [`HandleListener::bind`].
    pub fn path(&self) -> Option<&Path> {
        self.path.as_ref().map(|(p, _, _)| p.as_path())
    }

    /// Wait for a connection.
    pub fn accept(&self) -> Result<HandleStream> {
        let (s, _) = self
            .inner
            .accept()
            .map_err(|e| Error::io("accepting a connection", e))?;
        HandleStream::new(s, false)
    }

    /// Wait at most `timeout` for a connection ([`Error::Timeout`] after).
    pub fn accept_timeout(&self, timeout: Duration) -> Result<HandleStream> {
        let ms = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
        loop {
            let mut fds = [PollFd::new(self.inner.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, ms) {
                Ok(0) => {
                    return Err(Error::Timeout {
                        after: timeout,
                        what: "a connection to the handle socket".into(),
                    })
                }
                Ok(_) => return self.accept(),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(Error::errno("waiting for a connection", e)),
            }
        }
    }
}

impl AsFd for HandleListener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

impl Drop for HandleListener {
    fn drop(&mut self) {
        if let Some((path, dev, ino)) = &self.path {
            // Remove the file only if it is still the socket this listener made.
            if let Ok(m) = std::fs::symlink_metadata(path) {
                if m.dev() == *dev && m.ino() == *ino {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
    }
}

/// A connected Unix stream socket that carries handles with their
/// descriptors, and tells who is at the other end.
#[derive(Debug)]
pub struct HandleStream {
    inner: UnixStream,
    /// One end of a pair (or an inherited socket): `SO_PEERCRED` naming this
    /// very process says nothing about the other end.
    self_peer_unknown: bool,
    /// The sender of the last message received (`SCM_CREDENTIALS`).
    learned: Mutex<Option<PeerCred>>,
    timeout: Mutex<Option<Duration>>,
}

/// A connected pair of [`HandleStream`]s, for a parent and the child it
/// starts.
///
/// Both ends are close-on-exec: to give one to a child, clear the flag on it
/// in the child (for example `dup2` it to a fixed number in
/// [`CommandExt::pre_exec`](std::os::unix::process::CommandExt::pre_exec)),
/// and rebuild it there with [`HandleStream::from_fd`].
///
/// The kernel records the process that made the pair as the peer of both
/// ends, so after the fork the parent cannot learn the child's pid from the
/// socket until the child has sent something: the child calls
/// [`HandleStream::hello`], the parent [`HandleStream::wait_hello`], and only
/// then does [`HandleStream::send`] accept a handle restricted to pids.
pub fn socketpair() -> Result<(HandleStream, HandleStream)> {
    let (a, b) = UnixStream::pair().map_err(|e| Error::io("socketpair", e))?;
    Ok((HandleStream::new(a, true)?, HandleStream::new(b, true)?))
}

impl HandleStream {
    fn new(inner: UnixStream, self_peer_unknown: bool) -> Result<HandleStream> {
        sys::pass_cred(inner.as_fd())
            .map_err(|e| Error::io("enabling SO_PASSCRED on a handle socket", e))?;
        Ok(HandleStream {
            inner,
            self_peer_unknown,
            learned: Mutex::new(None),
            timeout: Mutex::new(None),
        })
    }

    /// Connect to a [`HandleListener`] at `path`.
    pub fn connect(path: impl AsRef<Path>) -> Result<HandleStream> {
        let path = path.as_ref();
        let s = UnixStream::connect(path).map_err(|e| connect_error(&path.display(), e))?;
        HandleStream::new(s, false)
    }

    /// Connect to a [`HandleListener`] on the abstract socket `name`.
    pub fn connect_abstract(name: &str) -> Result<HandleStream> {
        let addr = abstract_addr(name)?;
        let s =
            UnixStream::connect_addr(&addr).map_err(|e| connect_error(&format!("@{name}"), e))?;
        HandleStream::new(s, false)
    }

    /// A stream from an inherited or received descriptor of a connected Unix
    /// stream socket (the child's end of a [`socketpair`]).
    pub fn from_fd(fd: OwnedFd) -> Result<HandleStream> {
        let ty = nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::SockType)
            .map_err(|e| Error::errno("inspecting the descriptor given as a handle socket", e))?;
        if ty != nix::sys::socket::SockType::Stream {
            return Err(Error::invalid(
                "the descriptor is not a stream socket; a handle stream needs a connected Unix stream socket",
            ));
        }
        HandleStream::new(UnixStream::from(fd), true)
    }

    /// Give up reads and writes after `timeout` ([`Error::Timeout`]); `None`
    /// (the default) waits forever.
    pub fn set_timeout(&self, timeout: Option<Duration>) -> Result<()> {
        sys::set_timeouts(self.inner.as_fd(), timeout)
            .map_err(|e| Error::io("setting a handle socket's timeouts", e))?;
        *lock(&self.timeout) = timeout;
        Ok(())
    }

    /// The process at the other end: the sender of the last message received
    /// when there was one, otherwise what the kernel recorded at connect time
    /// (`SO_PEERCRED`). For a [`socketpair`] end that has received nothing,
    /// the kernel knows only the pair's creator: [`Error::NotFound`] until
    /// the peer sends a [`HandleStream::hello`].
    pub fn peer(&self) -> Result<PeerCred> {
        if let Some(c) = *lock(&self.learned) {
            return Ok(c);
        }
        let c = sys::peer_cred(self.inner.as_fd())
            .map_err(|e| Error::io("reading the peer's credentials (SO_PEERCRED)", e))?;
        if self.self_peer_unknown && c.pid == os::pid() {
            return Err(Error::NotFound {
                what: "the process at the other end of this socket pair: the kernel names only \
                       the pair's creator until the peer sends something (HandleStream::hello)"
                    .into(),
            });
        }
        Ok(c)
    }

    /// Send an empty message so that the peer learns this process's
    /// credentials (see [`socketpair`]).
    pub fn hello(&self) -> Result<()> {
        let mut frame = Vec::with_capacity(HEADER_LEN);
        push_header(&mut frame, KIND_HELLO, 0, 0);
        self.write_frame(&frame, &[])
    }

    /// Wait for the peer's [`HandleStream::hello`] and return its credentials.
    pub fn wait_hello(&self) -> Result<PeerCred> {
        let frame = self.read_frame()?;
        if frame.kind != KIND_HELLO {
            return Err(Error::invalid(
                "expected a hello from the peer and received a handle (its descriptors were closed)",
            ));
        }
        frame.creds.map_or_else(|| self.peer(), Ok)
    }

    /// Send `handle` with its descriptors.
    ///
    /// `fds` must be all the handle's descriptors ([`FdSource::count`]) or
    /// none (then the receiver fetches them from the exporter's broker, for a
    /// handle with [`FdSource::Broker`]); at most [`MAX_FDS`]. Unless the
    /// handle allows anyone, the peer's pid must be on its allow-list:
    /// [`Error::PermissionDenied`] with the pid otherwise (this process itself
    /// is always allowed).
    pub fn send<F: AsFd>(&self, handle: &Handle, fds: &[F]) -> Result<()> {
        if fds.len() > MAX_FDS {
            return Err(Error::invalid(format!(
                "{} descriptors given, over the bound of {MAX_FDS} per handle",
                fds.len()
            )));
        }
        let described = handle.fds.count();
        if !fds.is_empty() && fds.len() != described {
            return Err(Error::invalid(format!(
                "{} descriptor(s) given for a handle that describes {described}",
                fds.len()
            )));
        }
        if fds.is_empty() && matches!(handle.fds, FdSource::Attached { .. }) {
            return Err(Error::invalid(format!(
                "the handle's {described} descriptor(s) travel beside it: pass them to send"
            )));
        }
        if !handle.flags.contains(HandleFlags::ANY_IMPORTER) {
            let peer = self.peer().map_err(|e| match e {
                Error::NotFound { what } => Error::PermissionDenied {
                    pid: None,
                    reason: format!(
                        "the handle is restricted to pids {:?} and the peer is unknown: {what}",
                        handle.allowed_pids
                    ),
                },
                e => e,
            })?;
            if peer.pid != os::pid() && !handle.allows(peer.pid) {
                return Err(Error::PermissionDenied {
                    pid: Some(peer.pid),
                    reason: format!(
                        "pid {} (uid {}) is not on the handle's allow-list {:?}; add it \
                         (Exported::add_importers, Device::allow_importers) before sending",
                        peer.pid, peer.uid, handle.allowed_pids
                    ),
                });
            }
        }
        let body = handle.to_bytes();
        // A handle that decodes fits in a frame (`frame.rs` asserts it).
        Handle::from_bytes(&body)?;
        let mut frame = Vec::with_capacity(HEADER_LEN + body.len());
        push_header(&mut frame, KIND_HANDLE, fds.len() as u8, body.len() as u32);
        frame.extend_from_slice(&body);
        let raw: Vec<RawFd> = fds.iter().map(|f| f.as_fd().as_raw_fd()).collect();
        self.write_frame(&frame, &raw)
    }

    /// Send an export's handle and descriptors ([`HandleStream::send`]).
    pub fn send_exported(&self, exported: &Exported) -> Result<()> {
        self.send(exported.handle(), exported.fds())
    }

    /// Receive a handle with the descriptors that came with it, and the
    /// sender's credentials. Hellos received meanwhile are taken in stride.
    ///
    /// [`Error::Closed`] when the peer hung up; [`Error::Timeout`] after the
    /// stream's timeout; [`Error::Io`] naming `MSG_CTRUNC` when the kernel
    /// dropped descriptors (the open-file limit); [`HandleError`]s for a
    /// malformed message or a descriptor count that does not match.
    pub fn recv(&self) -> Result<(SharedHandle, PeerCred)> {
        loop {
            let frame = self.read_frame()?;
            if frame.kind == KIND_HELLO {
                continue;
            }
            let handle = Handle::from_bytes(&frame.body)?;
            if !frame.fds.is_empty() && frame.fds.len() != handle.fds.count() {
                return Err(HandleError::Descriptors(format!(
                    "{} descriptor(s) came with a handle that describes {}; all were closed",
                    frame.fds.len(),
                    handle.fds.count()
                ))
                .into());
            }
            let peer = match frame.creds {
                Some(c) => c,
                None => self.peer()?,
            };
            return Ok((
                SharedHandle {
                    handle,
                    fds: frame.fds.accept(),
                },
                peer,
            ));
        }
    }

    fn write_frame(&self, frame: &[u8], fds: &[RawFd]) -> Result<()> {
        sys::send_all(self.inner.as_fd(), frame, fds).map_err(|e| {
            if sys::is_timeout(&e) {
                self.timed_out("the peer to take a message")
            } else if matches!(e.raw_os_error(), Some(libc::EPIPE | libc::ECONNRESET)) {
                Error::Closed {
                    what: "the handle socket: the peer hung up".into(),
                }
            } else {
                Error::io("sending a handle", e)
            }
        })
    }

    fn timed_out(&self, what: &str) -> Error {
        Error::Timeout {
            after: lock(&self.timeout).unwrap_or_default(),
            what: what.into(),
        }
    }

    fn read_frame(&self) -> Result<Frame> {
        let mut frame = Frame {
            kind: 0,
            body: Vec::new(),
            fds: Untrusted::default(),
            creds: None,
        };
        let mut header = [0u8; HEADER_LEN];
        self.read_exact(&mut header, &mut frame, true)?;
        let (kind, announced, len) = parse_header(&header)?;
        frame.kind = kind;
        frame.body = vec![0u8; len];
        let mut body = std::mem::take(&mut frame.body);
        self.read_exact(&mut body, &mut frame, false)?;
        frame.body = body;
        if frame.fds.len() != announced {
            return Err(HandleError::Descriptors(format!(
                "the message announced {announced} descriptor(s) and {} arrived; all were closed",
                frame.fds.len()
            ))
            .into());
        }
        if let Some(c) = frame.creds {
            *lock(&self.learned) = Some(c);
        }
        Ok(frame)
    }

    /// Fill `buf`, collecting descriptors and credentials into `frame`.
    fn read_exact(&self, buf: &mut [u8], frame: &mut Frame, at_start: bool) -> Result<()> {
        let mut off = 0;
        while off < buf.len() {
            let got = sys::recv_msg(self.inner.as_fd(), &mut buf[off..], MAX_FDS).map_err(|e| {
                if sys::is_timeout(&e) {
                    self.timed_out("a message from the peer")
                } else if e.raw_os_error() == Some(libc::ECONNRESET) {
                    Error::Closed {
                        what: "the handle socket: the peer hung up".into(),
                    }
                } else {
                    Error::io("receiving a handle", e)
                }
            })?;
            let ctrunc = got.ctrunc;
            frame.fds.extend(got.fds);
            if got.creds.is_some() {
                frame.creds = got.creds;
            }
            if ctrunc {
                return Err(dropped_descriptors(frame.fds.len(), None));
            }
            if frame.fds.len() > MAX_FDS {
                return Err(HandleError::OverBound {
                    field: "descriptors",
                    len: frame.fds.len(),
                    max: MAX_FDS,
                }
                .into());
            }
            if got.bytes == 0 {
                return Err(Error::Closed {
                    what: if at_start && off == 0 {
                        "the handle socket: the peer hung up".into()
                    } else {
                        "the handle socket: the peer hung up in the middle of a message".into()
                    },
                });
            }
            off += got.bytes;
        }
        Ok(())
    }
}

impl AsFd for HandleStream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

impl From<HandleStream> for OwnedFd {
    fn from(s: HandleStream) -> OwnedFd {
        s.inner.into()
    }
}

fn abstract_addr(name: &str) -> Result<SocketAddr> {
    SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| Error::io(format!("the abstract socket name `{name}`"), e))
}

fn bind_error(what: &dyn std::fmt::Display, e: io::Error) -> Error {
    if e.kind() == io::ErrorKind::AddrInUse {
        Error::AlreadyExists {
            what: format!(
                "socket `{what}` (another listener, or a stale socket file of a process that exited)"
            ),
        }
    } else {
        Error::io(format!("binding the handle socket `{what}`"), e)
    }
}

fn connect_error(what: &dyn std::fmt::Display, e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::ENOENT) => Error::NotFound {
            what: format!("handle socket `{what}`"),
        },
        Some(libc::ECONNREFUSED) => Error::Closed {
            what: format!("handle socket `{what}`: nobody listens on it any more"),
        },
        _ => Error::io(format!("connecting to the handle socket `{what}`"), e),
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests;
