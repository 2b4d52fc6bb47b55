//! Plain data of the contract: backends, devices, capabilities, locations and
//! the options of allocate, export and import.

use std::fmt;
use std::time::Duration;

pub(crate) mod backend_id;
pub(crate) mod external;
mod sharing;

pub use backend_id::BackendId;
pub use external::external_name;
pub use sharing::*;

/// Whether a backend can be used on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// Usable.
    Available,
    /// Not usable, and why.
    Unavailable {
        /// Why not (library missing, no device, driver too old, ...).
        reason: String,
        /// Paths that were searched for the vendor runtime.
        searched: Vec<std::path::PathBuf>,
    },
}

impl Availability {
    /// True when usable.
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available)
    }
}

macro_rules! capabilities {
    ($($(#[$doc:meta])* $name:ident = $bit:expr, $label:literal;)*) => {
        /// What a device can do. A set of flags; test with [`Capabilities::contains`].
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct Capabilities(u64);

        impl Capabilities {
            $($(#[$doc])* pub const $name: Capabilities = Capabilities(1 << $bit);)*

            /// Every flag with its stable label, for listings and JSON.
            pub const ALL: &'static [(Capabilities, &'static str)] = &[$((Capabilities::$name, $label),)*];

            /// The name of a single flag as Rust spells it (`"VMM"`), for
            /// messages; `None` for the empty set or a set of several flags.
            pub const fn name(self) -> Option<&'static str> {
                $(if self.0 == 1 << $bit {
                    return Some(stringify!($name));
                })*
                None
            }
        }
    };
}

capabilities! {
    /// Memory can be exported to and imported by another process.
    IPC_MEMORY = 0, "ipc-memory";
    /// Events can be exported to another process.
    IPC_EVENT = 1, "ipc-event";
    /// Notifies can be exported to another process.
    IPC_NOTIFY = 2, "ipc-notify";
    /// Only the creating process may wait on a notify; importers record (Ascend).
    CREATOR_ONLY_NOTIFY_WAIT = 3, "creator-only-notify-wait";
    /// Virtual memory management: physical allocations, reservations, map/unmap.
    VMM = 4, "vmm";
    /// Managed (unified) memory can be allocated.
    MANAGED_MEMORY = 5, "managed-memory";
    /// Managed memory can be shared across processes.
    IPC_MANAGED_MEMORY = 6, "ipc-managed-memory";
    /// The device can access pageable host memory directly.
    PAGEABLE_MEMORY_ACCESS = 7, "pageable-memory-access";
    /// Another device's memory can be imported with peer access.
    PEER_ACCESS = 8, "peer-access";
    /// Exports can be restricted to a list of importer pids.
    PID_ALLOW_LIST = 9, "pid-allow-list";
    /// The pid allow-list is on unless an export turns it off (Ascend's default).
    PID_ALLOW_LIST_DEFAULT_ON = 10, "pid-allow-list-default-on";
    /// An import can be placed at the exporter's address.
    FIXED_ADDRESS_IMPORT = 12, "fixed-address-import";
    /// Events can be queried and timed after import (false on Ascend IPC events).
    IPC_EVENT_QUERY = 13, "ipc-event-query";
    /// The device's memory is host memory: [`Location::Host`] is its own
    /// kind of allocation, reached through host pointers (CPU shared
    /// memory; CUDA managed memory shared as host pages). A GPU whose own
    /// memory is device memory lacks it even where it also offers pinned
    /// host and managed memory: host visibility is a property of each
    /// allocation and mapping, and
    /// [`Memory::host_visible`](crate::Memory::host_visible) says which an
    /// allocation is.
    MEMORY_IS_HOST = 14, "memory-is-host";
    /// Read-only exports are enforced by the importer's mapping.
    READ_ONLY_EXPORT = 15, "read-only-export";
    /// A buffer can grow after export and importers follow.
    GROWABLE = 16, "growable";
    /// Leases: the exporter can count importers and wait for them.
    LEASES = 18, "leases";
    /// VMM physical allocations can live in host NUMA memory
    /// ([`PhysicalLocation::HostNuma`](crate::PhysicalLocation::HostNuma)) and
    /// be made host-accessible (CUDA's `HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`).
    HOST_NUMA_VMM = 20, "host-numa-vmm";
    /// Notifies can be signalled and waited on in stream order
    /// ([`Device::record_notify`](crate::Device::record_notify),
    /// [`Device::stream_wait_notify`](crate::Device::stream_wait_notify));
    /// without it those answer [`Error::Unsupported`](crate::Error::Unsupported)
    /// and only the host-side signal and wait work.
    STREAM_ORDERED_NOTIFY = 21, "stream-ordered-notify";
    /// Memory this library did not allocate (a framework's allocator, a raw
    /// vendor pointer) can be adopted and exported
    /// ([`Device::adopt_memory`](crate::Device::adopt_memory)).
    FOREIGN_MEMORY = 22, "foreign-memory";
    /// Existing host memory can be registered so that the device reaches it
    /// ([`Device::register_host`](crate::Device::register_host)).
    HOST_REGISTRATION = 23, "host-registration";
}

impl Capabilities {
    /// The empty set.
    pub const NONE: Capabilities = Capabilities(0);

    /// True when every flag of `other` is set here.
    pub const fn contains(self, other: Capabilities) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union.
    pub const fn union(self, other: Capabilities) -> Capabilities {
        Capabilities(self.0 | other.0)
    }

    /// This set without the flags of `other`.
    pub const fn difference(self, other: Capabilities) -> Capabilities {
        Capabilities(self.0 & !other.0)
    }

    /// The raw bits.
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// Labels of the flags set, in a stable order.
    pub fn labels(self) -> Vec<&'static str> {
        Self::ALL
            .iter()
            .filter(|(c, _)| self.contains(*c))
            .map(|(_, l)| *l)
            .collect()
    }
}

