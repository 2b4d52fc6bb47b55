//! This process's broker state: its registrations, and the handle an export
//! keeps on its registration.

use std::fmt;
use std::sync::atomic::{AtomicI32, AtomicU64};
use std::sync::{Arc, Mutex, Once};

pub(super) use super::entry::{Entry, Table};
use super::policy::Policy;
use crate::handle::Handle;
use crate::kit::os;
use crate::kit::os::lock::lock;

/// This process's broker.
pub(super) struct Broker {
    /// The process that started it; a forked child sees another pid here.
    pub(super) pid: u32,
    pub(super) name: String,
    pub(super) table: Arc<Table>,
}

pub(super) static BROKER: Mutex<Option<Broker>> = Mutex::new(None);
pub(super) static SERIAL: AtomicU64 = AtomicU64::new(1);
/// The listening descriptor, for the fork handler to close in a child.
pub(super) static LISTENER_FD: AtomicI32 = AtomicI32::new(-1);
pub(super) static FORK_HOOK: Once = Once::new();

/// An export's registration with the broker; dropping it unregisters.
#[must_use = "dropping the registration unregisters the export from the broker"]
pub(crate) struct Registration {
    pub(super) pid: u32,
    pub(super) serial: u64,
    pub(super) object_id: [u8; 16],
    pub(super) name: String,
    pub(super) table: Arc<Table>,
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("broker", &self.name)
            .field("pid", &self.pid)
            .field("object_id", &os::hex(&self.object_id))
            .finish()
    }
}

impl Registration {
    /// The broker's abstract socket name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// True in the process that registered (false in a forked child).
    fn here(&self) -> bool {
        self.pid == os::pid()
    }

    /// Replace the export's policy with the one `handle` states, keeping
    /// the pins of pids that stay allowed.
    pub(crate) fn set_policy_of(&self, handle: &Handle) {
        if !self.here() {
            return;
        }
        let board = super::board::active();
        if let Some(entries) = lock(&self.table).get_mut(&self.object_id) {
            for e in entries.iter_mut().filter(|e| e.serial == self.serial) {
                e.policy = Policy::of(handle, Some(&e.policy));
                if let Some(b) = &board {
                    b.publish(&self.object_id, e);
                }
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if !self.here() {
            // A forked child's copy: the registration belongs to the parent.
            return;
        }
        let mut table = lock(&self.table);
        if let Some(b) = super::board::active() {
            b.withdraw_serial(self.serial);
        }
        if let Some(entries) = table.get_mut(&self.object_id) {
            entries.retain(|e| e.serial != self.serial);
            if entries.is_empty() {
                table.remove(&self.object_id);
            }
        }
    }
}
