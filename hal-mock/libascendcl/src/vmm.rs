//! VMM: the granularity (`aclrtMemGetAllocationGranularity`), physical
//! allocations (`aclrtMallocPhysical`, `aclrtFreePhysical`), address
//! reservations (`aclrtReserveMemAddress`, `aclrtReleaseMemAddress`),
//! mappings and their access (`aclrtMapMem`, `aclrtUnmapMem`,
//! `aclrtMemSetAccess`), and the 64-bit shareable handle
//! (`aclrtMemExportToShareableHandle`, `aclrtMemSetPidToShareableHandle`,
//! `aclrtMemImportFromShareableHandle`), on the simulator's VMM, as
//! `vendor/ascend.md` ("Semantics", VMM) describes them:
//!
//! - sizes, offsets and alignments are whole granules, else
//!   `ACL_ERROR_RT_PARAM_INVALID`; a mapping has no access until
//!   `aclrtMemSetAccess` (copies through it are refused, not faulted);
//! - the shareable handle is made with `ACL_MEM_HANDLE_TYPE_NONE`. By
//!   default it admits nobody until `aclrtMemSetPidToShareableHandle` adds
//!   importers' bare tgids; `ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION`
//!   admits anyone. An importer not listed gets `ACL_ERROR_RT_NO_PERMISSION`;
//! - the handle stays valid until the exporter frees the physical
//!   allocation (`aclrtFreePhysical`).
//!
//! The `u64` works on its own across processes running this build: it is
//! the exporter's pid and a number naming an envelope registered with the
//! exporter's descriptor broker (`hal_core::exchange::envelope::numbered`); the
//! envelope holds the simulator export, whose allow-list the broker checks.
//!
//! Limits: a reservation is the simulator's, a range of host address space
//! whose protection follows the reserving device's access;
//! `aclrtMemcpy` reaches it (host to device, device to host), the
//! asynchronous copies do not; the address hint of
//! `aclrtReserveMemAddress` is ignored; only device locations exist.

use hal_core::Vmm;
use std::ffi::c_void;
use std::sync::Arc;

use hal_core::exchange::envelope::numbered;
use hal_core::kit::vendor::acl;
use hal_core::{
    Access, AccessGrant, BackendId, Device, ExportOptions, Granularity, Handle, ImportOptions,
    Importers, PhysicalDesc, PhysicalLocation, Reservation, ShareableHandle, SharedHandle,
};

use crate::abi::{guard, non_null, put, AclError};
use crate::error::sim;
use crate::refusal::{refuse, Refusal};
use crate::state::{lock, runtime, Runtime};
use crate::tgid::os_pid;
use crate::vmm_table::{vmm, PhysEntry, ResEntry, SharedExport};

/// `ACL_MEM_HANDLE_TYPE_NONE`: the handle type of the 64-bit handle.
pub const HANDLE_TYPE_NONE: u32 = 0;
/// `ACL_MEM_HANDLE_TYPE_POSIX`.
pub const HANDLE_TYPE_POSIX: u32 = 2;
/// `ACL_MEM_LOCATION_TYPE_DEVICE`.
pub const LOCATION_DEVICE: u32 = 1;
/// `ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION`.
pub const VMM_EXPORT_DISABLE_PID_VALIDATION: u64 = 0x1;

/// `aclrtMemLocation` as received (integers, so any value is answered).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemLocation {
    /// The device id.
    pub id: u32,
    /// `aclrtMemLocationType`.
    pub type_: u32,
}

/// `aclrtPhysicalMemProp` as received.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PhysicalMemProp {
    /// `aclrtMemHandleType`.
    pub handle_type: u32,
    /// `aclrtMemAllocationType` (pinned, 0).
    pub allocation_type: u32,
    /// `aclrtMemAttrType`.
    pub mem_attr: u32,
    /// Where the pages live.
    pub location: MemLocation,
    /// Reserved.
    pub reserve: u64,
}