impl std::ops::BitOr for Capabilities {
    type Output = Capabilities;
    fn bitor(self, rhs: Capabilities) -> Capabilities {
        self.union(rhs)
    }
}

impl fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.labels()).finish()
    }
}

/// Which granularity to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    /// The smallest unit a mapping may use.
    Minimum,
    /// The unit that performs best.
    Recommended,
}

/// What a backend says about one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The backend.
    pub backend: BackendId,
    /// Ordinal on this backend, as this process sees it.
    pub ordinal: u32,
    /// A stable identifier: processes that number devices differently still agree on it.
    pub uuid: [u8; 16],
    /// Human-readable name.
    pub name: String,
    /// Total memory in bytes.
    pub total_memory: u64,
    /// Page sizes the device maps with, smallest first. Exported ranges are
    /// multiples of the smallest.
    pub page_sizes: Vec<u64>,
    /// Minimum allocation granularity (VMM mapping unit).
    pub granularity_min: u64,
    /// Recommended allocation granularity.
    pub granularity_recommended: u64,
    /// What the device can do.
    pub capabilities: Capabilities,
    /// The DLPack device types of its memory, by location: the backend's
    /// own answer, so that adding a backend edits nothing in the contract.
    pub dlpack: DlpackTypes,
}

#[cfg(test)]
impl DeviceInfo {
    /// A device of `backend` for unit tests: ordinal 0, 4 KiB pages, no
    /// capabilities, the DLPack types `dlpack`.
    pub(crate) fn for_tests(backend: BackendId, dlpack: DlpackTypes) -> DeviceInfo {
        DeviceInfo {
            backend,
            ordinal: 0,
            uuid: [0; 16],
            name: "test".into(),
            total_memory: 0,
            page_sizes: vec![4096],
            granularity_min: 4096,
            granularity_recommended: 4096,
            capabilities: Capabilities::NONE,
            dlpack,
        }
    }
}

