//! The runtime's state, one per process: the simulator's devices, the
//! tables from the handles and addresses the runtime hands out to the
//! simulator's objects, initialisation, and each thread's current device.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use hal_core::kit::vendor::acl;
use hal_core::{Backend, Exported, MemRef};
use hal_mock::MockStream;
use hal_mock::{MockAllocation, MockBackend, MockDevice, MockEvent, MockMapping, MockNotify};

use crate::error::sim;
use crate::refusal::{refuse, Refusal};
use crate::visible;

pub(crate) use hal_core::kit::os::lock::lock;

/// Memory the runtime hands out: allocated here, or imported by key.
#[derive(Clone)]
pub(crate) enum Mem {
    Alloc(Arc<MockAllocation>),
    Map(Arc<MockMapping>),
}

impl Mem {
    pub(crate) fn r(&self) -> MemRef<'_, MockDevice> {
        match self {
            Mem::Alloc(a) => MemRef::Allocation(a.as_ref()),
            Mem::Map(m) => MemRef::Mapping(m.as_ref()),
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.r().memory().len()
    }

    /// True for memory imported onto another device than its own: only
    /// asynchronous device-to-device copies may use it.
    pub(crate) fn peer_only(&self) -> bool {
        matches!(self, Mem::Map(m) if m.is_peer_only())
    }
}

/// One block of device memory, by its base address.
pub(crate) struct Block {
    pub(crate) mem: Mem,
    pub(crate) ordinal: u32,
    /// The keys of this memory its exporter has not closed yet.
    pub(crate) open_keys: usize,
}

/// Memory found from a pointer.
pub(crate) struct Found {
    pub(crate) mem: Mem,
    pub(crate) base: u64,
    pub(crate) offset: u64,
    pub(crate) ordinal: u32,
}

/// An exported key, kept by its exporter until it closes it.
pub(crate) struct KeyExport {
    /// The simulator's export (its allow-list holds OS pids).
    pub(crate) export: Exported,
    /// The envelope the key names.
    pub(crate) _envelope: Exported,
    pub(crate) base: u64,
    pub(crate) ordinal: u32,
}

/// A key this process imported, and how many imports are open.
pub(crate) struct Imported {
    pub(crate) addr: u64,
    pub(crate) refs: u32,
    /// False in the exporting process, where the import is the original
    /// memory and its block the allocation's.
    pub(crate) own_block: bool,
}

pub(crate) struct StreamEntry {
    pub(crate) stream: Arc<MockStream>,
    pub(crate) ordinal: u32,
}

pub(crate) struct EventEntry {
    pub(crate) event: Arc<MockEvent>,
    pub(crate) ordinal: u32,
    pub(crate) flags: u32,
    /// Its IPC handle's exports, once taken.
    pub(crate) ipc: Option<(Exported, Exported, [u8; 64])>,
}

pub(crate) struct NotifyEntry {
    pub(crate) notify: Arc<MockNotify>,
    pub(crate) ordinal: u32,
    /// Its exported keys (the simulator's export and the envelope).
    pub(crate) keys: HashMap<String, (Exported, Exported)>,
}

/// The per-device state.
pub(crate) struct Dev {
    pub(crate) device: MockDevice,
    pub(crate) default_stream: Mutex<Option<Arc<MockStream>>>,
}

/// The process's runtime.
pub(crate) struct Runtime {
    _backend: MockBackend,
    pub(crate) devices: Vec<Dev>,
    pub(crate) memory: Mutex<BTreeMap<u64, Block>>,
    pub(crate) keys: Mutex<HashMap<String, KeyExport>>,
    pub(crate) imported: Mutex<HashMap<String, Imported>>,
    pub(crate) streams: Mutex<HashMap<usize, StreamEntry>>,
    pub(crate) events: Mutex<HashMap<usize, EventEntry>>,
    pub(crate) notifies: Mutex<HashMap<usize, NotifyEntry>>,
    next_handle: AtomicUsize,
}

/// The first value handed out as a stream, event or notify.
const FIRST_HANDLE: usize = 0x20_0000;

/// 0: before `aclInit`; 1: initialised; 2: after `aclFinalize`.
static STATE: AtomicU8 = AtomicU8::new(0);
static RUNTIME: OnceLock<Result<Runtime, Refusal>> = OnceLock::new();

thread_local! {
    /// This thread's current device (`aclrtSetDevice`).
    static CURRENT: Cell<Option<u32>> = const { Cell::new(None) };
}

/// `aclInit`: the runtime, made at the first; `ACL_ERROR_REPEAT_INITIALIZE`
/// while initialised.
pub(crate) fn init() -> Result<(), Refusal> {
    if STATE.load(Ordering::Acquire) == 1 {
        return Err(refuse(
            acl::REPEAT_INITIALIZE,
            "aclInit was called before in this process",
        ));
    }
    match RUNTIME.get_or_init(Runtime::new) {
        Ok(_) => {
            STATE.store(1, Ordering::Release);
            Ok(())
        }
        Err(e) => Err(e.clone()),
    }
}

/// `aclFinalize`: later calls answer `ACL_ERROR_UNINITIALIZE`.
pub(crate) fn finalize() -> Result<(), Refusal> {
    match STATE.compare_exchange(1, 2, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Ok(()),
        Err(_) => Err(refuse(acl::UNINITIALIZE, "aclInit has not been called")),
    }
}

