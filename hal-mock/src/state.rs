//! The state every device and resource of one backend instance shares:
//! the profile, the faults, per-device accounting and pools, the import
//! cache, and [`DevRef`], the handle resources keep to reach it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, Weak};

use hal_core::{BackendId, Capabilities, DeviceInfo, Error, Result};

use crate::backing::{Backing, ImportRegion};
use crate::codes::Code;
use crate::context::{self, Context};
use crate::fault::{FaultOp, Faults};
use crate::profile::Profile;
use crate::rules;
use crate::vendor::{Api, Vendor};

pub(crate) use hal_core::kit::os::lock::lock;

/// Imported regions by (buffer id, target device, read-only): a read-only
/// mapping is never handed to a writable import, nor the other way round.
pub(crate) type ImportCache = HashMap<([u8; 16], u32, bool), Weak<ImportRegion>>;

/// What every device and resource of one backend instance shares.
pub(crate) struct BackendShared {
    /// This instance's number in the process (for its contexts' ids).
    pub(crate) instance: u64,
    pub(crate) profile: Profile,
    /// Why the profile is invalid, if it is: the backend is then unavailable.
    pub(crate) invalid: Option<String>,
    pub(crate) faults: Faults,
    pub(crate) devices: Vec<DeviceState>,
    /// CUDA-like: imported regions by (buffer id, target device, read-only),
    /// so that a second open of one handle returns the same mapping.
    pub(crate) import_cache: Mutex<ImportCache>,
    /// This process's allocations by buffer id, so that an import of its
    /// own export reaches the original memory and an address finds its
    /// allocation ([`MockDevice::adopt_memory`](hal_core::Device::adopt_memory)).
    pub(crate) own_buffers: Mutex<HashMap<[u8; 16], OwnBuffer>>,
    /// Host ranges registered with the devices.
    pub(crate) host_registered: hal_core::kit::os::HostRegistry,
}

/// An allocation of this process, as the driver knows it.
pub(crate) struct OwnBuffer {
    pub(crate) backing: Weak<Backing>,
    /// Offset of its first byte in the backing.
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) location: hal_core::Location,
    pub(crate) page: u64,
    pub(crate) ordinal: u32,
}

impl BackendShared {
    /// How many devices this process sees, for messages: "the profile
    /// `mock-cuda` has 4 device(s)", or with a visible-device list, which
    /// of them are visible.
    pub(crate) fn device_count(&self) -> String {
        let p = &self.profile;
        match &p.visible_devices {
            None => format!(
                "the profile `{}` has {} device(s)",
                p.name,
                self.devices.len()
            ),
            Some(v) => format!(
                "this process sees {} of the {} device(s) of profile `{}` (visible devices \
                 {v:?}, as physical indices)",
                self.devices.len(),
                p.devices,
                p.name
            ),
        }
    }
}

/// The state of one simulated device.
pub(crate) struct DeviceState {
    pub(crate) info: DeviceInfo,
    /// Bytes of device memory in use.
    used: Mutex<u64>,
    /// Sub-allocation pool (Ascend-like profiles).
    pub(crate) pool: Mutex<Pool>,
    /// Devices whose memory this one may access.
    pub(crate) peers: Mutex<BTreeSet<u32>>,
    /// Allocations dropped while importers held them, not yet released.
    pub(crate) deferred: AtomicUsize,
    /// The live streams of the device, for a device-wide synchronize.
    pub(crate) streams: Mutex<Vec<Weak<dyn StreamWork>>>,
}

/// What a device-wide synchronize needs of a stream.
pub(crate) trait StreamWork: Send + Sync {
    /// Wait until the work queued so far has run. An error of that work
    /// stays with the stream, for its own synchronize or query to answer:
    /// a device-wide synchronize in one thread never takes the error that
    /// another thread's stream is about to be asked for.
    fn wait_idle(&self, timeout: Option<std::time::Duration>) -> Result<()>;
}

