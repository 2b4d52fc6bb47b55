//! The socket calls of the exchange: `sendmsg` and `recvmsg` with descriptors
//! and credentials, peer credentials, timeouts.
//!
//! `recvmsg` is written against libc rather than `nix` because a receiver must
//! take every descriptor the kernel installed even when it also reports
//! `MSG_CTRUNC` (some descriptors dropped), and `nix` refuses to walk the
//! control messages of a truncated reception.
//!
//! A descriptor the kernel installs is a file another process chose, whose
//! `close` may wait for as long as that process likes (the `FLUSH` of a
//! FUSE file). So a reception that wants none ([`recv_msg`] with `max_fds`
//! 0) gives the kernel no control buffer at all, and the kernel then drops
//! whatever was attached without installing it (no `close`, no `FLUSH`);
//! and what is received is [`Untrusted`] until accepted, so that every
//! refusal discards it off the caller's thread.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use nix::sys::socket::{self, sockopt, ControlMessage, MsgFlags};
use nix::sys::time::TimeVal;

use super::peer::PeerCred;
use crate::kit::os::discard::Untrusted;

/// What one `recvmsg` delivered.
#[derive(Debug)]
pub(crate) struct Received {
    /// Bytes of data (0 at end of stream).
    pub bytes: usize,
    /// Descriptors the kernel installed (close-on-exec), discarded unless
    /// accepted.
    pub fds: Untrusted,
    /// The sender's credentials (`SCM_CREDENTIALS`), when the socket passes them.
    pub creds: Option<PeerCred>,
    /// `MSG_CTRUNC`: the kernel dropped control data, usually descriptors.
    pub ctrunc: bool,
    /// `MSG_TRUNC`: a datagram or packet was longer than the buffer.
    pub trunc: bool,
}

/// Bytes of control buffer for credentials and `max_fds` descriptors; none
/// at all for no descriptors, so that the kernel installs none (it drops an
/// `SCM_RIGHTS` that finds no room, with `MSG_CTRUNC`) and gives no
/// credentials either.
fn control_len(max_fds: usize) -> usize {
    let fd_bytes = (max_fds * mem::size_of::<RawFd>()) as u32;
    let cred_bytes = mem::size_of::<libc::ucred>() as u32;
    // SAFETY: CMSG_SPACE is pure arithmetic on its argument.
    let rights = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
    // SAFETY: as above.
    let cred = unsafe { libc::CMSG_SPACE(cred_bytes) } as usize;
    if max_fds == 0 {
        0
    } else {
        rights + cred
    }
}

