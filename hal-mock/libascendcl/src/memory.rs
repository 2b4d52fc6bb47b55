//! Device memory: allocation, synchronous and stream-ordered copies, and
//! memset. Device addresses are the simulator's: never dereferenced, so a
//! caller that dereferences one faults as on a real NPU.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use hal_core::kit::vendor::acl;
use hal_core::{AllocDesc, Device, HugePages, Memory};

use crate::abi::{guard, non_null, put, AclError};
use crate::error::sim;
use crate::refusal::{refuse, Refusal};
use crate::state::{lock, runtime, Block, Found, Mem, Runtime};

/// `aclrtMemMallocPolicy` bit flags this runtime accepts beside the policy
/// in the low byte: `TYPE_LOW_BAND_WIDTH` (0x0100), `TYPE_HIGH_BAND_WIDTH`
/// (0x1000), `ACCESS_USER_SPACE_READONLY` (0x100000).
const POLICY_FLAGS: u32 = 0x0100 | 0x1000 | 0x10_0000;
/// A 2 MiB huge page.
const HUGE: u64 = 2 << 20;

/// The pages an allocation of `size` bytes with `policy` sits on, as the
/// runtime places it (`aclrtMemMallocPolicy`, `acl_rt.h`): `HUGE_FIRST`
/// (0, and `_P2P` 3) on 2 MiB pages where the size is at least one, else
/// on normal pages (its fallback); `HUGE_ONLY` (1, 4) on 2 MiB pages;
/// `NORMAL_ONLY` (2, 5) on normal pages, sub-allocated; `HUGE1G_ONLY` (6,
/// 7) on 1 GiB pages. An export of the memory must be whole pages of that
/// size (the simulator's rule). `None` for a policy the runtime does not have.
fn pages(size: u64, policy: u32) -> Option<HugePages> {
    match policy & !POLICY_FLAGS {
        0 | 3 if size >= HUGE => Some(HugePages::Explicit(HUGE)),
        0 | 3 | 2 | 5 => Some(HugePages::None),
        1 | 4 => Some(HugePages::Explicit(HUGE)),
        6 | 7 => Some(HugePages::Explicit(1 << 30)),
        _ => None,
    }
}
/// `aclrtMemcpyKind`.
const HOST_TO_HOST: c_int = 0;
const HOST_TO_DEVICE: c_int = 1;
const DEVICE_TO_HOST: c_int = 2;
const DEVICE_TO_DEVICE: c_int = 3;

fn peer_only(what: &str) -> Refusal {
    refuse(
        acl::RT_FEATURE_NOT_SUPPORT,
        format!(
            "the {what} is memory imported onto another device: it takes only asynchronous \
             device-to-device copies (aclrtMemcpyAsync, ACL_MEMCPY_DEVICE_TO_DEVICE)"
        ),
    )
}

/// The device memory at `ptr` for `len` bytes, refusing peer-only memory
/// for `what`.
fn device_side(rt: &Runtime, ptr: u64, len: u64, what: &str) -> Result<Found, Refusal> {
    let f = rt.find(ptr, len)?;
    if f.mem.peer_only() {
        return Err(peer_only(what));
    }
    Ok(f)
}

/// Allocates `size` bytes of device memory on the current device, on the
/// pages `policy` gives them (huge pages honoured, see `pages`).
#[no_mangle]
pub unsafe extern "C" fn aclrtMalloc(
    dev_ptr: *mut *mut c_void,
    size: usize,
    policy: u32,
) -> AclError {
    guard("aclrtMalloc", || {
        let rt = runtime()?;
        let o = rt.current()?;
        non_null(dev_ptr, "devPtr")?;
        let huge = pages(size as u64, policy)
            .filter(|_| size != 0)
            .ok_or_else(|| {
                refuse(
                    acl::INVALID_PARAM,
                    format!("size {size}, policy {policy:#x}"),
                )
            })?;
        let mut desc = AllocDesc::device(o, size as u64);
        desc.placement.huge_pages = huge;
        let a = sim(rt.device(o).allocate(&desc))?;
        let addr = a.addr();
        lock(&rt.memory).insert(
            addr,
            Block {
                mem: Mem::Alloc(Arc::new(a)),
                ordinal: o,
                open_keys: 0,
            },
        );
        // SAFETY: not null, valid for a write (the caller's contract).
        unsafe { put(dev_ptr, std::ptr::without_provenance_mut(addr as usize)) }
    })
}

/// The block of device memory holding `ptr`: its first byte and its size
/// (memory allocated here, or imported by key: the exported range).
#[no_mangle]
pub unsafe extern "C" fn aclrtMemGetAddressRange(
    ptr: *mut c_void,
    pbase: *mut *mut c_void,
    psize: *mut usize,
) -> AclError {
    guard("aclrtMemGetAddressRange", || {
        let rt = runtime()?;
        let found = rt.find(ptr.addr() as u64, 1)?;
        let len = found.mem.len();
        // SAFETY: valid for writes or null (the caller's contract).
        unsafe {
            put(pbase, std::ptr::without_provenance_mut(found.base as usize))?;
            put(psize, len as usize)
        }
    })
}