impl DeviceState {
    /// A device with nothing allocated.
    pub(crate) fn new(info: DeviceInfo) -> DeviceState {
        DeviceState {
            info,
            used: Mutex::new(0),
            pool: Mutex::new(Pool::default()),
            peers: Mutex::new(BTreeSet::new()),
            deferred: AtomicUsize::new(0),
            streams: Mutex::new(Vec::new()),
        }
    }

    /// Account for `bytes` more of device memory.
    pub(crate) fn charge(&self, vendor: Vendor, bytes: u64) -> Result<()> {
        let mut used = lock(&self.used);
        match used.checked_add(bytes) {
            Some(n) if n <= self.info.total_memory => {
                *used = n;
                Ok(())
            }
            _ => Err(Error::OutOfMemory {
                requested: bytes,
                detail: format!(
                    "device {} has {} of {} bytes in use ({} {}); free memory first",
                    self.info.ordinal,
                    *used,
                    self.info.total_memory,
                    vendor.out_of_memory().name,
                    vendor.out_of_memory().code
                ),
            }),
        }
    }

    /// Give back `bytes` of device memory.
    pub(crate) fn refund(&self, bytes: u64) {
        let mut used = lock(&self.used);
        *used = used.saturating_sub(bytes);
    }

    /// Bytes in use.
    pub(crate) fn used(&self) -> u64 {
        *lock(&self.used)
    }
}

/// A device of a backend instance: what resources keep to reach their
/// device's state, the profile and the faults.
#[derive(Clone)]
pub(crate) struct DevRef {
    pub(crate) shared: Arc<BackendShared>,
    pub(crate) ordinal: u32,
}

impl DevRef {
    pub(crate) fn state(&self) -> &DeviceState {
        &self.shared.devices[self.ordinal as usize]
    }

    pub(crate) fn profile(&self) -> &Profile {
        &self.shared.profile
    }

    pub(crate) fn vendor(&self) -> Vendor {
        self.shared.profile.vendor
    }

    pub(crate) fn backend(&self) -> BackendId {
        self.shared.profile.backend()
    }

    pub(crate) fn name(&self) -> String {
        self.backend().name()
    }

    pub(crate) fn caps(&self) -> Capabilities {
        self.shared.profile.capabilities
    }

    /// The primary context of this device.
    pub(crate) fn context(&self) -> Context {
        Context {
            instance: self.shared.instance,
            ordinal: self.ordinal,
        }
    }

    /// A simulated vendor call: the device's context pushed on the calling
    /// thread for the call and popped after it (the caller's current
    /// context is left as it was), then the checks of the call: a context
    /// of this backend current (the vendor's invalid-context code
    /// otherwise), missing entry point, lost device, injected fault.
    pub(crate) fn enter(&self, api: Api, op: Option<FaultOp>) -> Result<()> {
        let _pushed = context::push(self.context());
        self.in_context(api)?;
        self.shared
            .faults
            .enter(self.vendor(), self.ordinal, api, op)
    }

    /// The driver's check that a context of this backend instance is
    /// current on the calling thread.
    fn in_context(&self, api: Api) -> Result<()> {
        match context::current() {
            Some(c) if c.instance == self.shared.instance => Ok(()),
            other => Err(self.err(
                rules::no_context(self.vendor()),
                format!(
                    "{}: no context of this device is current on the calling thread ({other:?})",
                    api.symbol(self.vendor())
                ),
            )),
        }
    }

    /// The lost-device check and an injected fault, for operations that
    /// call no entry point of their own.
    pub(crate) fn inject(&self, op: FaultOp) -> Result<()> {
        self.shared.faults.inject(self.vendor(), self.ordinal, op)
    }

    /// The lost-device check alone.
    pub(crate) fn alive(&self) -> Result<()> {
        self.shared.faults.alive(self.vendor(), self.ordinal)
    }

