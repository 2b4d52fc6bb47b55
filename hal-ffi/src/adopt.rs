//! Memory another library of this process allocated, adopted by address
//! (`hal_adopt`): a C++ producer's `cudaMalloc` buffer or a framework's
//! tensor shared without a copy.

use std::sync::Arc;

use crate::device::{hal_device, need, put, DEVICES};
use crate::last_error::call;
use crate::memory::{hal_memory, MemoryObj, MEMORIES};
use crate::status::hal_status;

/// Adopt `size` bytes at the device address `addr` (a `CUdeviceptr` on
/// CUDA), memory another library of this process allocated, as memory that
/// `hal_export`, `hal_export_tensor`, `hal_read`, `hal_write` and
/// `hal_importers` take like hal's own: the backend finds the vendor
/// allocation that holds the range (`cuMemGetAddressRange`), refuses a range
/// that leaves it or lies on another device (`HAL_ERR_INVALID_ARGUMENT`,
/// or the vendor's refusal, `HAL_ERR_VENDOR`), and an export keeps the
/// whole-page rule (`HAL_ERR_MISALIGNED`, never widened). Releasing the
/// adopted memory never frees it. Backends that cannot adopt memory
/// (`cpu-shm`) answer `HAL_ERR_UNSUPPORTED`.
///
/// # Safety
///
/// `addr .. addr + size` is memory of the device's vendor runtime, and it
/// stays allocated until the adopted memory is released and no importer
/// maps it any more (`hal_wait_unleased` first, then `hal_memory_release`,
/// then free it). `out` is NULL or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_adopt(
    device: *mut hal_device,
    addr: u64,
    size: u64,
    out: *mut *mut hal_memory,
) -> hal_status {
    call("hal_adopt", || {
        need(out, "out")?;
        let device = DEVICES.get(device as usize, "device")?;
        // SAFETY: the caller gives this function's promise, which is
        // `adopt_memory`'s.
        let alloc = unsafe { device.device.adopt_memory(addr, size) }?;
        let token = MEMORIES.insert(Arc::new(MemoryObj::adopted(device, alloc, None)));
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_memory, "out") }
    })
}