/// `aclrtMemAccessDesc` as received.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemAccessDesc {
    /// `aclrtMemAccessFlags`.
    pub flags: u32,
    /// Who.
    pub location: MemLocation,
    /// Reserved.
    pub rsv: [u8; 12],
}

const _: () = {
    assert!(std::mem::size_of::<PhysicalMemProp>() == 32);
    assert!(std::mem::size_of::<MemAccessDesc>() == 24);
};

/// The runtime and the calling thread's current device.
fn enter() -> Result<(&'static Runtime, u32), Refusal> {
    let rt = runtime()?;
    let ordinal = rt.current()?;
    Ok((rt, ordinal))
}

fn invalid(what: impl Into<String>) -> Refusal {
    refuse(acl::INVALID_PARAM, what)
}

/// The device a location names.
fn device_of(rt: &Runtime, loc: MemLocation) -> Result<u32, Refusal> {
    if loc.type_ != LOCATION_DEVICE {
        return Err(invalid(format!(
            "location type {}: only devices (1)",
            loc.type_
        )));
    }
    rt.device_id(i32::try_from(loc.id).unwrap_or(i32::MAX))
}

/// Gives the minimum granularity of allocations like `prop`.
#[no_mangle]
pub unsafe extern "C" fn aclrtMemGetAllocationGranularity(
    prop: *mut PhysicalMemProp,
    option: u32,
    granularity: *mut usize,
) -> AclError {
    guard("aclrtMemGetAllocationGranularity", || {
        let rt = runtime()?;
        non_null(prop, "prop")?;
        non_null(granularity, "granularity")?;
        // SAFETY: not null, valid for a read (the caller's contract).
        let prop = unsafe { prop.read() };
        let which = match option {
            0 => Granularity::Minimum,
            1 => Granularity::Recommended,
            _ => return Err(invalid(format!("granularity option {option}"))),
        };
        let on = device_of(rt, prop.location)?;
        let g = sim(rt.device(on).granularity(which))?;
        let g = usize::try_from(g).map_err(|_| invalid("granularity"))?;
        // SAFETY: not null, valid for a write (the caller's contract).
        unsafe { put(granularity, g) }
    })
}

/// Allocates `size` bytes of physical memory as `prop` says.
#[no_mangle]
pub unsafe extern "C" fn aclrtMallocPhysical(
    handle: *mut *mut c_void,
    size: usize,
    prop: *const PhysicalMemProp,
    flags: u64,
) -> AclError {
    guard("aclrtMallocPhysical", || {
        let (rt, _) = enter()?;
        non_null(handle, "handle")?;
        non_null(prop, "prop")?;
        // SAFETY: not null, valid for a read (the caller's contract).
        let prop = unsafe { prop.read() };
        if flags != 0 || prop.allocation_type != 0 {
            return Err(invalid(format!(
                "flags {flags:#x}, allocation type {}",
                prop.allocation_type
            )));
        }
        let made_for = match prop.handle_type {
            HANDLE_TYPE_NONE => ShareableHandle::None,
            HANDLE_TYPE_POSIX => ShareableHandle::PosixFd,
            t => return Err(invalid(format!("handle type {t}"))),
        };
        let on = device_of(rt, prop.location)?;
        let desc = PhysicalDesc::new(size as u64)
            .location(PhysicalLocation::Device(on))
            .handle(made_for);
        let phys = sim(rt.device(on).allocate_physical_with(&desc))?;
        let h = rt.new_handle();
        lock(&vmm().physical).insert(
            h,
            PhysEntry {
                phys: Arc::new(phys),
                ordinal: on,
            },
        );
        // SAFETY: not null, valid for a write (the caller's contract).
        unsafe { put(handle, std::ptr::without_provenance_mut(h)) }
    })
}

