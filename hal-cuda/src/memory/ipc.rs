//! Legacy CUDA IPC of device memory (`cuMemAlloc` memory).
//!
//! **Export.** The range (the whole allocation or `ExportOptions::range`)
//! must be whole pages of the device's page size, else
//! [`Error::Misaligned`] (never widened). The driver's handle names an
//! allocation's *base* (a handle taken inside it is the base's, measured),
//! so the base is found with `cuMemGetAddressRange_v2`, its 64 bytes taken
//! with `cuIpcGetMemHandle`, and the hal handle's `offset` and `size` name
//! the range relative to the base. Its payload ([`Payload`]) carries the 64
//! bytes, the base's size and the base's `CU_POINTER_ATTRIBUTE_BUFFER_ID`.
//! CUDA keeps no allow-list: exports are open to anyone (a pid list, and a
//! read-only export, are [`Error::Unsupported`]). The export needs no
//! descriptor but counts its importers: it is registered with the
//! descriptor broker with the allocation's lease table.
//!
//! **Import.** The lease is taken from the exporter's broker first. In the
//! exporting process the driver refuses to open its own handle
//! (`CUDA_ERROR_INVALID_CONTEXT`, measured), so the import reaches the
//! original memory, still holding the lease. Elsewhere the 64 bytes are
//! opened with `cuIpcOpenMemHandle_v2(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)`,
//! once per process and device for each exported allocation: a cache keyed
//! by (exporter pid, start time, pid namespace, buffer id, device) shares
//! the open among every import of any range of it, and the last mapping to
//! drop closes it. The buffer id, not the address, names the allocation,
//! so a freed and reused address is never mistaken for the old memory.
//!
//! **Mappings.** A [`CudaMapping`] is the imported range (or, for this
//! process's own export, the original memory), reached with
//! `cuMemcpyHtoD` / `DtoH`, never dereferenced.

use std::collections::HashMap;
use std::ffi::{c_int, c_uint};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use hal_core::exchange::{take_fds_leased, Lease};
use hal_core::kit::export::{new_handle, HandleSpec};
use hal_core::kit::os::lock::lock;
use hal_core::{
    BackendId, ByteRange, DeviceInfo, Error, ExportOptions, Exported, Handle, HandleError,
    HandleKind, ImportOptions, Importers, Location, Mapping, Memory, Result, SharedHandle,
};

use crate::context::Primary;
use crate::ffi::result::{ipc, mem};
use crate::ffi::{CUdevice, CUdeviceptr};
use crate::memory::alloc::{copy_in, copy_out, own_base, CudaAllocation};
use crate::peer;

/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.
const LAZY_ENABLE_PEER_ACCESS: c_uint = 1;
/// `CU_POINTER_ATTRIBUTE_BUFFER_ID`.
const POINTER_ATTRIBUTE_BUFFER_ID: c_int = 7;
/// The payload layout's version.
const PAYLOAD_VERSION: u8 = 1;
/// Bytes of a payload.
const PAYLOAD_LEN: usize = 1 + 64 + 8 + 8;

/// What a memory handle of this backend carries beyond hal's fields.
///
/// | bytes | field |
/// | ---: | --- |
/// | 0 | version, 1 |
/// | 1..65 | the driver's `CUipcMemHandle` of the base |
/// | 65..73 | the base allocation's size (`u64`, little-endian) |
/// | 73..81 | the base's `CU_POINTER_ATTRIBUTE_BUFFER_ID` (`u64`, little-endian) |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Payload {
    pub(crate) ipc: [u8; 64],
    pub(crate) base_size: u64,
    pub(crate) buffer_id: u64,
}

