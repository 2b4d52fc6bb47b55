//! The raw baselines the demo measures in the same run, between the same two
//! processes: what the operating system itself costs for the same jobs.
//!
//! - import: a sealed memfd's descriptor received over a Unix socket
//!   (`SCM_RIGHTS`), then `fstat`, `mmap` and the first touch; or taken
//!   from the exporter with `pidfd_getfd`, then the same;
//! - notify: a futex ping-pong on two words of a shared memfd.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hal::kit::os::{self, FutexWait, Prot, SharedMap};

use crate::channel::{Channel, Listener};
use crate::fail::{CmdResult, Context, Fail};

/// The byte at offset 0 of the raw baseline's memfd.
pub const RAW_MARKER: u8 = 0x5a;

/// The exporter's side of the raw import baseline: sealed memfds of the
/// demo buffer's size, each served once over a socket.
pub struct RawExport {
    fds: Vec<OwnedFd>,
    listener: Listener,
}

impl RawExport {
    /// `count` sealed memfds of `size` bytes whose first page is populated
    /// (as the demo's probe buffers are, so every first touch finds a
    /// resident page).
    pub fn new(size: u64, count: usize) -> CmdResult<RawExport> {
        let fds = sealed_probes(size, count)?;
        let listener = Listener::bind("halctl-raw")?;
        Ok(RawExport { fds, listener })
    }

    /// The socket name the consumer connects to.
    pub fn name(&self) -> &str {
        self.listener.name()
    }

    /// Serve the descriptors to process `pid` on a thread (as a
    /// descriptor broker would), one per request, each request answered on
    /// the connection it came on: a consumer may connect for each one, or
    /// keep its connection.
    pub fn serve(self, pid: u32, timeout: Duration) -> JoinHandle<CmdResult<()>> {
        std::thread::spawn(move || {
            let mut left = self.fds.iter();
            let mut next = left.next();
            while next.is_some() {
                let chan = self.listener.accept_from(pid, timeout)?;
                chan.set_timeout(timeout)?;
                // Requests until the consumer closes this connection.
                while let Some(fd) = next {
                    if chan.recv().is_err() {
                        break;
                    }
                    chan.send(b"F", &[fd.as_fd()])?;
                    next = left.next();
                }
            }
            Ok(())
        })
    }
}

/// `count` sealed memfds of `size` bytes whose first page is populated and
/// starts with [`RAW_MARKER`].
pub fn sealed_probes(size: u64, count: usize) -> CmdResult<Vec<OwnedFd>> {
    let mut fds = Vec::with_capacity(count);
    for _ in 0..count {
        let fd = os::memfd("halctl-raw-baseline", size, None).ctx("raw memfd")?;
        {
            let len = os::page_size().min(size);
            let map = SharedMap::map(fd.as_fd(), len, 0, Prot::ReadWrite, None).ctx("raw mmap")?;
            map.write(0, &[RAW_MARKER]).ctx("raw write")?;
        }
        os::add_seals(fd.as_fd(), os::EXPORT_SEALS).ctx("raw seals")?;
        fds.push(fd);
    }
    Ok(fds)
}

/// The consumer's side of the raw import baseline: connect, receive the
/// descriptor, `fstat`, `mmap` and touch the first byte. Returns the time
/// taken and the first byte.
pub fn raw_import(name: &str, size: u64) -> CmdResult<(Duration, u8)> {
    let t0 = Instant::now();
    let chan = Channel::connect(name)?;
    chan.set_timeout(Duration::from_secs(30))?;
    let (_, first) = request(&chan, size)?;
    Ok((t0.elapsed(), first))
}

/// The same over a connection kept from import to import (`kept`, made at
/// the first): a request answered with the descriptor, then `fstat`,
/// `mmap` and the first touch.
pub fn raw_import_kept(
    kept: &mut Option<Channel>,
    name: &str,
    size: u64,
) -> CmdResult<(Duration, u8)> {
    if kept.is_none() {
        let chan = Channel::connect(name)?;
        chan.set_timeout(Duration::from_secs(30))?;
        *kept = Some(chan);
    }
    let chan = kept
        .as_ref()
        .ok_or_else(|| Fail::failed("the raw baseline's connection"))?;
    request(chan, size)
}

