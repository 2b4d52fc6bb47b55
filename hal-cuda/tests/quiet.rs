//! A driver call that waits for the device (`cuMemFree_v2` here) never
//! starts while one of the process's streams waits for a notify: on driver
//! 580 such a free waited for the device and, it appears, held the
//! process's other driver calls until the wait passed, so a thread that had
//! to make one more driver call before it signalled the notify hung for
//! ever. The stand-in frees that way by default. Each test counts the teardowns its process has left, so they
//! run one at a time (`serial`); the file is a process of its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use hal_core::{AllocDesc, Backend, Device, Memory, Notify, WaitOptions};
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
    while hal_core::teardown::unfinished() > 0 {
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
    assert_eq!(hal_core::teardown::unfinished(), 1, "the free waits");
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
        hal_core::teardown::unfinished() >= 1,
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
    // A pipeline: each round queues a wait, signals it, and waits for the
    // answer recorded behind it; a wait is queued most of the time.
    let pipeline = {
        let (dev, stop) = (Arc::clone(&dev), Arc::clone(&stop));
        std::thread::spawn(move || {
            let stream = dev.create_stream().unwrap();
            let (ring, answer) = (dev.create_notify().unwrap(), dev.create_notify().unwrap());
            let mut rounds = 0u64;
            while !stop.load(Ordering::Acquire) {
                dev.stream_wait_notify(&stream, &ring, None).unwrap();
                dev.record_notify(&stream, &answer).unwrap();
                ring.signal().unwrap();
                answer.wait(WaitOptions::timeout(LONG)).unwrap();
                rounds += 1;
            }
            dev.synchronize(&stream, Some(LONG)).unwrap();
            rounds
        })
    };
    for _ in 0..5 {
        let memory = dev
            .allocate(&AllocDesc::device(dev.info().ordinal, 1 << 20))
            .unwrap();
        drop(memory);
        teardowns_finish();
    }
    stop.store(true, Ordering::Release);
    let rounds = pipeline.join().unwrap();
    assert!(rounds > 0, "the pipeline never ran a round");
}