/// The DLPack device types (`DLDeviceType` of `dlpack.h`, as its numbers:
/// [`dlpack::DLDeviceType`](crate::dlpack::DLDeviceType) names them) of a
/// device's memory at each [`Location`]. Device memory takes the device's
/// ordinal as its DLPack device id; host and managed memory take 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DlpackTypes {
    /// Of [`Location::Device`] memory; `None` when DLPack has no type for
    /// it (a tensor of it then names its device itself).
    pub device: Option<i32>,
    /// Of [`Location::Host`] memory.
    pub host: i32,
    /// Of [`Location::Managed`] memory; `None` when DLPack has no type for
    /// it.
    pub managed: Option<i32>,
}

impl DlpackTypes {
    /// A device whose memory is all host memory: `kDLCPU` (1) at every
    /// location it has, nothing for device or managed memory.
    pub const HOST: DlpackTypes = DlpackTypes {
        device: None,
        host: 1,
        managed: None,
    };
}

impl DeviceInfo {
    /// A device's `Debug`: its type name `kind`, this device's ordinal and
    /// name.
    pub fn fmt_device(&self, kind: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(kind)
            .field("ordinal", &self.ordinal)
            .field("name", &self.name)
            .finish()
    }

    /// The smallest page size, which every exported range must be aligned to.
    pub fn page_size(&self) -> u64 {
        self.page_sizes.first().copied().unwrap_or(4096)
    }

    /// The granularity of the given kind.
    pub fn granularity(&self, which: Granularity) -> u64 {
        match which {
            Granularity::Minimum => self.granularity_min,
            Granularity::Recommended => self.granularity_recommended,
        }
    }
}

/// Advice on how a range of managed memory will be used (`cuMemAdvise`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Advice {
    /// Mostly read: devices may keep read-only copies.
    ReadMostly,
    /// Keep the pages at this location when possible.
    PreferredLocation(Location),
    /// This device will access the range: keep it mapped there.
    AccessedBy(u32),
}

/// Where memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Location {
    /// Device memory of the given ordinal; host-addressable only where the
    /// allocation says so ([`Memory::host_visible`](crate::Memory::host_visible)).
    Device(u32),
    /// Host memory (CPU shared memory, pinned host memory).
    Host,
    /// Managed memory that migrates between host and devices.
    Managed,
}

impl Location {
    /// The wire tag.
    pub const fn to_wire(self) -> (u8, u32) {
        match self {
            Location::Device(d) => (0, d),
            Location::Host => (1, 0),
            Location::Managed => (2, 0),
        }
    }

    /// Decode a wire tag.
    pub const fn from_wire(tag: u8, ordinal: u32) -> Option<Self> {
        match tag {
            0 => Some(Location::Device(ordinal)),
            1 => Some(Location::Host),
            2 => Some(Location::Managed),
            _ => None,
        }
    }
}

/// The location in words, with its name in each binding, so that a message
/// reads right whether Rust, C or Python asked: "host memory
/// (`Location::Host` in Rust, `HAL_LOCATION_HOST` in C, `"host"` in
/// Python)".
impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (words, rust, c, python) = match self {
            Location::Device(d) => (
                format!("device memory of device {d}"),
                format!("Location::Device({d})"),
                "HAL_LOCATION_DEVICE",
                "device",
            ),
            Location::Host => (
                "host memory".to_string(),
                "Location::Host".to_string(),
                "HAL_LOCATION_HOST",
                "host",
            ),
            Location::Managed => (
                "managed memory".to_string(),
                "Location::Managed".to_string(),
                "HAL_LOCATION_MANAGED",
                "managed",
            ),
        };
        write!(
            f,
            "{words} ({rust} in Rust, {c} in C, \"{python}\" in Python)"
        )
    }
}

/// NUMA placement for host memory.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum NumaPolicy {
    /// The kernel's default (first touch).
    #[default]
    Default,
    /// Bind to these nodes.
    Bind(Vec<u32>),
    /// Interleave pages over these nodes.
    Interleave(Vec<u32>),
    /// Prefer this node, fall back to others.
    Preferred(u32),
}

