//! Streams are ordered queues: record/wait ordering is real.

use hal_core::DeviceExt;
mod common;

use common::{aligned, LONG, SHORT};
use hal_core::wait::block_on;
use hal_core::{Backend, Device, Event, EventFlags, Memory, Notify, WaitOptions};
use hal_mock::MockBackend;

const PAGE: u64 = 4096;

#[test]
fn stream_waiting_on_an_event_runs_no_later_work_until_the_record_ran() {
    for backend in [MockBackend::cuda(), MockBackend::ascend()] {
        let dev = backend.open(0).unwrap();
        let src = dev.allocate(&aligned(0, PAGE)).unwrap();
        let dst = dev.allocate(&aligned(0, PAGE)).unwrap();
        let (s1, s2) = (dev.create_stream().unwrap(), dev.create_stream().unwrap());
        let gate = dev.create_notify().unwrap();
        let ev = dev.create_event(EventFlags::default()).unwrap();
        // s1: held by the gate, then writes src and records the event.
        dev.stream_wait_notify(&s1, &gate, None).unwrap();
        dev.write_async(&s1, &src, 0, b"ordered".to_vec()).unwrap();
        dev.record_event(&s1, &ev).unwrap();
        // s2: waits for the event, then copies src to dst.
        dev.stream_wait_event(&s2, &ev).unwrap();
        dev.copy_async(&s2, &dst, 0, &src, 0, 7).unwrap();
        // Nothing can have run past the gate: s2 is held by s1's record.
        assert!(!ev.query().unwrap());
        assert!(dev.synchronize(&s2, Some(SHORT)).unwrap_err().is_timeout());
        assert!(ev
            .wait(WaitOptions::timeout(SHORT))
            .unwrap_err()
            .is_timeout());
        let mut out = [0u8; 7];
        dst.read(0, &mut out).unwrap();
        assert_eq!(out, [0u8; 7], "the copy ran before the event's record");
        // Open the gate: everything drains in order.
        gate.signal().unwrap();
        dev.synchronize(&s2, Some(LONG)).unwrap();
        dst.read(0, &mut out).unwrap();
        assert_eq!(&out, b"ordered");
        assert!(ev.query().unwrap());
        dev.synchronize(&s1, Some(LONG)).unwrap();
    }
}

#[test]
fn event_waits_time_out_and_complete_also_async() {
    let backend = MockBackend::cuda();
    let dev = backend.open(0).unwrap();
    let stream = dev.create_stream().unwrap();
    let gate = dev.create_notify().unwrap();
    let ev = dev.create_event(EventFlags::default()).unwrap();
    // A never-recorded event is complete.
    ev.wait(WaitOptions::timeout(SHORT)).unwrap();
    dev.stream_wait_notify(&stream, &gate, None).unwrap();
    dev.record_event(&stream, &ev).unwrap();
    assert!(block_on(ev.wait_async(WaitOptions::timeout(SHORT)))
        .unwrap_err()
        .is_timeout());
    let waiter = ev.wait_async(WaitOptions::timeout(LONG));
    gate.signal().unwrap();
    block_on(waiter).unwrap();
    ev.wait(WaitOptions::timeout(LONG)).unwrap();
}

#[test]
fn notify_waits_reset_and_stream_wait_timeouts_reach_synchronize() {
    let backend = MockBackend::ascend();
    let dev = backend.open(0).unwrap();
    let n = dev.create_notify().unwrap();
    assert!(n
        .wait(WaitOptions::timeout(SHORT))
        .unwrap_err()
        .is_timeout());
    n.signal().unwrap();
    block_on(n.wait_async(WaitOptions::timeout(LONG))).unwrap();
    assert!(n
        .wait(WaitOptions::timeout(SHORT))
        .unwrap_err()
        .is_timeout());
    // A stream's wait that times out is reported by the next synchronize.
    let stream = dev.create_stream().unwrap();
    dev.stream_wait_notify(&stream, &n, Some(SHORT)).unwrap();
    assert!(dev
        .synchronize(&stream, Some(LONG))
        .unwrap_err()
        .is_timeout());
    dev.synchronize(&stream, Some(LONG)).unwrap();
    // A stream records, another stream waits and resets.
    let other = dev.create_stream().unwrap();
    dev.record_notify(&stream, &n).unwrap();
    dev.stream_wait_notify(&other, &n, Some(LONG)).unwrap();
    dev.synchronize(&other, Some(LONG)).unwrap();
    assert!(n
        .wait(WaitOptions::timeout(SHORT))
        .unwrap_err()
        .is_timeout());
}

/// A device-wide synchronize waits for every stream but leaves each
/// stream's error to that stream: a thread waiting on its own stream (as
/// the Ascend backend's host wait of a notify does, slice by slice) still
/// learns that its queued wait timed out.
#[test]
fn a_device_wide_synchronize_leaves_each_streams_error_to_it() {
    for backend in [MockBackend::cuda(), MockBackend::ascend()] {
        let dev = backend.open(0).unwrap();
        let n = dev.create_notify().unwrap();
        let (timed_out, queried) = (dev.create_stream().unwrap(), dev.create_stream().unwrap());
        dev.stream_wait_notify(&timed_out, &n, Some(SHORT)).unwrap();
        dev.stream_wait_notify(&queried, &n, Some(SHORT)).unwrap();
        dev.synchronize_device(Some(LONG)).unwrap();
        assert!(
            dev.synchronize(&timed_out, Some(LONG))
                .unwrap_err()
                .is_timeout(),
            "{:?}: the stream's own synchronize answers its timed-out wait",
            backend.profile().name
        );
        assert!(
            dev.query_stream(&queried).unwrap_err().is_timeout(),
            "{:?}: so does its query",
            backend.profile().name
        );
        dev.synchronize(&timed_out, Some(LONG)).unwrap();
        assert!(dev.query_stream(&queried).unwrap());
    }
}

#[test]
fn dropping_a_blocked_stream_abandons_its_wait() {
    let backend = MockBackend::cuda();
    let dev = backend.open(0).unwrap();
    let a = dev.allocate(&aligned(0, PAGE)).unwrap();
    let gate = dev.create_notify().unwrap();
    let stream = dev.create_stream().unwrap();
    dev.stream_wait_notify(&stream, &gate, None).unwrap();
    dev.write_async(&stream, &a, 0, b"never".to_vec()).unwrap();
    drop(stream);
    let mut out = [0u8; 5];
    a.read(0, &mut out).unwrap();
    assert_eq!(out, [0u8; 5]);
}

#[test]
fn resources_of_another_backend_instance_are_refused() {
    let (b1, b2) = (MockBackend::cuda(), MockBackend::cuda());
    let (d1, d2) = (b1.open(0).unwrap(), b2.open(0).unwrap());
    let s2 = d2.create_stream().unwrap();
    let e1 = d1.create_event(EventFlags::default()).unwrap();
    assert!(matches!(
        d1.record_event(&s2, &e1),
        Err(hal_core::Error::InvalidArgument { .. })
    ));
    let s1 = d1.create_stream().unwrap();
    let d1b = b1.open(1).unwrap();
    assert!(matches!(
        d1b.synchronize(&s1, None),
        Err(hal_core::Error::InvalidArgument { .. })
    ));
}

#[test]
fn the_simulator_has_no_vendor_stream_to_wrap() {
    let dev = MockBackend::cuda().open(0).unwrap();
    // SAFETY: the simulator never dereferences the pointer: it has no
    // vendor streams and refuses at once.
    let r = unsafe { dev.wrap_stream(std::ptr::null_mut()) };
    assert!(r.unwrap_err().is_unsupported());
}
