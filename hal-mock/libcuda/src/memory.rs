//! Allocation, freeing, address ranges and synchronous copies.

use std::ffi::{c_uint, c_void};
use std::sync::Arc;

use cudarc::driver::sys::{CUdeviceptr, CUresult};
use hal_core::kit::vendor::{cuda, Code};
use hal_core::{AllocDesc, Device, Memory, Reservation};

use crate::abi::{guard, non_null, put};
use crate::context::current;
use crate::error::sim;
use crate::state::{driver, lock, Block, Driver, Kind, Mem};
use crate::view::NoAccess;
use crate::vmm_table::vmm;

/// `CU_MEM_ATTACH_GLOBAL`.
const ATTACH_GLOBAL: c_uint = 1;
/// `CU_MEM_ATTACH_HOST`.
const ATTACH_HOST: c_uint = 2;

/// Allocate `size` bytes of `kind` in the current context and note the
/// allocation; its address.
fn allocate(d: &Driver, size: usize, kind: Kind) -> Result<u64, Code> {
    let ordinal = current(d)?;
    let size = u64::try_from(size).map_err(|_| cuda::INVALID_VALUE)?;
    if size == 0 {
        return Err(cuda::INVALID_VALUE);
    }
    let desc = match kind {
        Kind::Device => AllocDesc::device(ordinal, size),
        Kind::Host => AllocDesc::host(size),
        Kind::Managed => AllocDesc::managed(size),
        Kind::Imported | Kind::Registered => return Err(cuda::INVALID_VALUE),
    };
    let alloc = sim(d.devices[ordinal as usize].device.allocate(&desc))?;
    // Device memory is handed out at a no-access address: the host cannot
    // touch it. Pinned and managed memory are host memory.
    let view = match kind {
        Kind::Device => Some(NoAccess::reserve(size)?),
        _ => None,
    };
    let addr = view.as_ref().map_or_else(|| alloc.addr(), NoAccess::addr);
    let block = Block {
        alloc: Mem::Alloc(Arc::new(alloc)),
        ordinal,
        kind,
        buffer_id: d.new_buffer_id(),
        ipc: None,
        _view: view,
    };
    lock(&d.memory).insert(addr, block);
    Ok(addr)
}

/// Free the allocation at `addr` if it is the base of one of `kinds`;
/// `CUDA_ERROR_INVALID_VALUE` otherwise.
/// With [`crate::switches::free_synchronizes`] (the default), first waits
/// for the work queued on the allocation's device, as driver 580 did.
fn free(d: &Driver, addr: u64, kinds: &[Kind]) -> Result<(), Code> {
    if crate::switches::free_synchronizes() {
        let ordinal = match lock(&d.memory).get(&addr) {
            Some(b) if kinds.contains(&b.kind) => b.ordinal,
            _ => return Err(cuda::INVALID_VALUE),
        };
        // Outside the memory table's lock: the queued work may use it. The
        // driver is held meanwhile (`held.rs`).
        let _held = crate::held::hold();
        sim(d.devices[ordinal as usize].device.synchronize_device(None))?;
    }
    current(d)?;
    let block = {
        let mut memory = lock(&d.memory);
        match memory.get(&addr) {
            Some(b) if kinds.contains(&b.kind) => memory.remove(&addr),
            _ => None,
        }
    };
    // Dropped outside the lock; queued stream work keeps its own reference.
    block.map(drop).ok_or(cuda::INVALID_VALUE)
}

/// Allocates device memory in the current context.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult {
    guard("cuMemAlloc_v2", || {
        let d = driver()?;
        current(d)?;
        non_null(dptr)?;
        let addr = allocate(d, bytesize, Kind::Device)?;
        // SAFETY: `dptr` is not null and valid for a write (the caller's contract).
        unsafe { put(dptr, addr) }
    })
}

/// Frees device or managed memory given by its base address.
#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    guard("cuMemFree_v2", || {
        free(driver()?, dptr, &[Kind::Device, Kind::Managed])
    })
}

/// Allocates pinned host memory in the current context.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytesize: usize) -> CUresult {
    guard("cuMemAllocHost_v2", || {
        let d = driver()?;
        current(d)?;
        non_null(pp)?;
        let addr = allocate(d, bytesize, Kind::Host)?;
        let ptr = std::ptr::with_exposed_provenance_mut::<c_void>(
            usize::try_from(addr).map_err(|_| cuda::UNKNOWN)?,
        );
        // SAFETY: `pp` is not null and valid for a write (the caller's contract).
        unsafe { put(pp, ptr) }
    })
}

/// Frees pinned host memory given by its base address.
#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    guard("cuMemFreeHost", || {
        free(driver()?, p.addr() as u64, &[Kind::Host])
    })
}

