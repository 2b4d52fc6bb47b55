//! The process-wide driver state: the simulator backend made by `cuInit`,
//! its devices and their primary contexts, and the tables of allocations,
//! streams and events that the opaque handles name.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use hal_core::kit::vendor::{cuda, Code};
use hal_core::{Backend, Device, MemRef};
use hal_mock::{MockAllocation, MockBackend, MockDevice, MockEvent, MockMapping, MockStream};

use crate::error::sim;
use crate::ipc_table::{EventExport, IpcExport, Opened};
use crate::view::NoAccess;
use crate::visible;

pub(crate) use hal_core::kit::os::lock::lock;

/// What kind of memory an allocation is, by the call that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `cuMemAlloc_v2`.
    Device,
    /// `cuMemAllocHost_v2`.
    Host,
    /// `cuMemAllocManaged`.
    Managed,
    /// `cuIpcOpenMemHandle_v2`: another process's device memory.
    Imported,
    /// `cuMemHostRegister_v2`: host memory of the caller's, reached by the
    /// device at its host address (found by [`Driver::find_copyable`] only).
    Registered,
}

/// The simulator's memory behind an address: an allocation of this
/// process, or another process's memory opened here.
#[derive(Clone)]
pub(crate) enum Mem {
    /// Allocated here.
    Alloc(Arc<MockAllocation>),
    /// Opened from another process's IPC handle.
    Map(Arc<MockMapping>),
    /// Host memory registered with the device (a clone of the
    /// registration: queued work holds it until it ran).
    Registered(hal_core::kit::RegisteredHost),
}

impl Mem {
    /// The memory as the simulator's stream calls take it.
    pub(crate) fn r(&self) -> MemRef<'_, MockDevice> {
        match self {
            Mem::Alloc(a) => MemRef::Allocation(a.as_ref()),
            Mem::Map(m) => MemRef::Mapping(m.as_ref()),
            Mem::Registered(r) => MemRef::Registered(r),
        }
    }

    /// Its length.
    pub(crate) fn len(&self) -> u64 {
        self.r().memory().len()
    }

    /// Read `dst.len()` bytes at `offset`.
    pub(crate) fn read(&self, offset: u64, dst: &mut [u8]) -> hal_core::Result<()> {
        self.r().memory().read(offset, dst)
    }

    /// Write `src` at `offset`.
    pub(crate) fn write(&self, offset: u64, src: &[u8]) -> hal_core::Result<()> {
        self.r().memory().write(offset, src)
    }
}

/// An allocation of the table, keyed by its address.
pub(crate) struct Block {
    /// The simulator's memory.
    pub(crate) alloc: Mem,
    /// The device whose context made it.
    pub(crate) ordinal: u32,
    /// Which call made it.
    pub(crate) kind: Kind,
    /// `CU_POINTER_ATTRIBUTE_BUFFER_ID`: unique per allocation.
    pub(crate) buffer_id: u64,
    /// Its IPC export, made by the first `cuIpcGetMemHandle` and kept
    /// while the allocation lives.
    pub(crate) ipc: Option<IpcExport>,
    /// For device memory: the no-access range whose address is the
    /// allocation's device pointer (the key of the table).
    pub(crate) _view: Option<NoAccess>,
}

/// What [`Driver::find`] found.
pub(crate) struct Found {
    /// The allocation.
    pub(crate) alloc: Mem,
    /// Its address.
    pub(crate) base: u64,
    /// The offset of the pointer looked up.
    pub(crate) offset: u64,
    /// Which call made it.
    pub(crate) kind: Kind,
}

/// A stream of the table.
pub(crate) struct StreamEntry {
    /// The simulator's stream.
    pub(crate) stream: Arc<MockStream>,
    /// The device whose context made it.
    pub(crate) ordinal: u32,
    /// Created without `CU_STREAM_NON_BLOCKING`: synchronous copies wait for it.
    pub(crate) blocking: bool,
}

/// An event of the table.
pub(crate) struct EventEntry {
    /// The simulator's event.
    pub(crate) event: Arc<MockEvent>,
    /// The device whose context made it.
    pub(crate) ordinal: u32,
    /// Its IPC export, after the first `cuIpcGetEventHandle`.
    pub(crate) ipc: Option<EventExport>,
}

/// The primary context of one device.
#[derive(Default)]
pub(crate) struct Primary {
    /// `cuDevicePrimaryCtxRetain` minus `cuDevicePrimaryCtxRelease_v2`:
    /// the context is active while this is above zero.
    pub(crate) refs: u32,
    /// The context's default (null) stream, made on first use.
    pub(crate) default_stream: Option<Arc<MockStream>>,
}

/// One device this process sees.
pub(crate) struct Dev {
    /// The simulator's device.
    pub(crate) device: MockDevice,
    /// The primary context's handle: the address of this box, never read
    /// through, stable for the life of the process.
    token: Box<u64>,
    /// The primary context's state.
    pub(crate) primary: Mutex<Primary>,
}

