//! Handles: what an export produces and an import consumes.
//!
//! A [`Handle`] is plain data: kind, backend, device, size, offset, creator,
//! allowed importers, and a bounded vendor payload. File descriptors never
//! travel inside it; they travel out of band (a Unix socket with `SCM_RIGHTS`,
//! inheritance by a child, or the exporter's descriptor broker named in the
//! handle) and a [`SharedHandle`] carries them together with the handle inside
//! one process.
//!
//! The wire format is documented in [`wire`].

use std::os::fd::OwnedFd;

use crate::types::{BackendId, Location};

pub mod remote;
pub mod wire;

/// Kind of resource a handle names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HandleKind {
    /// A range of memory (wire tag 1).
    Memory,
    /// An IPC event (wire tag 2).
    Event,
    /// A notify (wire tag 3).
    Notify,
    /// A VMM physical allocation (wire tag 4).
    Physical,
    /// A growable shared buffer's header (wire tag 5).
    Growable,
}

impl HandleKind {
    /// Wire tag.
    pub const fn to_wire(self) -> u8 {
        match self {
            HandleKind::Memory => 1,
            HandleKind::Event => 2,
            HandleKind::Notify => 3,
            HandleKind::Physical => 4,
            HandleKind::Growable => 5,
        }
    }

    /// Kind for a wire tag.
    pub const fn from_wire(tag: u8) -> Option<Self> {
        Some(match tag {
            1 => HandleKind::Memory,
            2 => HandleKind::Event,
            3 => HandleKind::Notify,
            4 => HandleKind::Physical,
            5 => HandleKind::Growable,
            _ => return None,
        })
    }

    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            HandleKind::Memory => "memory",
            HandleKind::Event => "event",
            HandleKind::Notify => "notify",
            HandleKind::Physical => "physical",
            HandleKind::Growable => "growable",
        }
    }
}

/// Flags of a handle (a `u32` on the wire; unknown bits are refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HandleFlags(pub u32);

impl HandleFlags {
    /// Importers must map read-only.
    pub const READ_ONLY: HandleFlags = HandleFlags(1 << 0);
    /// The pid allow-list is not enforced (anyone may import).
    pub const ANY_IMPORTER: HandleFlags = HandleFlags(1 << 1);
    /// The exporter's mapping address is meaningful for a fixed-address import.
    pub const HAS_ADDRESS: HandleFlags = HandleFlags(1 << 2);
    /// The region is a named region; the payload holds its name.
    pub const NAMED: HandleFlags = HandleFlags(1 << 3);
    /// The handle is for an IPC event that cannot be queried or timed.
    pub const NO_QUERY: HandleFlags = HandleFlags(1 << 4);
    /// Any process of the exporter's user may import
    /// ([`Importers::SameUser`](crate::Importers::SameUser)): the
    /// exporter's broker compares the importer's `SO_PEERCRED` uid with
    /// its own effective uid. Never with [`HandleFlags::ANY_IMPORTER`] or
    /// an allow-list.
    pub const SAME_USER: HandleFlags = HandleFlags(1 << 5);
    /// Every flag this version knows.
    pub const KNOWN: HandleFlags = HandleFlags(0b11_1111);

    /// True when every bit of `other` is set.
    pub const fn contains(self, other: HandleFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Set the bits of `other`.
    pub fn insert(&mut self, other: HandleFlags) {
        self.0 |= other.0;
    }
}

/// Which kind of process id a handle's allow-list
/// ([`Handle::allowed_pids`]) holds: who checks it, and against what.
///
/// An importer learns the id to send its exporter from
/// [`Device::process_id`](crate::Device::process_id) of the importing
/// backend, which gives the kind of id that backend's exports list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum PidKind {
    /// OS pids as the exporter's pid namespace numbers processes, checked
    /// by the exporter's descriptor broker against the importer's
    /// `SO_PEERCRED` (wire tag 0; every version 1 handle).
    #[default]
    Os,
    /// The vendor runtime's own process ids, checked by the vendor (Ascend:
    /// bare tgids from `aclrtDeviceGetBareTgid`, given to
    /// `aclrtIpcMemSetImportPid`; the host's pids, even inside a container)
    /// (wire tag 1).
    Vendor,
}

impl PidKind {
    /// Wire tag.
    pub const fn to_wire(self) -> u8 {
        match self {
            PidKind::Os => 0,
            PidKind::Vendor => 1,
        }
    }

    /// Kind for a wire tag.
    pub const fn from_wire(tag: u8) -> Option<Self> {
        Some(match tag {
            0 => PidKind::Os,
            1 => PidKind::Vendor,
            _ => return None,
        })
    }

    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            PidKind::Os => "os",
            PidKind::Vendor => "vendor",
        }
    }
}

