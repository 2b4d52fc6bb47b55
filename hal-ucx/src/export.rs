//! An export to other hosts: its handle, its count of remote importers,
//! its signals, and the end of it all when it is dropped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hal_core::handle::remote::RemoteHandle;
use hal_core::{Error, Result};

use crate::ffi::bindings::ucp_mem_h;
use crate::hub::lock;
use crate::owner::Owner;

/// Memory or a notify exported to other hosts ([`crate::Node::export`],
/// [`crate::Node::export_notify`]). Dropping it ends the export: the
/// memory is unregistered, its importers' connections are closed (their
/// operations fail with [`Error::Closed`]), and later connections are
/// refused with [`Error::NotFound`].
pub struct RemoteExported {
    owner: Arc<Owner>,
    handle: RemoteHandle,
    /// The registration (`ucp_mem_h`) of a memory export.
    memh: Option<usize>,
    /// Signals already taken by [`RemoteExported::wait_signal`].
    taken: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for RemoteExported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteExported")
            .field("handle", &self.handle)
            .finish()
    }
}

impl RemoteExported {
    pub(crate) fn new(
        owner: Arc<Owner>,
        handle: RemoteHandle,
        memh: Option<usize>,
    ) -> RemoteExported {
        RemoteExported {
            owner,
            handle,
            memh,
            taken: Default::default(),
        }
    }

    /// The handle.
    pub fn handle(&self) -> &RemoteHandle {
        &self.handle
    }

    /// The handle's text (`hal1r.…`), for the other host. It holds the
    /// export's secret: give it only to the processes meant to use it.
    pub fn text(&self) -> String {
        self.handle.to_text()
    }

    /// How many importers proved the secret and are still connected.
    pub fn importers(&self) -> usize {
        lock(&self.owner.hub.tables)
            .exports
            .get(&self.handle.export_id)
            .map_or(0, |e| e.importers)
    }

    /// Wait until `pred` holds of the export's (importers, signals), or
    /// the timeout; [`Error::Timeout`] naming `what` then.
    fn wait_for(
        &self,
        timeout: Duration,
        what: &str,
        pred: impl Fn(usize, u64) -> bool,
    ) -> Result<()> {
        let hub = &self.owner.hub;
        let deadline = Instant::now() + timeout;
        hub.watchers
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _counted = Watching(hub);
        let mut t = lock(&hub.tables);
        loop {
            let (n, s) = t
                .exports
                .get(&self.handle.export_id)
                .map_or((0, 0), |e| (e.importers, e.signals));
            if pred(n, s) {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout {
                    after: timeout,
                    what: what.to_string(),
                });
            }
            t = hub
                .changed
                .wait_timeout(t, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Wait until at least `n` importers are connected.
    pub fn wait_importers(&self, n: usize, timeout: Duration) -> Result<()> {
        self.wait_for(timeout, &format!("{n} remote importer(s)"), |have, _| {
            have >= n
        })
    }

    /// Wait until no importer is left (each closed its connection, or
    /// died: a dead importer is dropped from the count once UCX sees its
    /// connection fail).
    pub fn wait_unused(&self, timeout: Duration) -> Result<()> {
        self.wait_for(timeout, "the remote importers to close", |have, _| {
            have == 0
        })
    }

    /// Wait for the next signal an importer sent
    /// ([`crate::RemoteMemory::write_signal`],
    /// [`crate::RemoteNotify::signal`]) and take it.
    pub fn wait_signal(&self, timeout: Duration) -> Result<()> {
        use std::sync::atomic::Ordering;
        let want = self.taken.load(Ordering::Acquire) + 1;
        let hub = &self.owner.hub;
        let id = self.handle.export_id;
        crate::drive::spin_until(hub, || {
            lock(&hub.tables)
                .exports
                .get(&id)
                .is_some_and(|e| e.signals >= want)
        });
        self.wait_for(timeout, "a remote signal", |_, s| s >= want)?;
        self.taken.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

/// A thread counted among the hub's watchers until dropped.
struct Watching<'a>(&'a crate::hub::Hub);

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        self.0
            .watchers
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for RemoteExported {
    fn drop(&mut self) {
        let hub = &self.owner.hub;
        lock(&hub.tables).exports.remove(&self.handle.export_id);
        let id = self.handle.export_id;
        let closing = hub
            .on_thread(move |h| crate::serve::close_export(h, id))
            .unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(5);
        for c in closing {
            c.wait_until(Some(deadline));
            hub.unwaited(c);
        }
        hub.tell_changed();
        if let Some(memh) = self.memh {
            let _ = hub.on_thread(move |h| h.engine.unmap(memh as ucp_mem_h));
        }
    }
}
