//! Memory: allocate, export, import, read, write, release.

use std::ffi::{c_char, c_void};
use std::sync::Arc;
use std::time::Duration;

use hal_facade::dynamic::DynAllocation;
use hal_facade::{AllocDesc, Handle, HandleKind, Memory};

use crate::decode::decode;
use crate::device::{hal_device, need, put, DEVICES};
use crate::last_error::call;
use crate::options::{export_options, hal_export_options, hal_import_options, import_read_only};
use crate::status::{hal_status, Failure};
use crate::table::{Kind, Table};
use crate::text::{give_text, str_arg};

/// Memory (opaque): allocated here (`hal_alloc`, `hal_named_create`) or
/// imported from another process (`hal_import`). Release it with
/// `hal_memory_release`.
#[allow(non_camel_case_types)]
pub struct hal_memory {
    _private: [u8; 0],
}

/// Where `hal_alloc` places memory: a value of `HAL_LOCATION_*`.
#[allow(non_camel_case_types)]
pub type hal_location = u32;
/// Device memory of the device.
pub const HAL_LOCATION_DEVICE: hal_location = 0;
/// Host memory (CPU shared memory, pinned host memory).
pub const HAL_LOCATION_HOST: hal_location = 1;
/// Managed memory, migrating between host and device.
pub const HAL_LOCATION_MANAGED: hal_location = 2;

/// A memory object of the C library: nothing added to the shared one.
pub(crate) type MemoryObj = hal_facade::objects::MemoryObj;

pub(crate) static MEMORIES: Table<MemoryObj> = Table::new(Kind::Memory);

/// Why writes through a memory imported read-only are refused, in C's words.
pub(crate) const READ_ONLY_IMPORT: &str = "hal_import_options.read_only";

/// The allocation of `memory` (this process's own or adopted), for `what`;
/// an import has none.
pub(crate) fn allocated<'m>(
    memory: &'m MemoryObj,
    what: &str,
) -> Result<&'m dyn DynAllocation, Failure> {
    memory.own_allocation().ok_or_else(|| {
        Failure::invalid(format!(
            "{what}: this memory was imported; only memory this process allocated has that"
        ))
    })
}

/// Export `memory` with the options at `opts`; the export lives as long as
/// the memory.
///
/// # Safety
///
/// `opts` is NULL or a valid `hal_export_options` (the entry point's
/// contract).
pub(crate) unsafe fn export(
    memory: &MemoryObj,
    opts: *const hal_export_options,
) -> Result<Handle, Failure> {
    // SAFETY: per this function's contract, the one `export_options` asks for.
    let opts = unsafe { export_options(opts) }?;
    allocated(memory, "export")?;
    Ok(memory.export(&opts)?)
}

/// Import the memory handle `handle` on its backend and device.
pub(crate) fn import_memory(handle: Handle, read_only: bool) -> Result<MemoryObj, Failure> {
    Ok(hal_facade::objects::import_memory(
        handle,
        read_only.then_some(READ_ONLY_IMPORT),
    )?)
}

/// Allocate `size` bytes on `device` at `location` (`HAL_LOCATION_DEVICE`,
/// `HAL_LOCATION_HOST` or `HAL_LOCATION_MANAGED`).
///
/// # Safety
///
/// `out` is NULL or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_alloc(
    device: *mut hal_device,
    size: u64,
    location: hal_location,
    out: *mut *mut hal_memory,
) -> hal_status {
    call("hal_alloc", || {
        need(out, "out")?;
        let device = DEVICES.get(device as usize, "device")?;
        let desc = match location {
            HAL_LOCATION_DEVICE => AllocDesc::device(device.device.info().ordinal, size),
            HAL_LOCATION_HOST => AllocDesc::host(size),
            HAL_LOCATION_MANAGED => AllocDesc::managed(size),
            other => {
                return Err(Failure::invalid(format!(
                    "location {other}: use HAL_LOCATION_DEVICE, HAL_LOCATION_HOST or \
                     HAL_LOCATION_MANAGED"
                )))
            }
        };
        let alloc = device.device.allocate(&desc)?;
        let token = MEMORIES.insert(Arc::new(MemoryObj::allocation(device, alloc)));
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_memory, "out") }
    })
}

/// Export memory this process allocated to other processes: `out_text` is
/// the handle's text (`hal1.` ...), all another process needs to
/// `hal_import` it (the descriptors come from this process while the memory
/// lives). The export lasts until the memory is released. Free the text with
/// `hal_string_free`.
///
/// # Safety
///
/// `options` is NULL or a valid `hal_export_options`; `out_text` is NULL or
/// valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_export(
    memory: *mut hal_memory,
    options: *const hal_export_options,
    out_text: *mut *mut c_char,
) -> hal_status {
    call("hal_export", || {
        need(out_text, "out_text")?;
        let memory = MEMORIES.get(memory as usize, "memory")?;
        // SAFETY: per the contract.
        let handle = unsafe { export(&memory, options) }?;
        // SAFETY: checked not NULL above.
        unsafe { give_text(out_text, handle.to_text()) };
        Ok(())
    })
}