/// Frees memory `aclrtMalloc` gave. Refused while a key of it is open
/// (the documented order: importers close, the exporter closes its key,
/// then frees), and for memory imported by key (close it instead).
#[no_mangle]
pub unsafe extern "C" fn aclrtFree(dev_ptr: *mut c_void) -> AclError {
    guard("aclrtFree", || {
        let rt = runtime()?;
        let addr = dev_ptr.addr() as u64;
        let mut memory = lock(&rt.memory);
        let block = memory.get(&addr).ok_or_else(|| {
            refuse(
                acl::RT_PARAM_INVALID,
                format!("{addr:#x} was not allocated"),
            )
        })?;
        if matches!(block.mem, Mem::Map(_)) {
            return Err(refuse(
                acl::RT_PARAM_INVALID,
                "memory imported by key is closed with aclrtIpcMemClose, not freed",
            ));
        }
        if block.open_keys > 0 {
            return Err(refuse(
                acl::RT_PARAM_INVALID,
                format!(
                    "{} key(s) of this memory are still open: importers close, then the exporter \
                     closes its keys (aclrtIpcMemClose), then frees",
                    block.open_keys
                ),
            ));
        }
        let gone = memory.remove(&addr);
        drop(memory);
        drop(gone);
        Ok(())
    })
}

/// Copies `count` bytes; `dest_max` bounds the destination.
#[no_mangle]
pub unsafe extern "C" fn aclrtMemcpy(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: c_int,
) -> AclError {
    guard("aclrtMemcpy", || {
        let rt = runtime()?;
        rt.current()?;
        if count > dest_max {
            return Err(refuse(acl::INVALID_PARAM, "count exceeds destMax"));
        }
        if count == 0 {
            return Ok(());
        }
        non_null(dst.cast_const(), "dst")?;
        non_null(src, "src")?;
        let len = count as u64;
        match kind {
            HOST_TO_HOST => {
                // SAFETY: both are host buffers of `count` bytes (the caller's contract).
                unsafe { std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), count) };
                Ok(())
            }
            HOST_TO_DEVICE => {
                // SAFETY: `src` is a host buffer of `count` bytes (the caller's contract).
                let bytes = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), count) };
                if let Some(r) = crate::vmm::write_reserved(dst.addr() as u64, bytes) {
                    return r;
                }
                let to = device_side(rt, dst.addr() as u64, len, "destination")?;
                sim(to.mem.r().memory().write(to.offset, bytes))
            }
            DEVICE_TO_HOST => {
                // SAFETY: `dst` is a host buffer of `count` bytes (the caller's contract).
                let out = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), count) };
                if let Some(r) = crate::vmm::read_reserved(src.addr() as u64, out) {
                    return r;
                }
                let from = device_side(rt, src.addr() as u64, len, "source")?;
                sim(from.mem.r().memory().read(from.offset, out))
            }
            DEVICE_TO_DEVICE => {
                let to = device_side(rt, dst.addr() as u64, len, "destination")?;
                let from = device_side(rt, src.addr() as u64, len, "source")?;
                let mut bytes = vec![0u8; count];
                sim(from.mem.r().memory().read(from.offset, &mut bytes))?;
                sim(to.mem.r().memory().write(to.offset, &bytes))
            }
            _ => Err(refuse(acl::INVALID_PARAM, format!("copy kind {kind}"))),
        }
    })
}

/// Queues a copy of `count` bytes on `stream`: host to device (the host
/// bytes are read before the call returns) or device to device (the only
/// use of memory imported onto another device). Other kinds are
/// `ACL_ERROR_RT_FEATURE_NOT_SUPPORT` in this runtime.
#[no_mangle]
pub unsafe extern "C" fn aclrtMemcpyAsync(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: c_int,
    stream: *mut c_void,
) -> AclError {
    guard("aclrtMemcpyAsync", || {
        let rt = runtime()?;
        let (s, o) = rt.stream(stream.addr())?;
        if count > dest_max {
            return Err(refuse(acl::INVALID_PARAM, "count exceeds destMax"));
        }
        if count == 0 {
            return Ok(());
        }
        non_null(dst.cast_const(), "dst")?;
        non_null(src, "src")?;
        let len = count as u64;
        let dev = rt.device(o);
        match kind {
            HOST_TO_DEVICE => {
                let to = device_side(rt, dst.addr() as u64, len, "destination")?;
                // SAFETY: `src` is a host buffer of `count` bytes (the caller's contract).
                let bytes = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), count) };
                sim(Device::write_async(
                    dev,
                    &s,
                    to.mem.r(),
                    to.offset,
                    bytes.to_vec(),
                ))
            }
            DEVICE_TO_DEVICE => {
                let to = rt.find(dst.addr() as u64, len)?;
                let from = rt.find(src.addr() as u64, len)?;
                sim(Device::copy_async(
                    dev,
                    &s,
                    to.mem.r(),
                    to.offset,
                    from.mem.r(),
                    from.offset,
                    len,
                ))
            }
            HOST_TO_HOST | DEVICE_TO_HOST => Err(refuse(
                acl::RT_FEATURE_NOT_SUPPORT,
                format!("copy kind {kind} on a stream is not offered by this runtime"),
            )),
            _ => Err(refuse(acl::INVALID_PARAM, format!("copy kind {kind}"))),
        }
    })
}

/// Queues setting `count` bytes at `dev_ptr` to `value` on `stream`.
#[no_mangle]
pub unsafe extern "C" fn aclrtMemsetAsync(
    dev_ptr: *mut c_void,
    max_count: usize,
    value: i32,
    count: usize,
    stream: *mut c_void,
) -> AclError {
    guard("aclrtMemsetAsync", || {
        let rt = runtime()?;
        let (s, o) = rt.stream(stream.addr())?;
        if count > max_count {
            return Err(refuse(acl::INVALID_PARAM, "count exceeds maxCount"));
        }
        let to = device_side(rt, dev_ptr.addr() as u64, count as u64, "destination")?;
        sim(Device::memset_async(
            rt.device(o),
            &s,
            to.mem.r(),
            to.offset,
            count as u64,
            value as u8,
        ))
    })
}
