//! The per-thread current context: a framework's context made current on a
//! thread stays current across every call and drop of the simulator, on
//! any device and any thread.

use hal_core::testing::ContextProbe;
use hal_core::DeviceExt;
use hal_core::{
    AllocDesc, Backend, Device, Event, EventFlags, ExportOptions, ImportOptions, Memory, Notify,
    WaitOptions,
};
use hal_mock::context::{self, Context};
use hal_mock::MockBackend;

const PAGE: u64 = 4096;
const LONG: std::time::Duration = std::time::Duration::from_secs(20);

/// Run the calls of a full cycle on device `ordinal` of `backend`.
fn full_cycle(backend: &MockBackend, ordinal: u32) {
    let dev = backend.open(ordinal).unwrap();
    let a = dev.allocate(&AllocDesc::device(ordinal, 2 * PAGE)).unwrap();
    a.write(0, b"ctx").unwrap();
    let stream = dev.create_stream().unwrap();
    let event = dev
        .create_event(EventFlags {
            interprocess: true,
            timing: false,
        })
        .unwrap();
    dev.record_event(&stream, &event).unwrap();
    event.wait(WaitOptions::timeout(LONG)).unwrap();
    let notify = dev.create_notify().unwrap();
    notify.signal().unwrap();
    notify.wait(WaitOptions::timeout(LONG)).unwrap();
    let ex = dev
        .export_memory(
            &a,
            &ExportOptions {
                importers: hal_core::Importers::Anyone,
                ..ExportOptions::default()
            },
        )
        .unwrap();
    let m = dev
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let mut got = [0u8; 3];
    m.read(0, &mut got).unwrap();
    assert_eq!(&got, b"ctx");
    dev.synchronize_device(Some(LONG)).unwrap();
    drop((m, ex, notify, event, stream, a));
}

#[test]
fn a_framework_context_stays_current_across_every_call() {
    for backend in [MockBackend::cuda(), MockBackend::ascend()] {
        let theirs = MockBackend::cuda().open(1).unwrap().context();
        for current in [None, Some(theirs), Some(backend.open(1).unwrap().context())] {
            context::make_current(current);
            full_cycle(&backend, 0);
            assert_eq!(context::current(), current, "{:?}", backend.profile().name);
        }
        context::make_current(None);
    }
}

#[test]
fn resources_move_between_threads_and_leave_each_context_alone() {
    let backend = MockBackend::cuda();
    let dev = backend.open(0).unwrap();
    let foreign: Context = MockBackend::ascend().open(0).unwrap().context();
    let (a, notify) = std::thread::spawn({
        let dev = backend.open(0).unwrap();
        move || {
            context::make_current(Some(foreign));
            let a = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
            let n = dev.create_notify().unwrap();
            assert_eq!(context::current(), Some(foreign));
            (a, n)
        }
    })
    .join()
    .unwrap();
    std::thread::spawn(move || {
        a.write(0, b"moved").unwrap();
        notify.signal().unwrap();
        notify.wait(WaitOptions::timeout(LONG)).unwrap();
        assert_eq!(context::current(), None, "a fresh thread has none");
        drop((a, notify));
        assert_eq!(context::current(), None, "drops leave none current");
    })
    .join()
    .unwrap();
    assert_ne!(dev.context(), foreign, "contexts of two instances differ");
    assert_ne!(
        dev.context(),
        backend.open(1).unwrap().context(),
        "contexts of two devices differ"
    );
    assert_eq!(dev.current_context().unwrap(), None);
}
