//! Which driver entry points each capability needs. A driver older than
//! one of them does not get the capability, and an operation refused for
//! it names the entry point it lacks ([`hal_core::needs`]).

use hal_core::needs::{self, EntryGroup};
use hal_core::vendor::cuda::entry;
use hal_core::{Capabilities, Error};

use crate::sys::Driver;

/// Legacy IPC of device memory (importers counted by leases, which IPC
/// events grant as well).
pub(crate) const IPC_MEMORY: EntryGroup = EntryGroup {
    needed_by: Capabilities::IPC_MEMORY.union(Capabilities::GROWABLE),
    entries: &[
        entry::MEM_GET_ADDRESS_RANGE_V2,
        entry::POINTER_GET_ATTRIBUTE,
        entry::IPC_GET_MEM_HANDLE,
        entry::IPC_OPEN_MEM_HANDLE_V2,
        entry::IPC_CLOSE_MEM_HANDLE,
    ],
};

/// IPC events.
pub(crate) const IPC_EVENT: EntryGroup = EntryGroup {
    needed_by: Capabilities::IPC_EVENT.union(Capabilities::IPC_EVENT_QUERY),
    entries: &[entry::IPC_GET_EVENT_HANDLE, entry::IPC_OPEN_EVENT_HANDLE],
};

/// VMM shared by POSIX descriptor; the growable buffer's chunks are VMM
/// and its header legacy IPC.
pub(crate) const VMM: EntryGroup = EntryGroup {
    needed_by: Capabilities::VMM
        .union(Capabilities::GROWABLE)
        .union(Capabilities::HOST_NUMA_VMM),
    entries: &[
        entry::MEM_GET_ALLOCATION_GRANULARITY,
        entry::MEM_CREATE,
        entry::MEM_RELEASE,
        entry::MEM_ADDRESS_RESERVE,
        entry::MEM_ADDRESS_FREE,
        entry::MEM_MAP,
        entry::MEM_UNMAP,
        entry::MEM_SET_ACCESS,
        entry::MEM_EXPORT_TO_SHAREABLE_HANDLE,
        entry::MEM_IMPORT_FROM_SHAREABLE_HANDLE,
        entry::CTX_SYNCHRONIZE,
    ],
};

/// Every group, in the order a refusal looks for what is missing.
const GROUPS: &[EntryGroup] = &[VMM, IPC_MEMORY, IPC_EVENT];

impl Driver {
    /// True when the driver has every entry point of `group`.
    pub(crate) fn offers(&self, group: &EntryGroup) -> bool {
        group.first_missing(|s| self.present(s)).is_none()
    }

    /// The `Unsupported` answer of `operation` on a device without
    /// `capability`, naming the entry point this driver lacks for it.
    pub(crate) fn absent(&self, operation: &str, capability: Capabilities) -> Error {
        let lacking = needs::first_lacking(GROUPS, capability, |s| self.present(s));
        needs::capability_absent(
            "cuda",
            operation,
            capability,
            lacking.map(|s| (self.path().as_path(), s)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::GROUPS;

    /// `present` answers `false` for a name outside the table, so an entry
    /// point misspelt in a group would quietly take its capabilities away.
    #[test]
    fn every_entry_point_of_a_group_is_one_the_table_resolves() {
        for group in GROUPS {
            for entry in group.entries {
                assert!(crate::RESOLVED.contains(entry), "{entry}");
            }
        }
    }
}