    /// A vendor error of this backend.
    pub(crate) fn err(&self, code: Code, message: impl Into<String>) -> Error {
        code.error(self.backend(), message)
    }

    /// [`Error::Unsupported`] unless the profile has `cap`.
    pub(crate) fn require(&self, cap: Capabilities, operation: &str) -> Result<()> {
        if self.caps().contains(cap) {
            return Ok(());
        }
        Err(Error::unsupported(
            self.name(),
            operation,
            format!(
                "the profile `{}` lacks the capability {:?}",
                self.profile().name,
                cap
            ),
        ))
    }

    /// True when `other` belongs to the same backend instance.
    pub(crate) fn same_backend(&self, other: &DevRef) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Refuse a resource of another backend instance or device.
    pub(crate) fn check_owner(&self, other: &DevRef, what: &str, same_device: bool) -> Result<()> {
        if !self.same_backend(other) {
            return Err(Error::invalid(format!(
                "the {what} belongs to another backend instance, not to this `{}` device",
                self.profile().name
            )));
        }
        if same_device && other.ordinal != self.ordinal {
            return Err(Error::invalid(format!(
                "the {what} belongs to device {}, not to device {}; call the operation on \
                 its own device",
                other.ordinal, self.ordinal
            )));
        }
        Ok(())
    }
}

/// A pool of sub-allocation chunks: first fit in each chunk's free list.
#[derive(Default)]
pub(crate) struct Pool {
    next_id: u64,
    chunks: Vec<Chunk>,
}

struct Chunk {
    id: u64,
    backing: Arc<Backing>,
    /// Free ranges: offset -> length.
    free: BTreeMap<u64, u64>,
    live: usize,
}

/// One sub-allocation: where it lives.
pub(crate) struct Slot {
    pub(crate) chunk: u64,
    pub(crate) backing: Arc<Backing>,
    pub(crate) offset: u64,
}

impl Pool {
    /// Take `len` bytes aligned to `align` from an existing chunk.
    pub(crate) fn take(&mut self, len: u64, align: u64) -> Option<Slot> {
        for c in &mut self.chunks {
            let found = c.free.iter().find_map(|(&start, &flen)| {
                let at = start.next_multiple_of(align);
                (at.checked_add(len)? <= start + flen).then_some((start, flen, at))
            });
            if let Some((start, flen, at)) = found {
                c.free.remove(&start);
                if at > start {
                    c.free.insert(start, at - start);
                }
                let end = start + flen;
                if at + len < end {
                    c.free.insert(at + len, end - at - len);
                }
                c.live += 1;
                return Some(Slot {
                    chunk: c.id,
                    backing: Arc::clone(&c.backing),
                    offset: at,
                });
            }
        }
        None
    }

    /// Add an empty chunk.
    pub(crate) fn add(&mut self, backing: Arc<Backing>) {
        let size = backing.size();
        self.next_id += 1;
        self.chunks.push(Chunk {
            id: self.next_id,
            backing,
            free: BTreeMap::from([(0, size)]),
            live: 0,
        });
    }

    /// Return a sub-allocation. Returns the chunk's size when the chunk
    /// became empty and was released.
    pub(crate) fn give_back(&mut self, chunk: u64, offset: u64, len: u64) -> Option<u64> {
        let idx = self.chunks.iter().position(|c| c.id == chunk)?;
        let c = &mut self.chunks[idx];
        let (mut start, mut flen) = (offset, len);
        if let Some((&p, &plen)) = c.free.range(..offset).next_back() {
            if p + plen == offset {
                c.free.remove(&p);
                start = p;
                flen += plen;
            }
        }
        if let Some(&nlen) = c.free.get(&(offset + len)) {
            c.free.remove(&(offset + len));
            flen += nlen;
        }
        c.free.insert(start, flen);
        c.live = c.live.saturating_sub(1);
        if c.live == 0 {
            let c = self.chunks.swap_remove(idx);
            return Some(c.backing.size());
        }
        None
    }
}
