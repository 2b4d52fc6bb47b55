//! VMM: physical allocations (`cuMemCreate`, `cuMemRelease`), address
//! reservations (`cuMemAddressReserve`, `cuMemAddressFree`), mappings and
//! their access (`cuMemMap`, `cuMemUnmap`, `cuMemSetAccess`), the
//! granularity, and POSIX shareable handles
//! (`cuMemExportToShareableHandle`, `cuMemImportFromShareableHandle`), on
//! the simulator's VMM.
//!
//! As driver 580 answers (`vendor/cuda.md`, measured on an H200):
//! - a fabric handle type is `CUDA_ERROR_NOT_PERMITTED` unless
//!   `HAL_MOCK_LIBCUDA_IMEX=1` says an IMEX daemon is present (see
//!   `switches.rs`); even then only POSIX descriptors are exported
//!   (`CUDA_ERROR_NOT_SUPPORTED` for a fabric export);
//! - exporting an allocation made without a requested handle type is
//!   `CUDA_ERROR_INVALID_VALUE`;
//! - host NUMA memory (`CU_MEM_LOCATION_TYPE_HOST_NUMA`) is created,
//!   mapped, exported and imported; `cuMemSetAccess` with a `HOST` or
//!   `HOST_NUMA` location makes it CPU-accessible, and is refused for
//!   device memory;
//! - a mapping has no access until `cuMemSetAccess`: copies through it are
//!   refused (`CUDA_ERROR_INVALID_VALUE`) instead of faulting;
//! - as the driver API says of `cuMemRelease`, device memory comes back
//!   only when the allocation's handle, the handles imported from it in
//!   this process and its mappings are all gone (the simulator counts it in
//!   the allocating process only).
//!
//! The POSIX handle is a descriptor of the memfd that holds the bytes, so
//! another process's stand-in imports the same memory from the descriptor
//! alone; the memfd's name says where the pages live.
//!
//! Limits: a reservation is the simulator's, a range of host address space
//! whose protection follows the reserving device's access, so unlike
//! `cuMemAlloc` memory a mapped, accessible VMM address can be read by the
//! host here; the stream-ordered copies do not reach reservations (the
//! synchronous `cuMemcpy*` do); `cuMemAddressReserve`'s address hint is
//! ignored; a fabric export is `CUDA_ERROR_NOT_SUPPORTED`.

use std::ffi::{c_int, c_uint, c_void};
use std::os::fd::{AsFd, BorrowedFd, IntoRawFd};
use std::sync::Arc;

use cudarc::driver::sys::{CUdeviceptr, CUmemGenericAllocationHandle, CUresult};
use hal_core::kit::vendor::cuda;
use hal_core::kit::vendor::Code;
use hal_core::{
    Access, AccessGrant, Granularity, PhysicalDesc, PhysicalLocation, Reservation, ShareableHandle,
    Vmm,
};

use crate::abi::{guard, non_null, put};
use crate::context::current;
use crate::error::sim;
use crate::state::{driver, lock, Driver};
use crate::switches;
use crate::vmm_table::{vmm, PhysEntry, ResEntry, HANDLE_FABRIC, HANDLE_POSIX_FD};

/// `CU_MEM_ALLOCATION_TYPE_PINNED`.
const ALLOCATION_PINNED: c_uint = 1;
/// `CU_MEM_LOCATION_TYPE_DEVICE`.
const LOCATION_DEVICE: c_uint = 1;
/// `CU_MEM_LOCATION_TYPE_HOST`.
const LOCATION_HOST: c_uint = 2;
/// `CU_MEM_LOCATION_TYPE_HOST_NUMA`.
const LOCATION_HOST_NUMA: c_uint = 3;

/// `CUmemLocation` as received: the type as its integer, so that any
/// value is answered (an unknown one in a Rust enum would be undefined).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemLocation {
    /// `CUmemLocationType`.
    pub type_: c_uint,
    /// The device ordinal or NUMA node.
    pub id: c_int,
}

