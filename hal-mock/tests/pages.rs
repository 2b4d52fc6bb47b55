//! Allocation granularity, page sizes, and the whole-pages export rule.

mod common;

use common::aligned;
use hal_core::{
    AllocDesc, Allocation, Backend, ByteRange, Device, Error, ExportOptions, HugePages,
    ImportOptions, Importers, Location, Memory,
};
use hal_mock::{MockBackend, Profile};

const PAGE: u64 = 4096;
const HUGE: u64 = 2 << 20;

fn export_range(range: ByteRange) -> ExportOptions {
    ExportOptions {
        range: Some(range),
        importers: Importers::Anyone,
        ..ExportOptions::default()
    }
}

#[test]
fn profiles_describe_pages_and_granularity() {
    for (profile, devices) in [(Profile::cuda(), 4), (Profile::ascend(), 2)] {
        let backend = MockBackend::new(profile);
        let infos = backend.devices().unwrap();
        assert_eq!(infos.len(), devices);
        for (i, info) in infos.iter().enumerate() {
            assert_eq!(info.ordinal, i as u32);
            assert_eq!(info.page_sizes, vec![PAGE, HUGE, 1 << 30]);
            assert_eq!(info.granularity_min, HUGE);
        }
        assert_ne!(infos[0].uuid, infos[1].uuid);
    }
    let more = MockBackend::new(Profile::cuda().with_devices(7));
    assert_eq!(more.devices().unwrap().len(), 7);
    // Another instance (another process) of the same profile agrees on UUIDs.
    assert_eq!(
        MockBackend::cuda().devices().unwrap()[2].uuid,
        more.devices().unwrap()[2].uuid
    );
}

#[test]
fn invalid_profile_makes_an_unavailable_backend() {
    let mut p = Profile::cuda();
    p.page_sizes = vec![3000];
    let backend = MockBackend::new(p);
    assert!(!backend.availability().is_available());
    assert!(matches!(backend.open(0), Err(Error::Unavailable { .. })));
}

#[test]
fn cuda_misaligned_range_is_refused_never_widened() {
    let backend = MockBackend::cuda();
    let dev = backend.open(0).unwrap();
    let a = dev.allocate(&AllocDesc::device(0, 4 * PAGE)).unwrap();
    for (offset, len) in [(512, PAGE), (0, PAGE / 2), (PAGE, PAGE + 1)] {
        match dev.export_memory(&a, &export_range(ByteRange::new(offset, len))) {
            Err(Error::Misaligned {
                offset: o,
                len: l,
                page_size,
            }) => {
                assert_eq!((o, l, page_size), (offset, len, PAGE));
            }
            other => panic!("range {offset:#x}+{len:#x}: expected Misaligned, got {other:?}"),
        }
    }
    let e = dev
        .export_memory(&a, &export_range(ByteRange::new(PAGE, 2 * PAGE)))
        .unwrap();
    assert_eq!((e.handle().offset, e.handle().size), (PAGE, 2 * PAGE));
}

#[test]
fn cuda_allocation_rounds_to_the_page() {
    let backend = MockBackend::cuda();
    let dev = backend.open(0).unwrap();
    let a = dev.allocate(&AllocDesc::device(0, 100)).unwrap();
    assert_eq!(a.len(), PAGE);
    assert_eq!(a.addr() % PAGE, 0);
}