/// How the importer obtains the file descriptors that go with a handle.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum FdSource {
    /// The handle needs no descriptors (a named region, a vendor key).
    #[default]
    None,
    /// `count` descriptors travel beside the handle (socket, inheritance).
    Attached {
        /// How many.
        count: u8,
    },
    /// `count` descriptors are served by the exporter's broker on the abstract
    /// Unix socket `name`; the importer connects, the broker checks its pid and
    /// uid against the handle's allow-list and sends them with `SCM_RIGHTS`.
    Broker {
        /// How many.
        count: u8,
        /// Abstract socket name (without the leading NUL).
        name: String,
    },
}

impl FdSource {
    /// How many descriptors go with the handle.
    pub fn count(&self) -> usize {
        match self {
            FdSource::None => 0,
            FdSource::Attached { count } | FdSource::Broker { count, .. } => *count as usize,
        }
    }
}

/// The handle of an exported resource. Plain data: encode it with
/// [`Handle::to_bytes`] or [`Handle::to_text`], decode with
/// [`Handle::from_bytes`] or [`Handle::from_text`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Handle {
    /// What it names.
    pub kind: HandleKind,
    /// Which backend made it.
    pub backend: BackendId,
    /// The exporter's device ordinal.
    pub device: u32,
    /// The exporter's device UUID, so importers that number devices
    /// differently still find the right one.
    pub device_uuid: [u8; 16],
    /// Where the memory lives.
    pub location: Location,
    /// Size in bytes of the exported range (0 for events and notifies).
    pub size: u64,
    /// Offset of the range within the exporter's allocation (CUDA exports the
    /// base allocation plus an offset).
    pub offset: u64,
    /// The exporter's mapping address (valid with [`HandleFlags::HAS_ADDRESS`]).
    pub address: u64,
    /// Pid of the creating process (in its pid namespace, always an OS pid
    /// whatever [`Handle::pid_kind`] says).
    pub creator_pid: u32,
    /// Start time of the creating process (clock ticks since boot), which tells
    /// a recycled pid from the creator.
    pub creator_start: u64,
    /// The creating process's pid namespace: the inode of its
    /// `/proc/self/ns/pid` ([`os::pid_namespace`](crate::kit::os::pid_namespace)),
    /// 0 when unknown (a handle decoded from wire version 1, or a creator
    /// without `/proc`). With it, [`Handle::same_pid_namespace`] and
    /// [`Handle::is_own`] are decidable.
    pub creator_pid_ns: u64,
    /// A unique id of the exported object, the key of import caches and brokers.
    pub object_id: [u8; 16],
    /// Flags.
    pub flags: HandleFlags,
    /// Which kind of id [`Handle::allowed_pids`] holds: OS pids in the
    /// creator's pid namespace, or the vendor's own process ids.
    pub pid_kind: PidKind,
    /// Ids allowed to import, of the kind [`Handle::pid_kind`] says (empty
    /// with [`HandleFlags::ANY_IMPORTER`] means anyone; empty without it means
    /// nobody yet). At most [`wire::MAX_PIDS`].
    pub allowed_pids: Vec<u32>,
    /// Where the file descriptors come from.
    pub fds: FdSource,
    /// Backend-specific bytes (a CUDA IPC handle, an Ascend key, a shm name).
    /// At most [`wire::MAX_PAYLOAD`] bytes.
    pub payload: Vec<u8>,
}

impl Handle {
    /// The ordinal, among `devices` (a backend's list in this process),
    /// of the device the handle's resource lives on: the device with the
    /// handle's [`device_uuid`](Handle::device_uuid), never the exporter's
    /// ordinal alone, which another process may number otherwise
    /// (`CUDA_VISIBLE_DEVICES`, `ASCEND_RT_VISIBLE_DEVICES`). Host memory
    /// ([`Location::Host`]) is reached from any device: its handle's
    /// ordinal is kept when no UUID matches. `None`: no device here has
    /// the UUID. [`Backend::device_for`](crate::Backend::device_for) says
    /// it as an error.
    pub fn device_in(&self, devices: &[crate::types::DeviceInfo]) -> Option<u32> {
        if let Some(d) = devices.iter().find(|d| d.uuid == self.device_uuid) {
            return Some(d.ordinal);
        }
        (self.location == Location::Host && devices.iter().any(|d| d.ordinal == self.device))
            .then_some(self.device)
    }

    /// True when the handle's allow-list admits `pid`, an id of the kind
    /// [`Handle::pid_kind`] says (what the importer's
    /// [`Device::process_id`](crate::Device::process_id) gives). This is the
    /// handle's claim only: the exporter's broker, or the vendor, decides.
    /// A handle for [`HandleFlags::SAME_USER`] claims every pid: its broker
    /// checks the importer's user.
    pub fn allows(&self, pid: u32) -> bool {
        self.flags.contains(HandleFlags::ANY_IMPORTER)
            || self.flags.contains(HandleFlags::SAME_USER)
            || self.allowed_pids.contains(&pid)
    }

