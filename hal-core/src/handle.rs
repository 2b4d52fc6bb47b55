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
    /// Every flag this version knows.
    pub const KNOWN: HandleFlags = HandleFlags(0b1_1111);

    /// True when every bit of `other` is set.
    pub const fn contains(self, other: HandleFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Set the bits of `other`.
    pub fn insert(&mut self, other: HandleFlags) {
        self.0 |= other.0;
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
    /// Pid of the creating process (in its pid namespace).
    pub creator_pid: u32,
    /// Start time of the creating process (clock ticks since boot), which tells
    /// a recycled pid from the creator.
    pub creator_start: u64,
    /// A unique id of the exported object, the key of import caches and brokers.
    pub object_id: [u8; 16],
    /// Flags.
    pub flags: HandleFlags,
    /// Pids allowed to import (empty with [`HandleFlags::ANY_IMPORTER`] means anyone;
    /// empty without it means nobody yet). At most [`wire::MAX_PIDS`].
    pub allowed_pids: Vec<u32>,
    /// Where the file descriptors come from.
    pub fds: FdSource,
    /// Backend-specific bytes (a CUDA IPC handle, an Ascend key, a shm name).
    /// At most [`wire::MAX_PAYLOAD`] bytes.
    pub payload: Vec<u8>,
}

impl Handle {
    /// True when `pid` may import.
    pub fn allows(&self, pid: u32) -> bool {
        self.flags.contains(HandleFlags::ANY_IMPORTER) || self.allowed_pids.contains(&pid)
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
