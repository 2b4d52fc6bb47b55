//! Legacy IPC of device memory: `cuIpcGetMemHandle`,
//! `cuIpcOpenMemHandle_v2`, `cuIpcCloseMemHandle`, and the buffer id of
//! `cuPointerGetAttribute`, answering as driver 580 does (`vendor/cuda.md`,
//! "Measured on an H200").
//!
//! # How 64 bytes reach another process's memory
//!
//! The first `cuIpcGetMemHandle` of an allocation exports it with the
//! simulator (`MockDevice::driver_export_memory`, open to anyone), writes
//! that export's handle text into a small sealed memfd, the *envelope*, and
//! registers the envelope with this process's descriptor broker
//! (`hal_core::Exported`). Both exports live as long as the allocation.
//! The 64 bytes name the envelope; another process's stand-in (the same
//! build) rebuilds the envelope's handle from them, fetches its descriptor
//! from the broker (`hal_core::exchange::take_fds`), reads and decodes the
//! text, and opens the memory with the simulator.
//!
//! | bytes | field |
//! | ---: | --- |
//! | 0..4 | magic `HLCI` |
//! | 4 | version, 1 |
//! | 5..8 | zero |
//! | 8..12 | the exporter's pid (`u32`, little-endian, as everywhere here) |
//! | 12..20 | the exporter's start time, clock ticks since boot |
//! | 20..28 | the exporter's pid namespace (inode of `/proc/self/ns/pid`) |
//! | 28..36 | the broker's name: `hal-<pid>-<these 8 bytes in hex>` |
//! | 36..52 | the envelope's object id |
//! | 52..60 | the allocation's buffer id |
//! | 60..64 | FNV-1a (32 bits) of bytes 0..60 |
//!
//! As the driver: a handle taken on a pointer inside an allocation is the
//! base's (the offset is not in it); opening in the exporting process is
//! `CUDA_ERROR_INVALID_CONTEXT`; a second open of one handle in a process
//! returns the same pointer and needs a second close; managed and pinned
//! host memory are `CUDA_ERROR_INVALID_VALUE`, and so is closing a pointer
//! that was not opened.

use std::ffi::{c_int, c_uint, c_void};
use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt as _;
use std::sync::Arc;

use cudarc::driver::sys::{CUdeviceptr, CUipcMemHandle, CUresult};
use hal_core::export::{new_handle, HandleSpec};
use hal_core::vendor::{cuda, Code};
use hal_core::{
    os, BackendId, Device, ExportOptions, Exported, FdSource, Handle, HandleKind, ImportOptions,
    Importers, Location, Memory, SharedHandle,
};

use crate::abi::{guard, non_null, put};
use crate::context::current;
use crate::error::sim;
use crate::ipc_table::{IpcExport, Opened};
use crate::state::{driver, lock, Block, Driver, Kind, Mem};

/// The first bytes of a stand-in IPC handle.
const MAGIC: [u8; 4] = *b"HLCI";
/// The layout's version.
const VERSION: u8 = 1;
/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.
const LAZY_ENABLE_PEER_ACCESS: c_uint = 1;
/// `CU_POINTER_ATTRIBUTE_BUFFER_ID`.
const POINTER_ATTRIBUTE_BUFFER_ID: c_int = 7;
/// The most bytes an envelope holds (a handle's text is far shorter).
const MAX_ENVELOPE: u64 = 4096;

/// What the 64 bytes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Wire {
    pid: u32,
    start: u64,
    pid_ns: u64,
    broker: [u8; 8],
    object_id: [u8; 16],
    buffer_id: u64,
}

/// FNV-1a, 32 bits.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