/// `CUmemAllocationProp` as received (the layout of `cuda.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AllocationProp {
    /// `CUmemAllocationType`.
    pub type_: c_uint,
    /// `CUmemAllocationHandleType` bits.
    pub requested_handle_types: c_uint,
    /// Where the pages live.
    pub location: MemLocation,
    /// Windows only.
    pub win32_handle_meta_data: *mut c_void,
    /// `allocFlags`: compression type, GPUDirect RDMA, usage, reserved.
    pub alloc_flags: [u8; 8],
}

/// `CUmemAccessDesc` as received.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AccessDesc {
    /// Who.
    pub location: MemLocation,
    /// `CUmemAccess_flags`.
    pub flags: c_uint,
}

const _: () = {
    use cudarc::driver::sys::{CUmemAccessDesc, CUmemAllocationProp};
    assert!(std::mem::size_of::<AllocationProp>() == std::mem::size_of::<CUmemAllocationProp>());
    assert!(std::mem::size_of::<AccessDesc>() == std::mem::size_of::<CUmemAccessDesc>());
};

/// The driver and the current context's device.
fn enter() -> Result<(&'static Driver, u32), Code> {
    let d = driver()?;
    let ordinal = current(d)?;
    Ok((d, ordinal))
}

/// A size or offset as `u64`.
fn wide(v: usize) -> Result<u64, Code> {
    u64::try_from(v).map_err(|_| cuda::INVALID_VALUE)
}

/// The location `prop` names, checked against the devices.
fn location_of(d: &Driver, loc: MemLocation) -> Result<PhysicalLocation, Code> {
    let id = u32::try_from(loc.id).map_err(|_| cuda::INVALID_VALUE)?;
    match loc.type_ {
        LOCATION_DEVICE => {
            d.dev(loc.id).map_err(|_| cuda::INVALID_DEVICE)?;
            Ok(PhysicalLocation::Device(id))
        }
        LOCATION_HOST_NUMA => Ok(PhysicalLocation::HostNuma(id)),
        _ => Err(cuda::INVALID_VALUE),
    }
}

/// The device whose simulator serves a call about `location` from the
/// context of device `current`.
fn serving(location: PhysicalLocation, current: u32) -> u32 {
    match location {
        PhysicalLocation::Device(d) => d,
        PhysicalLocation::HostNuma(_) => current,
    }
}

/// Gives the minimum or recommended granularity of allocations like `prop`.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const AllocationProp,
    option: c_uint,
) -> CUresult {
    guard("cuMemGetAllocationGranularity", || {
        // A device property: no context is needed.
        let d = driver()?;
        non_null(granularity)?;
        non_null(prop.cast_mut())?;
        // SAFETY: not null, and valid for a read (the caller's contract).
        let prop = unsafe { prop.read() };
        let which = match option {
            0 => Granularity::Minimum,
            1 => Granularity::Recommended,
            _ => return Err(cuda::INVALID_VALUE),
        };
        let on = serving(location_of(d, prop.location)?, 0);
        let g = match crate::switches::granularity(option == 1) {
            Some(answer) => answer,
            None => sim(d.devices[on as usize].device.granularity(which))?,
        };
        // SAFETY: not null, and valid for a write (the caller's contract).
        unsafe { put(granularity, usize::try_from(g).map_err(|_| cuda::UNKNOWN)?) }
    })
}

/// Creates `size` bytes of physical memory as `prop` says.
#[no_mangle]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const AllocationProp,
    flags: u64,
) -> CUresult {
    guard("cuMemCreate", || {
        let (d, ordinal) = enter()?;
        non_null(handle)?;
        non_null(prop.cast_mut())?;
        // SAFETY: not null, and valid for a read (the caller's contract).
        let prop = unsafe { prop.read() };
        if flags != 0 || prop.type_ != ALLOCATION_PINNED {
            return Err(cuda::INVALID_VALUE);
        }
        let requested = prop.requested_handle_types;
        if requested & !(HANDLE_POSIX_FD | HANDLE_FABRIC) != 0 {
            return Err(cuda::INVALID_VALUE);
        }
        if requested & HANDLE_FABRIC != 0 && !switches::imex() {
            // Measured without an IMEX daemon.
            return Err(cuda::NOT_PERMITTED);
        }
        let location = location_of(d, prop.location)?;
        let made_for = if requested == 0 {
            ShareableHandle::None
        } else {
            ShareableHandle::PosixFd
        };
        let desc = PhysicalDesc::new(wide(size)?)
            .location(location)
            .handle(made_for);
        let on = serving(location, ordinal);
        let phys = sim(d.devices[on as usize].device.allocate_physical_with(&desc))?;
        let table = vmm();
        let h = table.new_handle();
        lock(&table.physical).insert(
            h,
            PhysEntry {
                phys: Arc::new(phys),
                requested,
            },
        );
        // SAFETY: not null, and valid for a write (the caller's contract).
        unsafe { put(handle, h) }
    })
}