/// Huge-page use for host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HugePages {
    /// Normal pages.
    #[default]
    None,
    /// Transparent huge pages where the kernel can (`madvise(MADV_HUGEPAGE)`).
    Transparent,
    /// Explicit huge pages of the given size (2 MiB or 1 GiB); fails with a
    /// clear error when none are reserved.
    Explicit(u64),
}

/// Hints for where and how an allocation is placed. Backends honour what
/// they can and say which hints they ignore in their documentation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Placement {
    /// NUMA policy for host memory.
    pub numa: NumaPolicy,
    /// Huge pages.
    pub huge_pages: HugePages,
    /// Touch every page at allocation so that first use pays no faults.
    pub prefault: bool,
}

/// What to allocate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocDesc {
    /// Size in bytes; backends round up to their granularity.
    pub size: u64,
    /// Required alignment of the start address (0 = the backend's default).
    pub align: u64,
    /// Where.
    pub location: Location,
    /// Placement hints.
    pub placement: Placement,
}

impl AllocDesc {
    /// `size` bytes of host memory with default placement.
    pub fn host(size: u64) -> Self {
        AllocDesc {
            size,
            align: 0,
            location: Location::Host,
            placement: Placement::default(),
        }
    }

    /// `size` bytes on device `ordinal`.
    pub fn device(ordinal: u32, size: u64) -> Self {
        AllocDesc {
            size,
            align: 0,
            location: Location::Device(ordinal),
            placement: Placement::default(),
        }
    }

    /// `size` bytes of managed memory.
    pub fn managed(size: u64) -> Self {
        AllocDesc {
            size,
            align: 0,
            location: Location::Managed,
            placement: Placement::default(),
        }
    }

    /// The checks a device makes of every allocation first: a size that is
    /// not zero, an alignment that is 0 or a power of two, and a device
    /// location that names this device, `ordinal`
    /// ([`Error::InvalidArgument`](crate::Error::InvalidArgument) each).
    pub fn check_for(&self, ordinal: u32) -> crate::Result<()> {
        use crate::Error;
        if self.size == 0 {
            return Err(Error::invalid("cannot allocate zero bytes"));
        }
        if self.align != 0 && !self.align.is_power_of_two() {
            let align = self.align;
            return Err(Error::invalid(format!(
                "alignment {align} is not a power of two"
            )));
        }
        match self.location {
            Location::Device(d) if d != ordinal => Err(Error::invalid(format!(
                "allocation for device {d} requested on device {ordinal}: allocate on device {d}"
            ))),
            _ => Ok(()),
        }
    }
}

/// Options of a wait.
///
/// Timeouts mean the same on every backend: `None` waits until the
/// condition holds; `Some(Duration::ZERO)` looks once and answers at once
/// (success when the condition holds, [`Error::Timeout`](crate::Error::Timeout)
/// otherwise); any other value gives up after that long. A backend whose
/// vendor reads a zero timeout as "forever" (Ascend's
/// `aclrtWaitAndResetNotify`) maps these meanings onto its own. An awaitable
/// wait (`wait_async`) whose future is dropped before it completes is
/// cancelled: its waiter thread ends (see [`wait`](crate::wait)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitOptions {
    /// Give up after this long: `None` waits forever, `Some(0)` looks once.
    pub timeout: Option<Duration>,
    /// Spin this long before sleeping (latency-critical users; zero = sleep at once).
    pub spin: Duration,
}

impl Default for WaitOptions {
    fn default() -> Self {
        WaitOptions {
            timeout: None,
            spin: Duration::from_micros(50),
        }
    }
}

impl WaitOptions {
    /// Wait at most `timeout`, with the default spin.
    pub fn timeout(timeout: Duration) -> Self {
        WaitOptions {
            timeout: Some(timeout),
            ..Default::default()
        }
    }
}

