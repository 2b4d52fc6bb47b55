//! Device profiles: what a simulated CUDA-like or Ascend-like device looks
//! like and which rules it enforces.

use hal_core::{BackendId, Capabilities, DeviceInfo, Error, Result};

use crate::codes::{acl, cuda, Code};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// Whose rules a profile follows: error codes, entry point names and the
/// behaviour the capabilities cannot express.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Vendor {
    /// The CUDA driver API: legacy IPC exports the base allocation plus an
    /// offset, a second open of one handle in a process returns the same
    /// mapping with a reference count.
    Cuda,
    /// Ascend ACL: pid allow-lists on by default, creator-only notify waits,
    /// IPC events that cannot be queried, memory imported onto another device
    /// usable only by asynchronous device-to-device copies.
    Ascend,
}

impl Vendor {
    /// The backend id of the simulator's profile for this vendor.
    pub const fn backend(self) -> BackendId {
        match self {
            Vendor::Cuda => BackendId::MockCuda,
            Vendor::Ascend => BackendId::MockAscend,
        }
    }

    /// The code for an out-of-range parameter.
    pub const fn invalid_value(self) -> Code {
        match self {
            Vendor::Cuda => cuda::INVALID_VALUE,
            Vendor::Ascend => acl::RT_PARAM_INVALID,
        }
    }

    /// The code for a device ordinal that does not exist.
    pub const fn invalid_device(self) -> Code {
        match self {
            Vendor::Cuda => cuda::INVALID_DEVICE,
            Vendor::Ascend => acl::RT_INVALID_DEVICEID,
        }
    }

    /// The code for a handle naming a resource that is gone.
    pub const fn invalid_handle(self) -> Code {
        match self {
            Vendor::Cuda => cuda::INVALID_HANDLE,
            Vendor::Ascend => acl::RT_INVALID_HANDLE,
        }
    }

    /// The code for using another device's memory without peer access.
    pub const fn peer_not_enabled(self) -> Code {
        match self {
            Vendor::Cuda => cuda::PEER_ACCESS_NOT_ENABLED,
            Vendor::Ascend => acl::RT_NO_PERMISSION,
        }
    }

    /// The code for a device pair that cannot access each other at all.
    pub const fn peer_unsupported(self) -> Code {
        match self {
            Vendor::Cuda => cuda::PEER_ACCESS_UNSUPPORTED,
            Vendor::Ascend => acl::RT_FEATURE_NOT_SUPPORT,
        }
    }

    /// The code every call of a lost device answers.
    pub const fn device_lost(self) -> Code {
        match self {
            Vendor::Cuda => cuda::DEVICE_UNAVAILABLE,
            Vendor::Ascend => acl::RT_LOST_HEARTBEAT,
        }
    }

    /// The code for device memory that ran out.
    pub const fn out_of_memory(self) -> Code {
        match self {
            Vendor::Cuda => cuda::OUT_OF_MEMORY,
            Vendor::Ascend => acl::RT_MEMORY_ALLOCATION,
        }
    }

    /// The vendor's flag for an IPC event, for messages.
    pub(crate) const fn ipc_event_flag(self) -> &'static str {
        match self {
            Vendor::Cuda => "CU_EVENT_INTERPROCESS",
            Vendor::Ascend => "ACL_EVENT_IPC",
        }
    }
}

/// Sub-allocation of small allocations from shared pool chunks, as
/// `aclrtMalloc` does: sizes and offsets advance in small steps, so an
/// allocation that follows a small one does not start on a page boundary,
/// and exporting it is refused unless it was allocated with a page alignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubAllocation {
    /// Size of one pool chunk (one memfd).
    pub chunk_size: u64,
    /// Sizes and offsets are rounded up to this many bytes.
    pub quantum: u64,
    /// Allocations of at least this size get memory of their own instead.
    pub max_size: u64,
}

