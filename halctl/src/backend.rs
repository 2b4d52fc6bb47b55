//! Choosing a backend and a device by name or by handle.

use hal::dynamic::{DynBackend, DynDevice};
use hal::registry::Registry;
use hal::{BackendId, Handle};

use crate::fail::{CmdResult, Context, Fail};

/// Every backend hal knows, compiled in or not, in the registry's preference order.
pub const KNOWN: [BackendId; 6] = [
    BackendId::Cuda,
    BackendId::CudaUvm,
    BackendId::Ascend,
    BackendId::CpuShm,
    BackendId::MockCuda,
    BackendId::MockAscend,
];

/// The registry name for what the user typed: `mock` is short for `mock-cuda`.
pub fn canonical(name: &str) -> String {
    let n = name.trim().to_ascii_lowercase().replace('_', "-");
    match n.as_str() {
        "mock" => BackendId::MockCuda.name(),
        _ => n,
    }
}

/// Open a backend by name.
///
/// A name hal does not know is bad input (exit 2); a known backend that this
/// build lacks or that cannot run on this machine is a failed operation
/// (exit 1), with the reason.
pub fn open(registry: &Registry, name: &str) -> CmdResult<Box<dyn DynBackend>> {
    let want = canonical(name);
    let entries = registry.entries();
    if let Some(entry) = entries.iter().find(|e| e.name == want) {
        if let hal::Availability::Unavailable { reason, .. } = &entry.availability {
            return Err(Fail::failed(format!(
                "backend `{want}` is unavailable on this machine: {reason}"
            )));
        }
        return registry
            .open(&want)
            .ctx(&format!("opening backend `{want}`"));
    }
    let compiled: Vec<String> = entries.iter().map(|e| e.name.to_string()).collect();
    if KNOWN.iter().any(|id| id.name() == want) {
        return Err(Fail::failed(format!(
            "backend `{want}` is not compiled into this build of halctl (it has: {})",
            compiled.join(", ")
        )));
    }
    Err(Fail::usage(format!(
        "unknown backend `{name}` (this build has: {}; `mock` means mock-cuda)",
        compiled.join(", ")
    )))
}

/// Open device `ordinal` of `backend`.
pub fn device(backend: &dyn DynBackend, ordinal: u32) -> CmdResult<Box<dyn DynDevice>> {
    backend
        .open(ordinal)
        .ctx(&format!("opening device {ordinal} of `{}`", backend.name()))
}

/// The backend and device a handle belongs to: the device with the
/// exporter's UUID ([`hal::dynamic::DynBackend::device_for`]).
pub fn for_handle(
    registry: &Registry,
    handle: &Handle,
) -> CmdResult<(Box<dyn DynBackend>, Box<dyn DynDevice>)> {
    let backend = registry.for_handle(handle).ctx(&format!(
        "finding backend `{}` for the handle",
        handle.backend
    ))?;
    let ordinal = backend
        .device_for(handle)
        .ctx("finding the handle's device")?;
    let dev = device(backend.as_ref(), ordinal)?;
    Ok((backend, dev))
}
