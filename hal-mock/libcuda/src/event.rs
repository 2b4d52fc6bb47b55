//! Events.

use std::ffi::c_uint;
use std::sync::Arc;

use cudarc::driver::sys::{CUevent, CUevent_st, CUresult, CUstream};
use hal_core::kit::vendor::{cuda, Code};
use hal_core::{Device, Event, EventFlags, WaitOptions};
use hal_mock::MockEvent;

use crate::abi::{guard, non_null, put};
use crate::context::current;
use crate::error::sim;
use crate::state::{driver, lock, Driver, EventEntry};
use crate::stream::stream_of;

/// `CU_EVENT_BLOCKING_SYNC`.
const BLOCKING_SYNC: c_uint = 1;
/// `CU_EVENT_DISABLE_TIMING`.
const DISABLE_TIMING: c_uint = 2;
/// `CU_EVENT_INTERPROCESS`.
const INTERPROCESS: c_uint = 4;

/// The event `h` names; `CUDA_ERROR_INVALID_HANDLE` for a value that is
/// no live event.
pub(crate) fn event_of(d: &Driver, h: CUevent) -> Result<Arc<MockEvent>, Code> {
    current(d)?;
    lock(&d.events)
        .get(&h.addr())
        .map(|e| Arc::clone(&e.event))
        .ok_or(cuda::INVALID_HANDLE)
}

/// Creates an event in the current context; `CU_EVENT_INTERPROCESS` needs
/// `CU_EVENT_DISABLE_TIMING` (measured on driver 580).
#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(ph_event: *mut CUevent, flags: c_uint) -> CUresult {
    guard("cuEventCreate", || {
        let d = driver()?;
        let ordinal = current(d)?;
        non_null(ph_event)?;
        if flags & !(BLOCKING_SYNC | DISABLE_TIMING | INTERPROCESS) != 0 {
            return Err(cuda::INVALID_VALUE);
        }
        let interprocess = flags & INTERPROCESS != 0;
        let timing = flags & DISABLE_TIMING == 0;
        if interprocess && timing {
            return Err(cuda::INVALID_VALUE);
        }
        let flags = EventFlags {
            interprocess,
            timing,
        };
        let event = sim(d.devices[ordinal as usize].device.create_event(flags))?;
        let id = d.new_handle();
        let entry = EventEntry {
            event: Arc::new(event),
            ordinal,
            ipc: None,
        };
        lock(&d.events).insert(id, entry);
        // SAFETY: `ph_event` is not null and valid for a write (the caller's contract).
        unsafe { put(ph_event, std::ptr::without_provenance_mut::<CUevent_st>(id)) }
    })
}

/// Destroys an event; an opened IPC event is released (the exporter's
/// event lives on). The exporter's destroy of an IPC event takes effect at
/// once: the processes that opened it get `CUDA_ERROR_UNKNOWN` from then on
/// (`ipc_event.rs`).
#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(h_event: CUevent) -> CUresult {
    guard("cuEventDestroy_v2", || {
        let d = driver()?;
        current(d)?;
        let entry = lock(&d.events)
            .remove(&h_event.addr())
            .ok_or(cuda::INVALID_HANDLE)?;
        if entry.ipc.is_some() {
            // The driver does not wait for the processes that opened the
            // event: their later use of it is undefined
            // (`cuIpcOpenEventHandle`), so here it fails at once.
            entry.event.destroy_at_once();
        }
        Ok(())
    })
}

/// Records the event on the stream, after the work queued before it.
#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(h_event: CUevent, h_stream: CUstream) -> CUresult {
    guard("cuEventRecord", || {
        let d = driver()?;
        let event = event_of(d, h_event)?;
        let (stream, ordinal) = stream_of(d, h_stream)?;
        sim(d.devices[ordinal as usize]
            .device
            .record_event(&stream, &event))
    })
}

/// `CUDA_SUCCESS` when the work before the event's last record has run,
/// `CUDA_ERROR_NOT_READY` while some is pending.
#[no_mangle]
pub unsafe extern "C" fn cuEventQuery(h_event: CUevent) -> CUresult {
    guard("cuEventQuery", || {
        let event = event_of(driver()?, h_event)?;
        match sim(event.query())? {
            true => Ok(()),
            false => Err(cuda::NOT_READY),
        }
    })
}

/// Waits until the work before the event's last record has run.
#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(h_event: CUevent) -> CUresult {
    guard("cuEventSynchronize", || {
        let event = event_of(driver()?, h_event)?;
        sim(event.wait(WaitOptions::default()))
    })
}

/// Makes later work of the stream wait for the event's last record
/// (`flags` must be 0).
#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent(
    h_stream: CUstream,
    h_event: CUevent,
    flags: c_uint,
) -> CUresult {
    guard("cuStreamWaitEvent", || {
        if flags != 0 {
            return Err(cuda::INVALID_VALUE);
        }
        let d = driver()?;
        let event = event_of(d, h_event)?;
        let (stream, ordinal) = stream_of(d, h_stream)?;
        sim(d.devices[ordinal as usize]
            .device
            .stream_wait_event(&stream, &event))
    })
}

/// The milliseconds between the completions of the latest records of
/// `h_start` and `h_end`. Events created without timing, IPC events and
/// opened IPC events answer `CUDA_ERROR_INVALID_HANDLE` (measured on an
/// opened one); records not both completed `CUDA_ERROR_NOT_READY`.
#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(
    pms: *mut f32,
    h_start: CUevent,
    h_end: CUevent,
) -> CUresult {
    guard("cuEventElapsedTime", || {
        let d = driver()?;
        non_null(pms)?;
        let start = event_of(d, h_start)?;
        let end = event_of(d, h_end)?;
        let ordinal = lock(&d.events)
            .get(&h_start.addr())
            .map(|e| e.ordinal)
            .ok_or(cuda::INVALID_HANDLE)?;
        let took = sim(d.devices[ordinal as usize]
            .device
            .event_elapsed(&start, &end))?;
        let ms = took.as_secs_f64() * 1000.0;
        // SAFETY: `pms` is not null and valid for a write (the caller's contract).
        unsafe { put(pms, ms as f32) }
    })
}
