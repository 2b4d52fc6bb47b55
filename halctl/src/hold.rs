//! How long `halctl export` holds its region: a time, the end of standard
//! input, or a signal; and the signals that end every hold cleanly.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal};

use crate::fail::{CmdResult, Fail};

/// Why a hold ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The hold time passed.
    Elapsed,
    /// Standard input reached its end.
    StdinClosed,
    /// This signal came.
    Signal(Signal),
}

/// What a hold waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// This many seconds (or a signal).
    Time(u64),
    /// Standard input's end (or a signal).
    StdinEnd,
    /// A signal only.
    Signal,
}

impl Until {
    /// The hold `--hold SECONDS` asks for: with 0, the end of standard
    /// input, unless it has already ended (a background job's input is
    /// /dev/null), when only a signal ends it.
    pub fn for_hold(seconds: u64) -> Until {
        match seconds {
            0 if stdin_already_ended() => Until::Signal,
            0 => Until::StdinEnd,
            s => Until::Time(s),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Until::Time(_) => "time",
            Until::StdinEnd => "stdin",
            Until::Signal => "signal",
        }
    }
}

/// True when standard input is not a terminal and has nothing more to give
/// right now and ever: it reads as ended at once (/dev/null, an empty file,
/// a pipe whose writers are gone). A pipe still open is not, nor is a
/// terminal this process may read (it is in the foreground); a terminal of
/// which it is a background job is treated as ended.
/// (The byte a probe may read is lost; the hold discards input anyway.)
fn stdin_already_ended() -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::{AsFd, AsRawFd};
    let stdin = std::io::stdin();
    let fd = stdin.as_fd();
    if nix::unistd::isatty(fd.as_raw_fd()).unwrap_or(false) {
        // A terminal, but a background job of an interactive shell: reading
        // it would stop the process (SIGTTIN), and its broker with it.
        // SAFETY: tcgetpgrp(3) takes a descriptor this process holds open
        // (standard input, borrowed above) and returns an integer; it
        // touches no memory of ours.
        let foreground = unsafe { libc::tcgetpgrp(fd.as_raw_fd()) };
        return foreground > 0 && foreground != nix::unistd::getpgrp().as_raw();
    }
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(n) if n > 0 => {}
        // Nothing to read yet: an open pipe, whose end ends the hold.
        Ok(_) => return false,
        // Standard input is closed altogether (no descriptor 0).
        Err(_) => return true,
    }
    let revents = fds[0].revents().unwrap_or(PollFlags::empty());
    if revents.intersects(PollFlags::POLLNVAL | PollFlags::POLLERR) {
        return true;
    }
    let mut byte = [0u8; 1];
    matches!(nix::unistd::read(fd.as_raw_fd(), &mut byte), Ok(0))
}

/// Block SIGINT, SIGTERM and SIGHUP in this thread (and so in every thread
/// started after this), so that a signal waits for [`hold`] to take it and
/// the region is cleaned up instead of the process dying.
pub fn block_termination() -> CmdResult<SigSet> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGHUP);
    set.thread_block()
        .map_err(|e| Fail::failed(format!("blocking SIGINT/SIGTERM/SIGHUP: {e}")))?;
    Ok(set)
}

pub fn hold(until: Until, signals: SigSet) -> Release {
    let (tx, rx) = mpsc::channel();
    let tx_sig = tx.clone();
    std::thread::spawn(move || {
        if let Ok(sig) = signals.wait() {
            let _ = tx_sig.send(Release::Signal(sig));
        }
    });
    let seconds = match until {
        Until::StdinEnd => {
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
                let _ = tx.send(Release::StdinClosed);
            });
            return rx.recv().unwrap_or(Release::StdinClosed);
        }
        Until::Signal => {
            drop(tx);
            // Only the signal thread sends; should it be gone (it could not
            // wait), hold for good: the process's end removes what it made.
            return rx.recv().unwrap_or_else(|_| loop {
                std::thread::park();
            });
        }
        Until::Time(s) => s,
    };
    drop(tx);
    let until = Instant::now() + Duration::from_secs(seconds);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Release::Elapsed;
        }
        match rx.recv_timeout(left) {
            Ok(r) => return r,
            Err(mpsc::RecvTimeoutError::Timeout) => return Release::Elapsed,
            // The signal thread is gone (it cannot wait): just sleep it out.
            Err(mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(left),
        }
    }
}