/// A simulated device model: how many devices, their memory, page sizes,
/// granularity, capabilities, and whose rules they follow.
///
/// Two processes that build the same profile see the same devices with the
/// same UUIDs (derived from [`Profile::name`] and the ordinal), so a handle
/// exported by one is imported onto the right device by the other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// Profile name, part of every device UUID (`mock-cuda`, `mock-ascend`).
    pub name: String,
    /// Whose rules apply.
    pub vendor: Vendor,
    /// Number of devices.
    pub devices: u32,
    /// Device name prefix; the ordinal is appended.
    pub device_name: String,
    /// Memory per device in bytes (accounted, not reserved: pages are only
    /// used when touched).
    pub total_memory: u64,
    /// Page sizes, smallest first (4 KiB, 2 MiB, 1 GiB). Exported ranges must
    /// be whole pages of the allocation's page size; an allocation asks for a
    /// larger page with [`hal_core::HugePages::Explicit`].
    pub page_sizes: Vec<u64>,
    /// Sizes of plain allocations are rounded up to this many bytes (CUDA:
    /// the smallest page; Ascend: the sub-allocation quantum).
    pub alloc_rounding: u64,
    /// VMM minimum granularity.
    pub granularity_min: u64,
    /// VMM recommended granularity.
    pub granularity_recommended: u64,
    /// Pool sub-allocation of small allocations, if the vendor does it.
    pub suballocation: Option<SubAllocation>,
    /// What the devices can do. Operations whose capability is removed
    /// answer [`Error::Unsupported`]. [`Capabilities::GROWABLE`] is reported
    /// only together with VMM and IPC memory, which growable buffers
    /// ([`hal_core::growable`]) are built on.
    pub capabilities: Capabilities,
}

impl Profile {
    /// A CUDA-like profile: 4 devices of 16 GiB, pages of 4 KiB / 2 MiB /
    /// 1 GiB, VMM granularity 2 MiB, backend [`BackendId::MockCuda`].
    pub fn cuda() -> Profile {
        Profile {
            name: "mock-cuda".into(),
            vendor: Vendor::Cuda,
            devices: 4,
            device_name: "Mock CUDA device".into(),
            total_memory: 16 * GIB,
            page_sizes: vec![4 * KIB, 2 * MIB, GIB],
            alloc_rounding: 4 * KIB,
            granularity_min: 2 * MIB,
            granularity_recommended: 2 * MIB,
            suballocation: None,
            capabilities: Capabilities::IPC_MEMORY
                | Capabilities::IPC_EVENT
                | Capabilities::IPC_NOTIFY
                | Capabilities::VMM
                | Capabilities::MANAGED_MEMORY
                | Capabilities::PEER_ACCESS
                | Capabilities::IPC_EVENT_QUERY
                | Capabilities::LEASES
                | Capabilities::GROWABLE,
        }
    }

    /// An Ascend-like profile: 2 devices of 32 GiB, pages of 4 KiB / 2 MiB /
    /// 1 GiB, VMM granularity 2 MiB, allocations under 1 MiB sub-allocated
    /// from 2 MiB pool chunks in 512-byte steps, backend
    /// [`BackendId::MockAscend`].
    pub fn ascend() -> Profile {
        Profile {
            name: "mock-ascend".into(),
            vendor: Vendor::Ascend,
            devices: 2,
            device_name: "Mock Ascend NPU".into(),
            total_memory: 32 * GIB,
            page_sizes: vec![4 * KIB, 2 * MIB, GIB],
            alloc_rounding: 512,
            granularity_min: 2 * MIB,
            granularity_recommended: 2 * MIB,
            suballocation: Some(SubAllocation {
                chunk_size: 2 * MIB,
                quantum: 512,
                max_size: MIB,
            }),
            capabilities: Capabilities::IPC_MEMORY
                | Capabilities::IPC_EVENT
                | Capabilities::IPC_NOTIFY
                | Capabilities::CREATOR_ONLY_NOTIFY_WAIT
                | Capabilities::VMM
                | Capabilities::PEER_ACCESS
                | Capabilities::PID_ALLOW_LIST
                | Capabilities::PID_ALLOW_LIST_DEFAULT_ON
                | Capabilities::LEASES
                | Capabilities::GROWABLE,
        }
    }

    /// The built-in profile of a backend id (`MockCuda` or `MockAscend`).
    pub fn for_backend(id: BackendId) -> Option<Profile> {
        match id {
            BackendId::MockCuda => Some(Profile::cuda()),
            BackendId::MockAscend => Some(Profile::ascend()),
            _ => None,
        }
    }