impl Payload {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(PAYLOAD_LEN);
        b.push(PAYLOAD_VERSION);
        b.extend_from_slice(&self.ipc);
        b.extend_from_slice(&self.base_size.to_le_bytes());
        b.extend_from_slice(&self.buffer_id.to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Payload> {
        if b.len() != PAYLOAD_LEN {
            return Err(Error::malformed_payload(format!(
                "a CUDA memory payload is {PAYLOAD_LEN} bytes, this one {}",
                b.len()
            )));
        }
        if b[0] != PAYLOAD_VERSION {
            return Err(Error::malformed_payload(format!(
                "CUDA memory payload version {} (this build reads {PAYLOAD_VERSION})",
                b[0]
            )));
        }
        let mut ipc = [0u8; 64];
        ipc.copy_from_slice(&b[1..65]);
        let mut size = [0u8; 8];
        size.copy_from_slice(&b[65..73]);
        let mut id = [0u8; 8];
        id.copy_from_slice(&b[73..81]);
        Ok(Payload {
            ipc,
            base_size: u64::from_le_bytes(size),
            buffer_id: u64::from_le_bytes(id),
        })
    }
}

/// The allocation holding a device pointer, as legacy IPC names it.
pub(crate) struct Base {
    /// Its first byte.
    pub(crate) base: CUdeviceptr,
    /// Its size in bytes.
    pub(crate) size: u64,
    /// The driver's 64-byte handle of the base.
    pub(crate) ipc: [u8; 64],
    /// `CU_POINTER_ATTRIBUTE_BUFFER_ID`.
    pub(crate) buffer_id: u64,
}

/// The base, size, IPC handle and buffer id of the allocation holding
/// `ptr` (`cuMemGetAddressRange_v2`, `cuIpcGetMemHandle`,
/// `cuPointerGetAttribute`).
pub(crate) fn base_of(primary: &Primary, ptr: CUdeviceptr) -> Result<Base> {
    let driver = &primary.driver;
    let _ctx = primary.enter()?;
    let (base, size) = mem::address_range(driver, ptr)?;
    let ipc = ipc::get_mem_handle(driver, base)?;
    Ok(Base {
        base,
        size,
        ipc,
        buffer_id: mem::attribute_u64(driver, POINTER_ATTRIBUTE_BUFFER_ID, base)?,
    })
}

/// What a memory handle of device `info` says of itself.
pub(crate) fn memory_spec(info: &DeviceInfo) -> HandleSpec {
    HandleSpec {
        kind: HandleKind::Memory,
        backend: BackendId::Cuda,
        device: info.ordinal,
        device_uuid: info.uuid,
        location: Location::Device(info.ordinal),
        default_allow_list: false,
    }
}

/// The error of a handle's range that leaves its allocation of `size` bytes.
pub(crate) fn out_of_range(offset: u64, len: u64, size: u64, whose: &str) -> Error {
    HandleError::Malformed {
        field: "size",
        detail: format!("range {offset:#x}+{len:#x} of a {size:#x}-byte allocation{whose}"),
    }
    .into()
}

/// Refuse memory that legacy IPC cannot export: managed and pinned host
/// memory (`cuIpcGetMemHandle` answers `CUDA_ERROR_INVALID_VALUE` for
/// both, measured for managed memory).
pub(crate) fn exportable(alloc: &CudaAllocation) -> Result<()> {
    match alloc.location {
        Location::Managed => Err(Error::unsupported(
            "cuda",
            "export managed memory",
            "CUDA cannot export managed memory (cuIpcGetMemHandle answers \
             CUDA_ERROR_INVALID_VALUE); share it with the cuda-uvm backend",
        )),
        Location::Host => Err(Error::unsupported(
            "cuda",
            "export pinned host memory",
            "legacy CUDA IPC exports device memory only (cuIpcGetMemHandle answers \
             CUDA_ERROR_INVALID_VALUE for cuMemAllocHost memory)",
        )),
        _ => Ok(()),
    }
}

/// Export `alloc` as [`Device::export_memory`](hal_core::Device::export_memory) does.
pub(crate) fn export(
    primary: &Primary,
    info: &DeviceInfo,
    alloc: &CudaAllocation,
    opts: &ExportOptions,
) -> Result<Exported> {
    exportable(alloc)?;
    opts.refuse_read_only("cuda", "memory", "legacy CUDA IPC maps imports read-write")?;
    opts.importers.refuse_same_user("cuda", "a CUDA IPC handle is opened by whoever holds its bytes: no broker checks the importer's user")?;
    if matches!(opts.importers, Importers::Pids(_)) {
        return Err(Error::unsupported(
            "cuda",
            "an export to a pid list",
            "CUDA keeps no allow-list of importers: export to anyone \
             (Capabilities::PID_ALLOW_LIST is absent)",
        ));
    }
    let range = opts.range.unwrap_or(ByteRange::new(0, alloc.len));
    range.check(alloc.len, 0)?;
    let page = info.page_size();
    if (alloc.ptr + range.offset) % page != 0 || range.len % page != 0 {
        return Err(Error::Misaligned {
            offset: range.offset,
            len: range.len,
            page_size: page,
        });
    }
    let Base {
        base,
        size,
        ipc,
        buffer_id,
    } = base_of(primary, alloc.ptr)?;
    let exports = alloc.exports(buffer_id, base)?;
    let spec = memory_spec(info);
    let mut handle = new_handle(&spec, opts)?;
    handle.offset = alloc.ptr - base + range.offset;
    handle.size = range.len;
    handle.payload = Payload {
        ipc,
        base_size: size,
        buffer_id,
    }
    .encode();
    Exported::with_leases(handle, Vec::new(), Arc::clone(&exports.leases))
}

/// What names one open of an allocation in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    /// A hal handle: who exported the allocation (pid, start time, pid
    /// namespace), its buffer id, and the device it is opened on.
    Hal(u32, u64, u64, u64, CUdevice),
    /// A raw handle of another library: its 64 bytes, and the device.
    Raw([u8; 64], CUdevice),
}