/// Allocates managed memory (`flags`: `CU_MEM_ATTACH_GLOBAL` or `_HOST`).
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    flags: c_uint,
) -> CUresult {
    guard("cuMemAllocManaged", || {
        let d = driver()?;
        current(d)?;
        non_null(dptr)?;
        if flags != ATTACH_GLOBAL && flags != ATTACH_HOST {
            return Err(cuda::INVALID_VALUE);
        }
        let addr = allocate(d, bytesize, Kind::Managed)?;
        // SAFETY: `dptr` is not null and valid for a write (the caller's contract).
        unsafe { put(dptr, addr) }
    })
}

/// Gives the base and size of the allocation holding `dptr` (either output
/// may be null); `CUDA_ERROR_NOT_FOUND` when none holds it.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(
    pbase: *mut CUdeviceptr,
    psize: *mut usize,
    dptr: CUdeviceptr,
) -> CUresult {
    guard("cuMemGetAddressRange_v2", || {
        let d = driver()?;
        current(d)?;
        let found = d.find(dptr, 0).map_err(|_| cuda::NOT_FOUND)?;
        let size = usize::try_from(found.alloc.len()).map_err(|_| cuda::UNKNOWN)?;
        if !pbase.is_null() {
            // SAFETY: not null, and valid for a write (the caller's contract).
            unsafe { put(pbase, found.base)? };
        }
        if !psize.is_null() {
            // SAFETY: not null, and valid for a write (the caller's contract).
            unsafe { put(psize, size)? };
        }
        Ok(())
    })
}

/// The checks every synchronous copy makes: a current context, and the
/// context's earlier work done; `None` when there is nothing to copy.
fn before_copy(d: &Driver, n: usize) -> Result<Option<u64>, Code> {
    let ordinal = current(d)?;
    if n == 0 {
        return Ok(None);
    }
    d.sync_blocking(ordinal)?;
    u64::try_from(n).map(Some).map_err(|_| cuda::INVALID_VALUE)
}

/// Write `bytes` at `ptr`: into an allocation, or into a mapped part of a
/// reservation that its device may write (`CUDA_ERROR_INVALID_VALUE`
/// otherwise, where a driver's copy would fault).
fn write_at(d: &Driver, ptr: u64, bytes: &[u8]) -> Result<(), Code> {
    let len = bytes.len() as u64;
    match d.find(ptr, len) {
        Ok(to) => sim(to.alloc.write(to.offset, bytes)),
        Err(e) => match vmm().find(ptr, len) {
            Ok(at) => sim(at.res.write(at.offset, bytes)),
            Err(_) => Err(e),
        },
    }
}

/// Read `bytes.len()` bytes at `ptr`, as [`write_at`] writes.
fn read_at(d: &Driver, ptr: u64, bytes: &mut [u8]) -> Result<(), Code> {
    let len = bytes.len() as u64;
    match d.find(ptr, len) {
        Ok(from) => sim(from.alloc.read(from.offset, bytes)),
        Err(e) => match vmm().find(ptr, len) {
            Ok(at) => sim(at.res.read(at.offset, bytes)),
            Err(_) => Err(e),
        },
    }
}

/// Copies `n` bytes from host memory to device memory.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
) -> CUresult {
    guard("cuMemcpyHtoD_v2", || {
        let d = driver()?;
        let Some(len) = before_copy(d, n)? else {
            return Ok(());
        };
        non_null(src.cast_mut())?;
        debug_assert_eq!(len, n as u64);
        // SAFETY: `src` is not null and readable for `n` bytes (the caller's contract).
        let bytes = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), n) };
        // Staged, not landed (`staged.rs`): the destination is checked and
        // written now, so that a refusal is answered here, then given back
        // its old bytes until this process calls the driver again.
        let mut old = vec![0; n];
        if read_at(d, dst, &mut old).is_err() {
            return write_at(d, dst, bytes);
        }
        write_at(d, dst, bytes)?;
        write_at(d, dst, &old)?;
        let new = bytes.to_vec();
        crate::staged::stage(Box::new(move || {
            // Checked and written once already; a free since then was an
            // entry point, which landed this copy before it ran.
            let _ = write_at(d, dst, &new);
        }));
        Ok(())
    })
}

/// Copies `n` bytes from device memory to host memory.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) -> CUresult {
    guard("cuMemcpyDtoH_v2", || {
        let d = driver()?;
        let Some(len) = before_copy(d, n)? else {
            return Ok(());
        };
        non_null(dst)?;
        debug_assert_eq!(len, n as u64);
        // SAFETY: `dst` is not null and writable for `n` bytes (the caller's
        // contract), and nothing else in this call refers to them.
        let bytes = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), n) };
        read_at(d, src, bytes)
    })
}

/// Copies `n` bytes between device memory (the ranges may overlap).
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CUresult {
    guard("cuMemcpyDtoD_v2", || {
        let d = driver()?;
        if before_copy(d, n)?.is_none() {
            return Ok(());
        }
        let mut bytes = vec![0u8; n];
        read_at(d, src, &mut bytes)?;
        write_at(d, dst, &bytes)
    })
}
