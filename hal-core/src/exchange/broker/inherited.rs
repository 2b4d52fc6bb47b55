//! The importer's broker connections as a forked child inherits them: every
//! connection descriptor (and the pidfd kept with it) is listed in a table
//! of atomics for as long as it is open, and a fork handler closes them all
//! in the child right after `fork`, before the child runs any code of its
//! own. The broker knows a connection as the process that connected (its
//! credentials are read once, at accept): a child that kept its parent's
//! would be served, and counted in leases, as its parent.
//!
//! - A descriptor is listed when the connection is made and unlisted just
//!   before it is closed, so a listed number is always open in the parent
//!   at the moment of a `fork`.
//! - In the child the connections' owners (the pool's entries) are then
//!   forgotten, never dropped: their numbers are closed already, and may
//!   name the child's own descriptors by the time it drops them
//!   ([`handler_installed`] says whether that is so).
//! - Past [`SLOTS`] open connections, a new one is not listed: it serves
//!   its request and is not kept ([`ListedFd::listed`]).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Once;

/// Most connection descriptors (and pidfds) listed at once.
pub(super) const SLOTS: usize = 1024;

static LISTED: [AtomicI32; SLOTS] = [const { AtomicI32::new(-1) }; SLOTS];
static HOOK: Once = Once::new();
static HOOKED: AtomicBool = AtomicBool::new(false);

/// Runs in a child right after `fork`: close every listed descriptor.
extern "C" fn close_in_child() {
    for slot in &LISTED {
        let fd = slot.swap(-1, Ordering::SeqCst);
        if fd >= 0 {
            // SAFETY: right after fork the child's descriptor table is a
            // copy of the parent's, where a listed number is an open
            // connection (or pidfd) of the broker client: it is unlisted
            // before it is closed. Its owner in the child is forgotten,
            // never dropped (`handler_installed`), so nothing closes the
            // number again. close(2) is async-signal-safe, as a fork
            // handler requires.
            unsafe { libc::close(fd) };
        }
    }
}

fn install() {
    HOOK.call_once(|| {
        // SAFETY: the handler only swaps atomics and calls close(2), both
        // async-signal-safe, as handlers that run in a forked child must be.
        let r = unsafe { libc::pthread_atfork(None, None, Some(close_in_child)) };
        if r == 0 {
            HOOKED.store(true, Ordering::SeqCst);
        } else {
            log::warn!(
                "pthread_atfork failed ({r}): a forked child keeps its parent's broker \
                 connections open until its first import, or until it execs or exits"
            );
        }
    });
}

/// Whether the fork handler runs in children: when it does, a child must
/// forget, not drop, the connections it inherited.
pub(super) fn handler_installed() -> bool {
    HOOKED.load(Ordering::SeqCst)
}

/// A descriptor of the broker client, listed for the fork handler while it
/// is open.
#[derive(Debug)]
pub(super) struct ListedFd {
    fd: OwnedFd,
    slot: Option<usize>,
}

impl ListedFd {
    /// List `fd` (installing the fork handler on first use).
    pub(super) fn new(fd: OwnedFd) -> ListedFd {
        install();
        let raw = fd.as_raw_fd();
        let slot = LISTED.iter().position(|s| {
            s.compare_exchange(-1, raw, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        });
        ListedFd { fd, slot }
    }

    /// Whether the fork handler will close it in a child; one that is not
    /// listed must not be kept after its request.
    pub(super) fn listed(&self) -> bool {
        self.slot.is_some()
    }
}

impl AsFd for ListedFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for ListedFd {
    fn drop(&mut self) {
        // Unlisted before the descriptor closes (right after this).
        if let Some(i) = self.slot {
            let _ = LISTED[i].compare_exchange(
                self.fd.as_raw_fd(),
                -1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_descriptor_is_listed_until_it_is_dropped() {
        let fd = crate::kit::os::memfd("hal-inherited-test", 4096, None).unwrap();
        let raw = fd.as_raw_fd();
        let held = ListedFd::new(fd);
        assert!(held.listed());
        assert!(handler_installed(), "the fork handler is installed");
        let slot = held.slot.expect("a slot");
        assert_eq!(LISTED[slot].load(Ordering::SeqCst), raw, "listed");
        drop(held);
        // The slot is free; another thread may have listed a descriptor
        // there since, but the number it holds then is open.
        let now = LISTED[slot].load(Ordering::SeqCst);
        assert!(now != raw || nix::fcntl::fcntl(raw, nix::fcntl::FcntlArg::F_GETFD).is_ok());
    }
}
