//! Host steps: home pages the GPU does not reach through a registration
//! (every home under `Strategy::Pageable`, which the stand-in driver takes
//! with `HAL_MOCK_LIBCUDA_PAGEABLE_MEMORY_ACCESS=1`, in a child process of
//! its own) are written, filled and copied by a thread in stream order:
//! behind the stream's earlier work, before its later work.

use hal_core::DeviceExt;
use std::time::Duration;

mod child;

use hal_core::{AllocDesc, Backend, Device, MemRef, Memory, Notify};
use hal_cuda_uvm::{Strategy, UvmBackend};
use hal_mock_libcuda::PAGEABLE_VAR;

const PAGE: u64 = 4096;
const LONG: Duration = Duration::from_secs(30);

fn contents(m: &impl Memory) -> Vec<u8> {
    let mut got = vec![0u8; m.len() as usize];
    m.read(0, &mut got).unwrap();
    got
}

/// A write, a fill, a copy between home pages, a copy from home pages to
/// the GPU's memory and one back, all queued behind a closed gate: none has
/// run before the gate opens, and each saw the one before it after.
#[test]
fn host_steps_run_in_stream_order() {
    child::passes(
        "host_steps_run_in_stream_order_child",
        "the child whose driver reads pageable memory",
        &[(PAGEABLE_VAR, "1")],
    );
}

#[test]
#[ignore = "child entry point: run by its parent"]
fn host_steps_run_in_stream_order_child() {
    assert!(
        std::env::var_os(PAGEABLE_VAR).is_some(),
        "run by its parent, with {PAGEABLE_VAR}"
    );
    let dev = UvmBackend::with_library(hal_mock_libcuda::built_library())
        .open(0)
        .unwrap();
    assert_eq!(dev.strategy(), Strategy::Pageable);
    let managed = || dev.allocate(&AllocDesc::managed(2 * PAGE)).unwrap();
    let (a, b, c) = (managed(), managed(), managed());
    let inner = dev.allocate(&AllocDesc::device(0, 2 * PAGE)).unwrap();
    let pattern: Vec<u8> = (0..PAGE).map(|i| (i % 251) as u8 ^ 0x33).collect();

    let stream = dev.create_stream().unwrap();
    let gate = dev.create_notify().unwrap();
    dev.stream_wait_notify(&stream, &gate, None).unwrap();
    let (a_, b_, c_) = (
        MemRef::Allocation(&a),
        MemRef::Allocation(&b),
        MemRef::Allocation(&c),
    );
    dev.write_async(&stream, a_, 0, pattern.clone()).unwrap();
    dev.memset_async(&stream, a_, PAGE, PAGE, 0x5a).unwrap();
    dev.copy_async(&stream, b_, 0, a_, 0, 2 * PAGE).unwrap();
    dev.copy_async(&stream, MemRef::Allocation(&inner), 0, b_, 0, 2 * PAGE)
        .unwrap();
    dev.copy_async(&stream, c_, 0, MemRef::Allocation(&inner), 0, 2 * PAGE)
        .unwrap();
    // An empty copy between home pages is checked and queues nothing.
    dev.copy_async(&stream, c_, 2 * PAGE, a_, 0, 0).unwrap();
    assert!(dev.copy_async(&stream, c_, 2 * PAGE, a_, 0, 1).is_err());

    let zero = vec![0u8; 2 * PAGE as usize];
    for (name, m) in [("a", &a), ("b", &b), ("c", &c)] {
        assert_eq!(contents(m), zero, "{name} before the gate opened");
    }
    gate.signal().unwrap();
    dev.synchronize(&stream, Some(LONG)).unwrap();

    let mut want = pattern;
    want.resize(2 * PAGE as usize, 0x5a);
    assert_eq!(contents(&a), want, "the write and the fill");
    assert_eq!(contents(&b), want, "the copy between home pages");
    assert_eq!(contents(&inner), want, "the copy to the GPU's memory");
    assert_eq!(contents(&c), want, "the copy back home");
    println!("child done");
}
