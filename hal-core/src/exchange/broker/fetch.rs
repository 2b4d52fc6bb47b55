//! An importer's fetch of one object, by the fastest way this process and
//! the exporter allow: from the exporter's board with no request
//! ([`direct`]), by location with `pidfd_getfd`
//! ([`locate`](super::locate)), or with `SCM_RIGHTS` ([`client`]).

use super::client::{self, Served};
use super::direct;
use super::getfd;
use super::locate::locate_id;
use super::server::own_table;
use crate::error::Result;
use crate::handle::Handle;

/// Fetch the `count` descriptors of `handle` (and a lease, when the export
/// counts importers) from the broker `name`: from its board when the
/// `pidfd_getfd` path is on (the default) and works with this broker, by
/// location where that path was asked for, else with `SCM_RIGHTS`.
pub(crate) fn fetch(handle: &Handle, name: &str, count: usize) -> Result<Served> {
    if own_table(name).is_none() {
        if getfd::wanted(name) {
            if let Some(served) = direct::fetch(handle, name, count) {
                getfd::note_direct();
                return Ok(served);
            }
        }
        if getfd::located_wanted(name) {
            if let Some(served) = locate_id(handle, &handle.object_id, name, count)? {
                getfd::note_taken();
                return Ok(served);
            }
        }
    }
    client::fetch(handle, name, count)
}