impl Dev {
    /// The `CUcontext` value of this device's primary context.
    pub(crate) fn context_addr(&self) -> usize {
        std::ptr::from_ref::<u64>(&*self.token).addr()
    }
}

/// The driver after a successful `cuInit`.
pub(crate) struct Driver {
    /// The simulator (kept so that its devices stay one backend instance).
    _backend: MockBackend,
    /// The devices, by ordinal.
    pub(crate) devices: Vec<Dev>,
    /// Allocations by address.
    pub(crate) memory: Mutex<BTreeMap<u64, Block>>,
    /// Streams by handle.
    pub(crate) streams: Mutex<HashMap<usize, StreamEntry>>,
    /// Events by handle.
    pub(crate) events: Mutex<HashMap<usize, EventEntry>>,
    /// Registered host memory by its first address.
    pub(crate) registered: Mutex<BTreeMap<u64, hal_core::kit::RegisteredHost>>,
    /// Handles opened with `cuIpcOpenMemHandle_v2`, by their 64 bytes and
    /// the device whose context opened them.
    pub(crate) opened: Mutex<HashMap<([u8; 64], u32), Opened>>,
    /// The next stream or event handle.
    next_handle: AtomicUsize,
    /// The next buffer id.
    next_buffer_id: AtomicU64,
}

/// The first stream or event handle; they step by 16, so that none is
/// null, `CU_STREAM_LEGACY` (1) or `CU_STREAM_PER_THREAD` (2).
const FIRST_HANDLE: usize = 0x10_0000;

static DRIVER: OnceLock<Result<Driver, Code>> = OnceLock::new();

/// `cuInit`: make the driver once; later calls answer what the first did.
pub(crate) fn init() -> Result<(), Code> {
    match DRIVER.get_or_init(Driver::new) {
        Ok(_) => Ok(()),
        Err(code) => Err(*code),
    }
}

/// The driver, or `CUDA_ERROR_NOT_INITIALIZED` before a successful `cuInit`.
pub(crate) fn driver() -> Result<&'static Driver, Code> {
    match DRIVER.get() {
        Some(Ok(d)) => Ok(d),
        _ => Err(cuda::NOT_INITIALIZED),
    }
}

/// The entry of `map` (keyed by first address) that holds `ptr..ptr + len`
/// (at least the byte at `ptr` when `len` is 0): its base, the entry and
/// the offset of `ptr` in it; `CUDA_ERROR_INVALID_VALUE` when none does.
fn holding<V>(
    map: &BTreeMap<u64, V>,
    ptr: u64,
    len: u64,
    size: impl Fn(&V) -> u64,
) -> Result<(u64, &V, u64), Code> {
    let (&base, entry) = map.range(..=ptr).next_back().ok_or(cuda::INVALID_VALUE)?;
    let offset = ptr - base;
    let end = offset.checked_add(len).ok_or(cuda::INVALID_VALUE)?;
    if offset >= size(entry) || end > size(entry) {
        return Err(cuda::INVALID_VALUE);
    }
    Ok((base, entry, offset))
}

impl Driver {
    fn new() -> Result<Driver, Code> {
        let profile = visible::profile()?;
        let backend = MockBackend::new(profile);
        let count = sim(backend.devices())?.len();
        if count == 0 {
            return Err(cuda::NO_DEVICE);
        }
        let devices = (0..count)
            .map(|i| {
                let ordinal = u32::try_from(i).map_err(|_| cuda::INVALID_DEVICE)?;
                Ok(Dev {
                    device: sim(backend.open(ordinal))?,
                    token: Box::new(u64::from(ordinal)),
                    primary: Mutex::new(Primary::default()),
                })
            })
            .collect::<Result<Vec<_>, Code>>()?;
        Ok(Driver {
            _backend: backend,
            devices,
            memory: Mutex::new(BTreeMap::new()),
            streams: Mutex::new(HashMap::new()),
            events: Mutex::new(HashMap::new()),
            registered: Mutex::new(BTreeMap::new()),
            opened: Mutex::new(HashMap::new()),
            next_handle: AtomicUsize::new(FIRST_HANDLE),
            next_buffer_id: AtomicU64::new(1),
        })
    }

    /// The device `dev`, or `CUDA_ERROR_INVALID_DEVICE`.
    pub(crate) fn dev(&self, dev: i32) -> Result<&Dev, Code> {
        usize::try_from(dev)
            .ok()
            .and_then(|i| self.devices.get(i))
            .ok_or(cuda::INVALID_DEVICE)
    }

    /// The ordinal of the device whose primary context is `ctx`.
    pub(crate) fn ordinal_of_context(&self, ctx: usize) -> Option<u32> {
        self.devices
            .iter()
            .position(|d| d.context_addr() == ctx)
            .and_then(|i| u32::try_from(i).ok())
    }

    /// A new buffer id.
    pub(crate) fn new_buffer_id(&self) -> u64 {
        self.next_buffer_id.fetch_add(1, Ordering::Relaxed)
    }

