//! The allocations of this process that are alive, by the DLPack device and
//! data pointer a tensor of them has: `hal.share` of an array that lives in
//! hal's memory (`numpy.from_dlpack(m)`, a slice of it) exports that memory
//! instead of copying it.

use std::sync::{Arc, Mutex, Weak};

use hal::dlpack::dl_device;

use crate::memory_obj::MemoryObj;

/// One allocation: its DLPack device, where its bytes start as a tensor's
/// data pointer gives them, its length.
struct Entry {
    device: (i32, i32),
    start: u64,
    len: u64,
    memory: Weak<MemoryObj>,
}

static LIVE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// The data pointer a DLPack tensor of `memory` on `device_type` has: the
/// host address for host types, the device's address otherwise.
fn data_start(memory: &MemoryObj, device_type: i32) -> Option<u64> {
    use hal::dlpack::DLDeviceType;
    if device_type == DLDeviceType::CPU.0 || device_type == DLDeviceType::CUDA_HOST.0 {
        hal::Memory::host_ptr(memory).map(|p| p as usize as u64)
    } else {
        Some(hal::Memory::addr(memory))
    }
}

/// Remember an allocation (imports are not remembered: they cannot be
/// exported again).
pub(crate) fn remember(memory: &Arc<MemoryObj>) {
    if memory.own_allocation().is_none() {
        return;
    }
    let Ok(device) = dl_device(
        memory.device.device.info(),
        hal::Memory::location(&**memory),
    ) else {
        return;
    };
    let Some(start) = data_start(memory, device.device_type.0) else {
        return;
    };
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|e| e.memory.strong_count() > 0);
    live.push(Entry {
        device: (device.device_type.0, device.device_id),
        start,
        len: hal::Memory::len(&**memory),
        memory: Arc::downgrade(memory),
    });
}

/// The live allocation that holds `len` bytes at `ptr` on `device`, and the
/// offset of `ptr` in it.
pub(crate) fn find(device: (i32, i32), ptr: u64, len: u64) -> Option<(Arc<MemoryObj>, u64)> {
    let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.iter().find_map(|e| {
        let end = ptr.checked_add(len)?;
        if e.device != device || ptr < e.start || end > e.start + e.len {
            return None;
        }
        Some((e.memory.upgrade()?, ptr - e.start))
    })
}
