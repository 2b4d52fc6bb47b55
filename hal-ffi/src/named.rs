//! Named regions of CPU shared memory: opened by name by any process of the
//! same user (Python's `multiprocessing.shared_memory` too).

use std::ffi::c_char;

use crate::last_error::call;
use crate::memory::hal_memory;
use crate::status::hal_status;
use crate::text::str_arg;

#[cfg(feature = "cpu-shm")]
mod imp {
    use std::sync::Arc;

    use hal_facade::cpu_shm::{named, NamedOptions};
    use hal_facade::dynamic::DynAllocation;

    use crate::memory::{MemoryObj, MEMORIES};
    use crate::status::Failure;
    use hal_facade::objects::open_device;

    /// A named region as a memory object on the CPU shared-memory device.
    pub(super) fn keep(
        made: hal_facade::Result<hal_facade::cpu_shm::CpuAllocation>,
    ) -> Result<usize, Failure> {
        let alloc: Box<dyn DynAllocation> = Box::new(made?);
        let device = Arc::new(open_device(Some("cpu-shm"), 0)?);
        Ok(MEMORIES.insert(Arc::new(MemoryObj::allocation(device, alloc))))
    }

    pub(super) fn create(name: &str, size: u64) -> Result<usize, Failure> {
        keep(named::create_named(name, size, &NamedOptions::default()))
    }

    pub(super) fn open(name: &str) -> Result<usize, Failure> {
        keep(named::open_named(name, None))
    }
}

#[cfg(not(feature = "cpu-shm"))]
mod imp {
    use crate::status::{hal_status, Failure};

    fn absent() -> Failure {
        Failure::new(
            hal_status::HAL_ERR_UNSUPPORTED,
            "named regions need the cpu-shm backend, which this library was built without",
        )
    }

    pub(super) fn create(_: &str, _: u64) -> Result<usize, Failure> {
        Err(absent())
    }

    pub(super) fn open(_: &str) -> Result<usize, Failure> {
        Err(absent())
    }
}

/// Create the named region `name` (`/dev/shm/NAME`; letters, digits, `.`,
/// `_`, `-`) of `size` bytes, zero-filled; `HAL_ERR_ALREADY_EXISTS` when the
/// name is taken. The name is removed when this memory is released; other
/// processes open it with `hal_named_open` meanwhile. CPU shared memory only.
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string; `out` is NULL or valid for a
/// write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_named_create(
    name: *const c_char,
    size: u64,
    out: *mut *mut hal_memory,
) -> hal_status {
    call("hal_named_create", || {
        crate::device::need(out, "out")?;
        // SAFETY: per the contract.
        let name = unsafe { str_arg(name, "name") }?;
        let token = imp::create(name, size)?;
        // SAFETY: checked not NULL above.
        unsafe { crate::device::put(out, token as *mut hal_memory, "out") }
    })
}

/// Open the named region `name` that another process created;
/// `HAL_ERR_NOT_FOUND` when there is none.
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string; `out` is NULL or valid for a
/// write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_named_open(
    name: *const c_char,
    out: *mut *mut hal_memory,
) -> hal_status {
    call("hal_named_open", || {
        crate::device::need(out, "out")?;
        // SAFETY: per the contract.
        let name = unsafe { str_arg(name, "name") }?;
        let token = imp::open(name)?;
        // SAFETY: checked not NULL above.
        unsafe { crate::device::put(out, token as *mut hal_memory, "out") }
    })
}