impl Wire {
    fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b[12..20].copy_from_slice(&self.start.to_le_bytes());
        b[20..28].copy_from_slice(&self.pid_ns.to_le_bytes());
        b[28..36].copy_from_slice(&self.broker);
        b[36..52].copy_from_slice(&self.object_id);
        b[52..60].copy_from_slice(&self.buffer_id.to_le_bytes());
        let sum = fnv1a(&b[..60]);
        b[60..64].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// The fields of `b`; `CUDA_ERROR_INVALID_VALUE` for bytes this layout
    /// did not write.
    fn decode(b: &[u8; 64]) -> Result<Wire, Code> {
        let u64_at = |i: usize| {
            let mut v = [0u8; 8];
            v.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(v)
        };
        let mut sum = [0u8; 4];
        sum.copy_from_slice(&b[60..64]);
        if b[0..4] != MAGIC
            || b[4] != VERSION
            || b[5..8] != [0; 3]
            || u32::from_le_bytes(sum) != fnv1a(&b[..60])
        {
            return Err(cuda::INVALID_VALUE);
        }
        let mut pid = [0u8; 4];
        pid.copy_from_slice(&b[8..12]);
        let mut broker = [0u8; 8];
        broker.copy_from_slice(&b[28..36]);
        let mut object_id = [0u8; 16];
        object_id.copy_from_slice(&b[36..52]);
        Ok(Wire {
            pid: u32::from_le_bytes(pid),
            start: u64_at(12),
            pid_ns: u64_at(20),
            broker,
            object_id,
            buffer_id: u64_at(52),
        })
    }

    /// The broker's name.
    fn broker_name(&self) -> String {
        format!("hal-{}-{}", self.pid, os::hex(&self.broker))
    }

    /// The envelope's handle, as the exporter's broker needs it: the
    /// object id, the broker, and the creator it checks the broker against.
    fn envelope_handle(&self) -> Handle {
        Handle {
            kind: HandleKind::Memory,
            backend: BackendId::MockCuda,
            device: 0,
            device_uuid: [0; 16],
            location: Location::Host,
            size: 0,
            offset: 0,
            address: 0,
            creator_pid: self.pid,
            creator_start: self.start,
            creator_pid_ns: self.pid_ns,
            object_id: self.object_id,
            flags: hal_core::HandleFlags::ANY_IMPORTER,
            pid_kind: hal_core::PidKind::Os,
            allowed_pids: Vec::new(),
            fds: FdSource::Broker {
                count: 1,
                name: self.broker_name(),
            },
            payload: Vec::new(),
        }
    }
}

