//! The broker's server: its abstract `SOCK_SEQPACKET` socket, served by the
//! workers of [`serve`](super::serve), and the registrations it serves.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use nix::sys::socket::{self, AddressFamily, Backlog, SockFlag, SockType, UnixAddr};

use super::policy::Policy;
use super::registry::{Broker, Entry, Registration, Table, BROKER, FORK_HOOK, LISTENER_FD, SERIAL};
use super::serve;
use crate::error::{Error, Result};
use crate::kit::os;
use crate::kit::os::lock::lock;
use crate::lease::LeaseTable;

/// Register `fds` under `object_id` with this process's broker, starting it
/// on first use (and again in a forked child).
pub(crate) fn register(
    object_id: [u8; 16],
    fds: Arc<[OwnedFd]>,
    policy: Policy,
    leases: Option<Arc<LeaseTable>>,
) -> Result<Registration> {
    let pid = os::pid();
    let (name, table) = {
        let mut slot = lock(&BROKER);
        if slot.as_ref().is_some_and(|b| b.pid != pid) {
            // Inherited through fork: its thread did not come along and its
            // registrations are the parent's. Drop what can be dropped
            // without waiting on a lock a vanished thread may hold.
            if let Some(old) = slot.take() {
                if let Ok(mut t) = old.table.try_lock() {
                    t.clear();
                }
            }
        }
        if slot.is_none() {
            *slot = Some(start(pid)?);
        }
        let b = slot
            .as_ref()
            .ok_or_else(|| Error::invalid("descriptor broker state missing"))?;
        (b.name.clone(), Arc::clone(&b.table))
    };
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    {
        let mut t = lock(&table);
        let entries = t.entry(object_id).or_default();
        entries.push(Entry {
            serial,
            fds,
            policy,
            leases,
        });
        if let (Some(b), Some(e)) = (super::board::active(), entries.last()) {
            b.publish(&object_id, e);
        }
    }
    Ok(Registration {
        pid,
        serial,
        object_id,
        name,
        table,
    })
}

pub(super) fn start(pid: u32) -> Result<Broker> {
    let name = format!("hal-{pid}-{}", os::hex(&os::random_id()[..8]));
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )
    .map_err(|e| Error::errno("creating the descriptor broker's socket", e))?;
    let addr = UnixAddr::new_abstract(name.as_bytes())
        .map_err(|e| Error::errno("naming the descriptor broker's socket", e))?;
    socket::bind(fd.as_raw_fd(), &addr).map_err(|e| {
        Error::errno(
            format!("binding the descriptor broker to the abstract socket `{name}`"),
            e,
        )
    })?;
    let backlog = Backlog::new(128).unwrap_or(Backlog::MAXCONN);
    socket::listen(&fd, backlog)
        .map_err(|e| Error::errno("listening on the descriptor broker's socket", e))?;
    FORK_HOOK.call_once(|| {
        // SAFETY: the handler only swaps atomics and calls close(2), both
        // async-signal-safe, as handlers that run in a forked child must be.
        let r = unsafe { libc::pthread_atfork(None, None, Some(serve::close_in_child)) };
        if r != 0 {
            log::warn!(
                "pthread_atfork failed ({r}): forked children keep the descriptor broker's \
                 sockets open until they exec or exit"
            );
        }
    });
    let table: Arc<Table> = Arc::new(Mutex::new(HashMap::new()));
    LISTENER_FD.store(fd.as_raw_fd(), Ordering::SeqCst);
    if let Err(e) = serve::spawn_workers(fd, Arc::clone(&table), pid) {
        LISTENER_FD.store(-1, Ordering::SeqCst);
        return Err(e);
    }
    log::debug!("descriptor broker of pid {pid} listens on abstract socket `{name}`");
    Ok(Broker { pid, name, table })
}

/// This process's own broker table when `name` is its broker: a request to
/// it is decided in place, without a socket.
pub(super) fn own_table(name: &str) -> Option<Arc<Table>> {
    let slot = lock(&BROKER);
    slot.as_ref()
        .filter(|b| b.pid == os::pid() && b.name == name)
        .map(|b| Arc::clone(&b.table))
}

/// True when `name` is this process's own broker and `fds` are the files
/// (device and inode) it registered for `object_id`, in order.
pub(crate) fn registered_here(name: &str, object_id: &[u8; 16], fds: &[OwnedFd]) -> bool {
    let Some(table) = own_table(name) else {
        return false;
    };
    // F_GET_SEALS first: it answers at once for any descriptor, where
    // fstat on a peer's FUSE-backed descriptor could stall. Registered
    // descriptors are memfds.
    let file = |fd: BorrowedFd<'_>| {
        os::seals(fd).ok()?;
        os::fstat(fd).ok().map(|st| (st.st_dev, st.st_ino))
    };
    let table = lock(&table);
    table.get(object_id).is_some_and(|entries| {
        entries.iter().any(|e| {
            e.fds.len() == fds.len()
                && e.fds
                    .iter()
                    .zip(fds)
                    .all(|(a, b)| file(a.as_fd()).is_some_and(|x| Some(x) == file(b.as_fd())))
        })
    })
}
