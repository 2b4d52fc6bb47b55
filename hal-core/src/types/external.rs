//! The names out-of-tree backends were registered under in this process,
//! which [`BackendId`](super::BackendId) prints; [`naming`](crate::naming)
//! fills the table and says how.

use std::collections::BTreeMap;
use std::sync::RwLock;

/// External ids and their names.
pub(crate) static NAMES: RwLock<BTreeMap<u16, String>> = RwLock::new(BTreeMap::new());

/// The name external id `id` was registered under in this process, if any
/// ([`naming::claim_external_name`](crate::naming::claim_external_name)).
pub fn external_name(id: u16) -> Option<String> {
    let names = NAMES.read().unwrap_or_else(|p| p.into_inner());
    names.get(&id).cloned()
}
