//! Streams, events and notifies in one process (the cross-process cases are
//! in cross.rs).

use hal_core::DeviceExt;
use std::sync::Arc;
use std::time::Duration;

use hal_core::wait::block_on;
use hal_core::{
    Device, Error, Event, EventFlags, ExportOptions, HandleError, HandleKind, ImportOptions,
    Notify, WaitOptions,
};
use hal_cpu_shm::CpuDevice;

fn short(ms: u64, spin_us: u64) -> WaitOptions {
    WaitOptions {
        timeout: Some(Duration::from_millis(ms)),
        spin: Duration::from_micros(spin_us),
    }
}

#[test]
fn notify_signal_wait_reset_and_timeout() {
    let d = CpuDevice::new();
    let n = d.create_notify().unwrap();
    assert!(
        n.wait(short(5, 0)).unwrap_err().is_timeout(),
        "nothing signalled"
    );
    n.signal().unwrap();
    n.signal().unwrap(); // signals collapse
    n.wait(short(1000, 0)).unwrap();
    assert!(
        n.wait(short(5, 10)).unwrap_err().is_timeout(),
        "reset by the wait"
    );
    // Through the stream operations.
    let s = d.create_stream().unwrap();
    d.record_notify(&s, &n).unwrap();
    d.stream_wait_notify(&s, &n, Some(Duration::from_secs(1)))
        .unwrap();
    let e = d
        .stream_wait_notify(&s, &n, Some(Duration::from_millis(5)))
        .unwrap_err();
    assert!(e.is_timeout());
    d.synchronize(&s, Some(Duration::from_secs(1))).unwrap();
}

#[test]
fn notify_wakes_a_sleeping_waiter_and_an_async_waiter() {
    let d = CpuDevice::new();
    let n = Arc::new(d.create_notify().unwrap());
    let n2 = Arc::clone(&n);
    let sleeper = std::thread::spawn(move || n2.wait(short(30_000, 0)));
    // Signal until the sleeper has taken one (it may not sleep yet).
    while !sleeper.is_finished() {
        n.signal().unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    sleeper.join().unwrap().unwrap();
    // The awaitable wait runs on a waiter thread; the polling thread is free.
    let fut = n.wait_async(short(30_000, 0));
    let n3 = Arc::clone(&n);
    let signaller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(5));
        n3.signal()
    });
    block_on(fut).unwrap();
    signaller.join().unwrap().unwrap();
    assert!(block_on(n.wait_async(short(5, 0)))
        .unwrap_err()
        .is_timeout());
}

#[test]
fn notify_export_import_in_process() {
    let d = CpuDevice::new();
    let n = d.create_notify().unwrap();
    let ex = d.export_notify(&n, &ExportOptions::default()).unwrap();
    assert_eq!(ex.handle().kind, HandleKind::Notify);
    assert_eq!(ex.handle().fds.count(), 1);
    let m = d
        .import_notify(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    // Both sides may signal and wait.
    m.signal().unwrap();
    n.wait(short(1000, 0)).unwrap();
    n.signal().unwrap();
    m.wait(short(1000, 0)).unwrap();
    // An event handle is not a notify, and a notify's memfd is not an event's.
    let e = d
        .import_event(ex.share().unwrap(), &ImportOptions::default())
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidHandle(HandleError::WrongKind { .. })),
        "{e}"
    );
    let mut shared = ex.share().unwrap();
    shared.handle.kind = HandleKind::Event;
    let e = d
        .import_event(shared, &ImportOptions::default())
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidHandle(HandleError::Descriptors(_))),
        "{e}"
    );
    // Memory options make no sense for a notify.
    let e = d
        .export_notify(
            &n,
            &ExportOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }));
}

#[test]
fn events_record_query_wait() {
    let d = CpuDevice::new();
    let s = d.create_stream().unwrap();
    let ev = d.create_event(EventFlags::default()).unwrap();
    assert!(ev.query().unwrap());
    ev.wait(short(1000, 0)).unwrap();
    d.record_event(&s, &ev).unwrap();
    assert!(ev.query().unwrap(), "host-synchronous: complete at once");
    d.stream_wait_event(&s, &ev).unwrap();
    block_on(ev.wait_async(short(1000, 0))).unwrap();
    // Only interprocess events export.
    let e = d.export_event(&ev, &ExportOptions::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let ipc = d
        .create_event(EventFlags {
            interprocess: true,
            timing: false,
        })
        .unwrap();
    let ex = d.export_event(&ipc, &ExportOptions::default()).unwrap();
    let imp = d
        .import_event(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    d.record_event(&s, &imp).unwrap();
    assert!(ipc.query().unwrap());
    ipc.wait(short(1000, 0)).unwrap();
    assert!(imp.flags().interprocess);
}

#[test]
fn there_is_no_vendor_stream_to_wrap() {
    let dev = CpuDevice::new();
    // SAFETY: the host backend never dereferences the pointer: it has no
    // vendor streams and refuses at once.
    let r = unsafe { dev.wrap_stream(std::ptr::null_mut()) };
    assert!(r.unwrap_err().is_unsupported());
}
