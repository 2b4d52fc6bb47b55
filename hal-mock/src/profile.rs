//! Device profiles: what a simulated CUDA-like or Ascend-like device looks
//! like and which rules it enforces.

use hal_core::{BackendId, Capabilities, DeviceInfo, Error, Result};

use crate::vendor::Vendor;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// The environment variable that sets the visible devices
/// ([`Profile::with_env_overrides`]).
const VISIBLE_ENV: &str = "HAL_MOCK_VISIBLE_DEVICES";

/// The value of the environment variable `name`, if set.
fn env_var(name: &str) -> Result<Option<String>> {
    match std::env::var(name) {
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(Error::invalid(format!("{name} is not valid UTF-8")))
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
/// same UUIDs (derived from [`Profile::name`] and the physical device index),
/// so a handle exported by one is imported onto the right device by the
/// other, even when the processes number the devices differently
/// ([`Profile::with_visible_devices`]).
///
/// # Profiles
///
/// A [`Profile`](crate::Profile) describes the devices: their number, memory,
/// page sizes, allocation granularity, capabilities, and whose rules they
/// follow ([`Vendor`](crate::Vendor)). Two are built in:
///
/// | | [`Profile::cuda()`](crate::Profile::cuda) | [`Profile::ascend()`](crate::Profile::ascend) |
/// |---|---|---|
/// | backend id | [`BackendId::MockCuda`](hal_core::BackendId::MockCuda) | [`BackendId::MockAscend`](hal_core::BackendId::MockAscend) |
/// | devices | 4 × 16 GiB | 2 × 32 GiB |
/// | page sizes | 4 KiB, 2 MiB, 1 GiB | 4 KiB, 2 MiB, 1 GiB |
/// | VMM granularity (min / recommended) | 2 MiB / 2 MiB | 2 MiB / 2 MiB |
/// | plain allocations | own memory, rounded to 4 KiB | under 1 MiB: sub-allocated from 2 MiB pool chunks in 512-byte steps; larger: own memory, rounded to 512 bytes |
/// | capabilities | IPC memory, events, notifies; VMM; managed memory; peer access; IPC event query; leases; growable buffers | IPC memory, events, notifies; creator-only notify wait; VMM; peer access; pid allow-lists, on by default; leases; growable buffers |
///
/// Change the number of devices with
/// [`Profile::with_devices`](crate::Profile::with_devices) or the
/// `HAL_MOCK_DEVICES` variable
/// ([`Profile::with_env_overrides`](crate::Profile::with_env_overrides)).
/// Device UUIDs derive from the profile name and the physical device index
/// ([`Profile::device_uuid`](crate::Profile::device_uuid)), so a child process
/// that builds the same profile (`MockBackend::cuda()`) imports onto the same
/// devices.
///
/// Removing a capability from a profile makes the operations that
/// need it answer [`Error::Unsupported`](hal_core::Error::Unsupported).
/// Growable buffers ([`hal_core::growable`]) are built on VMM and IPC memory:
/// without either, the devices do not report
/// [`Capabilities::GROWABLE`](hal_core::Capabilities::GROWABLE).
///
/// # Visible devices
///
/// On real machines processes often number the same devices differently:
/// `CUDA_VISIBLE_DEVICES=2,0` (or `ASCEND_RT_VISIBLE_DEVICES`, or a container's
/// device list) makes physical device 2 that process's device 0.
/// [`Profile::with_visible_devices`](crate::Profile::with_visible_devices)
/// (`&[2, 0]`) or the `HAL_MOCK_VISIBLE_DEVICES` variable (`2,0`, or per
/// profile `mock-cuda=2,0;mock-ascend=1`; read by
/// [`Profile::with_env_overrides`](crate::Profile::with_env_overrides))
/// simulate it. Ordinals
/// ([`DeviceInfo::ordinal`](hal_core::DeviceInfo::ordinal),
/// [`Backend::open`](hal_core::Backend::open), allocations, peer access, memory
/// accounting, faults) are this process's; the UUID, name and memory of a
/// device are its physical device's
/// ([`MockDevice::physical_device`](crate::MockDevice::physical_device)).
///
/// This is why a handle names its device by UUID as well as by ordinal: the
/// exporter's ordinal 2 may be the importer's ordinal 0, or another device
/// altogether. Imports find the device by UUID, so memory lands on the
/// device the exporter allocated it on, whatever the two processes' lists;
/// a handle whose device the importer does not see is refused with the
/// vendor's invalid-device code (`CUDA_ERROR_INVALID_DEVICE` (101),
/// `ACL_ERROR_RT_INVALID_DEVICEID` (107001)) naming the UUID, rather than
/// landing on whichever device has the handle's ordinal here.
///
/// ```
/// use hal_core::{AllocDesc, Backend, Device, ExportOptions, ImportOptions, Location, Memory};
/// use hal_mock::{MockBackend, Profile};
///
/// let exporter = MockBackend::new(Profile::cuda()); // sees devices 0..4
/// let importer = MockBackend::new(Profile::cuda().with_visible_devices(&[2, 0])?);
/// let gpu2 = exporter.open(2)?;
/// let buf = gpu2.allocate(&AllocDesc::device(2, 4096))?;
/// let exported = gpu2.export_memory(&buf, &ExportOptions::default())?;
/// let here = importer.open(0)?;
/// let mapping = here.import_memory(exported.share()?, &ImportOptions::default())?;
/// assert_eq!(mapping.location(), Location::Device(0)); // physical device 2
/// # Ok::<(), hal_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// Profile name, part of every device UUID (`mock-cuda`, `mock-ascend`).
    pub name: String,
    /// Whose rules apply.
    pub vendor: Vendor,
    /// Number of physical devices on the simulated machine. This process
    /// sees all of them, or those [`Profile::visible_devices`] lists.
    pub devices: u32,
    /// The physical devices this process sees, in ordinal order, as
    /// `CUDA_VISIBLE_DEVICES` and `ASCEND_RT_VISIBLE_DEVICES` set them:
    /// `Some(vec![2, 0])` makes ordinal 0 physical device 2 and ordinal 1
    /// physical device 0. `None`: every device, ordinal = physical index.
    /// Indices are below [`Profile::devices`] and distinct
    /// ([`Profile::validate`] checks).
    pub visible_devices: Option<Vec<u32>>,
    /// Device name prefix; the physical device index is appended.
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
            visible_devices: None,
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
                | Capabilities::GROWABLE
                | Capabilities::HOST_NUMA_VMM
                | Capabilities::STREAM_ORDERED_NOTIFY
                | Capabilities::FOREIGN_MEMORY
                | Capabilities::HOST_REGISTRATION,
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
            visible_devices: None,
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
                | Capabilities::GROWABLE
                | Capabilities::STREAM_ORDERED_NOTIFY
                | Capabilities::FOREIGN_MEMORY,
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

    /// This profile with `devices` physical devices. A visible-device list
    /// set before must still name devices under the new count, else the
    /// profile fails [`Profile::validate`].
    pub fn with_devices(mut self, devices: u32) -> Profile {
        self.devices = devices;
        self
    }

    /// This profile with `bytes` of memory per device.
    pub fn with_total_memory(mut self, bytes: u64) -> Profile {
        self.total_memory = bytes;
        self
    }

    /// This process sees only the physical devices `physical`, in that
    /// order, as `CUDA_VISIBLE_DEVICES=2,0` or `ASCEND_RT_VISIBLE_DEVICES=2,0`
    /// make a real runtime do: with `&[2, 0]` ordinal 0 is physical device 2
    /// and ordinal 1 is physical device 0. UUIDs, names and memory follow
    /// the physical device, so processes with different lists agree on
    /// which device a handle names. An empty list hides every device.
    ///
    /// Refused with [`Error::InvalidArgument`] when an index is not below
    /// [`Profile::devices`] or appears twice.
    ///
    /// ```
    /// use hal_core::Backend;
    /// use hal_mock::{MockBackend, Profile};
    ///
    /// let all = MockBackend::new(Profile::cuda()).devices()?;
    /// let here = MockBackend::new(Profile::cuda().with_visible_devices(&[2, 0])?).devices()?;
    /// assert_eq!(here.len(), 2);
    /// assert_eq!(here[0].ordinal, 0);
    /// assert_eq!(here[0].uuid, all[2].uuid);
    /// assert_eq!(here[1].uuid, all[0].uuid);
    /// assert!(Profile::cuda().with_visible_devices(&[0, 0]).is_err());
    /// # Ok::<(), hal_core::Error>(())
    /// ```
    pub fn with_visible_devices(mut self, physical: &[u32]) -> Result<Profile> {
        self.check_visible(physical)?;
        self.visible_devices = Some(physical.to_vec());
        Ok(self)
    }

    fn check_visible(&self, physical: &[u32]) -> Result<()> {
        for (i, &p) in physical.iter().enumerate() {
            if p >= self.devices {
                return Err(Error::invalid(format!(
                    "visible devices {physical:?}: device {p} does not exist, the profile `{}` \
                     has {} device(s) (indices 0..{})",
                    self.name, self.devices, self.devices
                )));
            }
            if physical[..i].contains(&p) {
                return Err(Error::invalid(format!(
                    "visible devices {physical:?}: device {p} is listed twice; list each \
                     physical device once"
                )));
            }
        }
        Ok(())
    }

    /// Apply the environment variables, if set:
    ///
    /// - `HAL_MOCK_DEVICES`: the number of physical devices, either a count
    ///   for every profile (`HAL_MOCK_DEVICES=8`) or a list of `name=count`
    ///   pairs (`HAL_MOCK_DEVICES=mock-cuda=8,mock-ascend=1`).
    /// - `HAL_MOCK_VISIBLE_DEVICES`: the physical devices this process sees,
    ///   in ordinal order ([`Profile::with_visible_devices`]), the
    ///   simulator's `CUDA_VISIBLE_DEVICES` / `ASCEND_RT_VISIBLE_DEVICES`:
    ///   either a list for every profile (`HAL_MOCK_VISIBLE_DEVICES=2,0`) or
    ///   `name=list` entries separated by `;`
    ///   (`HAL_MOCK_VISIBLE_DEVICES=mock-cuda=2,0;mock-ascend=1`), since the
    ///   vendors have a variable each. An empty list hides every device, as
    ///   an empty `CUDA_VISIBLE_DEVICES` does. Applied after
    ///   `HAL_MOCK_DEVICES`, against its count.
    ///
    /// A child process that applies them too sees the same devices; one
    /// with another visible list still agrees on every device's UUID.
    /// Values that do not parse, and lists that name a device twice or one
    /// that does not exist, are [`Error::InvalidArgument`].
    pub fn with_env_overrides(self) -> Result<Profile> {
        let profile = match env_var("HAL_MOCK_DEVICES")? {
            Some(spec) => self.with_device_spec(&spec)?,
            None => self,
        };
        match env_var(VISIBLE_ENV)? {
            Some(spec) => profile.with_visible_spec(&spec),
            None => Ok(profile),
        }
    }

    /// Apply a `HAL_MOCK_VISIBLE_DEVICES` value.
    fn with_visible_spec(self, spec: &str) -> Result<Profile> {
        let bad = || {
            Error::invalid(format!(
                "{VISIBLE_ENV}={spec:?}: expected physical device indices (2,0) or \
                 name=indices entries separated by `;` (mock-cuda=2,0;mock-ascend=1)"
            ))
        };
        let indices = |text: &str| -> Result<Vec<u32>> {
            text.split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|p| p.parse::<u32>().map_err(|_| bad()))
                .collect()
        };
        let physical = if spec.contains('=') {
            let mut mine = None;
            for entry in spec.split(';').filter(|e| !e.trim().is_empty()) {
                let (name, list) = entry.split_once('=').ok_or_else(bad)?;
                let list = indices(list)?;
                if name.trim() == self.name {
                    mine = Some(list);
                }
            }
            match mine {
                Some(list) => list,
                None => return Ok(self),
            }
        } else {
            indices(spec)?
        };
        let name = self.name.clone();
        self.with_visible_devices(&physical).map_err(|e| match e {
            Error::InvalidArgument { what } => Error::invalid(format!(
                "{VISIBLE_ENV}={spec:?} for profile `{name}`: {what}"
            )),
            other => other,
        })
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
        if let Some(visible) = &self.visible_devices {
            self.check_visible(visible)?;
        }
        Ok(())
    }

    /// The number of devices this process sees: the visible list's length,
    /// else [`Profile::devices`].
    pub fn visible_device_count(&self) -> u32 {
        match &self.visible_devices {
            // At most `devices` entries once validated; saturate otherwise.
            Some(v) => u32::try_from(v.len()).unwrap_or(u32::MAX),
            None => self.devices,
        }
    }

    /// The physical device this process sees at `ordinal`, or `None` when
    /// `ordinal` is not one of its devices.
    pub fn physical_device(&self, ordinal: u32) -> Option<u32> {
        match &self.visible_devices {
            Some(v) => v.get(ordinal as usize).copied(),
            None => (ordinal < self.devices).then_some(ordinal),
        }
    }

    /// The ordinal at which this process sees physical device `physical`,
    /// or `None` when it is not visible here.
    pub fn ordinal_of(&self, physical: u32) -> Option<u32> {
        match &self.visible_devices {
            Some(v) => v
                .iter()
                .position(|&p| p == physical)
                .and_then(|i| u32::try_from(i).ok()),
            None => (physical < self.devices).then_some(physical),
        }
    }

    /// The stable UUID of physical device `physical` (the ordinal, when
    /// every device is visible): the same in every process that builds a
    /// profile of this name, whatever its visible devices.
    pub fn device_uuid(&self, physical: u32) -> [u8; 16] {
        let mut out = [0u8; 16];
        let lo = fnv1a(0xcbf2_9ce4_8422_2325, self.name.as_bytes(), physical);
        let hi = fnv1a(0x6c62_272e_07bb_0142, self.name.as_bytes(), physical);
        out[..8].copy_from_slice(&lo.to_be_bytes());
        out[8..].copy_from_slice(&hi.to_be_bytes());
        // RFC 9562 version 8 (custom), variant 10.
        out[6] = (out[6] & 0x0f) | 0x80;
        out[8] = (out[8] & 0x3f) | 0x80;
        out
    }

    /// The description of the device this process sees at `ordinal`, or
    /// `None` when there is none: the ordinal is this process's, the UUID
    /// and the name are the physical device's
    /// ([`Profile::physical_device`]).
    pub fn device_info(&self, ordinal: u32) -> Option<DeviceInfo> {
        let physical = self.physical_device(ordinal)?;
        Some(DeviceInfo {
            backend: self.backend(),
            ordinal,
            uuid: self.device_uuid(physical),
            name: format!("{} {physical}", self.device_name),
            total_memory: self.total_memory,
            page_sizes: self.page_sizes.clone(),
            granularity_min: self.granularity_min,
            granularity_recommended: self.granularity_recommended,
            capabilities: self.reported_capabilities(),
            dlpack: DLPACK,
        })
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

/// The DLPack device types of simulated memory. Host and managed memory are
/// host memory (`kDLCPU`); device memory is no real device's, so it is
/// `kDLExtDev` with the simulated ordinal, and no consumer takes it for CPU
/// or CUDA memory (told `kDLCUDA`, a consumer would hand the pointer to a
/// GPU kernel).
pub const DLPACK: hal_core::DlpackTypes = hal_core::DlpackTypes {
    device: Some(hal_core::dlpack::DLDeviceType::EXT_DEV.0),
    host: hal_core::dlpack::DLDeviceType::CPU.0,
    managed: Some(hal_core::dlpack::DLDeviceType::CPU.0),
};

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
                .unwrap()
                .capabilities
                .contains(Capabilities::GROWABLE));
            for removed in [Capabilities::VMM, Capabilities::IPC_MEMORY] {
                let mut q = p.clone();
                q.capabilities = q.capabilities.difference(removed);
                let caps = q.device_info(0).unwrap().capabilities;
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

    #[test]
    fn visible_devices_map_ordinals_to_physical_devices() {
        let p = Profile::cuda().with_visible_devices(&[2, 0]).unwrap();
        p.validate().unwrap();
        assert_eq!(p.visible_device_count(), 2);
        assert_eq!(p.physical_device(0), Some(2));
        assert_eq!(p.physical_device(1), Some(0));
        assert_eq!(p.physical_device(2), None);
        assert_eq!(p.ordinal_of(2), Some(0));
        assert_eq!(p.ordinal_of(1), None);
        let info = p.device_info(0).unwrap();
        assert_eq!(info.ordinal, 0);
        assert_eq!(info.uuid, Profile::cuda().device_uuid(2));
        assert_eq!(info.name, "Mock CUDA device 2");
        assert!(p.device_info(2).is_none());

        let all = Profile::cuda();
        assert_eq!(all.visible_device_count(), 4);
        assert_eq!(all.physical_device(3), Some(3));
        assert_eq!(all.physical_device(4), None);
        assert_eq!(
            Profile::cuda()
                .with_visible_devices(&[])
                .unwrap()
                .visible_device_count(),
            0
        );
    }

    #[test]
    fn visible_devices_refuse_duplicates_and_missing_devices() {
        for bad in [&[0, 0][..], &[4], &[1, 2, 1]] {
            match Profile::cuda().with_visible_devices(bad) {
                Err(Error::InvalidArgument { .. }) => {}
                other => panic!("{bad:?}: expected InvalidArgument, got {other:?}"),
            }
        }
        // A list that a later device count no longer covers fails validation.
        let p = Profile::cuda()
            .with_visible_devices(&[3])
            .unwrap()
            .with_devices(2);
        assert!(matches!(p.validate(), Err(Error::InvalidArgument { .. })));
    }

    #[test]
    fn visible_spec_parses() {
        let p = Profile::cuda().with_visible_spec(" 2, 0 ").unwrap();
        assert_eq!(p.visible_devices, Some(vec![2, 0]));
        let p = Profile::cuda().with_visible_spec("").unwrap();
        assert_eq!(p.visible_devices, Some(vec![]));
        let spec = "mock-cuda=3,1;mock-ascend=1";
        let p = Profile::cuda().with_visible_spec(spec).unwrap();
        assert_eq!(p.visible_devices, Some(vec![3, 1]));
        let p = Profile::ascend().with_visible_spec(spec).unwrap();
        assert_eq!(p.visible_devices, Some(vec![1]));
        // A profile the spec does not name keeps every device.
        let p = Profile::ascend().with_visible_spec("mock-cuda=2").unwrap();
        assert_eq!(p.visible_devices, None);
        for bad in ["2,x", "mock-cuda=2;oops", "0,0", "9", "mock-cuda=1,1"] {
            match Profile::cuda().with_visible_spec(bad) {
                Err(Error::InvalidArgument { what }) => {
                    assert!(what.contains(VISIBLE_ENV), "{bad}: {what}")
                }
                other => panic!("{bad}: expected InvalidArgument, got {other:?}"),
            }
        }
    }
}