/// Flags of an event at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventFlags {
    /// The event can be exported (CUDA `CU_EVENT_INTERPROCESS`, Ascend `ACL_EVENT_IPC`).
    pub interprocess: bool,
    /// The event records timing (not allowed together with `interprocess` on CUDA and Ascend).
    pub timing: bool,
}

/// Flags of a notify at creation (Ascend `aclrtCreateNotify`'s flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NotifyFlags {
    /// Only streams signal and wait on it (`ACL_NOTIFY_DEVICE_USE_ONLY`):
    /// the host-side [`Notify::signal`](crate::Notify::signal) and
    /// [`Notify::wait`](crate::Notify::wait) are refused with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument). Needs
    /// [`Capabilities::STREAM_ORDERED_NOTIFY`].
    pub device_only: bool,
}

impl NotifyFlags {
    /// The refusal of a host-side `operation` (`"signal"`, `"wait"`) on a
    /// device-only notify, the same on every backend.
    pub fn refuse_host(self, operation: &str) -> crate::Result<()> {
        if self.device_only {
            return Err(crate::Error::invalid(format!(
                "host-side {operation} of a notify created with NotifyFlags::device_only: record \
                 it and wait on it on streams (Device::record_notify, Device::stream_wait_notify)"
            )));
        }
        Ok(())
    }
}