    /// Whether the creator is in this process's pid namespace, so that the
    /// pids of the handle ([`Handle::creator_pid`], and an allow-list of
    /// [`PidKind::Os`]) mean here what they meant to the creator. `None`
    /// when it cannot be told: the handle does not record its creator's
    /// namespace (`creator_pid_ns` 0, version 1 handles) or this process
    /// cannot read its own ([`os::pid_namespace`](crate::kit::os::pid_namespace)
    /// gives 0).
    pub fn same_pid_namespace(&self) -> Option<bool> {
        let here = crate::process::pid_namespace();
        (self.creator_pid_ns != 0 && here != 0).then_some(self.creator_pid_ns == here)
    }

    /// True when this process created the handle: its pid, start time and
    /// pid namespace are the handle's `creator_pid`, `creator_start` and
    /// `creator_pid_ns`. False when that cannot be told (a namespace or
    /// start time of 0): a pid and start time alone may belong to another
    /// process in another pid namespace.
    pub fn is_own(&self) -> bool {
        let (pid, start) = crate::process::self_identity();
        self.creator_start != 0
            && (self.creator_pid, self.creator_start) == (pid, start)
            && self.same_pid_namespace() == Some(true)
    }

    /// Refuse the handle unless it is of `kind` and from `backend`.
    pub fn expect(&self, kind: HandleKind, backend: BackendId) -> crate::Result<()> {
        if self.kind != kind {
            return Err(crate::HandleError::WrongKind {
                expected: kind.name(),
                found: self.kind.name(),
            }
            .into());
        }
        if self.backend != backend {
            return Err(crate::HandleError::WrongBackend {
                expected: backend.name(),
                found: self.backend.name(),
            }
            .into());
        }
        Ok(())
    }
}

/// A handle together with its file descriptors, inside one process: what an
/// import consumes. Build one from a received handle with no descriptors
/// ([`SharedHandle::from`]) and the backend fetches them from the exporter's
/// broker, or attach descriptors received on a socket or inherited.
#[derive(Debug)]
pub struct SharedHandle {
    /// The handle.
    pub handle: Handle,
    /// Descriptors received with it (may be empty; see [`FdSource`]).
    pub fds: Vec<OwnedFd>,
}

impl From<Handle> for SharedHandle {
    fn from(handle: Handle) -> Self {
        SharedHandle {
            handle,
            fds: Vec::new(),
        }
    }
}

