//! Backends and devices: `hal_backends`, `hal_device_open`, ...

use std::ffi::c_char;
use std::sync::Arc;

use hal_facade::objects::{open_device, DeviceObj};
use hal_facade::{Availability, Registry};

use crate::last_error::call;
use crate::status::{hal_status, Failure};
use crate::table::{Kind, Table};
use crate::text::{give_text, str_arg};

/// An open device (opaque). Release it with `hal_device_release`; memory,
/// notifies and events made on it keep what they need of it alive.
#[allow(non_camel_case_types)]
pub struct hal_device {
    _private: [u8; 0],
}

/// The version of this ABI: the major version times 1000 plus the minor.
/// A program checks `hal_abi_version() / 1000 == HAL_ABI_VERSION / 1000`.
pub const HAL_ABI_VERSION: u32 = 1000;

/// This process's registry ([`Registry::this_process`]): a child forked
/// from a process that used it gets its own at its first call, so that
/// "open the backend again in the child" works.
fn registry() -> Arc<Registry> {
    Registry::this_process()
}

pub(crate) static DEVICES: Table<DeviceObj> = Table::new(Kind::Device);

/// Write `value` to the out-parameter `out`.
///
/// # Safety
///
/// `out` is NULL or valid for a write of `T`.
pub(crate) unsafe fn put<T>(out: *mut T, value: T, argument: &str) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::null(argument));
    }
    // SAFETY: not NULL, and valid per this function's contract.
    unsafe { out.write(value) };
    Ok(())
}

/// Fail unless the out-parameter `out` is set, before any work is done.
pub(crate) fn need<T>(out: *mut T, argument: &str) -> Result<(), Failure> {
    if out.is_null() {
        Err(Failure::null(argument))
    } else {
        Ok(())
    }
}

/// The version of the ABI this library implements (`HAL_ABI_VERSION` of
/// the header it was built with).
#[no_mangle]
pub extern "C" fn hal_abi_version() -> u32 {
    HAL_ABI_VERSION
}

/// Every backend compiled into the library, one line each, in preference
/// order: its name, a tab, then `available`, or `unavailable: ` and why
/// (the vendor library missing, no device, ...). Free the text with
/// `hal_string_free`.
///
/// # Safety
///
/// `out_text` is NULL or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_backends(out_text: *mut *mut c_char) -> hal_status {
    call("hal_backends", || {
        need(out_text, "out_text")?;
        let mut text = String::new();
        for entry in registry().entries() {
            text.push_str(&entry.name);
            match entry.availability {
                Availability::Available => text.push_str("\tavailable\n"),
                Availability::Unavailable { reason, .. } => {
                    text.push_str("\tunavailable: ");
                    text.push_str(&reason.replace('\n', " "));
                    text.push('\n');
                }
            }
        }
        // SAFETY: checked not NULL above; valid per the contract.
        unsafe { give_text(out_text, text) };
        Ok(())
    })
}

/// Open device `ordinal` of the backend called `backend` (`cpu-shm`,
/// `mock-cuda`, `cuda`, `cuda-uvm`, `ascend`, `template`, or a backend of
/// another crate registered at run time under its name; NULL: the best usable
/// one, hardware first). An unknown name or one not compiled in is
/// `HAL_ERR_NOT_FOUND`; a backend unusable here is `HAL_ERR_UNAVAILABLE`,
/// with the reason in `hal_last_error()`.
///
/// # Safety
///
/// `backend` is NULL or a NUL-terminated string; `out` is NULL or valid
/// for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_device_open(
    backend: *const c_char,
    ordinal: u32,
    out: *mut *mut hal_device,
) -> hal_status {
    call("hal_device_open", || {
        need(out, "out")?;
        let name = if backend.is_null() {
            None
        } else {
            // SAFETY: not NULL, NUL-terminated per the contract.
            Some(unsafe { str_arg(backend, "backend") }?)
        };
        let device = open_device(name, ordinal)?;
        let token = DEVICES.insert(Arc::new(device));
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_device, "out") }
    })
}

/// Release a device. Memory, notifies and events made on it stay usable
/// until they are released. A second release is `HAL_ERR_DOUBLE_RELEASE`.
#[no_mangle]
pub extern "C" fn hal_device_release(device: *mut hal_device) -> hal_status {
    call("hal_device_release", || {
        DEVICES.remove(device as usize, "device").map(drop)
    })
}

/// The registry name of the device's backend (`cpu-shm`, `mock-cuda`, ...);
/// free it with `hal_string_free`.
///
/// # Safety
///
/// `out_name` is NULL or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_device_backend(
    device: *const hal_device,
    out_name: *mut *mut c_char,
) -> hal_status {
    call("hal_device_backend", || {
        need(out_name, "out_name")?;
        let device = DEVICES.get(device as usize, "device")?;
        // SAFETY: checked not NULL above.
        unsafe { give_text(out_name, device.backend.name()) };
        Ok(())
    })
}

/// This process's id as the device's runtime knows it: what another
/// process puts in its `HAL_IMPORTERS_PIDS` list to let this one import.
/// The operating system's pid on most backends; on Ascend the runtime's
/// own process id, which differs from it. Send it to the exporter before
/// it exports.
///
/// # Safety
///
/// `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_device_process_id(
    device: *const hal_device,
    out: *mut u32,
) -> hal_status {
    call("hal_device_process_id", || {
        need(out, "out")?;
        let device = DEVICES.get(device as usize, "device")?;
        let id = device.device.process_id()?;
        // SAFETY: checked not NULL above.
        unsafe { put(out, id, "out") }
    })
}

/// Whether the device has the capability labelled `capability`:
/// `memory-is-host` (allocate `HAL_LOCATION_HOST` and use
/// `hal_memory_host_ptr`), `pid-allow-list` (exports can name their
/// importers' pids), `pid-allow-list-default-on` (an export without pids
/// admits nobody), `ipc-event`, `ipc-notify`, `creator-only-notify-wait`,
/// `managed-memory`, `read-only-export`, `growable`, ... (the labels
/// `halctl devices` lists for each device). An unknown label is
/// `HAL_ERR_NOT_FOUND`.
///
/// # Safety
///
/// `capability` is NULL or a NUL-terminated string; `out` is NULL or valid
/// for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_device_has(
    device: *const hal_device,
    capability: *const c_char,
    out: *mut bool,
) -> hal_status {
    call("hal_device_has", || {
        need(out, "out")?;
        let device = DEVICES.get(device as usize, "device")?;
        // SAFETY: per the contract.
        let label = unsafe { str_arg(capability, "capability") }?;
        let (flag, _) = hal_facade::Capabilities::ALL
            .iter()
            .find(|(_, l)| *l == label)
            .ok_or_else(|| {
                let labels: Vec<&str> = hal_facade::Capabilities::ALL
                    .iter()
                    .map(|(_, l)| *l)
                    .collect();
                Failure::new(
                    hal_status::HAL_ERR_NOT_FOUND,
                    format!(
                        "no capability `{label}`; the capabilities are: {}",
                        labels.join(", ")
                    ),
                )
            })?;
        let has = device.device.capabilities().contains(*flag);
        // SAFETY: checked not NULL above.
        unsafe { put(out, has, "out") }
    })
}