#[test]
fn ascend_suballocations_round_to_512_and_are_not_page_aligned() {
    let backend = MockBackend::ascend();
    let dev = backend.open(0).unwrap();
    let small = dev.allocate(&AllocDesc::device(0, 100)).unwrap();
    assert_eq!(small.len(), 512, "sizes round to the 512-byte quantum");
    let next = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    assert_eq!(
        next.addr(),
        small.addr() + 512,
        "packed in the same pool chunk"
    );
    assert_ne!(next.addr() % PAGE, 0);
    // The whole allocation is a page long, but it does not start on a page:
    // exporting it would leak its neighbour, so it is refused.
    match dev.export_memory(&next, &ExportOptions::default()) {
        Err(Error::Misaligned {
            offset: 0,
            len: PAGE,
            page_size: PAGE,
        }) => {}
        other => panic!("expected Misaligned, got {other:?}"),
    }
    // Asking for page alignment makes it exportable.
    let ok = dev.allocate(&aligned(0, PAGE)).unwrap();
    assert_eq!(ok.addr() % PAGE, 0);
    let exported = dev
        .export_memory(
            &ok,
            &ExportOptions {
                importers: Importers::Anyone,
                ..ExportOptions::default()
            },
        )
        .unwrap();
    ok.write(0, b"aligned").unwrap();
    let m = dev
        .import_memory(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let mut out = [0u8; 7];
    m.read(0, &mut out).unwrap();
    assert_eq!(&out, b"aligned");
    // A size that is not whole pages cannot be exported whole either.
    let big = dev.allocate(&aligned(0, (1 << 20) + 100)).unwrap();
    assert_eq!(big.len(), (1 << 20) + 512);
    assert!(matches!(
        dev.export_memory(&big, &ExportOptions::default()),
        Err(Error::Misaligned { .. })
    ));
}

#[test]
fn huge_page_allocation_exports_whole_huge_pages() {
    for backend in [MockBackend::cuda(), MockBackend::ascend()] {
        let dev = backend.open(0).unwrap();
        let mut desc = AllocDesc::device(0, 3 * PAGE);
        desc.placement.huge_pages = HugePages::Explicit(HUGE);
        let a = dev.allocate(&desc).unwrap();
        assert_eq!(a.len(), HUGE, "rounded to the huge page");
        assert_eq!(a.addr() % HUGE, 0, "placed on a huge page");
        assert_eq!(a.page_size(), HUGE);
        match dev.export_memory(&a, &export_range(ByteRange::new(0, PAGE))) {
            Err(Error::Misaligned { page_size, .. }) => assert_eq!(page_size, HUGE),
            other => panic!("expected Misaligned at 2 MiB, got {other:?}"),
        }
        let _ = dev
            .export_memory(&a, &export_range(ByteRange::new(0, HUGE)))
            .unwrap();
        desc.placement.huge_pages = HugePages::Explicit(3 * PAGE);
        assert!(matches!(
            dev.allocate(&desc),
            Err(Error::InvalidArgument { .. })
        ));
    }
}

#[test]
fn device_memory_is_not_host_visible() {
    for backend in [MockBackend::cuda(), MockBackend::ascend()] {
        let dev = backend.open(1).unwrap();
        let a = dev.allocate(&AllocDesc::device(1, PAGE)).unwrap();
        assert_eq!(a.location(), Location::Device(1));
        assert_eq!(a.host_ptr(), None);
        a.write(10, b"through memcpy").unwrap();
        let mut out = [0u8; 14];
        a.read(10, &mut out).unwrap();
        assert_eq!(&out, b"through memcpy");
        assert!(
            a.read(PAGE - 1, &mut out).is_err(),
            "reads are bounds-checked"
        );
        let host = dev.allocate(&AllocDesc::host(PAGE)).unwrap();
        assert!(host.host_ptr().is_some());
        assert!(dev
            .export_memory(&host, &ExportOptions::default())
            .unwrap_err()
            .is_unsupported());
        // An allocation for another device is not made here.
        assert!(dev.allocate(&AllocDesc::device(0, PAGE)).is_err());
    }
}

#[test]
fn memory_is_accounted_and_out_of_memory_refused() {
    let backend = MockBackend::new(Profile::cuda().with_total_memory(8 << 20));
    let dev = backend.open(0).unwrap();
    assert!(matches!(
        dev.allocate(&AllocDesc::device(0, 16 << 20)),
        Err(Error::OutOfMemory { .. })
    ));
    let a = dev.allocate(&AllocDesc::device(0, 6 << 20)).unwrap();
    assert_eq!(dev.memory_used(), 6 << 20);
    assert!(dev.allocate(&AllocDesc::device(0, 4 << 20)).is_err());
    a.free().unwrap();
    assert_eq!(dev.memory_used(), 0);
    let _ = dev.allocate(&AllocDesc::device(0, 4 << 20)).unwrap();
}

#[test]
fn pool_ranges_are_reused_after_free() {
    let backend = MockBackend::ascend();
    let dev = backend.open(0).unwrap();
    let a = dev.allocate(&AllocDesc::device(0, 1000)).unwrap();
    let b = dev.allocate(&AllocDesc::device(0, 1000)).unwrap();
    let chunk = dev.memory_used();
    let a_addr = a.addr();
    drop(a);
    let c = dev.allocate(&AllocDesc::device(0, 512)).unwrap();
    assert_eq!(c.addr(), a_addr, "first fit reuses the freed range");
    drop((b, c));
    assert_eq!(dev.memory_used(), 0, "an empty chunk is released");
    assert!(chunk > 0);
}
