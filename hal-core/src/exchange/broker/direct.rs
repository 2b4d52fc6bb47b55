//! The importer's direct path: an import that asks no one. Where this
//! process may take the exporter's descriptors itself (`pidfd_getfd(2)`,
//! ptrace access), it maps the exporter's [board] once per
//! broker and then, for each import, finds the export there, checks the
//! allow-list itself, records its lease on the board and takes the
//! descriptors: no round trip to the exporter.
//!
//! The path only ever says yes: an export the board does not state, an
//! allow-list that does not name this process, a full board, a descriptor
//! that is not the file the board names, an exporter in another pid
//! namespace: every doubt goes to the broker, whose answer (and refusal)
//! is the same as without the path. An importer that could use the path
//! could read and write the exporter's memory anyway, so honouring the
//! allow-list here costs the exporter no protection it had.

use std::collections::HashMap;
use std::fmt;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex};

use super::board::{self, Page, Snapshot, ANYONE, BOARD_ID, COUNTS_LEASES, PIDS, SAME_USER};
use super::client::Served;
use super::getfd::{self, Took};
use super::policy::overflow_uid;
use crate::handle::Handle;
use crate::kit::lock::lock;
use crate::kit::os;
use crate::lease::LeaseTicket;

/// An exporter's board as this process sees it, with a pidfd of the
/// exporter to take descriptors through.
pub(crate) struct View {
    page: Page,
    pidfd: OwnedFd,
    pid: u32,
    start: u64,
}

impl fmt::Debug for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("View").field("pid", &self.pid).finish()
    }
}

/// The most boards kept: past it, those of exporters that exited go first.
const MAX_VIEWS: usize = 64;

/// The boards of the brokers this process imported from (`None`: a broker
/// that has none for this process).
static VIEWS: Mutex<Option<HashMap<String, Option<Arc<View>>>>> = Mutex::new(None);

/// A lease this process recorded on an exporter's board.
pub(crate) struct BoardLease {
    view: Arc<View>,
    slot: u32,
    generation: u64,
    pid: u32,
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

    /// Give the lease back (in the process that recorded it).
    pub(crate) fn give_back(&self) {
        if self.pid == os::pid() {
            self.view
                .page
                .give_back(self.slot, self.pid, self.generation);
        }
    }
}

/// Import `handle`'s `count` descriptors from the board of the broker
/// `name`; `None` when the broker must be asked.
pub(super) fn fetch(handle: &Handle, name: &str, count: usize) -> Option<Served> {
    if count == 0 || count > board::MAX_FDS || handle.same_pid_namespace() != Some(true) {
        return None;
    }
    let view = view_for(handle, name)?;
    if handle.creator_pid != view.pid || handle.creator_start != view.start {
        return None;
    }
    let entry = view.page.find(&handle.object_id)?;
    let (pid, start) = os::self_identity();
    if entry.fds.len() != count || !admits(&entry, pid, start) {
        return None;
    }
    let lease = if entry.flags & COUNTS_LEASES != 0 {
        let slot = view.page.claim(pid, start, entry.index, entry.generation)?;
        // The claim before the second look, as the exporter's withdrawal is
        // before its count: one of the two sees the other.
        fence(Ordering::SeqCst);
        let lease = BoardLease {
            view: Arc::clone(&view),
            slot,
            generation: entry.generation,
            pid,
        };
        if !view.page.still(entry.index, entry.generation) {
            lease.give_back();
            return None;
        }
        Some(lease)
    } else {
        None
    };
    match getfd::take(view.pidfd.as_fd(), &entry.fds, name) {
        Took::Fds(fds, facts) => Some(Served {
            fds,
            lease: None,
            board: lease,
            facts: Some(facts),
        }),
        Took::Fallback => {
            if let Some(l) = &lease {
                l.give_back();
            }
            if !os::pidfd_alive(view.pidfd.as_fd()) {
                forget(name);
            }
            None
        }
    }
}

/// Whether the entry's allow-list admits this process (`pid`, `start`).
fn admits(entry: &Snapshot, pid: u32, start: u64) -> bool {
    match entry.policy {
        ANYONE => true,
        SAME_USER => {
            let uid = nix::unistd::geteuid().as_raw();
            uid == entry.uid && uid != overflow_uid()
        }
        PIDS => start != 0 && entry.pids.iter().any(|a| a.pid == pid && a.start == start),
        _ => false,
    }
}

/// The board of the broker `name`, loaded at the first import from it.
fn view_for(handle: &Handle, name: &str) -> Option<Arc<View>> {
    if let Some(known) = lock(&VIEWS).as_ref().and_then(|m| m.get(name)) {
        return known.clone();
    }
    let view = match load(handle, name) {
        Ok(v) => Some(Arc::new(v)),
        Err(why) => {
            log::debug!("no direct imports from the broker `{name}`: {why}");
            None
        }
    };
    let mut views = lock(&VIEWS);
    let map = views.get_or_insert_with(HashMap::new);
    if map.len() >= MAX_VIEWS {
        map.retain(|_, v| v.as_ref().is_some_and(|v| os::pidfd_alive(v.pidfd.as_fd())));
        if map.len() >= MAX_VIEWS {
            map.clear();
        }
    }
    map.insert(name.to_owned(), view.clone());
    view
}

/// Take and map the board of the broker `name`, served to `handle`'s
/// creator, and open a pidfd of it.
fn load(handle: &Handle, name: &str) -> std::result::Result<View, String> {
    let (pid, start) = (handle.creator_pid, handle.creator_start);
    if pid == 0 || start == 0 {
        return Err("the handle does not name its creator's process".into());
    }
    let served = super::locate::locate_id(handle, &BOARD_ID, name, 1)
        .map_err(|e| e.to_string())?
        .ok_or("its board could not be taken")?;
    let [fd] = <[OwnedFd; 1]>::try_from(served.fds).map_err(|_| "one descriptor expected")?;
    let seals = os::seals(fd.as_fd()).map_err(|e| e.to_string())?;
    if seals & os::SIZE_SEALS != os::SIZE_SEALS {
        return Err("the board's size is not sealed".into());
    }
    let size = os::fstat(fd.as_fd()).map_err(|e| e.to_string())?.st_size;
    if usize::try_from(size).ok() != Some(board::LEN) {
        return Err(format!("the board is {size} bytes, not {}", board::LEN));
    }
    let page = Page::map(&fd).map_err(|e| e.to_string())?;
    let (board_pid, ns) = page.header().map_err(|e| e.to_string())?;
    if board_pid != pid || ns != os::pid_namespace() {
        return Err("the board is not the handle's creator's".into());
    }
    let pidfd = os::pidfd_open(pid).map_err(|e| e.to_string())?;
    // The pidfd names the creator only while it lives with its start time.
    if os::process_start_time(pid) != Some(start) || !os::pidfd_alive(pidfd.as_fd()) {
        return Err("the creator exited".into());
    }
    Ok(View {
        page,
        pidfd,
        pid,
        start,
    })
}

/// Forget the board of the broker `name` (its exporter exited).
fn forget(name: &str) {
    if let Some(m) = lock(&VIEWS).as_mut() {
        m.remove(name);
    }
}

/// Forget every board (with the kept connections): their pidfds close once
/// no lease holds them.
pub(crate) fn forget_all() {
    *lock(&VIEWS) = None;
}