/// One `recvmsg` into `buf`, with room for `max_fds` descriptors and the
/// sender's credentials (with `max_fds` 0, for nothing but data: attached
/// descriptors are dropped uninstalled, see the module). Received
/// descriptors are close-on-exec. `EINTR` is retried; a timeout reads as
/// `WouldBlock`.
pub(crate) fn recv_msg(fd: BorrowedFd<'_>, buf: &mut [u8], max_fds: usize) -> io::Result<Received> {
    let clen = control_len(max_fds);
    // u64 words keep the control buffer aligned for `cmsghdr`.
    let mut control = vec![0u64; clen.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data for which all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if clen > 0 {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = clen as _;
    }
    let n = loop {
        // SAFETY: `msg` points at `iov` (which covers `buf`) and at `control`
        // (`clen` bytes); all three outlive the call and nothing else
        // accesses them meanwhile.
        let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    };
    let used = (msg.msg_controllen as usize).min(clen);
    // SAFETY: the control buffer is `clen` initialised bytes (zeroed, then
    // partly written by the kernel); viewing u64 words as bytes is sound.
    let bytes = unsafe { std::slice::from_raw_parts(control.as_ptr().cast::<u8>(), clen) };
    let (fds, creds) = parse_control(&bytes[..used]);
    Ok(Received {
        bytes: n,
        fds: Untrusted::new(fds),
        creds,
        ctrunc: msg.msg_flags & libc::MSG_CTRUNC != 0,
        trunc: msg.msg_flags & libc::MSG_TRUNC != 0,
    })
}

/// Walk the control messages in `control` (what the kernel wrote), taking
/// ownership of every descriptor and reading credentials. Bounds are checked
/// against the buffer, so a truncated message cannot make it read past it.
fn parse_control(control: &[u8]) -> (Vec<OwnedFd>, Option<PeerCred>) {
    let hdr_len = mem::size_of::<libc::cmsghdr>();
    // SAFETY: CMSG_LEN is pure arithmetic.
    let data_off = unsafe { libc::CMSG_LEN(0) } as usize;
    let align = mem::size_of::<usize>();
    let mut fds = Vec::new();
    let mut creds = None;
    let mut off = 0usize;
    while off + hdr_len <= control.len() {
        // SAFETY: `off + hdr_len` bytes are in bounds; read_unaligned copes
        // with any alignment and cmsghdr is plain integers.
        let hdr: libc::cmsghdr =
            unsafe { std::ptr::read_unaligned(control[off..].as_ptr().cast()) };
        let len = hdr.cmsg_len as usize;
        if len < data_off {
            break;
        }
        let start = off + data_off;
        let end = off.saturating_add(len).min(control.len());
        let data = control.get(start..end).unwrap_or(&[]);
        if hdr.cmsg_level == libc::SOL_SOCKET && hdr.cmsg_type == libc::SCM_RIGHTS {
            for chunk in data.chunks_exact(mem::size_of::<RawFd>()) {
                let mut raw = [0u8; 4];
                raw.copy_from_slice(chunk);
                let raw = RawFd::from_ne_bytes(raw);
                if raw >= 0 {
                    // SAFETY: the kernel installed this descriptor in our
                    // table for this reception; nothing else owns it.
                    fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
                }
            }
        } else if hdr.cmsg_level == libc::SOL_SOCKET
            && hdr.cmsg_type == libc::SCM_CREDENTIALS
            && data.len() >= mem::size_of::<libc::ucred>()
        {
            // SAFETY: `data` holds at least one ucred; read_unaligned copes
            // with alignment and ucred is plain integers.
            let c: libc::ucred = unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
            creds = Some(PeerCred {
                pid: c.pid.max(0) as u32,
                uid: c.uid,
                gid: c.gid,
            });
        }
        let step = len.div_ceil(align) * align;
        off = match off.checked_add(step) {
            Some(next) => next,
            None => break,
        };
    }
    (fds, creds)
}

/// One `sendmsg` of `data` with `fds` attached (`MSG_NOSIGNAL`: a closed peer
/// is `EPIPE`, never `SIGPIPE`). Returns the bytes sent; `EINTR` is retried.
pub(crate) fn send_msg(fd: BorrowedFd<'_>, data: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    let iov = [io::IoSlice::new(data)];
    let rights = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &rights };
    loop {
        match socket::sendmsg::<()>(fd.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(n) => return Ok(n),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from_raw_os_error(e as i32)),
        }
    }
}

/// Send all of `data`, the descriptors with the first bytes.
pub(crate) fn send_all(fd: BorrowedFd<'_>, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    send_all_with(data, fds, |d, f| send_msg(fd, d, f))
}

/// Send all of `data` through `send` (a send with a timeout may send part):
/// the descriptors go with the first part only.
fn send_all_with(
    data: &[u8],
    fds: &[RawFd],
    mut send: impl FnMut(&[u8], &[RawFd]) -> io::Result<usize>,
) -> io::Result<()> {
    let mut sent = send(data, fds)?;
    while sent < data.len() {
        match send(&data[sent..], &[])? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n => sent += n,
        }
    }
    Ok(())
}

/// The credentials the kernel recorded for the peer at connect time.
pub(crate) fn peer_cred(fd: BorrowedFd<'_>) -> io::Result<PeerCred> {
    let c = socket::getsockopt(&fd, sockopt::PeerCredentials)
        .map_err(|e| io::Error::from_raw_os_error(e as i32))?;
    Ok(PeerCred {
        pid: c.pid().max(0) as u32,
        uid: c.uid(),
        gid: c.gid(),
    })
}

