//! One registration of an export with this process's broker, and the
//! table of them by object id: what the broker decides on, and what its
//! board states.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use super::policy::Policy;
use crate::lease::LeaseTable;

/// One registration: its serial (unique in the process), the export's
/// descriptors, who may import them, and the lease table of an export that
/// counts its importers.
pub(super) struct Entry {
    pub(super) serial: u64,
    pub(super) fds: Arc<[OwnedFd]>,
    pub(super) policy: Policy,
    pub(super) leases: Option<Arc<LeaseTable>>,
}

/// The registrations by object id. It stays consistent even if a holder
/// panicked (every update is a single insert, remove or field store), so it
/// is locked with [`crate::kit::os::lock::lock`].
pub(super) type Table = Mutex<HashMap<[u8; 16], Vec<Entry>>>;
