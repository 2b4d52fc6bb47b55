//! This process's own exported events (a binary of its own: the table of
//! them is the process's). An import in the exporting process reaches the
//! original event, however many events were exported after it; the table
//! forgets an event once it is destroyed.

use hal_core::{Backend, Device, Event, EventFlags, ExportOptions, ImportOptions};
use hal_cuda::{own_exported_events, CudaBackend};

const IPC: EventFlags = EventFlags {
    interprocess: true,
    timing: false,
};

#[test]
fn each_exported_event_is_imported_here_and_forgotten_once_destroyed() {
    let dev = CudaBackend::with_library(hal_mock_libcuda::built_library())
        .open(0)
        .unwrap();
    let stream = dev.create_stream().unwrap();
    let events: Vec<_> = (0..3).map(|_| dev.create_event(IPC).unwrap()).collect();
    let exports: Vec<_> = events
        .iter()
        .map(|e| dev.export_event(e, &ExportOptions::default()).unwrap())
        .collect();
    assert_eq!(own_exported_events(), 3);
    for (n, ex) in exports.iter().enumerate() {
        let imported = dev
            .import_event(ex.share().unwrap(), &ImportOptions::default())
            .unwrap_or_else(|e| panic!("event {n}, exported before others: {e}"));
        dev.record_event(&stream, &events[n]).unwrap();
        dev.synchronize(&stream, None).unwrap();
        assert!(imported.query().unwrap(), "event {n} is the original");
    }
    drop(exports);
    drop(events);
    let last = dev.create_event(IPC).unwrap();
    let _ex = dev.export_event(&last, &ExportOptions::default()).unwrap();
    assert_eq!(
        own_exported_events(),
        1,
        "the destroyed events are forgotten at the next export"
    );
}