/// How many bytes of what this socket sent its peer are still unread there
/// (`SIOCOUTQ`; on a Unix socket, the memory of the messages still queued
/// at the receiver, descriptors and all): 0 once the peer has read
/// everything, or has closed its end.
pub(crate) fn unread_by_peer(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ writes one int through the pointer, which points at
    // `n`, alive for the call; the descriptor is borrowed, so open.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCOUTQ, &mut n as *mut libc::c_int) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n.max(0) as usize)
}

/// Ask the kernel to attach the sender's credentials to every message this
/// socket receives (`SO_PASSCRED`).
pub(crate) fn pass_cred(fd: BorrowedFd<'_>) -> io::Result<()> {
    socket::setsockopt(&fd, sockopt::PassCred, &true)
        .map_err(|e| io::Error::from_raw_os_error(e as i32))
}

/// Receive and send timeouts (`SO_RCVTIMEO`, `SO_SNDTIMEO`; the latter also
/// bounds a Unix `connect` waiting on a full backlog). `None` blocks.
pub(crate) fn set_timeouts(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<()> {
    let tv = timeval(timeout);
    let map = |e: nix::errno::Errno| io::Error::from_raw_os_error(e as i32);
    socket::setsockopt(&fd, sockopt::ReceiveTimeout, &tv).map_err(map)?;
    socket::setsockopt(&fd, sockopt::SendTimeout, &tv).map_err(map)
}

/// The kernel's form of a socket timeout: an all-zero timeval is "forever",
/// so a timeout under a microsecond is rounded up to one, and a timeout too
/// long for the kernel is bounded.
fn timeval(timeout: Option<Duration>) -> TimeVal {
    match timeout {
        Some(t) => {
            let secs = t.as_secs().min(i64::MAX as u64 / 2);
            let mut micros = t.subsec_micros();
            if secs == 0 && micros == 0 {
                micros = 1;
            }
            TimeVal::new(secs as _, micros as _)
        }
        None => TimeVal::new(0, 0),
    }
}

/// True for the errors a socket timeout produces.
pub(crate) fn is_timeout(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, IntoRawFd};

    /// One control message as the kernel lays it out: the header, the
    /// data, padding to the next header.
    fn cmsg(level: i32, kind: i32, data: &[u8]) -> Vec<u8> {
        // SAFETY: CMSG_LEN and CMSG_SPACE are pure arithmetic.
        let (len, space) = unsafe {
            (
                libc::CMSG_LEN(data.len() as u32) as usize,
                libc::CMSG_SPACE(data.len() as u32) as usize,
            )
        };
        let mut out = Vec::with_capacity(space);
        out.extend_from_slice(&len.to_ne_bytes());
        out.extend_from_slice(&level.to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(data);
        out.resize(space, 0);
        out
    }

    fn ucred_bytes(pid: i32, uid: u32, gid: u32) -> Vec<u8> {
        [pid.to_ne_bytes(), uid.to_ne_bytes(), gid.to_ne_bytes()].concat()
    }

    #[test]
    fn credentials_are_read_only_from_a_socket_credentials_message() {
        let cred = ucred_bytes(42, 1000, 1000);
        let other_type = cmsg(libc::SOL_SOCKET, libc::SO_TIMESTAMP, &cred);
        let other_level = cmsg(libc::SOL_IP, libc::SCM_CREDENTIALS, &cred);
        let control = [other_type, other_level].concat();
        let (fds, creds) = parse_control(&control);
        assert!(fds.is_empty());
        assert_eq!(creds, None, "no credentials message");
        let short = cmsg(libc::SOL_SOCKET, libc::SCM_CREDENTIALS, &cred[..8]);
        assert_eq!(parse_control(&short).1, None, "a ucred cut short");
        let real = cmsg(libc::SOL_SOCKET, libc::SCM_CREDENTIALS, &cred);
        let (_, creds) = parse_control(&real);
        let c = creds.expect("credentials");
        assert_eq!((c.pid, c.uid, c.gid), (42, 1000, 1000));
    }

    #[test]
    fn every_descriptor_is_taken_after_an_empty_message() {
        let file = crate::kit::os::memfd("hal-sys-test", 4096, None).unwrap();
        let dup = file.try_clone().unwrap();
        let raw = dup.into_raw_fd();
        let control = [
            cmsg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &[]),
            cmsg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &raw.to_ne_bytes()),
        ]
        .concat();
        let (fds, _) = parse_control(&control);
        assert_eq!(fds.len(), 1, "the descriptor after the empty message");
        assert_eq!(fds[0].as_raw_fd(), raw);
        let (a, b) = (
            crate::kit::os::fstat(fds[0].as_fd()).unwrap(),
            crate::kit::os::fstat(file.as_fd()).unwrap(),
        );
        assert_eq!((a.st_dev, a.st_ino), (b.st_dev, b.st_ino));
    }

    #[test]
    fn a_malformed_length_ends_the_walk() {
        // A header whose length is under a header's: nothing after it is
        // read, and the walk ends.
        let mut control = cmsg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &[]);
        control[..mem::size_of::<usize>()].copy_from_slice(&0usize.to_ne_bytes());
        let creds = cmsg(
            libc::SOL_SOCKET,
            libc::SCM_CREDENTIALS,
            &ucred_bytes(1, 2, 3),
        );
        let (fds, found) = parse_control(&[control, creds].concat());
        assert!(fds.is_empty());
        assert_eq!(found, None);
        // A length past the buffer reads only what is there.
        let mut long = cmsg(
            libc::SOL_SOCKET,
            libc::SCM_CREDENTIALS,
            &ucred_bytes(1, 2, 3),
        );
        long[..mem::size_of::<usize>()].copy_from_slice(&4096usize.to_ne_bytes());
        assert!(parse_control(&long).1.is_some());
        long.truncate(long.len() - 8);
        assert_eq!(
            parse_control(&long).1,
            None,
            "the ucred is cut by the buffer"
        );
    }

    #[test]
    fn a_partial_send_is_finished_and_the_descriptors_go_first() {
        let data: Vec<u8> = (0..10).collect();
        let mut got = Vec::new();
        let mut with_fds = Vec::new();
        send_all_with(&data, &[7, 8], |d, f| {
            let n = d.len().min(3);
            got.extend_from_slice(&d[..n]);
            with_fds.push(f.to_vec());
            Ok(n)
        })
        .unwrap();
        assert_eq!(got, data);
        assert_eq!(with_fds, vec![vec![7, 8], vec![], vec![], vec![]]);
        let stalled = send_all_with(&data, &[], |d, _| Ok(if d.len() == 10 { 4 } else { 0 }));
        assert_eq!(stalled.unwrap_err().kind(), io::ErrorKind::WriteZero);
        let failed = send_all_with(&data, &[], |_, _| Err(io::ErrorKind::BrokenPipe.into()));
        assert_eq!(failed.unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn a_timeout_never_reads_as_forever() {
        let tv = |t: Option<Duration>| {
            let v = timeval(t);
            (v.tv_sec(), v.tv_usec())
        };
        assert_eq!(tv(None), (0, 0), "no timeout: forever");
        assert_eq!(tv(Some(Duration::ZERO)), (0, 1));
        assert_eq!(tv(Some(Duration::from_nanos(500))), (0, 1));
        assert_eq!(tv(Some(Duration::from_secs(5))), (5, 0));
        assert_eq!(tv(Some(Duration::from_micros(2_000_003))), (2, 3));
        assert_eq!(tv(Some(Duration::MAX)), (i64::MAX / 2, 999_999));
    }

    #[test]
    fn the_control_buffer_holds_the_descriptors_and_the_credentials() {
        // SAFETY: CMSG_SPACE is pure arithmetic.
        let space = |n: usize| unsafe { libc::CMSG_SPACE(n as u32) } as usize;
        let cred = space(mem::size_of::<libc::ucred>());
        assert_eq!(control_len(0), 0, "no room for any descriptor");
        assert_eq!(control_len(16), space(16 * 4) + cred);
    }
}