/// Import memory another process exported, from its handle text. The
/// backend and the device are found from the handle (devices by UUID). A
/// process not on the export's pid list is `HAL_ERR_PERMISSION_DENIED`;
/// malformed text, or the handle of a notify, event or tensor, is
/// `HAL_ERR_INVALID_HANDLE`.
///
/// # Safety
///
/// `text` is NULL or a NUL-terminated string; `options` is NULL or a valid
/// `hal_import_options`; `out` is NULL or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_import(
    text: *const c_char,
    options: *const hal_import_options,
    out: *mut *mut hal_memory,
) -> hal_status {
    call("hal_import", || {
        need(out, "out")?;
        // SAFETY: per the contract.
        let text = unsafe { str_arg(text, "text") }?;
        // SAFETY: per the contract.
        let read_only = unsafe { import_read_only(options) }?;
        let handle = decode(text, HandleKind::Memory)?;
        let memory = import_memory(handle, read_only)?;
        let token = MEMORIES.insert(Arc::new(memory));
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_memory, "out") }
    })
}

/// The size of the memory in bytes.
///
/// # Safety
///
/// `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_memory_size(memory: *const hal_memory, out: *mut u64) -> hal_status {
    call("hal_memory_size", || {
        need(out, "out")?;
        let memory = MEMORIES.get(memory as usize, "memory")?;
        // SAFETY: checked not NULL above.
        unsafe { put(out, memory.len(), "out") }
    })
}

/// The host pointer of host-visible memory (CPU shared memory, host and
/// managed memory); `HAL_ERR_UNSUPPORTED` for device memory, which
/// `hal_read` and `hal_write` reach instead. Valid until the memory is
/// released. Memory imported read-only (either side asked) must not be
/// written through it.
///
/// # Safety
///
/// `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_memory_host_ptr(
    memory: *const hal_memory,
    out: *mut *mut c_void,
) -> hal_status {
    call("hal_memory_host_ptr", || {
        need(out, "out")?;
        let memory = MEMORIES.get(memory as usize, "memory")?;
        let ptr = memory.host_ptr().ok_or_else(|| {
            Failure::new(
                hal_status::HAL_ERR_UNSUPPORTED,
                format!(
                    "the {:?} memory is not host-visible: use hal_read and hal_write, or \
                     hal_memory_device_ptr for the device's address",
                    memory.location()
                ),
            )
        })?;
        // SAFETY: checked not NULL above.
        unsafe { put(out, ptr.cast::<c_void>(), "out") }
    })
}

/// The device's address of the memory (a `CUdeviceptr` on CUDA; the host
/// address on CPU shared memory).
///
/// # Safety
///
/// `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_memory_device_ptr(
    memory: *const hal_memory,
    out: *mut u64,
) -> hal_status {
    call("hal_memory_device_ptr", || {
        need(out, "out")?;
        let memory = MEMORIES.get(memory as usize, "memory")?;
        // SAFETY: checked not NULL above.
        unsafe { put(out, memory.addr(), "out") }
    })
}

/// The byte slice `(ptr, len)` of a C caller, empty when `len` is 0.
pub(crate) fn slice_arg<'a>(
    ptr: *const c_void,
    len: usize,
    argument: &str,
) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Failure::null(argument));
    }
    // SAFETY: the entry points' contracts say `ptr` holds `len` readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}

/// Copy `len` bytes at `offset` of the memory into `dst` (any memory,
/// device memory included). Out of range is `HAL_ERR_INVALID_ARGUMENT`.
///
/// # Safety
///
/// `dst` is NULL (only when `len` is 0) or valid for `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn hal_read(
    memory: *const hal_memory,
    offset: u64,
    dst: *mut c_void,
    len: usize,
) -> hal_status {
    call("hal_read", || {
        let memory = MEMORIES.get(memory as usize, "memory")?;
        if len == 0 {
            return Ok(());
        }
        if dst.is_null() {
            return Err(Failure::null("dst"));
        }
        // SAFETY: not NULL and `len` bytes writable per the contract.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), len) };
        Ok(memory.read(offset, dst)?)
    })
}

/// Copy `len` bytes from `src` to `offset` of the memory. Memory exported or
/// imported read-only refuses (`HAL_ERR_PERMISSION_DENIED`, or the
/// backend's status).
///
/// # Safety
///
/// `src` is NULL (only when `len` is 0) or valid for `len` bytes of reads.
#[no_mangle]
pub unsafe extern "C" fn hal_write(
    memory: *mut hal_memory,
    offset: u64,
    src: *const c_void,
    len: usize,
) -> hal_status {
    call("hal_write", || {
        let memory = MEMORIES.get(memory as usize, "memory")?;
        let src = slice_arg(src, len, "src")?;
        Ok(memory.write(offset, src)?)
    })
}

