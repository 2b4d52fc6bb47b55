//! Which runtime entry points each capability needs. The IPC calls exist
//! only in newer CANN (memory and notify keys from 8.3, IPC events from
//! 8.5): a runtime older than one of them does not get the capability, and
//! an operation refused for it names the entry point it lacks
//! ([`hal_core::kit::vendor::needs`]).

use hal_core::kit::vendor::acl::entry;
use hal_core::kit::vendor::needs::{self, EntryGroup};
use hal_core::{Capabilities, Error};

use crate::ffi::sys::Runtime;

/// Memory keys with allow-lists of bare tgids; imports onto another device
/// with peer access.
pub(crate) const IPC_MEMORY: EntryGroup = EntryGroup {
    needed_by: Capabilities::IPC_MEMORY.union(Capabilities::PEER_ACCESS),
    entries: &[
        entry::RT_IPC_MEM_GET_EXPORT_KEY,
        entry::RT_IPC_MEM_SET_IMPORT_PID,
        entry::RT_IPC_MEM_IMPORT_BY_KEY,
        entry::RT_IPC_MEM_CLOSE,
        entry::RT_DEVICE_GET_BARE_TGID,
    ],
};

/// Peer access, asked and enabled.
pub(crate) const PEER: EntryGroup = EntryGroup {
    needed_by: Capabilities::PEER_ACCESS,
    entries: &[
        entry::RT_DEVICE_CAN_ACCESS_PEER,
        entry::RT_DEVICE_ENABLE_PEER_ACCESS,
    ],
};

/// IPC events.
pub(crate) const IPC_EVENT: EntryGroup = EntryGroup {
    needed_by: Capabilities::IPC_EVENT,
    entries: &[
        entry::RT_IPC_GET_EVENT_HANDLE,
        entry::RT_IPC_OPEN_EVENT_HANDLE,
    ],
};

/// VMM, its shareable handle and that handle's pid allow-list.
pub(crate) const VMM: EntryGroup = EntryGroup {
    needed_by: Capabilities::VMM.union(Capabilities::GROWABLE),
    entries: &[
        entry::RT_MEM_GET_ALLOCATION_GRANULARITY,
        entry::RT_MALLOC_PHYSICAL,
        entry::RT_FREE_PHYSICAL,
        entry::RT_RESERVE_MEM_ADDRESS,
        entry::RT_RELEASE_MEM_ADDRESS,
        entry::RT_MAP_MEM,
        entry::RT_UNMAP_MEM,
        entry::RT_MEM_SET_ACCESS,
        entry::RT_MEM_EXPORT_TO_SHAREABLE_HANDLE,
        entry::RT_MEM_SET_PID_TO_SHAREABLE_HANDLE,
        entry::RT_MEM_IMPORT_FROM_SHAREABLE_HANDLE,
        entry::RT_DEVICE_GET_BARE_TGID,
    ],
};

/// Notify keys; a notify is waited on only by its creator.
pub(crate) const IPC_NOTIFY: EntryGroup = EntryGroup {
    needed_by: Capabilities::IPC_NOTIFY
        .union(Capabilities::CREATOR_ONLY_NOTIFY_WAIT)
        .union(Capabilities::STREAM_ORDERED_NOTIFY),
    entries: &[
        entry::RT_CREATE_NOTIFY,
        entry::RT_NOTIFY_GET_EXPORT_KEY,
        entry::RT_NOTIFY_SET_IMPORT_PID,
        entry::RT_NOTIFY_IMPORT_BY_KEY,
        entry::RT_WAIT_AND_RESET_NOTIFY,
        entry::RT_RECORD_NOTIFY,
    ],
};

/// Every group, in the order a refusal looks for what is missing.
const GROUPS: &[EntryGroup] = &[VMM, IPC_MEMORY, PEER, IPC_EVENT, IPC_NOTIFY];

impl Runtime {
    /// True when the runtime has every entry point of `group`.
    pub(crate) fn offers(&self, group: &EntryGroup) -> bool {
        group.offered(|s| self.present(s))
    }

    /// The `Unsupported` answer of `operation` on a device without
    /// `capability`, naming the entry point this runtime lacks for it.
    pub(crate) fn absent(&self, operation: &str, capability: Capabilities) -> Error {
        let why = needs::lacks(GROUPS, capability, self.path(), |s| self.present(s));
        needs::capability_absent("ascend", operation, capability, why)
    }
}

#[cfg(test)]
mod tests {
    use super::GROUPS;

    #[test]
    fn every_entry_point_of_a_group_is_one_the_table_resolves() {
        let unresolved = hal_core::kit::vendor::needs::unresolved(GROUPS, crate::RESOLVED);
        assert!(unresolved.is_empty(), "{unresolved:?}");
    }
}
