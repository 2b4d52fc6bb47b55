//! Which driver entry points and which device attributes each capability
//! needs. A driver older than one of the entry points, or a device that
//! answers one of the attributes with 0, does not get the capability, and
//! an operation refused for it names the entry point or the attribute
//! ([`hal_core::kit::vendor::needs`]).

use std::ffi::c_int;

use cudarc::driver::sys::CUdevice_attribute as A;
use hal_core::kit::vendor::cuda::{self, entry};
use hal_core::kit::vendor::needs::{self, EntryGroup, Why};
use hal_core::{Capabilities, Error, Result};

use crate::ffi::result::device;
use crate::ffi::{CUdevice, Driver};

/// Legacy IPC of device memory (importers counted by leases, which IPC
/// events grant as well).
pub(crate) const IPC_MEMORY: EntryGroup = EntryGroup {
    needed_by: Capabilities::IPC_MEMORY
        .union(Capabilities::GROWABLE)
        .union(Capabilities::FOREIGN_MEMORY),
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

/// A device attribute that some capabilities need answered non-zero.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gate {
    /// The capabilities that a 0 leaves out.
    pub(crate) needed_by: Capabilities,
    /// The attribute's number: a `CUdevice_attribute`, or one newer than
    /// the headers' enum (`hal_core::kit::vendor::cuda::ATTRIBUTE_*`).
    pub(crate) number: c_int,
    /// The attribute's name in the driver API.
    pub(crate) name: &'static str,
}

/// A gate on an attribute of the headers' enum, named as the enum names it.
macro_rules! gate {
    ($needed_by:expr, $attribute:ident) => {
        Gate {
            needed_by: $needed_by,
            number: A::$attribute as c_int,
            name: stringify!($attribute),
        }
    };
}

/// Managed memory.
pub(crate) const MANAGED_MEMORY: Gate = gate!(
    Capabilities::MANAGED_MEMORY,
    CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY
);

/// Host registration, and the stream-ordered notifies that write and wait
/// on registered host pages.
pub(crate) const HOST_REGISTER: Gate = gate!(
    Capabilities::HOST_REGISTRATION.union(Capabilities::STREAM_ORDERED_NOTIFY),
    CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED
);

/// IPC events (the leases they grant are granted by legacy IPC too).
pub(crate) const IPC_EVENT_SUPPORTED: Gate = gate!(
    Capabilities::IPC_EVENT.union(Capabilities::IPC_EVENT_QUERY),
    CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED
);

/// The device reads pageable host memory (HMM or ATS).
pub(crate) const PAGEABLE_MEMORY_ACCESS: Gate = gate!(
    Capabilities::PAGEABLE_MEMORY_ACCESS,
    CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS
);

/// What VMM shared by descriptor needs, and what is built on it.
const VMM_BUILT_ON: Capabilities = Capabilities::VMM
    .union(Capabilities::GROWABLE)
    .union(Capabilities::HOST_NUMA_VMM);

/// VMM.
pub(crate) const VMM_SUPPORTED: Gate = gate!(
    VMM_BUILT_ON,
    CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
);

/// VMM allocations shared by POSIX descriptor.
pub(crate) const POSIX_DESCRIPTOR: Gate = gate!(
    VMM_BUILT_ON,
    CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
);

/// Physical memory on a host NUMA node.
pub(crate) const HOST_NUMA_VMM: Gate = Gate {
    needed_by: Capabilities::HOST_NUMA_VMM,
    number: cuda::ATTRIBUTE_HOST_NUMA_VMM_SUPPORTED,
    name: "CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
};

/// Every gate, in the order a refusal looks for an attribute answered 0.
const GATES: &[Gate] = &[
    VMM_SUPPORTED,
    POSIX_DESCRIPTOR,
    HOST_NUMA_VMM,
    MANAGED_MEMORY,
    HOST_REGISTER,
    IPC_EVENT_SUPPORTED,
    PAGEABLE_MEMORY_ACCESS,
];

impl Driver {
    /// True when the driver has every entry point of `group`.
    pub(crate) fn offers(&self, group: &EntryGroup) -> bool {
        group.offered(|s| self.present(s))
    }

    /// True when device `dev` answers the attribute of `gate` non-zero.
    pub(crate) fn grants(&self, dev: CUdevice, gate: &Gate) -> Result<bool> {
        Ok(device::attribute(self, dev, gate.number)? != 0)
    }

    /// The `Unsupported` answer of `operation` on device `dev` without
    /// `capability`: it names the entry point this driver lacks for it, or
    /// else the attribute the device answers 0. Asked only on the way to
    /// an error, so the attributes are read again here rather than kept.
    pub(crate) fn absent(&self, operation: &str, capability: Capabilities, dev: CUdevice) -> Error {
        let library = self.path().as_path();
        let why = needs::lacks(GROUPS, capability, library, |s| self.present(s)).or_else(|| {
            GATES
                .iter()
                .filter(|g| g.needed_by.contains(capability))
                .find(|g| device::attribute(self, dev, g.number).is_ok_and(|v| v == 0))
                .map(|g| Why::DeviceSays {
                    attribute: g.name,
                    value: 0,
                })
        });
        needs::capability_absent("cuda", operation, capability, why)
    }
}

#[cfg(test)]
mod tests {
    use super::{GATES, GROUPS};

    #[test]
    fn every_entry_point_of_a_group_is_one_the_table_resolves() {
        let unresolved = hal_core::kit::vendor::needs::unresolved(GROUPS, crate::RESOLVED);
        assert!(unresolved.is_empty(), "{unresolved:?}");
    }

    /// Every capability a gate names is one that a 0 of its attribute takes
    /// away, and no two gates read the same attribute.
    #[test]
    fn every_gate_reads_an_attribute_of_its_own() {
        for (i, gate) in GATES.iter().enumerate() {
            assert_ne!(gate.needed_by.bits(), 0, "{}", gate.name);
            assert!(
                gate.name.starts_with("CU_DEVICE_ATTRIBUTE_"),
                "{}",
                gate.name
            );
            for other in &GATES[i + 1..] {
                assert_ne!(
                    gate.number, other.number,
                    "{} and {}",
                    gate.name, other.name
                );
            }
        }
    }
}