/// Frees a physical allocation handle, and the shareable handles exported
/// from it; mappings of it keep the memory until they are unmapped.
#[no_mangle]
pub unsafe extern "C" fn aclrtFreePhysical(handle: *mut c_void) -> AclError {
    guard("aclrtFreePhysical", || {
        enter()?;
        let h = handle.addr();
        let gone = lock(&vmm().physical).remove(&h);
        if gone.is_none() {
            return Err(refuse(
                acl::RT_INVALID_HANDLE,
                format!("{h:#x} is no physical allocation of this process"),
            ));
        }
        let mut shared = lock(&vmm().shared);
        let numbers: Vec<u64> = shared
            .iter()
            .filter(|(_, s)| s.physical == h)
            .map(|(&n, _)| n)
            .collect();
        let exports: Vec<SharedExport> = numbers.iter().filter_map(|n| shared.remove(n)).collect();
        drop(shared);
        drop(exports);
        drop(gone);
        Ok(())
    })
}

/// Reserves `size` bytes of address space aligned to `alignment` (0: the
/// granularity); the address hint is ignored.
#[no_mangle]
pub unsafe extern "C" fn aclrtReserveMemAddress(
    vir_ptr: *mut *mut c_void,
    size: usize,
    alignment: usize,
    _expect_ptr: *mut c_void,
    flags: u64,
) -> AclError {
    guard("aclrtReserveMemAddress", || {
        let (rt, ordinal) = enter()?;
        non_null(vir_ptr, "virPtr")?;
        if flags != 0 {
            return Err(invalid(format!("flags {flags:#x}")));
        }
        let len = size as u64;
        let res = sim(rt.device(ordinal).reserve(len, alignment as u64))?;
        let base = res.base();
        lock(&vmm().reservations).insert(
            base,
            ResEntry {
                res: Arc::new(res),
                ordinal,
                len,
                mapped: Default::default(),
            },
        );
        // SAFETY: not null, valid for a write (the caller's contract).
        unsafe { put(vir_ptr, std::ptr::without_provenance_mut(base as usize)) }
    })
}

/// Releases a whole reservation, given by its first address; refused
/// while parts of it are mapped.
#[no_mangle]
pub unsafe extern "C" fn aclrtReleaseMemAddress(vir_ptr: *mut c_void) -> AclError {
    guard("aclrtReleaseMemAddress", || {
        enter()?;
        let base = vir_ptr.addr() as u64;
        let mut table = lock(&vmm().reservations);
        match table.get(&base) {
            None => Err(refuse(
                acl::RT_PARAM_INVALID,
                format!("{base:#x} is not the first address of a reservation"),
            )),
            Some(r) if !r.mapped.is_empty() => Err(refuse(
                acl::RT_PARAM_INVALID,
                format!(
                    "{} mapping(s) of the reservation at {base:#x} remain: unmap them first \
                     (aclrtUnmapMem)",
                    r.mapped.len()
                ),
            )),
            Some(_) => {
                let gone = table.remove(&base);
                drop(table);
                drop(gone);
                Ok(())
            }
        }
    })
}

/// Maps `size` bytes of a physical allocation, from `offset`, at
/// `vir_ptr` inside a reservation, with no access yet.
#[no_mangle]
pub unsafe extern "C" fn aclrtMapMem(
    vir_ptr: *mut c_void,
    size: usize,
    offset: usize,
    handle: *mut c_void,
    flags: u64,
) -> AclError {
    guard("aclrtMapMem", || {
        let (rt, _) = enter()?;
        if flags != 0 {
            return Err(invalid(format!("flags {flags:#x}")));
        }
        let len = size as u64;
        let (phys, _) = vmm().physical(handle.addr())?;
        let at = vmm().found(vir_ptr.addr() as u64, len)?;
        let dev = rt.device(at.ordinal);
        sim(dev.map_range(&at.res, at.offset, &phys, offset as u64, len))?;
        if let Some(r) = lock(&vmm().reservations).get_mut(&at.base) {
            r.mapped.insert(at.offset, len);
        }
        Ok(())
    })
}