/// Releases a physical allocation handle. As on the driver, the memory
/// stays until every handle of it (those imported from it in this process
/// included) is released and every mapping of it unmapped.
#[no_mangle]
pub unsafe extern "C" fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> CUresult {
    guard("cuMemRelease", || {
        enter()?;
        let gone = lock(&vmm().physical).remove(&handle);
        gone.map(drop).ok_or(cuda::INVALID_VALUE)
    })
}

/// Reserves `size` bytes of address space aligned to `alignment` (0: the
/// granularity); the address hint `addr` is only a hint.
#[no_mangle]
pub unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    _addr: CUdeviceptr,
    flags: u64,
) -> CUresult {
    guard("cuMemAddressReserve", || {
        let (d, ordinal) = enter()?;
        non_null(ptr)?;
        if flags != 0 {
            return Err(cuda::INVALID_VALUE);
        }
        let len = wide(size)?;
        let res = sim(d.devices[ordinal as usize]
            .device
            .reserve(len, wide(alignment)?))?;
        let base = res.base();
        lock(&vmm().reservations).insert(
            base,
            ResEntry {
                res: Arc::new(res),
                ordinal,
                len,
            },
        );
        // SAFETY: not null, and valid for a write (the caller's contract).
        unsafe { put(ptr, base) }
    })
}

/// Frees a whole reservation given by its address and size.
#[no_mangle]
pub unsafe extern "C" fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CUresult {
    guard("cuMemAddressFree", || {
        enter()?;
        let len = wide(size)?;
        let gone = {
            let mut table = lock(&vmm().reservations);
            match table.get(&ptr) {
                Some(r) if r.len == len => table.remove(&ptr),
                _ => None,
            }
        };
        gone.map(drop).ok_or(cuda::INVALID_VALUE)
    })
}

/// Maps `size` bytes of a physical allocation, from its start (`offset` 0), at `ptr`
/// inside a reservation, with no access yet.
#[no_mangle]
pub unsafe extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: u64,
) -> CUresult {
    guard("cuMemMap", || {
        let (d, _) = enter()?;
        if flags != 0 {
            return Err(cuda::INVALID_VALUE);
        }
        // From the allocation's start only: the offset "must be zero" (the
        // driver API), and driver 580 answered so (measured on an H200).
        if offset != 0 {
            return Err(cuda::NOT_SUPPORTED);
        }
        let len = wide(size)?;
        let (phys, _) = vmm().physical(handle)?;
        let at = vmm().find(ptr, len)?;
        let dev = &d.devices[at.ordinal as usize].device;
        sim(dev.map_range(&at.res, at.offset, &phys, 0, len))
    })
}

/// Unmaps `size` bytes at `ptr`: whole mappings only.
#[no_mangle]
pub unsafe extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    guard("cuMemUnmap", || {
        let (d, _) = enter()?;
        let len = wide(size)?;
        let at = vmm().find(ptr, len)?;
        let dev = &d.devices[at.ordinal as usize].device;
        sim(dev.unmap(&at.res, at.offset, len))
    })
}

/// The grant one access descriptor gives.
fn grant_of(desc: &AccessDesc) -> Result<AccessGrant, Code> {
    let access = match desc.flags {
        0 => Access::None,
        1 => Access::Read,
        3 => Access::ReadWrite,
        _ => return Err(cuda::INVALID_VALUE),
    };
    match desc.location.type_ {
        LOCATION_DEVICE => {
            let d = u32::try_from(desc.location.id).map_err(|_| cuda::INVALID_DEVICE)?;
            Ok(AccessGrant::device(d, access))
        }
        // Measured: HOST_NUMA (or HOST) id 0 makes host NUMA memory
        // CPU-accessible.
        LOCATION_HOST | LOCATION_HOST_NUMA => Ok(AccessGrant::host(access)),
        _ => Err(cuda::INVALID_VALUE),
    }
}

