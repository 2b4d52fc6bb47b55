//! The one place that talks to hal-core's export and exchange plumbing.

use std::os::fd::OwnedFd;

use std::sync::Arc;

use hal_core::lease::LeaseTable;
use hal_core::{Exported, Handle, Result};

/// Register the descriptors with this process's broker and wrap the handle.
pub(crate) fn exported(handle: Handle, fds: Vec<OwnedFd>) -> Result<Exported> {
    Exported::new(handle, fds)
}

/// As [`exported`], counting importers in `leases`.
pub(crate) fn exported_leased(
    handle: Handle,
    fds: Vec<OwnedFd>,
    leases: Arc<LeaseTable>,
) -> Result<Exported> {
    Exported::with_leases(handle, fds, leases)
}

/// Add importer pids to an export.
pub(crate) fn add_importers(exported: &mut Exported, pids: &[u32]) -> Result<()> {
    exported.add_importers(pids)
}
