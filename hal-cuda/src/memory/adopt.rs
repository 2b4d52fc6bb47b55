//! Memory this library did not allocate, adopted by address
//! ([`Device::adopt_memory`](hal_core::Device::adopt_memory)): a range of a
//! framework's caching allocator (a PyTorch or CuPy CUDA tensor), or a raw
//! `cuMemAlloc` pointer, given as a [`CudaAllocation`] that is exported
//! like the backend's own and frees nothing when it drops.
//!
//! The driver says what the range is: `cuMemGetAddressRange_v2` finds the
//! allocation that holds it (a range that leaves it is refused), and
//! `cuPointerGetAttribute` its device (`CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`:
//! memory of another device is refused, adopt it there) and its kind
//! (`CU_POINTER_ATTRIBUTE_IS_MANAGED`, `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`),
//! so that managed and pinned host memory keep the rules of their kind
//! (neither has a legacy IPC handle).

use std::ffi::c_int;
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{CUmemorytype, CUpointer_attribute};
use hal_core::{Capabilities, DeviceInfo, Error, Location, Result};

use crate::context::Primary;
use crate::ffi::result::mem;
use crate::ffi::CUdeviceptr;
use crate::memory::alloc::CudaAllocation;

/// The range `addr..addr + len` of memory of the device `info` names, as an
/// allocation that frees nothing (see the module).
pub(crate) fn adopt(
    primary: &Arc<Primary>,
    info: &DeviceInfo,
    addr: CUdeviceptr,
    len: u64,
) -> Result<CudaAllocation> {
    if len == 0 {
        return Err(Error::invalid("adopt_memory of zero bytes"));
    }
    let end = addr
        .checked_add(len)
        .ok_or_else(|| Error::invalid("adopt_memory: the range wraps past the address space"))?;
    let _ctx = primary.enter()?;
    let (base, size) = mem::address_range(&primary.driver, addr)?;
    if end > base + size {
        return Err(Error::invalid(format!(
            "adopt_memory: {addr:#x}+{len:#x} is not inside one allocation (the one holding \
             {addr:#x} is {base:#x}+{size:#x}); adopt each allocation's range apart"
        )));
    }
    let ordinal = attribute(
        primary,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        addr,
    )?;
    if ordinal != info.ordinal {
        return Err(Error::invalid(format!(
            "adopt_memory: {addr:#x} is memory of CUDA device {ordinal}, not of device {}: \
             adopt it through that device",
            info.ordinal
        )));
    }
    let managed = attribute(
        primary,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        addr,
    )?;
    let kind = attribute(
        primary,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        addr,
    )?;
    let location = if managed != 0 {
        Location::Managed
    } else if kind == CUmemorytype::CU_MEMORYTYPE_HOST as u32 {
        Location::Host
    } else {
        Location::Device(ordinal)
    };
    Ok(CudaAllocation {
        primary: Arc::clone(primary),
        ptr: addr,
        len,
        location,
        counts_importers: info.capabilities.contains(Capabilities::LEASES),
        exports: OnceLock::new(),
        owned: false,
    })
}

/// A 4-byte attribute (an `int`, a `CUmemorytype` or a flag) of the memory
/// at `ptr`, with the context pushed by the caller.
fn attribute(primary: &Primary, which: CUpointer_attribute, ptr: CUdeviceptr) -> Result<u32> {
    mem::attribute_u32(&primary.driver, which as c_int, ptr)
}
