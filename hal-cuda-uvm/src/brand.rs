//! Handles name this backend: what the GPU or the host exports is renamed
//! for `cuda-uvm` and the GPU's device, and restored before the GPU or the
//! host imports it. A handle of any other backend is refused.

use hal_core::{BackendId, DeviceInfo, Exported, HandleError, Result, SharedHandle};

/// `exported`, named for this backend's device `info`.
pub fn ours(mut exported: Exported, info: &DeviceInfo) -> Exported {
    exported.set_device(BackendId::CudaUvm, info.ordinal, info.uuid);
    exported
}

/// Refuse a handle that names another backend than this one.
pub fn check(shared: &SharedHandle) -> Result<()> {
    let found = shared.handle.backend;
    if found != BackendId::CudaUvm {
        return Err(HandleError::WrongBackend {
            expected: BackendId::CudaUvm.to_string(),
            found: found.to_string(),
        }
        .into());
    }
    Ok(())
}

/// `shared`, a handle of this backend, renamed for the GPU backend `gpu`
/// that exported it.
pub fn theirs(mut shared: SharedHandle, gpu: BackendId) -> Result<SharedHandle> {
    check(&shared)?;
    shared.handle.backend = gpu;
    Ok(shared)
}

/// `shared`, a handle of this backend naming a shared managed buffer,
/// renamed for `hal-cpu-shm`'s host device `host`, which exported its pages.
pub fn host(mut shared: SharedHandle, host: &DeviceInfo) -> Result<SharedHandle> {
    check(&shared)?;
    if let hal_core::Location::Device(d) = shared.handle.location {
        return Err(hal_core::Error::invalid(format!(
            "the handle names device memory of GPU {d}, not a shared managed buffer: import it \
             on a UvmDevice"
        )));
    }
    shared.handle.backend = host.backend;
    shared.handle.device = host.ordinal;
    shared.handle.device_uuid = host.uuid;
    Ok(shared)
}
