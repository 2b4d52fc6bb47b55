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

/// Import `handle`'s `count` descriptors from the board of the broker
/// `name`; `None` when the broker must be asked.
pub(super) fn fetch(handle: &Handle, name: &str, count: usize) -> Option<Served> {
    // Pids mean the same to both only in one pid namespace; a handle that
    // does not name its creator's process could not be checked against
    // the board's.
    if count > board::MAX_FDS
        || handle.same_pid_namespace() != Some(true)
        || handle.creator_pid == 0
        || handle.creator_start == 0
    {
        return None;
    }
    let view = view_for(handle, name)?;
    if handle.creator_pid != view.pid || handle.creator_start != view.start {
        return None;
    }
    let Some(entry) = view.page.find(&handle.object_id) else {
        // An exporter that exits withdraws its exports first.
        forget_if_gone(&view, name);
        return None;
    };
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
            drop(lease);
            forget_if_gone(&view, name);
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
    // A handle that names no live process as its creator (forged, or its
    // exporter exited) cannot load the board, and says nothing of it.
    if os::process_start_time(handle.creator_pid) != Some(handle.creator_start) {
        return None;
    }
    let view = match load(handle, name) {
        Ok(v) => Some(Arc::new(v)),
        // A handle that does not match the broker's process (forged, or
        // stale) says nothing of the broker: nothing is kept.
        Err(Unloaded::ThisHandle(why)) => {
            log::debug!("no direct import from the broker `{name}` for this handle: {why}");
            return None;
        }
        Err(Unloaded::Broker(why)) => {
            log::debug!("no direct imports from the broker `{name}`: {why}");
            None
        }
    };
    keep(name, view.clone());
    view
}

/// Keep `view` as the broker `name`'s; past [`MAX_VIEWS`], the views of
/// exporters that exited (and the brokers without one) go first.
fn keep(name: &str, view: Option<Arc<View>>) {
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

/// Why a board was not loaded.
enum Unloaded {
    /// The broker has none for this process (an older hal, another pid
    /// namespace, a board of another layout): kept, so that it is not
    /// asked again.
    Broker(String),
    /// The handle does not match the broker's process.
    ThisHandle(String),
}

/// Take and map the board of the broker `name`, served to `handle`'s
/// creator, and open a pidfd of it.
fn load(handle: &Handle, name: &str) -> std::result::Result<View, Unloaded> {
    let (pid, start) = (handle.creator_pid, handle.creator_start);
    let broker = |e: &dyn std::fmt::Display| Unloaded::Broker(e.to_string());
    let served = match super::locate::locate_id(handle, &BOARD_ID, name, 1) {
        Ok(Some(served)) => served,
        Ok(None) => return Err(Unloaded::Broker("its board could not be taken".into())),
        // The server is not the handle's creator.
        Err(e @ crate::error::Error::PermissionDenied { .. }) => {
            return Err(Unloaded::ThisHandle(e.to_string()))
        }
        Err(e) => return Err(broker(&e)),
    };
    let [fd] =
        <[OwnedFd; 1]>::try_from(served.fds).map_err(|_| broker(&"one descriptor expected"))?;
    let facts = os::file_facts(fd.as_fd()).map_err(|e| broker(&e))?;
    if facts.seals & os::SIZE_SEALS != os::SIZE_SEALS {
        return Err(broker(&"the board's size is not sealed"));
    }
    let size = facts.stat.st_size;
    if usize::try_from(size).ok() != Some(board::LEN) {
        return Err(broker(&format!(
            "the board is {size} bytes, not {}",
            board::LEN
        )));
    }
    let page = Page::map(&fd).map_err(|e| broker(&e))?;
    let (board_pid, ns) = page.header().map_err(|e| broker(&e))?;
    if ns != os::pid_namespace() {
        return Err(broker(&"the exporter is in another pid namespace"));
    }
    if board_pid != pid {
        return Err(Unloaded::ThisHandle(
            "the board is not the handle's creator's".into(),
        ));
    }
    let pidfd = os::pidfd_open(pid).map_err(|e| broker(&e))?;
    // The pidfd names the creator only while it lives with its start time.
    if os::process_start_time(pid) != Some(start) || !os::pidfd_alive(pidfd.as_fd()) {
        return Err(Unloaded::ThisHandle(
            "the creator is not the process the handle names".into(),
        ));
    }
    Ok(View {
        page,
        pidfd,
        pid,
        start,
    })
}

/// Forget `view`, the board of the broker `name`, when its exporter exited.
fn forget_if_gone(view: &View, name: &str) {
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

#[cfg(test)]
mod tests {
    use super::super::policy::Allowed;
    use super::*;

    fn entry(policy: u32, uid: u32, pids: Vec<Allowed>) -> Snapshot {
        Snapshot {
            index: 0,
            generation: 1,
            flags: 0,
            policy,
            uid,
            fds: Vec::new(),
            pids,
        }
    }

    #[test]
    fn the_importer_honours_the_allow_list_the_board_states() {
        let (me, start) = os::self_identity();
        let uid = nix::unistd::geteuid().as_raw();
        assert!(admits(&entry(ANYONE, 0, Vec::new()), me, start));
        assert!(admits(&entry(SAME_USER, uid, Vec::new()), me, start));
        assert!(!admits(&entry(SAME_USER, uid + 1, Vec::new()), me, start));
        assert!(!admits(
            &entry(SAME_USER, overflow_uid(), Vec::new()),
            me,
            start
        ));
        let listed = |pid, start| vec![Allowed { pid: 1, start: 1 }, Allowed { pid, start }];
        assert!(admits(&entry(PIDS, 0, listed(me, start)), me, start));
        assert!(
            !admits(&entry(PIDS, 0, listed(me, start + 1)), me, start),
            "a recycled pid"
        );
        assert!(
            !admits(&entry(PIDS, 0, listed(me + 1, start)), me, start),
            "another pid"
        );
        assert!(
            !admits(&entry(PIDS, 0, listed(me, 0)), me, 0),
            "no start time"
        );
        assert!(!admits(&entry(PIDS, 0, Vec::new()), me, start));
        assert!(
            !admits(&entry(0, uid, Vec::new()), me, start),
            "an unknown policy"
        );
        assert!(!admits(&entry(9, uid, Vec::new()), me, start));
    }

    #[test]
    fn views_past_the_bound_go_dead_ones_first() {
        // Brokers without a view fill the map; the next one kept makes room.
        for i in 0..MAX_VIEWS {
            keep(&format!("hal-test-view-{i}"), None);
        }
        assert!(lock(&VIEWS).as_ref().unwrap().len() >= MAX_VIEWS);
        keep("hal-test-view-last", None);
        let views = lock(&VIEWS);
        let map = views.as_ref().unwrap();
        assert!(map.len() < MAX_VIEWS, "{} kept", map.len());
        assert!(map.contains_key("hal-test-view-last"));
    }
}