impl Key {
    fn device(&self) -> CUdevice {
        match *self {
            Key::Hal(.., d) | Key::Raw(_, d) => d,
        }
    }
}

fn cache() -> &'static Mutex<HashMap<Key, Weak<Opened>>> {
    static CACHE: OnceLock<Mutex<HashMap<Key, Weak<Opened>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// How many exported allocations this process holds open on `device`.
pub(crate) fn open_count(device: CUdevice) -> usize {
    lock(cache())
        .iter()
        .filter(|(k, w)| k.device() == device && w.strong_count() > 0)
        .count()
}

/// One `cuIpcOpenMemHandle_v2(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)` of
/// `handle` in `primary`'s context, closed when the value drops.
pub(crate) fn open_bare(primary: &Arc<Primary>, handle: &[u8; 64]) -> Result<Opened> {
    let _ctx = primary.enter()?;
    let base = ipc::open_mem_handle(&primary.driver, handle, LAZY_ENABLE_PEER_ACCESS)?;
    Ok(Opened {
        primary: Arc::clone(primary),
        base,
        size: 0,
        _lease: None,
    })
}

/// The open of `key` this process holds already, if any.
pub(crate) fn cached(key: &Key) -> Option<Arc<Opened>> {
    lock(cache()).get(key).and_then(Weak::upgrade)
}

/// The shared open of the allocation whose driver handle is `ipc`,
/// opening it on first use (holding `lease` with it, if given; a lease
/// taken for an open that another thread made first is given back).
pub(crate) fn open(
    primary: &Arc<Primary>,
    key: Key,
    ipc: &[u8; 64],
    lease: Option<Lease>,
) -> Result<Arc<Opened>> {
    let mut cache = lock(cache());
    if let Some(o) = cache.get(&key).and_then(Weak::upgrade) {
        return Ok(o);
    }
    cache.retain(|_, w| w.strong_count() > 0);
    let mut opened = open_bare(primary, ipc)?;
    opened.size = {
        let _ctx = primary.enter()?;
        mem::address_range(&primary.driver, opened.base)?.1
    };
    opened._lease = lease;
    let opened = Arc::new(opened);
    cache.insert(key, Arc::downgrade(&opened));
    Ok(opened)
}

/// Import as [`Device::import_memory`](hal_core::Device::import_memory) does.
pub(crate) fn import(
    primary: &Arc<Primary>,
    info: &DeviceInfo,
    mut shared: SharedHandle,
    opts: &ImportOptions,
) -> Result<CudaMapping> {
    shared.handle.expect(HandleKind::Memory, BackendId::Cuda)?;
    let handle = shared.handle.clone();
    opts.refuse_unplaceable("cuda", "cuIpcOpenMemHandle_v2", info.ordinal)?;
    // The memory's device, when it is not this one: found by UUID (this
    // process may number the devices otherwise), and reachable.
    let source = if handle.device_uuid == info.uuid {
        None
    } else if !opts.peer_access {
        return Err(Error::invalid(format!(
            "the memory is on the device with UUID {} (ordinal {} of the exporter), not on \
             device {}: import it through that device, or ask for peer access",
            hal_core::kit::os::hex(&handle.device_uuid),
            handle.device,
            info.ordinal
        )));
    } else {
        let source = peer::device_of_uuid(&primary.driver, &handle.device_uuid)?;
        if let Some(src) = source {
            peer::check(&primary.driver, primary.device, src)?;
        }
        Some(source)
    };
    let payload = Payload::decode(&handle.payload)?;
    let end = handle.offset.checked_add(handle.size);
    if end.is_none_or(|e| e > payload.base_size) || handle.size == 0 {
        return Err(out_of_range(
            handle.offset,
            handle.size,
            payload.base_size,
            "",
        ));
    }
    let key = Key::Hal(
        handle.creator_pid,
        handle.creator_start,
        handle.creator_pid_ns,
        payload.buffer_id,
        primary.device,
    );
    // A range of an allocation this process holds open costs a lookup
    // (looked up first: only other processes' allocations are in the
    // cache): the open and the process's lease are shared.
    let hit = cached(&key);
    let (addr, open, peer, lease) = if hit.is_none() && handle.is_own() {
        let taken = take_fds_leased(&mut shared)?;
        let base = own_base(payload.buffer_id).ok_or_else(|| Error::NotFound {
            what: "the exported allocation was freed".into(),
        })?;
        let peer = match source {
            // This process's memory of another device: reached once this
            // device's context may access it.
            Some(Some(src)) => Some(peer::enable(primary, src)?),
            Some(None) => {
                return Err(Error::NotFound {
                    what: format!(
                        "this process's device with UUID {}",
                        hal_core::kit::os::hex(&handle.device_uuid)
                    ),
                })
            }
            None => None,
        };
        (base + handle.offset, None, peer, taken.lease)
    } else {
        // On a miss the lease is taken from the exporter's broker, then the
        // 64 bytes are opened in this device's context (with another
        // device's memory, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS lets this
        // device reach it).
        let opened = match hit {
            Some(o) => o,
            None => {
                let taken = take_fds_leased(&mut shared)?;
                open(primary, key, &payload.ipc, taken.lease)?
            }
        };
        // The range is checked against the allocation the driver opened,
        // not only against what the handle claims.
        if handle.offset + handle.size > opened.size {
            return Err(out_of_range(
                handle.offset,
                handle.size,
                opened.size,
                " (as the driver opened it)",
            ));
        }
        (opened.base + handle.offset, Some(opened), None, None)
    };
    Ok(CudaMapping {
        primary: Arc::clone(primary),
        handle,
        addr,
        len: shared.handle.size,
        ordinal: info.ordinal,
        open,
        _peer: peer,
        _lease: lease,
    })
}

