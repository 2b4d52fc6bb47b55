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

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use super::board::{self, Page, Snapshot, ANYONE, BOARD_ID, COUNTS_LEASES, PIDS, SAME_USER};
use super::client::Served;
use super::getfd::{self, Took};
use super::policy::overflow_uid;
use super::view::{forget_if_gone, keep, known, BoardLease, View};
#[cfg(test)]
use super::view::{MAX_VIEWS, VIEWS};
use crate::handle::Handle;
use crate::kit::os;

/// Import `handle`'s `count` descriptors from the board of the broker
/// `name`; `None` when the broker must be asked.
pub(super) fn fetch(handle: &Handle, name: &str, count: usize) -> Option<Served> {
    // Pids mean the same to both only in one pid namespace; a handle that
    // does not name its creator's process could not be checked against
    // the board's.
    if count > board::MAX_FDS
        || handle.creator_pid == os::pid()
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
    // The descriptors' identities as the export's id vouches for them: an
    // entry pointed at other descriptors (by a process that wrote the
    // board) goes to the broker.
    if entry.tag != board::binding::tag(&handle.object_id, &entry.fds) {
        log::debug!(
            "the board of the broker `{name}` states descriptors that export {} does not \
             vouch for; asking the broker",
            os::hex(&handle.object_id)
        );
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
    match getfd::take(view.pidfd.as_fd(), view.pid, &entry.fds, name) {
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
    if let Some(known) = known(name) {
        return known;
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
    let pidfd = os::pidfd_open(pid).map_err(|e| broker(&e))?;
    // The pidfd names the creator only while it lives with its start time.
    if os::process_start_time(pid) != Some(start) || !os::pidfd_alive(pidfd.as_fd()) {
        return Err(Unloaded::ThisHandle(
            "the creator is not the process the handle names".into(),
        ));
    }
    // Without ptrace access to the exporter its board is of no use: asked
    // before the broker is, so that the exporter makes none for nothing.
    os::pidfd_getfd_allowed(pidfd.as_fd())
        .map_err(|e| broker(&format_args!("pidfd_getfd is not allowed ({e})")))?;
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
    Ok(View {
        page,
        _board_fd: fd,
        pidfd,
        pid,
        start,
    })
}

#[cfg(test)]
mod tests {
    use super::super::policy::Allowed;
    use super::*;
    use crate::kit::os::lock::lock;

    fn entry(policy: u32, uid: u32, pids: Vec<Allowed>) -> Snapshot {
        Snapshot {
            index: 0,
            generation: 1,
            flags: 0,
            policy,
            uid,
            fds: Vec::new(),
            pids,
            tag: 0,
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
