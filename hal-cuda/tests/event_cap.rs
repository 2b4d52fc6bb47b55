//! The cap on live IPC events (a binary of its own: the cap is the
//! process's): past it an interprocess event has no driver handle and
//! `record_event` synchronizes the stream, so that importers find it
//! complete; below it again, IPC events are the driver's. The first event
//! past the cap logs one warning for the process.

use hal_core::DeviceExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hal_core::{Backend, Device, Event, EventFlags, ExportOptions, ImportOptions, Notify};
use hal_cuda::{live_ipc_events, set_ipc_event_cap, CudaBackend};

mod common;

/// The words of the cap's warning.
const WARNING: &str = "CUDA IPC events are alive in this process";

const IPC: EventFlags = EventFlags {
    interprocess: true,
    timing: false,
};

/// The stand-in driver cargo built for this test.
fn standin() -> std::path::PathBuf {
    hal_mock_libcuda::built_library()
}

#[test]
fn past_the_cap_recording_synchronizes_the_stream() {
    hal_tests::warnings::capture();
    set_ipc_event_cap(1);
    let dev = CudaBackend::with_library(standin()).open(0).unwrap();
    let stream = dev.create_stream().unwrap();
    let gate = dev.create_notify().unwrap();
    dev.stream_wait_notify(&stream, &gate, None).unwrap();

    let driver_event = dev.create_event(IPC).unwrap();
    assert_eq!(live_ipc_events(), 1);
    let past = dev.create_event(IPC).unwrap();
    assert_eq!(live_ipc_events(), 1, "past the cap: no driver IPC event");
    let warned = hal_tests::warnings::containing(WARNING);
    assert_eq!(
        warned.len(),
        1,
        "the first event past the cap warns: {warned:?}"
    );
    assert!(
        warned[0].contains("1 CUDA IPC events"),
        "it names the cap: {}",
        warned[0]
    );
    let also_past = dev.create_event(IPC).unwrap();
    assert_eq!(live_ipc_events(), 1);
    assert_eq!(
        hal_tests::warnings::containing(WARNING).len(),
        1,
        "later events past the cap do not warn again"
    );
    dev.record_event(&stream, &driver_event).unwrap();
    assert!(!driver_event.query().unwrap(), "behind the gate");
    // Exported, never imported: dropped, it gives its slot back at once.
    let driver_ex = dev
        .export_event(&driver_event, &ExportOptions::default())
        .unwrap();

    let ex = dev.export_event(&past, &ExportOptions::default()).unwrap();
    let imported = dev
        .import_event(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let opened = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            opened.store(true, Ordering::SeqCst);
            gate.signal().unwrap();
        });
        dev.record_event(&stream, &past).unwrap();
        assert!(
            opened.load(Ordering::SeqCst),
            "the record returned only after the gate opened and the stream ran"
        );
    });
    assert!(past.query().unwrap(), "complete when the record returns");
    assert!(imported.query().unwrap());
    assert!(driver_event.query().unwrap());
    dev.stream_wait_event(&stream, &imported).unwrap();
    dev.synchronize(&stream, Some(Duration::from_secs(10)))
        .unwrap();
    drop((imported, ex, past, also_past, driver_ex, driver_event));
    assert_eq!(
        live_ipc_events(),
        0,
        "the slot comes back with the event, an exported one with no importer too"
    );
    let again = dev.create_event(IPC).unwrap();
    assert_eq!(live_ipc_events(), 1, "below the cap: a driver IPC event");
    drop(again);
    set_ipc_event_cap(hal_cuda::DEFAULT_IPC_EVENT_CAP);
}
