//! What the direct path keeps of an exporter: its board as this process
//! maps it, with a pidfd of the exporter, and the leases this process
//! recorded on it.

use std::collections::HashMap;
use std::fmt;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

use super::board::{Page, BOARD_ID};
use crate::kit::os;
use crate::kit::os::lock::lock;
use crate::lease::LeaseTicket;

/// An exporter's board as this process sees it, with a pidfd of the
/// exporter to take descriptors through.
pub(crate) struct View {
    pub(super) page: Page,
    /// The board's descriptor, kept open for the life of the view (never
    /// read: held): the exporter counts a lease only for a process that
    /// holds its board.
    pub(super) _board_fd: OwnedFd,
    pub(super) pidfd: OwnedFd,
    pub(super) pid: u32,
    pub(super) start: u64,
}

impl fmt::Debug for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("View").field("pid", &self.pid).finish()
    }
}

/// A lease this process recorded on an exporter's board.
pub(crate) struct BoardLease {
    pub(super) view: Arc<View>,
    pub(super) slot: u32,
    pub(super) generation: u64,
    pub(super) pid: u32,
}

impl fmt::Debug for BoardLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoardLease")
            .field("exporter", &self.view.pid)
            .field("slot", &self.slot)
            .finish()
    }
}

impl BoardLease {
    /// The lease as a ticket: the board's id, the slot, the generation of
    /// the entry it holds.
    pub(crate) fn ticket(&self) -> LeaseTicket {
        LeaseTicket {
            table: BOARD_ID,
            slot: self.slot,
            token: self.generation,
        }
    }
}

impl Drop for BoardLease {
    /// Give the lease back, once (in the process that recorded it: a
    /// forked child's copy gives nothing back).
    fn drop(&mut self) {
        if self.pid == os::pid() {
            self.view
                .page
                .give_back(self.slot, self.pid, self.generation);
        }
    }
}

/// The most boards kept: past it, those of exporters that exited go first.
pub(super) const MAX_VIEWS: usize = 64;

/// The boards of the brokers this process imported from (`None`: a broker
/// that has none for this process).
pub(super) static VIEWS: Mutex<Option<HashMap<String, Option<Arc<View>>>>> = Mutex::new(None);

/// The view kept for the broker `name`: `None` when none was tried,
/// `Some(None)` for a broker without a board for this process.
pub(super) fn known(name: &str) -> Option<Option<Arc<View>>> {
    lock(&VIEWS).as_ref().and_then(|m| m.get(name).cloned())
}

/// Keep `view` as the broker `name`'s; past [`MAX_VIEWS`], the views of
/// exporters that exited (and the brokers without one) go first.
pub(super) fn keep(name: &str, view: Option<Arc<View>>) {
    let mut views = lock(&VIEWS);
    let map = views.get_or_insert_with(HashMap::new);
    if map.len() >= MAX_VIEWS {
        map.retain(|_, v| v.as_ref().is_some_and(|v| os::pidfd_alive(v.pidfd.as_fd())));
        if map.len() >= MAX_VIEWS {
            map.clear();
        }
    }
    map.insert(name.to_owned(), view);
}

/// Forget `view`, the board of the broker `name`, when its exporter exited.
pub(super) fn forget_if_gone(view: &View, name: &str) {
    if !os::pidfd_alive(view.pidfd.as_fd()) {
        if let Some(m) = lock(&VIEWS).as_mut() {
            m.remove(name);
        }
    }
}

/// Forget every board (with the kept connections): their pidfds close once
/// no lease holds them.
pub(crate) fn forget_all() {
    *lock(&VIEWS) = None;
}