/// Access rights of a VMM mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No access.
    None,
    /// Read only.
    Read,
    /// Read and write.
    ReadWrite,
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_location_is_named_as_each_binding_names_it() {
        assert_eq!(
            Location::Host.to_string(),
            "host memory (Location::Host in Rust, HAL_LOCATION_HOST in C, \"host\" in Python)"
        );
        assert_eq!(
            Location::Device(1).to_string(),
            "device memory of device 1 (Location::Device(1) in Rust, HAL_LOCATION_DEVICE in C, \
             \"device\" in Python)"
        );
        assert!(Location::Managed
            .to_string()
            .contains("HAL_LOCATION_MANAGED in C, \"managed\" in Python"));
    }

    #[test]
    fn a_read_only_export_is_refused_where_the_backend_cannot_make_one() {
        ExportOptions::default()
            .refuse_read_only(BackendId::External(0x8000), "memory", "no seals")
            .unwrap();
        let read_only = ExportOptions {
            read_only: true,
            ..Default::default()
        };
        match read_only.refuse_read_only(BackendId::External(0x8000), "memory", "no seals") {
            Err(crate::Error::Unsupported {
                backend,
                operation,
                detail,
            }) => {
                assert_eq!(backend, BackendId::External(0x8000));
                assert_eq!(operation, "a read-only export of memory");
                assert_eq!(
                    detail,
                    "no seals (Capabilities::READ_ONLY_EXPORT is absent)"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_allocation_is_checked_for_size_alignment_and_device() {
        let ok = AllocDesc::device(1, 4096);
        ok.check_for(1).unwrap();
        AllocDesc::host(1).check_for(7).unwrap();
        AllocDesc::managed(1).check_for(7).unwrap();
        let invalid = |d: AllocDesc, on: u32| match d.check_for(on) {
            Err(crate::Error::InvalidArgument { what }) => what,
            other => panic!("{d:?} on {on}: {other:?}"),
        };
        assert!(invalid(AllocDesc::host(0), 0).contains("zero bytes"));
        let odd = AllocDesc {
            align: 3,
            ..ok.clone()
        };
        assert!(invalid(odd, 1).contains("alignment 3 is not a power of two"));
        AllocDesc {
            align: 64,
            ..ok.clone()
        }
        .check_for(1)
        .unwrap();
        let elsewhere = invalid(ok, 0);
        assert!(
            elsewhere.contains("device 1 requested on device 0"),
            "{elsewhere}"
        );
    }

    use std::time::Duration;

    use super::*;
    use crate::Error;

    #[test]
    fn capability_sets_join_subtract_and_list_their_labels() {
        let both = Capabilities::VMM.union(Capabilities::LEASES);
        assert_eq!(both, Capabilities::VMM | Capabilities::LEASES);
        assert_eq!(both.bits(), (1 << 4) | (1 << 18));
        assert_eq!(
            Capabilities::VMM.union(Capabilities::VMM),
            Capabilities::VMM
        );
        assert_eq!(both.difference(Capabilities::VMM), Capabilities::LEASES);
        assert_eq!(both.difference(Capabilities::IPC_EVENT), both);
        assert_eq!(
            Capabilities::NONE.difference(Capabilities::VMM),
            Capabilities::NONE
        );
        assert!(both.contains(Capabilities::VMM) && !Capabilities::VMM.contains(both));
        assert_eq!(both.labels(), vec!["vmm", "leases"]);
        assert!(Capabilities::NONE.labels().is_empty());
        assert_eq!(format!("{both:?}"), r#"{"vmm", "leases"}"#);
    }

    #[test]
    fn the_page_size_is_the_smallest_listed_or_4096() {
        let mut info = DeviceInfo {
            backend: BackendId::CpuShm,
            ordinal: 0,
            uuid: [0; 16],
            name: String::new(),
            total_memory: 0,
            page_sizes: vec![65536, 2 << 20],
            granularity_min: 65536,
            granularity_recommended: 2 << 20,
            capabilities: Capabilities::NONE,
            dlpack: crate::DlpackTypes::HOST,
        };
        assert_eq!(info.page_size(), 65536);
        info.page_sizes.clear();
        assert_eq!(info.page_size(), 4096);
    }

    #[test]
    fn a_range_is_non_empty_whole_pages_and_inside() {
        let page = 4096;
        assert!(ByteRange::new(0, page).check(page, page).is_ok());
        assert!(ByteRange::new(page, 2 * page).check(3 * page, page).is_ok());
        assert!(
            ByteRange::new(1, 3).check(4, 0).is_ok(),
            "page size 0 checks no alignment"
        );
        for (range, size) in [
            (ByteRange::new(0, 0), page),
            (ByteRange::new(0, 2 * page), page),
            (ByteRange::new(page, page), page),
            (ByteRange::new(u64::MAX, 2), page),
        ] {
            assert!(
                matches!(range.check(size, page), Err(Error::InvalidArgument { .. })),
                "{range:?} in {size}"
            );
        }
        for range in [ByteRange::new(1, page), ByteRange::new(0, page + 1)] {
            match range.check(4 * page, page) {
                Err(Error::Misaligned {
                    offset,
                    len,
                    page_size,
                }) => assert_eq!((offset, len, page_size), (range.offset, range.len, page)),
                other => panic!("{range:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn wait_options_with_a_timeout_keep_the_default_spin() {
        let w = WaitOptions::timeout(Duration::from_millis(7));
        assert_eq!(w.timeout, Some(Duration::from_millis(7)));
        assert_eq!(w.spin, WaitOptions::default().spin);
    }

    #[test]
    fn a_device_only_notify_refuses_host_side_work() {
        assert!(NotifyFlags::default().refuse_host("signal").is_ok());
        let e = NotifyFlags { device_only: true }
            .refuse_host("wait")
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
        assert!(e.to_string().contains("host-side wait"), "{e}");
    }

    #[test]
    fn every_single_flag_has_its_rust_name_and_a_set_has_none() {
        assert_eq!(Capabilities::VMM.name(), Some("VMM"));
        assert_eq!(
            Capabilities::HOST_REGISTRATION.name(),
            Some("HOST_REGISTRATION")
        );
        for (flag, label) in Capabilities::ALL {
            let name = flag.name().unwrap_or_else(|| panic!("{label} has no name"));
            assert_eq!(name.to_lowercase().replace('_', "-"), *label);
        }
        assert_eq!(Capabilities::NONE.name(), None);
        assert_eq!((Capabilities::VMM | Capabilities::LEASES).name(), None);
    }
}