    /// This profile with `devices` devices.
    pub fn with_devices(mut self, devices: u32) -> Profile {
        self.devices = devices;
        self
    }

    /// This profile with `bytes` of memory per device.
    pub fn with_total_memory(mut self, bytes: u64) -> Profile {
        self.total_memory = bytes;
        self
    }

    /// Apply the `HAL_MOCK_DEVICES` environment variable, if set: either a
    /// count for every profile (`HAL_MOCK_DEVICES=8`) or a list of
    /// `name=count` pairs (`HAL_MOCK_DEVICES=mock-cuda=8,mock-ascend=1`).
    /// A child process that applies it too sees the same devices.
    pub fn with_env_overrides(self) -> Result<Profile> {
        match std::env::var("HAL_MOCK_DEVICES") {
            Ok(spec) => self.with_device_spec(&spec),
            Err(std::env::VarError::NotPresent) => Ok(self),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(Error::invalid("HAL_MOCK_DEVICES is not valid UTF-8"))
            }
        }
    }

    fn with_device_spec(mut self, spec: &str) -> Result<Profile> {
        let bad = || {
            Error::invalid(format!(
                "HAL_MOCK_DEVICES={spec:?}: expected a count (8) or name=count pairs \
                 (mock-cuda=8,mock-ascend=1)"
            ))
        };
        let spec = spec.trim();
        if let Ok(n) = spec.parse::<u32>() {
            self.devices = n;
            return Ok(self);
        }
        for pair in spec.split(',').filter(|p| !p.trim().is_empty()) {
            let (name, count) = pair.split_once('=').ok_or_else(bad)?;
            let count: u32 = count.trim().parse().map_err(|_| bad())?;
            if name.trim() == self.name {
                self.devices = count;
            }
        }
        Ok(self)
    }

    /// The backend id of this profile.
    pub fn backend(&self) -> BackendId {
        self.vendor.backend()
    }

    /// The smallest page size.
    pub fn page_size(&self) -> u64 {
        self.page_sizes.first().copied().unwrap_or(4 * KIB)
    }

    /// Check that the profile is coherent.
    pub fn validate(&self) -> Result<()> {
        let pow2 = |v: u64| v != 0 && v.is_power_of_two();
        if self.name.is_empty() {
            return Err(Error::invalid("profile name is empty"));
        }
        if self.page_sizes.is_empty()
            || !self.page_sizes.iter().all(|&p| pow2(p) && p % 4096 == 0)
            || !self.page_sizes.windows(2).all(|w| w[0] < w[1])
        {
            return Err(Error::invalid(format!(
                "page sizes {:?} must be increasing powers of two, multiples of 4 KiB",
                self.page_sizes
            )));
        }
        let page = self.page_size();
        if !pow2(self.granularity_min)
            || self.granularity_min % page != 0
            || self.granularity_recommended % self.granularity_min != 0
            || self.granularity_recommended == 0
        {
            return Err(Error::invalid(
                "granularity must be a power of two, a multiple of the page size, and \
                 divide the recommended granularity",
            ));
        }
        if !pow2(self.alloc_rounding) {
            return Err(Error::invalid("allocation rounding must be a power of two"));
        }
        if let Some(s) = &self.suballocation {
            if !pow2(s.quantum)
                || s.chunk_size % page != 0
                || s.max_size == 0
                || s.max_size > s.chunk_size
            {
                return Err(Error::invalid(
                    "sub-allocation: the quantum must be a power of two, the chunk whole pages, \
                     and the largest sub-allocation fit in a chunk",
                ));
            }
        }
        if self.devices > 1024 {
            return Err(Error::invalid("at most 1024 devices per profile"));
        }
        Ok(())
    }

    /// The stable UUID of device `ordinal`: the same in every process that
    /// builds a profile of this name.
    pub fn device_uuid(&self, ordinal: u32) -> [u8; 16] {
        let mut out = [0u8; 16];
        let lo = fnv1a(0xcbf2_9ce4_8422_2325, self.name.as_bytes(), ordinal);
        let hi = fnv1a(0x6c62_272e_07bb_0142, self.name.as_bytes(), ordinal);
        out[..8].copy_from_slice(&lo.to_be_bytes());
        out[8..].copy_from_slice(&hi.to_be_bytes());
        // RFC 9562 version 8 (custom), variant 10.
        out[6] = (out[6] & 0x0f) | 0x80;
        out[8] = (out[8] & 0x3f) | 0x80;
        out
    }

    /// The description of device `ordinal`.
    pub fn device_info(&self, ordinal: u32) -> DeviceInfo {
        DeviceInfo {
            backend: self.backend(),
            ordinal,
            uuid: self.device_uuid(ordinal),
            name: format!("{} {ordinal}", self.device_name),
            total_memory: self.total_memory,
            page_sizes: self.page_sizes.clone(),
            granularity_min: self.granularity_min,
            granularity_recommended: self.granularity_recommended,
            capabilities: self.reported_capabilities(),
        }
    }

    /// The capabilities the devices report: the profile's, without
    /// [`Capabilities::GROWABLE`] when VMM or IPC memory was removed (a
    /// growable buffer is built on both).
    fn reported_capabilities(&self) -> Capabilities {
        let needs = Capabilities::VMM.union(Capabilities::IPC_MEMORY);
        if self.capabilities.contains(needs) {
            self.capabilities
        } else {
            self.capabilities.difference(Capabilities::GROWABLE)
        }
    }
}