/// Sets the access of `count` devices (or the host) to the mapped range
/// `ptr..ptr + size`, all or nothing.
#[no_mangle]
pub unsafe extern "C" fn cuMemSetAccess(
    ptr: CUdeviceptr,
    size: usize,
    desc: *const AccessDesc,
    count: usize,
) -> CUresult {
    guard("cuMemSetAccess", || {
        let (d, _) = enter()?;
        non_null(desc.cast_mut())?;
        if count == 0 {
            return Err(cuda::INVALID_VALUE);
        }
        // SAFETY: not null, and valid for `count` reads (the caller's contract).
        let descs = unsafe { std::slice::from_raw_parts(desc, count) };
        let grants = descs.iter().map(grant_of).collect::<Result<Vec<_>, _>>()?;
        let len = wide(size)?;
        let at = vmm().find(ptr, len)?;
        let dev = &d.devices[at.ordinal as usize].device;
        sim(dev.set_access_for(&at.res, at.offset, len, &grants))
    })
}

/// Exports a physical allocation as a POSIX descriptor (an `int` written
/// at `shareable_handle`), which the caller owns and closes.
#[no_mangle]
pub unsafe extern "C" fn cuMemExportToShareableHandle(
    shareable_handle: *mut c_void,
    handle: CUmemGenericAllocationHandle,
    handle_type: c_uint,
    flags: u64,
) -> CUresult {
    guard("cuMemExportToShareableHandle", || {
        enter()?;
        non_null(shareable_handle)?;
        let (phys, requested) = vmm().physical(handle)?;
        if flags != 0 || requested & handle_type == 0 {
            // Measured: an allocation made without a requested handle type.
            return Err(cuda::INVALID_VALUE);
        }
        match handle_type {
            HANDLE_POSIX_FD => {
                // The lowest free number, as the driver's own descriptors.
                let fd = sim(phys
                    .dup_fd()
                    .and_then(|f| hal_core::kit::os::dup_lowest(f.as_fd())))?
                .into_raw_fd();
                // SAFETY: not null, and valid for a write of an `int` (the
                // caller's contract for a POSIX descriptor handle).
                unsafe { put(shareable_handle.cast::<c_int>(), fd) }
            }
            HANDLE_FABRIC => Err(cuda::NOT_SUPPORTED),
            _ => Err(cuda::INVALID_VALUE),
        }
    })
}

/// Imports a physical allocation from a POSIX descriptor (passed as the
/// pointer's value); the descriptor stays the caller's to close.
#[no_mangle]
pub unsafe extern "C" fn cuMemImportFromShareableHandle(
    handle: *mut CUmemGenericAllocationHandle,
    os_handle: *mut c_void,
    handle_type: c_uint,
) -> CUresult {
    guard("cuMemImportFromShareableHandle", || {
        let (d, ordinal) = enter()?;
        non_null(handle)?;
        if handle_type != HANDLE_POSIX_FD {
            return Err(cuda::INVALID_VALUE);
        }
        let raw = c_int::try_from(os_handle.addr()).map_err(|_| cuda::INVALID_VALUE)?;
        if raw < 0 {
            return Err(cuda::INVALID_VALUE);
        }
        // SAFETY: the caller's contract: `os_handle` is an open descriptor
        // for the duration of the call; it is only duplicated here.
        let fd = unsafe { BorrowedFd::borrow_raw(raw) };
        let own = hal_core::kit::os::dup(fd).map_err(|_| cuda::INVALID_VALUE)?;
        let phys = sim(d.devices[ordinal as usize].device.adopt_physical_fd(own))?;
        let table = vmm();
        let h = table.new_handle();
        lock(&table.physical).insert(
            h,
            PhysEntry {
                phys: Arc::new(phys),
                requested: HANDLE_POSIX_FD,
            },
        );
        // SAFETY: not null, and valid for a write (the caller's contract).
        unsafe { put(handle, h) }
    })
}
