//! IPC of events: `cuIpcGetEventHandle` and `cuIpcOpenEventHandle`.
//!
//! The 64 bytes name an envelope holding the simulator's export of the
//! event (`envelope.rs`), made at the first `cuIpcGetEventHandle` and kept
//! with the event; later calls return the same bytes. Opening fetches the
//! envelope from the exporter's broker and imports the event with the
//! simulator, which takes a lease on it. As on the driver, the exporter's
//! destroy of the event does not wait for its openers; using it afterwards
//! is undefined there, and here every later record, query or wait of an
//! opener answers `CUDA_ERROR_UNKNOWN`, so that a backend that destroys an
//! event too early fails its tests. `cuEventDestroy_v2` of an opened event
//! releases it.
//!
//! As the driver (`vendor/cuda.md`): only an event created with
//! `CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING` has a handle; for any
//! other event the simulator's vendor rule answers
//! `CUDA_ERROR_INVALID_VALUE` (the driver's documented list for this call;
//! not measured). An opened event answers `cuEventQuery` and
//! `cuStreamWaitEvent`, and `cuEventElapsedTime` with
//! `CUDA_ERROR_INVALID_HANDLE` (measured). Opening in the exporting process
//! works here (not measured on the driver).

use std::sync::Arc;

use cudarc::driver::sys::{CUevent, CUevent_st, CUipcEventHandle, CUresult};
use hal_core::kit::vendor::{cuda, Code};
use hal_core::{BackendId, Device, ExportOptions, HandleKind, ImportOptions, Importers};

use crate::abi::{guard, non_null, put};
use crate::context::current;
use crate::envelope::{self, Names, Wire};
use crate::error::sim;
use crate::ipc_table::EventExport;
use crate::state::{driver, lock, Driver, EventEntry};

/// `cuIpcGetEventHandle` of the event `h`: its 64 bytes.
fn get(d: &Driver, h: CUevent) -> Result<[u8; 64], Code> {
    current(d)?;
    let mut events = lock(&d.events);
    let entry = events.get_mut(&h.addr()).ok_or(cuda::INVALID_HANDLE)?;
    if let Some(e) = &entry.ipc {
        return Ok(e.bytes);
    }
    let device = &d.devices[entry.ordinal as usize].device;
    let opts = ExportOptions {
        importers: Importers::Anyone,
        ..ExportOptions::default()
    };
    let event = sim(device.export_event(&entry.event, &opts))?;
    let (envelope, bytes) = envelope::seal(&event.to_text(), Names::Event, 0)?;
    entry.ipc = Some(EventExport {
        bytes,
        _event: event,
        _envelope: envelope,
    });
    Ok(bytes)
}

/// `cuIpcOpenEventHandle`: a new event of the current context, the same
/// as the exporter's.
fn open(d: &Driver, bytes: [u8; 64]) -> Result<usize, Code> {
    let ordinal = current(d)?;
    let wire = Wire::decode(&bytes)?;
    if wire.names != Names::Event {
        return Err(cuda::INVALID_VALUE);
    }
    let inner = envelope::open(&wire)?;
    if inner.kind != HandleKind::Event || inner.backend != BackendId::MockCuda {
        return Err(cuda::INVALID_VALUE);
    }
    let options = ImportOptions {
        device: Some(ordinal),
        ..ImportOptions::default()
    };
    let device = &d.devices[ordinal as usize].device;
    let event = sim(device.import_event(inner.into(), &options))?;
    let id = d.new_handle();
    let entry = EventEntry {
        event: Arc::new(event),
        ordinal,
        ipc: None,
    };
    lock(&d.events).insert(id, entry);
    Ok(id)
}

/// Gives the 64-byte IPC handle of an event created with
/// `CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING`.
#[no_mangle]
pub unsafe extern "C" fn cuIpcGetEventHandle(
    p_handle: *mut CUipcEventHandle,
    event: CUevent,
) -> CUresult {
    guard("cuIpcGetEventHandle", || {
        let d = driver()?;
        current(d)?;
        non_null(p_handle)?;
        let bytes = get(d, event)?;
        let out = CUipcEventHandle {
            reserved: bytes.map(|b| b as _),
        };
        // SAFETY: `p_handle` is not null and valid for a write (the caller's contract).
        unsafe { put(p_handle, out) }
    })
}

/// Opens another process's IPC event by its handle, in the current context;
/// destroy it with `cuEventDestroy_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuIpcOpenEventHandle(
    ph_event: *mut CUevent,
    handle: CUipcEventHandle,
) -> CUresult {
    guard("cuIpcOpenEventHandle", || {
        let d = driver()?;
        current(d)?;
        non_null(ph_event)?;
        let id = open(d, handle.reserved.map(|b| b as u8))?;
        // SAFETY: `ph_event` is not null and valid for a write (the caller's contract).
        unsafe { put(ph_event, std::ptr::without_provenance_mut::<CUevent_st>(id)) }
    })
}
