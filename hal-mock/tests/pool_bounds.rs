//! Which allocations the Ascend-like profile carves from its pool chunks:
//! small device memory only. Host memory and device allocations of the
//! pool's bound or more get memory of their own, charged at their own size.

use hal_core::{AllocDesc, Backend, Device, Memory};
use hal_mock::MockBackend;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

#[test]
fn host_and_large_allocations_are_not_pooled() {
    let backend = MockBackend::ascend();
    let dev = backend.open(0).unwrap();
    // Pinned host memory is not the device's: nothing charged, no chunk.
    let host = dev.allocate(&AllocDesc::host(1000)).unwrap();
    assert_eq!(dev.memory_used(), 0);
    // Past the bound: its own memory, not a 2 MiB chunk.
    let large = dev.allocate(&AllocDesc::device(0, 1536 * KIB)).unwrap();
    assert_eq!(large.len(), 1536 * KIB);
    assert_eq!(dev.memory_used(), 1536 * KIB);
    let at_bound = dev.allocate(&AllocDesc::device(0, MIB)).unwrap();
    assert_eq!(dev.memory_used(), 1536 * KIB + MIB);
    // A small one takes a chunk.
    let small = dev.allocate(&AllocDesc::device(0, 1000)).unwrap();
    assert_eq!(dev.memory_used(), 1536 * KIB + MIB + 2 * MIB);
    drop((host, large, at_bound, small));
    assert_eq!(dev.memory_used(), 0);
}

#[test]
fn alignment_past_the_page_takes_memory_of_its_own() {
    let backend = MockBackend::ascend();
    let dev = backend.open(0).unwrap();
    // Aligned to the page (what an exporter asks for): still from a chunk.
    let paged = dev
        .allocate(&AllocDesc {
            align: 4 * KIB,
            ..AllocDesc::device(0, 1000)
        })
        .unwrap();
    assert_eq!(paged.addr() % (4 * KIB), 0);
    assert_eq!(dev.memory_used(), 2 * MIB);
    // Aligned past the page: memory of its own, a page long.
    let wide = dev
        .allocate(&AllocDesc {
            align: 8 * KIB,
            ..AllocDesc::device(0, 1000)
        })
        .unwrap();
    assert_eq!(wide.addr() % (8 * KIB), 0);
    assert_eq!(dev.memory_used(), 2 * MIB + 4 * KIB);
    drop((paged, wide));
    assert_eq!(dev.memory_used(), 0);
}
