//! A copy between home pages and the GPU's memory, queued behind work that
//! has not run, outlives the values its caller drops: the bytes arrive
//! after the caller let go of the source (the GPU's memory or the home
//! pages) before the stream reached the copy.
//!
//! Run over the stand-in driver and the simulator, whose frees do not wait
//! for queued work; on a GPU, `cuMemFree` waits for the device itself, so
//! freeing behind a gate only the host opens would block.

use hal_core::DeviceExt;
use std::time::Duration;

use hal_core::{AllocDesc, Backend, Device, MemRef, Memory, Notify};
use hal_cuda_uvm::{GpuDevice, UvmBackend, UvmDevice};

const PAGE: u64 = 4096;
const LONG: Duration = Duration::from_secs(30);

fn pattern(seed: u8) -> Vec<u8> {
    (0..PAGE).map(|i| (i % 251) as u8 ^ seed).collect()
}

fn dropped_sources_reach_their_copies<D: GpuDevice>(dev: UvmDevice<D>) {
    let ordinal = dev.info().ordinal;
    let stream = dev.create_stream().unwrap();

    // The GPU's memory to home pages, the GPU's memory dropped first.
    let home = dev.allocate(&AllocDesc::managed(PAGE)).unwrap();
    let inner = dev.allocate(&AllocDesc::device(ordinal, PAGE)).unwrap();
    inner.write(0, &pattern(3)).unwrap();
    let gate = dev.create_notify().unwrap();
    dev.stream_wait_notify(&stream, &gate, None).unwrap();
    dev.copy_async(
        &stream,
        MemRef::Allocation(&home),
        0,
        MemRef::Allocation(&inner),
        0,
        PAGE,
    )
    .unwrap();
    drop(inner);
    gate.signal().unwrap();
    dev.synchronize(&stream, Some(LONG)).unwrap();
    let mut got = vec![0u8; PAGE as usize];
    home.read(0, &mut got).unwrap();
    assert_eq!(got, pattern(3), "the GPU's bytes in the home pages");

    // Home pages to the GPU's memory, the home pages dropped first.
    let source = dev.allocate(&AllocDesc::managed(PAGE)).unwrap();
    source.write(0, &pattern(5)).unwrap();
    let inner = dev.allocate(&AllocDesc::device(ordinal, PAGE)).unwrap();
    dev.stream_wait_notify(&stream, &gate, None).unwrap();
    dev.copy_async(
        &stream,
        MemRef::Allocation(&inner),
        0,
        MemRef::Allocation(&source),
        0,
        PAGE,
    )
    .unwrap();
    drop(source);
    gate.signal().unwrap();
    dev.synchronize(&stream, Some(LONG)).unwrap();
    inner.read(0, &mut got).unwrap();
    assert_eq!(got, pattern(5), "the home pages' bytes in the GPU's memory");
}

#[test]
fn standin_dropped_sources_reach_their_copies() {
    let backend = UvmBackend::with_library(hal_mock_libcuda::built_library());
    dropped_sources_reach_their_copies(backend.open(0).unwrap());
}

#[test]
fn mock_dropped_sources_reach_their_copies() {
    let backend = UvmBackend::over(hal_mock::MockBackend::cuda());
    dropped_sources_reach_their_copies(backend.open(0).unwrap());
}