/// The consumer's side of the raw direct import: take the exporter's
/// descriptor `fd` with `pidfd_getfd` (through `pidfd`, opened once
/// beforehand), `fstat`, `mmap` and touch the first byte. Returns the time
/// taken and the first byte.
pub fn raw_getfd_import(pidfd: BorrowedFd<'_>, fd: u32, size: u64) -> CmdResult<(Duration, u8)> {
    let t0 = Instant::now();
    let fd =
        os::pidfd_getfd(pidfd, fd).map_err(|e| Fail::failed(format!("raw pidfd_getfd: {e}")))?;
    let st = os::fstat(fd.as_fd()).ctx("raw fstat")?;
    if (st.st_size as u64) < size {
        return Err(Fail::failed("the raw baseline's memfd is short"));
    }
    let map = SharedMap::map(fd.as_fd(), size, 0, Prot::Read, None).ctx("raw mmap")?;
    let first = std::hint::black_box(touch(&map));
    let elapsed = t0.elapsed();
    drop(map);
    Ok((elapsed, first))
}

/// Ask for a descriptor on `chan`, map it and touch its first byte: the
/// time from the request, and the byte.
fn request(chan: &Channel, size: u64) -> CmdResult<(Duration, u8)> {
    let t0 = Instant::now();
    chan.send(b"R", &[])?;
    let (_, mut fds) = chan.recv()?;
    let fd = fds
        .pop()
        .ok_or_else(|| Fail::failed("the raw baseline's descriptor did not arrive"))?;
    let st = os::fstat(fd.as_fd()).ctx("raw fstat")?;
    if (st.st_size as u64) < size {
        return Err(Fail::failed("the raw baseline's memfd is short"));
    }
    let map = SharedMap::map(fd.as_fd(), size, 0, Prot::Read, None).ctx("raw mmap")?;
    let first = std::hint::black_box(touch(&map));
    let elapsed = t0.elapsed();
    drop(map);
    Ok((elapsed, first))
}

/// The first access to a mapping: a one-byte copy of byte 0 (a page fault on
/// a resident shared page).
fn touch(map: &SharedMap) -> u8 {
    let mut b = [0u8; 1];
    let _ = map.read(0, &mut b);
    b[0]
}

/// Two futex words in a shared memfd: the exporter rings `ping`, the consumer
/// answers on `pong`. Each word counts rounds.
pub struct FutexPair {
    map: SharedMap,
}

const PING: usize = 0;
const PONG: usize = 64;

impl FutexPair {
    /// Create the pair; returns it and the memfd to send to the peer.
    pub fn create() -> CmdResult<(FutexPair, OwnedFd)> {
        let len = os::page_size();
        let fd = os::memfd("halctl-raw-futex", len, None).ctx("futex memfd")?;
        os::add_seals(fd.as_fd(), os::EXPORT_SEALS).ctx("futex memfd seals")?;
        let map = SharedMap::map(fd.as_fd(), len, 0, Prot::ReadWrite, None).ctx("futex mmap")?;
        Ok((FutexPair { map }, fd))
    }

    /// Open the pair from the memfd received from the exporter.
    pub fn open(fd: &OwnedFd) -> CmdResult<FutexPair> {
        let len = os::verify_sealed_memfd(fd.as_fd(), os::page_size()).ctx("futex memfd")?;
        let map = SharedMap::map(fd.as_fd(), len, 0, Prot::ReadWrite, None).ctx("futex mmap")?;
        Ok(FutexPair { map })
    }

    fn word(&self, at: usize) -> CmdResult<&AtomicU32> {
        self.map.atomic_u32(at).ctx("futex word")
    }

    /// Exporter: one round trip, number `round` (1, 2, ...).
    pub fn ping(&self, round: u32, timeout: Duration) -> CmdResult<()> {
        let ping = self.word(PING)?;
        ping.store(round, Ordering::Release);
        os::futex_wake(ping, 1);
        wait_for(self.word(PONG)?, round, timeout)
    }

    /// Consumer: answer round `round`.
    pub fn pong(&self, round: u32, timeout: Duration) -> CmdResult<()> {
        wait_for(self.word(PING)?, round, timeout)?;
        let pong = self.word(PONG)?;
        pong.store(round, Ordering::Release);
        os::futex_wake(pong, 1);
        Ok(())
    }
}

/// Sleep on `word` until it holds `want` (a plain blocking futex wait).
fn wait_for(word: &AtomicU32, want: u32, timeout: Duration) -> CmdResult<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let v = word.load(Ordering::Acquire);
        if v == want {
            return Ok(());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Fail::failed(format!(
                "the peer did not answer the raw futex ping-pong within {timeout:?}"
            )));
        }
        if os::futex_wait(word, v, Some(left)) == FutexWait::TimedOut
            && word.load(Ordering::Acquire) != want
        {
            return Err(Fail::failed(format!(
                "the peer did not answer the raw futex ping-pong within {timeout:?}"
            )));
        }
    }
}