/// Unmaps the mapping that starts at `vir_ptr`.
#[no_mangle]
pub unsafe extern "C" fn aclrtUnmapMem(vir_ptr: *mut c_void) -> AclError {
    guard("aclrtUnmapMem", || {
        let (rt, _) = enter()?;
        let ptr = vir_ptr.addr() as u64;
        let at = vmm().found(ptr, 1)?;
        let len = lock(&vmm().reservations)
            .get(&at.base)
            .and_then(|r| r.mapped.get(&at.offset).copied())
            .ok_or_else(|| {
                refuse(
                    acl::RT_PARAM_INVALID,
                    format!("no mapping starts at {ptr:#x}"),
                )
            })?;
        sim(rt.device(at.ordinal).unmap(&at.res, at.offset, len))?;
        if let Some(r) = lock(&vmm().reservations).get_mut(&at.base) {
            r.mapped.remove(&at.offset);
        }
        Ok(())
    })
}

/// The grant one access descriptor gives.
fn grant_of(rt: &Runtime, desc: &MemAccessDesc) -> Result<AccessGrant, Refusal> {
    let access = match desc.flags {
        0 => Access::None,
        1 => Access::Read,
        3 => Access::ReadWrite,
        f => return Err(invalid(format!("access flags {f:#x}"))),
    };
    Ok(AccessGrant::device(device_of(rt, desc.location)?, access))
}

/// Sets the access of `count` devices to the mapped range
/// `vir_ptr..vir_ptr + size`, all or nothing.
#[no_mangle]
pub unsafe extern "C" fn aclrtMemSetAccess(
    vir_ptr: *mut c_void,
    size: usize,
    desc: *mut MemAccessDesc,
    count: usize,
) -> AclError {
    guard("aclrtMemSetAccess", || {
        let (rt, _) = enter()?;
        non_null(desc, "desc")?;
        if count == 0 {
            return Err(invalid("no access descriptor"));
        }
        // SAFETY: not null, valid for `count` reads (the caller's contract).
        let descs = unsafe { std::slice::from_raw_parts(desc, count) };
        let grants = descs
            .iter()
            .map(|d| grant_of(rt, d))
            .collect::<Result<Vec<_>, _>>()?;
        let len = size as u64;
        let at = vmm().found(vir_ptr.addr() as u64, len)?;
        sim(rt
            .device(at.ordinal)
            .set_access_for(&at.res, at.offset, len, &grants))
    })
}

/// Exports a physical allocation as a 64-bit shareable handle written to
/// `shareable_handle`.
#[no_mangle]
pub unsafe extern "C" fn aclrtMemExportToShareableHandle(
    handle: *mut c_void,
    handle_type: u32,
    flags: u64,
    shareable_handle: *mut u64,
) -> AclError {
    guard("aclrtMemExportToShareableHandle", || {
        let (rt, _) = enter()?;
        non_null(shareable_handle, "shareableHandle")?;
        if flags & !VMM_EXPORT_DISABLE_PID_VALIDATION != 0 {
            return Err(invalid(format!("export flags {flags:#x}")));
        }
        match handle_type {
            HANDLE_TYPE_NONE => {}
            HANDLE_TYPE_POSIX => {
                return Err(refuse(
                    acl::RT_FEATURE_NOT_SUPPORT,
                    "a POSIX descriptor export: this runtime exports the 64-bit handle \
                     (ACL_MEM_HANDLE_TYPE_NONE)",
                ))
            }
            t => return Err(invalid(format!("handle type {t}"))),
        }
        let h = handle.addr();
        let (phys, ordinal) = vmm().physical(h)?;
        let importers = if flags & VMM_EXPORT_DISABLE_PID_VALIDATION != 0 {
            Importers::Anyone
        } else {
            Importers::Pids(Vec::new())
        };
        let opts = ExportOptions {
            importers,
            ..ExportOptions::default()
        };
        let export = sim(rt.device(ordinal).export_physical(&phys, &opts))?;
        let (envelope, number) = sim(numbered::seal(&export.to_text(), BackendId::MockAscend))?;
        lock(&vmm().shared).insert(
            number,
            SharedExport {
                export,
                _envelope: envelope,
                physical: h,
                ordinal,
            },
        );
        // SAFETY: not null, valid for a write (the caller's contract).
        unsafe { put(shareable_handle, number) }
    })
}