/// The 8 bytes of a broker name `hal-<pid>-<16 hex digits>`.
fn broker_suffix(name: &str, pid: u32) -> Option<[u8; 8]> {
    let hex = name.strip_prefix(&format!("hal-{pid}-"))?;
    if hex.len() != 16 {
        return None;
    }
    let mut out = [0u8; 8];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A sealed memfd holding `text`.
fn envelope_fd(text: &str) -> Result<OwnedFd, Code> {
    let fd = sim(os::memfd("hal-libcuda-ipc", 0, None))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(text.as_bytes())
        .map_err(|_| cuda::OUT_OF_MEMORY)?;
    let fd = OwnedFd::from(file);
    sim(os::add_seals(
        fd.as_fd(),
        libc_seals::SEAL | libc_seals::SHRINK | libc_seals::GROW | libc_seals::WRITE,
    ))?;
    Ok(fd)
}

/// The `F_SEAL_*` bits (`fcntl.h`).
mod libc_seals {
    pub(super) const SEAL: i32 = 0x0001;
    pub(super) const SHRINK: i32 = 0x0002;
    pub(super) const GROW: i32 = 0x0004;
    pub(super) const WRITE: i32 = 0x0008;
}

/// The text an envelope holds.
fn read_envelope(fd: OwnedFd) -> Result<String, Code> {
    let file = std::fs::File::from(fd);
    let len = file.metadata().map_err(|_| cuda::INVALID_VALUE)?.len();
    if len > MAX_ENVELOPE {
        return Err(cuda::INVALID_VALUE);
    }
    let mut buf = vec![0u8; usize::try_from(len).map_err(|_| cuda::INVALID_VALUE)?];
    file.read_exact_at(&mut buf, 0)
        .map_err(|_| cuda::INVALID_VALUE)?;
    String::from_utf8(buf).map_err(|_| cuda::INVALID_VALUE)
}

/// Export the allocation of `block` (at `base`) and register its envelope.
fn export(d: &Driver, block: &Block) -> Result<IpcExport, Code> {
    let Mem::Alloc(alloc) = &block.alloc else {
        return Err(cuda::INVALID_VALUE);
    };
    let device = &d.devices[block.ordinal as usize].device;
    let opts = ExportOptions {
        importers: Importers::Anyone,
        ..ExportOptions::default()
    };
    let memory = sim(device.driver_export_memory(alloc, &opts))?;
    let text = memory.to_text();
    let spec = HandleSpec {
        kind: HandleKind::Memory,
        backend: BackendId::MockCuda,
        device: block.ordinal,
        device_uuid: device.info().uuid,
        location: Location::Host,
        default_allow_list: false,
    };
    let mut handle = sim(new_handle(&spec, &opts))?;
    handle.size = text.len() as u64;
    let envelope = sim(Exported::new(handle, vec![envelope_fd(&text)?]))?;
    let h = envelope.handle();
    // Without a broker (sockets forbidden) the envelope cannot be fetched.
    let FdSource::Broker { name, .. } = &h.fds else {
        return Err(cuda::UNKNOWN);
    };
    let broker = broker_suffix(name, h.creator_pid).ok_or(cuda::UNKNOWN)?;
    let wire = Wire {
        pid: h.creator_pid,
        start: h.creator_start,
        pid_ns: h.creator_pid_ns,
        broker,
        object_id: h.object_id,
        buffer_id: block.buffer_id,
    };
    Ok(IpcExport {
        bytes: wire.encode(),
        _memory: memory,
        _envelope: envelope,
    })
}

/// `cuIpcGetMemHandle` of `ptr`: the 64 bytes of its allocation.
fn get(d: &Driver, ptr: u64) -> Result<[u8; 64], Code> {
    current(d)?;
    let mut memory = lock(&d.memory);
    let (&base, block) = memory
        .range_mut(..=ptr)
        .next_back()
        .ok_or(cuda::INVALID_VALUE)?;
    if ptr - base >= block.alloc.len() || block.kind != Kind::Device {
        return Err(cuda::INVALID_VALUE);
    }
    if let Some(e) = &block.ipc {
        return Ok(e.bytes);
    }
    let made = export(d, block)?;
    let bytes = made.bytes;
    block.ipc = Some(made);
    Ok(bytes)
}

/// `cuIpcOpenMemHandle_v2`: the address of the memory `bytes` name.
fn open(d: &Driver, bytes: [u8; 64], flags: c_uint) -> Result<u64, Code> {
    let ordinal = current(d)?;
    let wire = Wire::decode(&bytes)?;
    if flags & !LAZY_ENABLE_PEER_ACCESS != 0 {
        return Err(cuda::INVALID_VALUE);
    }
    let (pid, start) = os::self_identity();
    if (wire.pid, wire.start, wire.pid_ns) == (pid, start, os::pid_namespace()) {
        // The driver refuses to open a handle of its own process (measured).
        return Err(cuda::INVALID_CONTEXT);
    }
    let mut opened = lock(&d.opened);
    if let Some(o) = opened.get_mut(&bytes) {
        o.refs = o.refs.checked_add(1).ok_or(cuda::UNKNOWN)?;
        return Ok(o.addr);
    }
    let mut envelope = SharedHandle::from(wire.envelope_handle());
    let fd = sim(hal_core::exchange::take_fds(&mut envelope))?
        .into_iter()
        .next()
        .ok_or(cuda::INVALID_VALUE)?;
    let inner = Handle::from_text(&read_envelope(fd)?).map_err(|_| cuda::INVALID_VALUE)?;
    if inner.kind != HandleKind::Memory || inner.backend != BackendId::MockCuda {
        return Err(cuda::INVALID_VALUE);
    }
    let options = ImportOptions {
        device: Some(ordinal),
        peer_access: flags & LAZY_ENABLE_PEER_ACCESS != 0,
        ..ImportOptions::default()
    };
    let device = &d.devices[ordinal as usize].device;
    let mapping = sim(device.driver_open_memory(SharedHandle::from(inner), &options))?;
    let addr = mapping.addr();
    let buffer_id = d.new_buffer_id();
    lock(&d.memory).insert(
        addr,
        Block {
            alloc: Mem::Map(Arc::new(mapping)),
            ordinal,
            kind: Kind::Imported,
            buffer_id,
            ipc: None,
        },
    );
    opened.insert(
        bytes,
        Opened {
            addr,
            refs: 1,
            buffer_id,
        },
    );
    Ok(addr)
}

/// `cuIpcCloseMemHandle` of `ptr`: one open fewer; unmapped at the last.
fn close(d: &Driver, ptr: u64) -> Result<(), Code> {
    current(d)?;
    let mut opened = lock(&d.opened);
    let key = opened
        .iter()
        .find(|(_, o)| o.addr == ptr)
        .map(|(k, _)| *k)
        .ok_or(cuda::INVALID_VALUE)?;
    let Some(o) = opened.get_mut(&key) else {
        return Err(cuda::INVALID_VALUE);
    };
    o.refs -= 1;
    if o.refs > 0 {
        return Ok(());
    }
    opened.remove(&key);
    let block = lock(&d.memory).remove(&ptr);
    drop(opened);
    // Unmapped outside the locks; queued stream work keeps its own reference.
    drop(block);
    Ok(())
}

/// Gives the 64-byte IPC handle of the device allocation holding `dptr`
/// (the base's handle: the offset is not in it).
#[no_mangle]
pub unsafe extern "C" fn cuIpcGetMemHandle(
    handle: *mut CUipcMemHandle,
    dptr: CUdeviceptr,
) -> CUresult {
    guard(|| {
        let d = driver()?;
        current(d)?;
        non_null(handle)?;
        let bytes = get(d, dptr)?;
        let out = CUipcMemHandle {
            reserved: bytes.map(|b| b as _),
        };
        // SAFETY: `handle` is not null and valid for a write (the caller's contract).
        unsafe { put(handle, out) }
    })
}

/// Opens another process's device memory by its IPC handle, in the current
/// context (`flags`: 0 or `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`).
#[no_mangle]
pub unsafe extern "C" fn cuIpcOpenMemHandle_v2(
    pdptr: *mut CUdeviceptr,
    handle: CUipcMemHandle,
    flags: c_uint,
) -> CUresult {
    guard(|| {
        let d = driver()?;
        current(d)?;
        non_null(pdptr)?;
        let addr = open(d, handle.reserved.map(|b| b as u8), flags)?;
        // SAFETY: `pdptr` is not null and valid for a write (the caller's contract).
        unsafe { put(pdptr, addr) }
    })
}

/// Closes one open of an IPC handle, given the pointer the open returned.
#[no_mangle]
pub unsafe extern "C" fn cuIpcCloseMemHandle(dptr: CUdeviceptr) -> CUresult {
    guard(|| close(driver()?, dptr))
}

/// An attribute of the memory holding `ptr`: `CU_POINTER_ATTRIBUTE_BUFFER_ID`
/// (an `unsigned long long`, unique per allocation) is answered; other
/// attributes are `CUDA_ERROR_NOT_SUPPORTED` in this stand-in.
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: c_int,
    ptr: CUdeviceptr,
) -> CUresult {
    guard(|| {
        let d = driver()?;
        non_null(data)?;
        if attribute != POINTER_ATTRIBUTE_BUFFER_ID {
            return Err(cuda::NOT_SUPPORTED);
        }
        let memory = lock(&d.memory);
        let (&base, block) = memory
            .range(..=ptr)
            .next_back()
            .ok_or(cuda::INVALID_VALUE)?;
        if ptr - base >= block.alloc.len() {
            return Err(cuda::INVALID_VALUE);
        }
        let id = block.buffer_id;
        drop(memory);
        // SAFETY: `data` is not null and valid for a write of the
        // attribute's type, `unsigned long long` (the caller's contract).
        unsafe { put(data.cast::<u64>(), id) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire() -> Wire {
        Wire {
            pid: 4242,
            start: 99,
            pid_ns: 4026531836,
            broker: [1, 2, 3, 4, 5, 6, 7, 0xab],
            object_id: [9; 16],
            buffer_id: 17,
        }
    }

    #[test]
    fn the_64_bytes_round_trip_and_refuse_damage() {
        let w = wire();
        let b = w.encode();
        assert_eq!(Wire::decode(&b), Ok(w));
        for i in 0..64 {
            let mut bad = b;
            bad[i] ^= 0x40;
            assert_eq!(Wire::decode(&bad), Err(cuda::INVALID_VALUE), "byte {i}");
        }
        assert_eq!(Wire::decode(&[0; 64]), Err(cuda::INVALID_VALUE));
    }

    #[test]
    fn the_broker_name_round_trips() {
        let w = wire();
        assert_eq!(w.broker_name(), "hal-4242-01020304050607ab");
        assert_eq!(broker_suffix(&w.broker_name(), 4242), Some(w.broker));
        assert_eq!(broker_suffix("hal-4242-0102", 4242), None);
        assert_eq!(broker_suffix(&w.broker_name(), 4243), None);
        assert_eq!(broker_suffix("hal-4242-zz02030405060708", 4242), None);
    }
}