/// How many importers hold mappings of memory this process allocated.
///
/// # Safety
///
/// `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_importers(memory: *const hal_memory, out: *mut usize) -> hal_status {
    call("hal_importers", || {
        need(out, "out")?;
        let memory = MEMORIES.get(memory as usize, "memory")?;
        let n = allocated(&memory, "hal_importers")?.importers()?;
        // SAFETY: checked not NULL above.
        unsafe { put(out, n, "out") }
    })
}

/// Block until no importer holds memory this process allocated, or
/// `timeout_ns` nanoseconds pass (`HAL_ERR_TIMEOUT`); a negative timeout
/// waits forever, zero looks once.
#[no_mangle]
pub extern "C" fn hal_wait_unleased(memory: *const hal_memory, timeout_ns: i64) -> hal_status {
    call("hal_wait_unleased", || {
        let memory = MEMORIES.get(memory as usize, "memory")?;
        let alloc = allocated(&memory, "hal_wait_unleased")?;
        Ok(alloc.wait_unleased(timeout(timeout_ns))?)
    })
}

/// A C timeout in nanoseconds: negative is forever.
pub(crate) fn timeout(ns: i64) -> Option<Duration> {
    u64::try_from(ns).ok().map(Duration::from_nanos)
}

/// Release memory: an import is unmapped; an allocation stops being
/// exported and is freed once no DLPack tensor made from it
/// (`hal_to_dlpack`) holds it. A second release is `HAL_ERR_DOUBLE_RELEASE`.
#[no_mangle]
pub extern "C" fn hal_memory_release(memory: *mut hal_memory) -> hal_status {
    call("hal_memory_release", || {
        MEMORIES.remove(memory as usize, "memory").map(drop)
    })
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use super::*;
    use crate::device::hal_device_open;
    use crate::last_error::hal_last_error;

    fn last() -> String {
        // SAFETY: hal_last_error never answers NULL, and its text lives
        // until this thread's next failure.
        unsafe { CStr::from_ptr(hal_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    fn cpu_shm() -> *mut hal_device {
        let mut device = std::ptr::null_mut();
        // SAFETY: a NUL-terminated name and a valid place for the device.
        let status = unsafe { hal_device_open(c"cpu-shm".as_ptr(), 0, &mut device) };
        assert_eq!(status, hal_status::HAL_OK, "{}", last());
        device
    }

    #[test]
    fn a_location_the_backend_lacks_is_named_as_c_names_it() {
        let device = cpu_shm();
        let mut memory = std::ptr::null_mut();
        // SAFETY: a device of this library and a valid place for the memory.
        let status = unsafe { hal_alloc(device, 4096, HAL_LOCATION_DEVICE, &mut memory) };
        assert_eq!(status, hal_status::HAL_ERR_UNSUPPORTED);
        let message = last();
        assert!(message.contains("HAL_LOCATION_HOST in C"), "{message}");
        assert!(message.contains("HAL_LOCATION_DEVICE in C"), "{message}");
        assert!(!message.contains("(use Location::Host)"), "{message}");
        assert_eq!(
            crate::device::hal_device_release(device),
            hal_status::HAL_OK
        );
    }

    #[test]
    fn reads_and_writes_out_of_range_are_told_in_decimal() {
        let device = cpu_shm();
        let mut memory = std::ptr::null_mut();
        // SAFETY: a device of this library and a valid place for the memory.
        let status = unsafe { hal_alloc(device, 8000, HAL_LOCATION_HOST, &mut memory) };
        assert_eq!(status, hal_status::HAL_OK, "{}", last());
        let mut size = 0;
        // SAFETY: a memory of this library and a valid place for the size.
        let status = unsafe { hal_memory_size(memory, &mut size) };
        assert_eq!(status, hal_status::HAL_OK);
        let mut bytes = [0u8; 2];
        // SAFETY: `bytes` holds the two bytes read or written.
        let read = unsafe { hal_read(memory, size - 1, bytes.as_mut_ptr().cast(), 2) };
        assert_eq!(read, hal_status::HAL_ERR_INVALID_ARGUMENT);
        let read_message = last();
        // SAFETY: as above.
        let write = unsafe { hal_write(memory, size - 1, bytes.as_ptr().cast(), 2) };
        assert_eq!(write, hal_status::HAL_ERR_INVALID_ARGUMENT);
        let write_message = last();
        let expected = format!(
            "2 bytes at offset {} is outside the {size}-byte range",
            size - 1
        );
        for message in [read_message, write_message] {
            assert!(message.contains(&expected), "{message}");
            assert!(!message.contains("0x"), "{message}");
        }
        assert_eq!(hal_memory_release(memory), hal_status::HAL_OK);
        assert_eq!(
            crate::device::hal_device_release(device),
            hal_status::HAL_OK
        );
    }
}
