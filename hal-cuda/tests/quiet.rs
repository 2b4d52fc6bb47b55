//! A driver call that waits for the device (`cuMemFree_v2`,
//! `cuMemHostUnregister` here) never starts while one of the process's
//! streams waits for a notify, and no queued operation becomes one (a copy
//! between two host ranges): on driver 580 such a call waited for the
//! device and held the process's other driver work meanwhile (measured,
//! `driver_waits.rs`), so a thread that had to make one more driver call
//! before it signalled the notify hung for ever. The stand-in behaves so
//! by default. Each test counts the teardowns its process has left, so
//! they run one at a time (`serial`); the file is a process of its own and
//! runs on the real driver in the GPU smoke run.

use hal_core::DeviceExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use hal_core::{AllocDesc, Backend, Device, EventFlags, Memory, Notify, WaitOptions};
use hal_cuda::CudaDevice;
use serial_test::serial;

mod common;

/// How long the driver calls of a step may take before the test says the
/// driver was held: far more than they need, far less than for ever.
const LONG: Duration = Duration::from_secs(30);

fn device() -> CudaDevice {
    common::backend().open(0).expect("open CUDA device 0")
}

/// Run `f` on a thread of its own and require that it returns within
/// [`LONG`]; `what` names it in the failure.
fn returns<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(LONG)
        .unwrap_or_else(|_| panic!("{what} did not return: a free held the driver"))
}