    /// A new stream or event handle.
    pub(crate) fn new_handle(&self) -> usize {
        self.next_handle.fetch_add(16, Ordering::Relaxed)
    }

    /// The allocation holding `ptr..ptr + len` (at least the byte at `ptr`
    /// when `len` is 0), the offset of `ptr` in it and its kind;
    /// `CUDA_ERROR_INVALID_VALUE` when no allocation holds the range.
    pub(crate) fn find(&self, ptr: u64, len: u64) -> Result<Found, Code> {
        let memory = lock(&self.memory);
        let (base, block, offset) = holding(&memory, ptr, len, |b| b.alloc.len())?;
        Ok(Found {
            alloc: block.alloc.clone(),
            base,
            offset,
            kind: block.kind,
        })
    }

    /// As [`Driver::find`], and else registered host memory: what copies
    /// and memsets reach (the device addresses registered host memory at
    /// its host address, measured).
    pub(crate) fn find_copyable(&self, ptr: u64, len: u64) -> Result<Found, Code> {
        if let Ok(found) = self.find(ptr, len) {
            return Ok(found);
        }
        let registered = lock(&self.registered);
        let (base, reg, offset) = holding(&registered, ptr, len, hal_core::Memory::len)?;
        // The queued work gets a view of the pages that does not keep them
        // registered: as on the driver, `cuMemHostUnregister` ends the
        // registration at once, whatever is queued (the caller keeps it
        // registered until its work ran).
        let range = reg.range();
        // SAFETY: the caller of `cuMemHostRegister` keeps the range mapped
        // while it is registered and until the work queued on it ran.
        let view = unsafe { hal_core::kit::os::HostRange::new(range.ptr(), range.len()) }
            .map_err(|_| cuda::INVALID_VALUE)?;
        Ok(Found {
            alloc: Mem::Registered(hal_core::kit::RegisteredHost::new(
                view,
                hal_core::Memory::addr(reg),
                |_| {},
            )),
            base,
            offset,
            kind: Kind::Registered,
        })
    }

    /// The default stream of device `ordinal`'s primary context, made on
    /// first use.
    pub(crate) fn default_stream(&self, ordinal: u32) -> Result<Arc<MockStream>, Code> {
        let dev = &self.devices[ordinal as usize];
        let mut primary = lock(&dev.primary);
        if let Some(s) = &primary.default_stream {
            return Ok(Arc::clone(s));
        }
        let s = Arc::new(sim(dev.device.create_stream())?);
        primary.default_stream = Some(Arc::clone(&s));
        Ok(s)
    }

    /// Wait for the work a synchronous call of device `ordinal`'s context
    /// is ordered after: its default stream and its blocking streams (the
    /// legacy default stream's rule).
    pub(crate) fn sync_blocking(&self, ordinal: u32) -> Result<(), Code> {
        let dev = &self.devices[ordinal as usize];
        let mut streams: Vec<Arc<MockStream>> = lock(&self.streams)
            .values()
            .filter(|s| s.ordinal == ordinal && s.blocking)
            .map(|s| Arc::clone(&s.stream))
            .collect();
        streams.extend(lock(&dev.primary).default_stream.clone());
        for s in streams {
            sim(dev.device.synchronize(&s, None))?;
        }
        Ok(())
    }

    /// Destroy what device `ordinal`'s primary context owns, as the driver
    /// does when its last reference is released: allocations, streams,
    /// events and the default stream. Dropped outside the locks (a stream
    /// drains its queue on drop).
    pub(crate) fn destroy_context(&self, ordinal: u32) {
        let dev = &self.devices[ordinal as usize];
        let default = lock(&dev.primary).default_stream.take();
        let blocks: Vec<Block> = {
            let mut memory = lock(&self.memory);
            let gone: Vec<u64> = memory
                .iter()
                .filter(|(_, b)| b.ordinal == ordinal)
                .map(|(&a, _)| a)
                .collect();
            gone.iter().filter_map(|a| memory.remove(a)).collect()
        };
        // Handles opened in the context go with it.
        lock(&self.opened).retain(|_, o| !blocks.iter().any(|b| b.buffer_id == o.buffer_id));
        let streams: Vec<StreamEntry> = {
            let mut table = lock(&self.streams);
            let gone: Vec<usize> = table
                .iter()
                .filter(|(_, s)| s.ordinal == ordinal)
                .map(|(&h, _)| h)
                .collect();
            gone.iter().filter_map(|h| table.remove(h)).collect()
        };
        let events: Vec<EventEntry> = {
            let mut table = lock(&self.events);
            let gone: Vec<usize> = table
                .iter()
                .filter(|(_, e)| e.ordinal == ordinal)
                .map(|(&h, _)| h)
                .collect();
            gone.iter().filter_map(|h| table.remove(h)).collect()
        };
        drop((default, streams, events, blocks));
    }
}