/// Adds the processes with the bare tgids `pid[..num]` to the shareable
/// handle's allow-list (its exporter only).
#[no_mangle]
pub unsafe extern "C" fn aclrtMemSetPidToShareableHandle(
    shareable_handle: u64,
    pid: *mut i32,
    num: usize,
) -> AclError {
    guard("aclrtMemSetPidToShareableHandle", || {
        let (rt, _) = enter()?;
        non_null(pid, "pid")?;
        if num == 0 {
            return Err(invalid("no pid given"));
        }
        // SAFETY: `pid` holds `num` values (the caller's contract).
        let tgids = unsafe { std::slice::from_raw_parts(pid, num) };
        let pids: Vec<u32> = tgids.iter().filter_map(|&t| os_pid(t)).collect();
        let mut shared = lock(&vmm().shared);
        let e = shared.get_mut(&shareable_handle).ok_or_else(|| {
            refuse(
                acl::RT_PARAM_INVALID,
                format!("{shareable_handle:#x} was not exported by this process"),
            )
        })?;
        if pids.is_empty() {
            return Ok(());
        }
        let ordinal = e.ordinal;
        sim(rt.device(ordinal).allow_importers(&mut e.export, &pids))
    })
}

/// Imports the physical allocation `shareable_handle` names onto device
/// `device_id`, as a new physical allocation handle.
#[no_mangle]
pub unsafe extern "C" fn aclrtMemImportFromShareableHandle(
    shareable_handle: u64,
    device_id: i32,
    handle: *mut *mut c_void,
) -> AclError {
    guard("aclrtMemImportFromShareableHandle", || {
        let rt = runtime()?;
        non_null(handle, "handle")?;
        let on = rt.device_id(device_id)?;
        let text = numbered::open(shareable_handle, BackendId::MockAscend).map_err(|e| {
            refuse(
                acl::RT_PARAM_INVALID,
                format!("the shareable handle {shareable_handle:#x}: {e}"),
            )
        })?;
        let inner =
            Handle::from_text(&text).map_err(|e| refuse(acl::RT_PARAM_INVALID, e.to_string()))?;
        crate::switches::cross_device(
            rt,
            on,
            &inner.device_uuid,
            "aclrtMemImportFromShareableHandle",
        )?;
        // Physical memory of another device is reached only once this
        // device has peer access to it (aclrtDeviceEnablePeerAccess).
        if let Some(source) = crate::switches::source(rt, &inner.device_uuid) {
            if source != on && !rt.device(on).peer_access_enabled(source) {
                return Err(refuse(
                    acl::RT_NO_PERMISSION,
                    format!(
                        "the physical memory is on device {source}: call \
                         aclrtDeviceEnablePeerAccess({source}, 0) on device {on} before importing \
                         it there"
                    ),
                ));
            }
        }
        let opts = ImportOptions {
            device: Some(on),
            ..ImportOptions::default()
        };
        let phys = sim(rt
            .device(on)
            .import_physical(SharedHandle::from(inner), &opts))?;
        let h = rt.new_handle();
        lock(&vmm().physical).insert(
            h,
            PhysEntry {
                phys: Arc::new(phys),
                ordinal: on,
            },
        );
        // SAFETY: not null, valid for a write (the caller's contract).
        unsafe { put(handle, std::ptr::without_provenance_mut(h)) }
    })
}

/// The result of writing `bytes` at `ptr` when a reservation holds it
/// (`aclrtMemcpy` host to device); `None` when none does.
pub(crate) fn write_reserved(ptr: u64, bytes: &[u8]) -> Option<Result<(), Refusal>> {
    let at = vmm().find(ptr, bytes.len() as u64)?;
    Some(sim(at.res.write(at.offset, bytes)))
}

/// The result of reading `out.len()` bytes at `ptr` when a reservation
/// holds them (`aclrtMemcpy` device to host); `None` when none does.
pub(crate) fn read_reserved(ptr: u64, out: &mut [u8]) -> Option<Result<(), Refusal>> {
    let at = vmm().find(ptr, out.len() as u64)?;
    Some(sim(at.res.read(at.offset, out)))
}