fn fnv1a(seed: u64, name: &[u8], ordinal: u32) -> u64 {
    let mut h = seed;
    for &b in name.iter().chain(&[0xff]).chain(&ordinal.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A vendor entry point the simulator pretends to call, named as the loader
/// would resolve it. [`Faults::remove_entry_point`](crate::fault::Faults::remove_entry_point)
/// takes these names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    MemAlloc,
    MemAllocManaged,
    MemAllocHost,
    MemFree,
    MemcpyHtoD,
    MemcpyDtoH,
    MemcpyAsync,
    IpcGetMem,
    IpcSetImportPid,
    IpcOpenMem,
    IpcCloseMem,
    StreamCreate,
    StreamSynchronize,
    EventCreate,
    EventRecord,
    EventQuery,
    EventSynchronize,
    StreamWaitEvent,
    IpcGetEvent,
    IpcOpenEvent,
    NotifyCreate,
    NotifyRecord,
    NotifyWait,
    NotifyExport,
    NotifySetImportPid,
    NotifyImport,
    Granularity,
    MemCreate,
    AddressReserve,
    MemMap,
    MemUnmap,
    MemSetAccess,
    MemExportShareable,
    MemImportShareable,
    MemSetPidShareable,
    EnablePeerAccess,
}

impl Api {
    /// The symbol name for `vendor`.
    pub(crate) const fn symbol(self, vendor: Vendor) -> &'static str {
        use Api::*;
        match vendor {
            Vendor::Cuda => match self {
                MemAlloc => "cuMemAlloc_v2",
                MemAllocManaged => "cuMemAllocManaged",
                MemAllocHost => "cuMemHostAlloc",
                MemFree => "cuMemFree_v2",
                MemcpyHtoD => "cuMemcpyHtoD_v2",
                MemcpyDtoH => "cuMemcpyDtoH_v2",
                MemcpyAsync => "cuMemcpyAsync",
                IpcGetMem => "cuIpcGetMemHandle",
                // CUDA has no pid allow-lists: these are refused as
                // unsupported before any entry point is reached.
                IpcSetImportPid | NotifySetImportPid => "cuIpcGetMemHandle",
                IpcOpenMem => "cuIpcOpenMemHandle_v2",
                IpcCloseMem => "cuIpcCloseMemHandle",
                StreamCreate => "cuStreamCreate",
                StreamSynchronize => "cuStreamSynchronize",
                EventCreate => "cuEventCreate",
                EventRecord => "cuEventRecord",
                EventQuery => "cuEventQuery",
                EventSynchronize => "cuEventSynchronize",
                StreamWaitEvent => "cuStreamWaitEvent",
                IpcGetEvent => "cuIpcGetEventHandle",
                IpcOpenEvent => "cuIpcOpenEventHandle",
                NotifyCreate => "cuMemHostRegister_v2",
                NotifyRecord => "cuStreamWriteValue32_v2",
                NotifyWait => "cuStreamWaitValue32_v2",
                NotifyExport => "cuMemHostRegister_v2",
                NotifyImport => "cuMemHostRegister_v2",
                Granularity => "cuMemGetAllocationGranularity",
                MemCreate => "cuMemCreate",
                AddressReserve => "cuMemAddressReserve",
                MemMap => "cuMemMap",
                MemUnmap => "cuMemUnmap",
                MemSetAccess => "cuMemSetAccess",
                MemExportShareable => "cuMemExportToShareableHandle",
                MemImportShareable => "cuMemImportFromShareableHandle",
                MemSetPidShareable => "cuMemExportToShareableHandle",
                EnablePeerAccess => "cuCtxEnablePeerAccess",
            },
            Vendor::Ascend => match self {
                MemAlloc => "aclrtMalloc",
                MemAllocManaged => "aclrtMallocManaged",
                MemAllocHost => "aclrtMallocHost",
                MemFree => "aclrtFree",
                MemcpyHtoD | MemcpyDtoH => "aclrtMemcpy",
                MemcpyAsync => "aclrtMemcpyAsync",
                IpcGetMem => "aclrtIpcMemGetExportKey",
                IpcSetImportPid => "aclrtIpcMemSetImportPid",
                IpcOpenMem => "aclrtIpcMemImportByKey",
                IpcCloseMem => "aclrtIpcMemClose",
                StreamCreate => "aclrtCreateStream",
                StreamSynchronize => "aclrtSynchronizeStreamWithTimeout",
                EventCreate => "aclrtCreateEventExWithFlag",
                EventRecord => "aclrtRecordEvent",
                EventQuery => "aclrtQueryEventStatus",
                EventSynchronize => "aclrtSynchronizeEvent",
                StreamWaitEvent => "aclrtStreamWaitEvent",
                IpcGetEvent => "aclrtIpcGetEventHandle",
                IpcOpenEvent => "aclrtIpcOpenEventHandle",
                NotifyCreate => "aclrtCreateNotify",
                NotifyRecord => "aclrtRecordNotify",
                NotifyWait => "aclrtWaitAndResetNotify",
                NotifyExport => "aclrtNotifyGetExportKey",
                NotifySetImportPid => "aclrtNotifySetImportPid",
                NotifyImport => "aclrtNotifyImportByKey",
                Granularity => "aclrtMemGetAllocationGranularity",
                MemCreate => "aclrtMallocPhysical",
                AddressReserve => "aclrtReserveMemAddress",
                MemMap => "aclrtMapMem",
                MemUnmap => "aclrtUnmapMem",
                MemSetAccess => "aclrtMemSetAccess",
                MemExportShareable => "aclrtMemExportToShareableHandle",
                MemImportShareable => "aclrtMemImportFromShareableHandle",
                MemSetPidShareable => "aclrtMemSetPidToShareableHandle",
                EnablePeerAccess => "aclrtDeviceEnablePeerAccess",
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_profiles_are_valid_and_uuids_stable() {
        for p in [Profile::cuda(), Profile::ascend()] {
            p.validate().unwrap();
            assert_eq!(p.device_uuid(1), p.clone().device_uuid(1));
            assert_ne!(p.device_uuid(0), p.device_uuid(1));
        }
        assert_ne!(
            Profile::cuda().device_uuid(0),
            Profile::ascend().device_uuid(0)
        );
    }

    #[test]
    fn growable_is_reported_only_with_vmm_and_ipc_memory() {
        for p in [Profile::cuda(), Profile::ascend()] {
            assert!(p
                .device_info(0)
                .capabilities
                .contains(Capabilities::GROWABLE));
            for removed in [Capabilities::VMM, Capabilities::IPC_MEMORY] {
                let mut q = p.clone();
                q.capabilities = q.capabilities.difference(removed);
                let caps = q.device_info(0).capabilities;
                assert!(
                    !caps.contains(Capabilities::GROWABLE),
                    "{removed:?} removed"
                );
            }
        }
    }

    #[test]
    fn device_spec_parses() {
        let p = Profile::cuda().with_device_spec("7").unwrap();
        assert_eq!(p.devices, 7);
        let p = Profile::ascend()
            .with_device_spec("mock-cuda=8,mock-ascend=3")
            .unwrap();
        assert_eq!(p.devices, 3);
        assert!(Profile::cuda().with_device_spec("x=y").is_err());
    }
}
