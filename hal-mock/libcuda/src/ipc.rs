//! Legacy IPC of device memory: `cuIpcGetMemHandle`,
//! `cuIpcOpenMemHandle_v2`, `cuIpcCloseMemHandle`, and the buffer id of
//! `cuPointerGetAttribute`, answering as driver 580 does (`vendor/cuda.md`,
//! "Measured on an H200").
//!
//! The 64 bytes name an *envelope* holding the simulator export's handle
//! text (`envelope.rs`: the layout, and how another process opens it).
//!
//! As the driver: a handle taken on a pointer inside an allocation is the
//! base's (the offset is not in it); opening in the exporting process is
//! `CUDA_ERROR_INVALID_CONTEXT`; a second open of one handle in a process
//! returns the same pointer and needs a second close; managed and pinned
//! host memory are `CUDA_ERROR_INVALID_VALUE`, and so is closing a pointer
//! that was not opened.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::Arc;

use cudarc::driver::sys::{
    CUdeviceptr, CUipcMemHandle, CUmemorytype, CUpointer_attribute, CUresult,
};
use hal_core::kit::vendor::{cuda, Code};
use hal_core::{
    BackendId, Device, ExportOptions, HandleKind, ImportOptions, Importers, Memory, SharedHandle,
};

use crate::abi::{guard, non_null, put};
use crate::context::current;
use crate::envelope::{self, Names, Wire};
use crate::error::sim;
use crate::ipc_table::{IpcExport, Opened};
use crate::state::{driver, lock, Block, Driver, Kind, Mem};
use crate::view::NoAccess;

/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.
const LAZY_ENABLE_PEER_ACCESS: c_uint = 1;
/// `CU_POINTER_ATTRIBUTE_BUFFER_ID`.
const POINTER_ATTRIBUTE_BUFFER_ID: c_int =
    CUpointer_attribute::CU_POINTER_ATTRIBUTE_BUFFER_ID as c_int;
/// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`.
const POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int =
    CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL as c_int;
/// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`.
const POINTER_ATTRIBUTE_MEMORY_TYPE: c_int =
    CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE as c_int;
/// `CU_POINTER_ATTRIBUTE_IS_MANAGED`.
const POINTER_ATTRIBUTE_IS_MANAGED: c_int =
    CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED as c_int;

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
    let (envelope, bytes) = envelope::seal(&memory.to_text(), Names::Memory, block.buffer_id)?;
    Ok(IpcExport {
        bytes,
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
    if wire.names != Names::Memory || flags & !LAZY_ENABLE_PEER_ACCESS != 0 {
        return Err(cuda::INVALID_VALUE);
    }
    if wire.is_own() {
        // The driver refuses to open a handle of its own process (measured).
        return Err(cuda::INVALID_CONTEXT);
    }
    let mut opened = lock(&d.opened);
    // Opens are counted per context (device), as the driver keeps them.
    if let Some(o) = opened.get_mut(&(bytes, ordinal)) {
        o.refs = o.refs.checked_add(1).ok_or(cuda::UNKNOWN)?;
        return Ok(o.addr);
    }
    let inner = envelope::open(&wire)?;
    if inner.kind != HandleKind::Memory || inner.backend != BackendId::MockCuda {
        return Err(cuda::INVALID_VALUE);
    }
    if let Some(source) = d
        .devices
        .iter()
        .position(|dv| dv.device.info().uuid == inner.device_uuid)
    {
        crate::peer::refuse_without_peer(ordinal, source as u32)?;
    }
    let options = ImportOptions {
        device: Some(ordinal),
        peer_access: flags & LAZY_ENABLE_PEER_ACCESS != 0,
        ..ImportOptions::default()
    };
    let device = &d.devices[ordinal as usize].device;
    let mapping = sim(device.driver_open_memory(SharedHandle::from(inner), &options))?;
    // Another process's device memory is device memory here too.
    let view = NoAccess::reserve(mapping.len())?;
    let addr = view.addr();
    let buffer_id = d.new_buffer_id();
    lock(&d.memory).insert(
        addr,
        Block {
            alloc: Mem::Map(Arc::new(mapping)),
            ordinal,
            kind: Kind::Imported,
            buffer_id,
            ipc: None,
            _view: Some(view),
        },
    );
    opened.insert(
        (bytes, ordinal),
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
    guard("cuIpcGetMemHandle", || {
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
    guard("cuIpcOpenMemHandle_v2", || {
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
    guard("cuIpcCloseMemHandle", || close(driver()?, dptr))
}

/// An attribute of the memory holding `ptr`, in the type cuda.h's
/// `CUpointer_attribute` documents: `CU_POINTER_ATTRIBUTE_BUFFER_ID` (an
/// `unsigned long long`, unique per allocation), `_DEVICE_ORDINAL` (an
/// `int`: the device whose context made it), `_MEMORY_TYPE` (a
/// `CUmemorytype`: host for pinned host memory, device otherwise) and
/// `_IS_MANAGED` (written as a 4-byte `unsigned int`, 1 for
/// `cuMemAllocManaged` memory). Other attributes are
/// `CUDA_ERROR_NOT_SUPPORTED` in this stand-in.
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: c_int,
    ptr: CUdeviceptr,
) -> CUresult {
    guard("cuPointerGetAttribute", || {
        let d = driver()?;
        non_null(data)?;
        let answer = match attribute {
            POINTER_ATTRIBUTE_BUFFER_ID
            | POINTER_ATTRIBUTE_DEVICE_ORDINAL
            | POINTER_ATTRIBUTE_MEMORY_TYPE
            | POINTER_ATTRIBUTE_IS_MANAGED => attribute,
            _ => return Err(cuda::NOT_SUPPORTED),
        };
        let memory = lock(&d.memory);
        let (&base, block) = memory
            .range(..=ptr)
            .next_back()
            .ok_or(cuda::INVALID_VALUE)?;
        if ptr - base >= block.alloc.len() {
            return Err(cuda::INVALID_VALUE);
        }
        let (id, ordinal, kind) = (block.buffer_id, block.ordinal, block.kind);
        drop(memory);
        // The attribute's value, and whether it is the 8-byte buffer id
        // (the others are 4 bytes: an `int`, a `CUmemorytype`, a flag).
        let value: u64 = match answer {
            POINTER_ATTRIBUTE_BUFFER_ID => id,
            POINTER_ATTRIBUTE_DEVICE_ORDINAL => u64::from(ordinal),
            POINTER_ATTRIBUTE_MEMORY_TYPE => match kind {
                Kind::Host | Kind::Registered => CUmemorytype::CU_MEMORYTYPE_HOST as u64,
                _ => CUmemorytype::CU_MEMORYTYPE_DEVICE as u64,
            },
            _ => u64::from(kind == Kind::Managed),
        };
        if answer == POINTER_ATTRIBUTE_BUFFER_ID {
            // SAFETY: `data` is not null and valid for a write of the
            // attribute's type, `unsigned long long` (the caller's contract).
            unsafe { put(data.cast::<u64>(), value) }
        } else {
            let small = c_uint::try_from(value).map_err(|_| cuda::UNKNOWN)?;
            // SAFETY: `data` is not null and valid for a write of the
            // attribute's 4-byte type (the caller's contract).
            unsafe { put(data.cast::<c_uint>(), small) }
        }
    })
}