/// A memory handle of this process for the crate's unit tests: cpu-shm, host
/// memory, one page, no importers, no descriptors.
#[cfg(test)]
pub(crate) fn sample() -> Handle {
    let (pid, start) = crate::kit::os::self_identity();
    Handle {
        kind: HandleKind::Memory,
        backend: crate::types::BackendId::CpuShm,
        device: 0,
        device_uuid: [0; 16],
        location: crate::types::Location::Host,
        size: 4096,
        offset: 0,
        address: 0,
        creator_pid: pid,
        creator_start: start,
        creator_pid_ns: crate::kit::os::pid_namespace(),
        object_id: crate::kit::os::random_id(),
        flags: HandleFlags::default(),
        pid_kind: PidKind::Os,
        allowed_pids: Vec::new(),
        fds: FdSource::None,
        payload: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::os;

    fn made_here() -> Handle {
        let (pid, start) = os::self_identity();
        Handle {
            kind: HandleKind::Memory,
            backend: BackendId::CpuShm,
            device: 0,
            device_uuid: [0; 16],
            location: Location::Host,
            size: 4096,
            offset: 0,
            address: 0,
            creator_pid: pid,
            creator_start: start,
            creator_pid_ns: os::pid_namespace(),
            object_id: [1; 16],
            flags: HandleFlags::default(),
            pid_kind: PidKind::Os,
            allowed_pids: Vec::new(),
            fds: FdSource::None,
            payload: Vec::new(),
        }
    }

    #[test]
    fn is_own_needs_pid_start_and_namespace() {
        let h = made_here();
        assert_ne!(
            h.creator_pid_ns, 0,
            "this process can read its pid namespace"
        );
        assert_eq!(h.same_pid_namespace(), Some(true));
        assert!(h.is_own());

        let mut other = h.clone();
        other.creator_pid_ns ^= 1;
        assert_eq!(other.same_pid_namespace(), Some(false));
        assert!(!other.is_own(), "another namespace's process with this pid");

        let mut unknown = h.clone();
        unknown.creator_pid_ns = 0;
        assert_eq!(unknown.same_pid_namespace(), None);
        assert!(!unknown.is_own(), "undecidable is not own");

        let mut recycled = h.clone();
        recycled.creator_start += 1;
        assert_eq!(recycled.same_pid_namespace(), Some(true));
        assert!(!recycled.is_own());

        let mut no_start = h.clone();
        no_start.creator_start = 0;
        assert!(!no_start.is_own());

        let mut parent = h;
        parent.creator_pid = os::pid() + 1;
        assert!(!parent.is_own());
    }

    #[test]
    fn pid_kinds_round_trip_their_tags() {
        for kind in [PidKind::Os, PidKind::Vendor] {
            assert_eq!(PidKind::from_wire(kind.to_wire()), Some(kind));
        }
        assert_eq!(PidKind::Os.name(), "os");
        assert_eq!(PidKind::Vendor.name(), "vendor");
        assert_eq!(PidKind::from_wire(2), None);
    }

    #[test]
    fn the_device_of_a_handle_is_found_by_uuid_and_host_memory_by_ordinal() {
        let info = |ordinal: u32, uuid: u8| crate::types::DeviceInfo {
            backend: BackendId::Cuda,
            ordinal,
            uuid: [uuid; 16],
            name: String::new(),
            total_memory: 0,
            page_sizes: vec![4096],
            granularity_min: 4096,
            granularity_recommended: 4096,
            capabilities: crate::types::Capabilities::NONE,
            dlpack: crate::DlpackTypes::HOST,
        };
        // This process numbers the devices in the other order.
        let here = [info(0, 7), info(1, 5)];
        let mut h = made_here();
        h.location = Location::Device(0);
        h.device = 0;
        h.device_uuid = [5; 16];
        assert_eq!(h.device_in(&here), Some(1), "by UUID, not by ordinal");
        h.device_uuid = [9; 16];
        assert_eq!(
            h.device_in(&here),
            None,
            "a device this process does not see"
        );
        h.location = Location::Host;
        assert_eq!(h.device_in(&here), Some(0), "host memory keeps its ordinal");
        h.device = 4;
        assert_eq!(
            h.device_in(&here),
            None,
            "an ordinal that does not exist here"
        );
    }

    #[test]
    fn a_handle_of_another_kind_or_backend_is_refused_by_name() {
        let h = made_here();
        h.expect(HandleKind::Memory, BackendId::CpuShm).unwrap();
        match h.expect(HandleKind::Event, BackendId::CpuShm) {
            Err(crate::Error::InvalidHandle(crate::HandleError::WrongKind { expected, found })) => {
                assert_eq!((expected, found), ("event", "memory"));
                let e = h.expect(HandleKind::Event, BackendId::CpuShm).unwrap_err();
                assert_eq!(
                    e.to_string(),
                    "invalid handle: expected an event handle, got a memory handle"
                );
            }
            other => panic!("a memory handle taken for an event: {other:?}"),
        }
        match h.expect(HandleKind::Memory, BackendId::Cuda) {
            Err(crate::Error::InvalidHandle(crate::HandleError::WrongBackend {
                expected,
                found,
            })) => {
                assert_eq!(expected, BackendId::Cuda.name());
                assert_eq!(found, BackendId::CpuShm.name());
            }
            other => panic!("a cpu-shm handle taken for cuda: {other:?}"),
        }
    }

    #[test]
    fn kinds_have_their_names_and_round_trip_their_tags() {
        let kinds = [
            (HandleKind::Memory, "memory", 1),
            (HandleKind::Event, "event", 2),
            (HandleKind::Notify, "notify", 3),
            (HandleKind::Physical, "physical", 4),
            (HandleKind::Growable, "growable", 5),
        ];
        for (kind, name, tag) in kinds {
            assert_eq!(kind.name(), name);
            assert_eq!(kind.to_wire(), tag);
            assert_eq!(HandleKind::from_wire(tag), Some(kind));
        }
        assert_eq!(HandleKind::from_wire(0), None);
        assert_eq!(HandleKind::from_wire(6), None);
    }

    /// The flags are wire bits: a handle written by one version is read by
    /// another, so their values never change.
    #[test]
    fn flags_keep_their_wire_bits() {
        let bits = [
            (HandleFlags::READ_ONLY, 0x01),
            (HandleFlags::ANY_IMPORTER, 0x02),
            (HandleFlags::HAS_ADDRESS, 0x04),
            (HandleFlags::NAMED, 0x08),
            (HandleFlags::NO_QUERY, 0x10),
            (HandleFlags::SAME_USER, 0x20),
        ];
        let mut all = HandleFlags::default();
        for (flag, bit) in bits {
            assert_eq!(flag.0, bit);
            assert!(HandleFlags::KNOWN.contains(flag));
            all.insert(flag);
        }
        assert_eq!(all, HandleFlags::KNOWN);
        assert!(!HandleFlags::READ_ONLY.contains(HandleFlags::ANY_IMPORTER));
    }
}