/// Wait until this process has no teardown left, at most [`LONG`].
fn teardowns_finish() {
    let end = Instant::now() + LONG;
    while hal_core::kit::stream::teardown::unfinished() > 0 {
        assert!(Instant::now() < end, "a free never ran");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
#[serial]
fn driver_calls_go_on_while_a_dropped_allocation_waits_for_a_gated_stream() {
    let dev = Arc::new(device());
    let stream = dev.create_stream().unwrap();
    let gate = dev.create_notify().unwrap();
    dev.stream_wait_notify(&stream, &gate, None).unwrap();
    let memory = dev
        .allocate(&AllocDesc::device(dev.info().ordinal, 1 << 20))
        .unwrap();
    // Returns after at most the grace; the free waits for the gate.
    drop(memory);
    assert_eq!(
        hal_core::kit::stream::teardown::unfinished(),
        1,
        "the free waits"
    );
    // What the gate's opener may do before it opens the gate: driver calls
    // of every kind, another stream wait among them.
    let d = Arc::clone(&dev);
    returns("driver calls beside a pending free", move || {
        let other = d.create_stream().unwrap();
        let m = d
            .allocate(&AllocDesc::device(d.info().ordinal, 4096))
            .unwrap();
        m.write(0, b"still moving").unwrap();
        let mut back = [0u8; 12];
        m.read(0, &mut back).unwrap();
        assert_eq!(&back, b"still moving");
        let (inner, done) = (d.create_notify().unwrap(), d.create_notify().unwrap());
        d.stream_wait_notify(&other, &inner, None).unwrap();
        d.record_notify(&other, &done).unwrap();
        inner.signal().unwrap();
        done.wait(WaitOptions::timeout(LONG)).unwrap();
        d.synchronize(&other, Some(LONG)).unwrap();
        // Dropped here, `m` is a second pending free.
    });
    assert!(
        hal_core::kit::stream::teardown::unfinished() >= 1,
        "still waits for the gate"
    );
    gate.signal().unwrap();
    dev.synchronize(&stream, Some(LONG)).unwrap();
    teardowns_finish();
}

#[test]
#[serial]
fn a_free_goes_through_beside_a_stream_that_always_has_a_wait_queued() {
    let dev = Arc::new(device());
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    // A pipeline: each round queues a wait, signals it, and waits for the
    // answer recorded behind it; a wait is queued most of the time.
    let pipeline = {
        let (dev, stop, rounds) = (Arc::clone(&dev), Arc::clone(&stop), Arc::clone(&rounds));
        std::thread::spawn(move || {
            let stream = dev.create_stream().unwrap();
            let (ring, answer) = (dev.create_notify().unwrap(), dev.create_notify().unwrap());
            while !stop.load(Ordering::Acquire) {
                dev.stream_wait_notify(&stream, &ring, None).unwrap();
                dev.record_notify(&stream, &answer).unwrap();
                ring.signal().unwrap();
                answer.wait(WaitOptions::timeout(LONG)).unwrap();
                rounds.fetch_add(1, Ordering::AcqRel);
            }
            dev.synchronize(&stream, Some(LONG)).unwrap();
        })
    };
    // The frees start once the pipeline runs (however slowly the machine
    // schedules its thread), and it must still run after them: a free that
    // held the pipeline's stream work would stop it.
    let ran = |past: u64, what: &str| {
        let deadline = Instant::now() + LONG;
        while rounds.load(Ordering::Acquire) <= past {
            assert!(Instant::now() < deadline, "the pipeline {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
        rounds.load(Ordering::Acquire)
    };
    let before = ran(0, "never ran a round");
    for _ in 0..5 {
        let memory = dev
            .allocate(&AllocDesc::device(dev.info().ordinal, 1 << 20))
            .unwrap();
        drop(memory);
        teardowns_finish();
    }
    ran(before, "ran no round after the frees");
    stop.store(true, Ordering::Release);
    pipeline.join().unwrap();
}

/// The driver calls a gate's opener may make before it opens the gate:
/// registrations (a new notify's first stream wait), event destruction,
/// stream work.
fn calls_of_an_opener(d: &CudaDevice) {
    let other = d.create_stream().unwrap();
    let (inner, done) = (d.create_notify().unwrap(), d.create_notify().unwrap());
    d.stream_wait_notify(&other, &inner, None).unwrap();
    d.record_notify(&other, &done).unwrap();
    inner.signal().unwrap();
    done.wait(WaitOptions::timeout(LONG)).unwrap();
    let event = d.create_event(EventFlags::default()).unwrap();
    d.record_event(&other, &event).unwrap();
    d.synchronize(&other, Some(LONG)).unwrap();
    drop(event);
}

#[test]
#[serial]
fn driver_calls_go_on_while_a_dropped_notify_waits_to_be_unregistered() {
    let dev = Arc::new(device());
    let stream = dev.create_stream().unwrap();
    let gate = dev.create_notify().unwrap();
    dev.stream_wait_notify(&stream, &gate, None).unwrap();
    // A notify used in stream order has its page registered; dropped, the
    // page is unregistered on a teardown worker, after the gate.
    let used = dev.create_notify().unwrap();
    let side = dev.create_stream().unwrap();
    dev.record_notify(&side, &used).unwrap();
    dev.synchronize(&side, Some(LONG)).unwrap();
    returns("dropping a registered notify", move || drop(used));
    assert_eq!(
        hal_core::kit::stream::teardown::unfinished(),
        1,
        "the unregistration waits"
    );
    let d = Arc::clone(&dev);
    returns("driver calls beside a pending unregistration", move || {
        calls_of_an_opener(&d)
    });
    gate.signal().unwrap();
    dev.synchronize(&stream, Some(LONG)).unwrap();
    teardowns_finish();
}

#[test]
#[serial]
fn a_dropped_registration_waits_for_the_gate_and_holds_nobody_meanwhile() {
    let dev = Arc::new(device());
    let stream = dev.create_stream().unwrap();
    let gate = dev.create_notify().unwrap();
    dev.stream_wait_notify(&stream, &gate, None).unwrap();
    let page = hal_core::kit::os::page_size();
    let map = hal_core::kit::os::SharedMap::reserve(page, None).unwrap();
    map.protect(0, page, hal_core::kit::os::Prot::ReadWrite)
        .unwrap();
    // SAFETY: `map` outlives the registration (dropped before it, below).
    let reg = unsafe { dev.register_host(map.as_ptr(), page) }.unwrap();
    // The drop unregisters on its own thread, once the gate has opened.
    let (tx, dropped) = mpsc::channel();
    let dropper = std::thread::spawn(move || {
        drop(reg);
        let _ = tx.send(());
    });
    let d = Arc::clone(&dev);
    returns("driver calls beside a pending unregistration", move || {
        calls_of_an_opener(&d)
    });
    assert!(
        dropped.try_recv().is_err(),
        "the unregistration went on while a stream waited for a notify"
    );
    gate.signal().unwrap();
    dropped
        .recv_timeout(LONG)
        .expect("the registration ended once the gate opened");
    dropper.join().unwrap();
    dev.synchronize(&stream, Some(LONG)).unwrap();
    drop(map);
}

#[test]
#[serial]
fn a_host_to_host_copy_behind_a_gate_is_queued() {
    let dev = Arc::new(device());
    let stream = Arc::new(dev.create_stream().unwrap());
    let gate = dev.create_notify().unwrap();
    let page = hal_core::kit::os::page_size();
    let map = hal_core::kit::os::SharedMap::reserve(page, None).unwrap();
    map.protect(0, page, hal_core::kit::os::Prot::ReadWrite)
        .unwrap();
    // SAFETY: `map` outlives the registration (dropped before it, below).
    let reg = unsafe { dev.register_host(map.as_ptr(), page) }.unwrap();
    let pinned = dev.allocate(&AllocDesc::host(page)).unwrap();
    pinned.write(0, b"pinned to registered").unwrap();
    dev.stream_wait_notify(&stream, &gate, None).unwrap();
    // Queued behind the gate, both ways; the calls return at once.
    let (d, s) = (Arc::clone(&dev), Arc::clone(&stream));
    let (reg, pinned) = returns("host-to-host copies behind a gate", move || {
        d.copy_async(
            &s,
            hal_core::MemRef::Registered(&reg),
            0,
            hal_core::MemRef::Allocation(&pinned),
            0,
            20,
        )
        .unwrap();
        d.copy_async(
            &s,
            hal_core::MemRef::Allocation(&pinned),
            64,
            hal_core::MemRef::Registered(&reg),
            0,
            20,
        )
        .unwrap();
        (reg, pinned)
    });
    let mut early = [0u8; 20];
    map.read(0, &mut early).unwrap();
    assert_eq!(early, [0u8; 20], "a copy went ahead of the gate");
    gate.signal().unwrap();
    dev.synchronize(&stream, Some(LONG)).unwrap();
    let mut got = [0u8; 20];
    map.read(0, &mut got).unwrap();
    assert_eq!(&got, b"pinned to registered", "into the registration");
    pinned.read(64, &mut got).unwrap();
    assert_eq!(&got, b"pinned to registered", "and back, in stream order");
    drop(reg);
    drop(map);
}