/// One `cuIpcOpenMemHandle_v2` in this process, shared by the mappings of
/// every range of one exported allocation; closed when the last drops.
///
/// The process's lease on the exporter's allocation goes with it: one per
/// process and allocation, however many ranges are imported, given back
/// after the close (fields drop after `drop` runs).
pub(crate) struct Opened {
    pub(crate) primary: Arc<Primary>,
    pub(crate) base: CUdeviceptr,
    /// The allocation's size as the driver reports it after the open
    /// (`cuMemGetAddressRange_v2`); 0 for a bare open, which does not ask.
    pub(crate) size: u64,
    pub(crate) _lease: Option<Lease>,
}

impl Drop for Opened {
    fn drop(&mut self) {
        if self.primary.forked() {
            // A forked child: the context is the parent's; leave it be.
            return;
        }
        // `base` came from cuIpcOpenMemHandle_v2 and is closed once, by its
        // one owner.
        let closed = self
            .primary
            .enter()
            .and_then(|_ctx| ipc::close_mem_handle(&self.primary.driver, self.base));
        if let Err(e) = closed {
            log::warn!("closing imported CUDA memory at {:#x}: {e}", self.base);
        }
    }
}

/// Device memory imported from an export (`Device::import_memory`).
///
/// Imports of one allocation in one process share one
/// `cuIpcOpenMemHandle_v2`; the last mapping to drop closes it
/// (`cuIpcCloseMemHandle`, with the context pushed) and then gives its
/// lease back, so the exporter counts this process until its memory is no
/// longer mapped here.
#[must_use = "the import is closed and its lease released when this value drops"]
pub struct CudaMapping {
    pub(crate) primary: Arc<Primary>,
    pub(crate) handle: Handle,
    /// The first byte of the imported range.
    pub(crate) addr: CUdeviceptr,
    pub(crate) len: u64,
    pub(crate) ordinal: u32,
    /// The shared open; `None` for this process's own export, which is
    /// the original memory.
    pub(crate) open: Option<Arc<Opened>>,
    /// For this process's own memory of another device: that device's
    /// primary context, retained while peer access to it is used.
    pub(crate) _peer: Option<Arc<Primary>>,
    /// Declared after `open`: fields drop in order, so the lease goes
    /// back only once the memory is closed.
    pub(crate) _lease: Option<Lease>,
}

impl std::fmt::Debug for CudaMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaMapping")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("device", &self.ordinal)
            .field("same_process", &self.open.is_none())
            .finish()
    }
}

impl Memory for CudaMapping {
    fn addr(&self) -> u64 {
        self.addr
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn location(&self) -> Location {
        Location::Device(self.ordinal)
    }

    fn host_ptr(&self) -> Option<*mut u8> {
        None
    }

    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        copy_out(&self.primary, self.addr, self.len, offset, dst)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        copy_in(&self.primary, self.addr, self.len, offset, src)
    }
}

impl Mapping for CudaMapping {
    fn handle(&self) -> &Handle {
        &self.handle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_refuse_other_layouts() {
        let p = Payload {
            ipc: [3; 64],
            base_size: 1 << 20,
            buffer_id: 42,
        };
        let b = p.encode();
        assert_eq!(b.len(), PAYLOAD_LEN);
        assert_eq!(Payload::decode(&b).unwrap(), p);
        assert!(Payload::decode(&b[1..]).is_err());
        let mut v = b.clone();
        v[0] = 2;
        assert!(Payload::decode(&v).is_err());
    }
}