/// The runtime, once initialised.
pub(crate) fn runtime() -> Result<&'static Runtime, Refusal> {
    match (STATE.load(Ordering::Acquire), RUNTIME.get()) {
        (1, Some(Ok(r))) => Ok(r),
        _ => Err(refuse(
            acl::UNINITIALIZE,
            "call aclInit before any other runtime call",
        )),
    }
}

/// Set this thread's current device.
pub(crate) fn set_current(ordinal: u32) {
    CURRENT.with(|c| c.set(Some(ordinal)));
}

impl Runtime {
    fn new() -> Result<Runtime, Refusal> {
        let backend = MockBackend::new(visible::profile()?);
        visible::inject(backend.faults())?;
        let count = sim(backend.devices())?.len();
        if count == 0 {
            return Err(refuse(acl::RT_NO_DEVICE, "no visible device"));
        }
        let mut devices = Vec::with_capacity(count);
        for i in 0..count {
            let ordinal = u32::try_from(i).map_err(|_| refuse(acl::RT_NO_DEVICE, "count"))?;
            devices.push(Dev {
                device: sim(backend.open(ordinal))?,
                default_stream: Mutex::new(None),
            });
        }
        Ok(Runtime {
            _backend: backend,
            devices,
            memory: Mutex::new(BTreeMap::new()),
            keys: Mutex::new(HashMap::new()),
            imported: Mutex::new(HashMap::new()),
            streams: Mutex::new(HashMap::new()),
            events: Mutex::new(HashMap::new()),
            notifies: Mutex::new(HashMap::new()),
            next_handle: AtomicUsize::new(FIRST_HANDLE),
        })
    }

    /// The calling thread's current device; `ACL_ERROR_RT_CONTEXT_NULL`
    /// before `aclrtSetDevice` on this thread.
    pub(crate) fn current(&self) -> Result<u32, Refusal> {
        CURRENT
            .with(Cell::get)
            .filter(|&o| (o as usize) < self.devices.len())
            .ok_or_else(|| {
                refuse(
                    acl::RT_CONTEXT_NULL,
                    "no current device on this thread: call aclrtSetDevice first",
                )
            })
    }

    /// The device numbered `id` in this process.
    pub(crate) fn device_id(&self, id: i32) -> Result<u32, Refusal> {
        u32::try_from(id)
            .ok()
            .filter(|&o| (o as usize) < self.devices.len())
            .ok_or_else(|| {
                refuse(
                    acl::RT_INVALID_DEVICEID,
                    format!("device {id}: this process sees {}", self.devices.len()),
                )
            })
    }

    pub(crate) fn device(&self, ordinal: u32) -> &MockDevice {
        &self.devices[ordinal as usize].device
    }

    /// A fresh value for a stream, event or notify handle.
    pub(crate) fn new_handle(&self) -> usize {
        self.next_handle.fetch_add(16, Ordering::Relaxed)
    }

    /// The memory holding `ptr..ptr + len`; `ACL_ERROR_RT_PARAM_INVALID`
    /// when no block holds all of it.
    pub(crate) fn find(&self, ptr: u64, len: u64) -> Result<Found, Refusal> {
        let memory = lock(&self.memory);
        let not_found = || {
            refuse(
                acl::RT_PARAM_INVALID,
                format!("{ptr:#x}+{len:#x} is not inside device memory of this runtime"),
            )
        };
        let (&base, block) = memory.range(..=ptr).next_back().ok_or_else(not_found)?;
        let offset = ptr - base;
        let end = offset.checked_add(len).ok_or_else(not_found)?;
        if offset >= block.mem.len() || end > block.mem.len() {
            return Err(not_found());
        }
        Ok(Found {
            mem: block.mem.clone(),
            base,
            offset,
            ordinal: block.ordinal,
        })
    }

    /// The device's default stream (the null stream), made on first use.
    pub(crate) fn default_stream(&self, ordinal: u32) -> Result<Arc<MockStream>, Refusal> {
        let dev = &self.devices[ordinal as usize];
        let mut s = lock(&dev.default_stream);
        if let Some(s) = &*s {
            return Ok(Arc::clone(s));
        }
        let made = Arc::new(sim(hal_core::Device::create_stream(&dev.device))?);
        *s = Some(Arc::clone(&made));
        Ok(made)
    }

    /// The stream `h` names (null: the current device's default stream).
    pub(crate) fn stream(&self, h: usize) -> Result<(Arc<MockStream>, u32), Refusal> {
        if h == 0 {
            let ordinal = self.current()?;
            return Ok((self.default_stream(ordinal)?, ordinal));
        }
        lock(&self.streams)
            .get(&h)
            .map(|s| (Arc::clone(&s.stream), s.ordinal))
            .ok_or_else(|| refuse(acl::RT_INVALID_HANDLE, format!("no stream {h:#x}")))
    }

    /// The event `h` names.
    pub(crate) fn event(&self, h: usize) -> Result<(Arc<MockEvent>, u32, u32), Refusal> {
        lock(&self.events)
            .get(&h)
            .map(|e| (Arc::clone(&e.event), e.ordinal, e.flags))
            .ok_or_else(|| refuse(acl::RT_INVALID_HANDLE, format!("no event {h:#x}")))
    }

    /// The notify `h` names.
    pub(crate) fn notify(&self, h: usize) -> Result<(Arc<MockNotify>, u32), Refusal> {
        lock(&self.notifies)
            .get(&h)
            .map(|n| (Arc::clone(&n.notify), n.ordinal))
            .ok_or_else(|| refuse(acl::RT_INVALID_HANDLE, format!("no notify {h:#x}")))
    }
}
