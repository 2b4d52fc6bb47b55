//! Anonymous regions in one process: allocation, placement, export rules,
//! seals, descriptor checks at import, the import cache, read-only imports.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use hal_core::kit::os;
use hal_core::{
    Allocation, Backend, BackendId, ByteRange, Capabilities, Device, Error, ExportOptions,
    FdSource, HandleError, HandleFlags, HandleKind, HugePages, ImportOptions, ImportPlacement,
    Importers, Location, Mapping, Memory, NumaPolicy, SharedHandle,
};
use hal_cpu_shm::{CpuDevice, CpuShm, RegionKind};

fn dev() -> CpuDevice {
    CpuShm::new().open(0).expect("host device")
}

#[test]
fn backend_and_device_info() {
    let b = CpuShm::new();
    assert_eq!(b.id(), BackendId::CpuShm);
    assert!(b.availability().is_available());
    let infos = b.devices().unwrap();
    assert_eq!(infos.len(), 1);
    let info = &infos[0];
    assert_eq!(info.ordinal, 0);
    assert_eq!(info.name, "host");
    assert!(info.total_memory > 0);
    assert_eq!(info.page_sizes[0], os::page_size());
    assert!(info.page_sizes.contains(&(2 << 20)));
    assert_eq!(info.granularity_min, os::page_size());
    assert_eq!(info.granularity_recommended, 2 << 20);
    assert_ne!(info.uuid, [0; 16]);
    assert_eq!(info.uuid, b.open(0).unwrap().info().uuid, "stable uuid");
    assert_eq!(
        info.dlpack,
        hal_core::DlpackTypes::HOST,
        "host memory is kDLCPU"
    );
    for cap in [
        Capabilities::IPC_MEMORY,
        Capabilities::IPC_EVENT,
        Capabilities::IPC_NOTIFY,
        Capabilities::IPC_EVENT_QUERY,
        Capabilities::VMM,
        Capabilities::PID_ALLOW_LIST,
        Capabilities::FIXED_ADDRESS_IMPORT,
        Capabilities::MEMORY_IS_HOST,
        Capabilities::READ_ONLY_EXPORT,
        Capabilities::GROWABLE,
        Capabilities::LEASES,
    ] {
        assert!(info.capabilities.contains(cap), "{cap:?}");
    }
    assert!(!info
        .capabilities
        .contains(Capabilities::CREATOR_ONLY_NOTIFY_WAIT));
    assert!(matches!(b.open(1), Err(Error::NotFound { .. })));
}

#[test]
fn allocate_rounds_and_refuses_other_locations() {
    let d = dev();
    let a = d.allocate(&hal_core::AllocDesc::host(100)).unwrap();
    assert_eq!(a.len(), os::page_size());
    assert_eq!(a.location(), Location::Host);
    assert_eq!(a.kind(), RegionKind::Anonymous);
    assert!(a.host_ptr().is_some());
    let mut zero = [1u8; 16];
    a.read(0, &mut zero).unwrap();
    assert_eq!(zero, [0; 16]);
    a.write(90, b"0123456789").unwrap();
    assert!(a.write(a.len() - 2, b"abc").is_err(), "past the end");
    for desc in [
        hal_core::AllocDesc::device(0, 4096),
        hal_core::AllocDesc::managed(4096),
    ] {
        let e = d.allocate(&desc).unwrap_err();
        assert!(e.is_unsupported(), "{e}");
    }
    assert!(matches!(
        d.allocate(&hal_core::AllocDesc::host(0)),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn alignment_is_honoured() {
    let d = dev();
    let mut desc = hal_core::AllocDesc::host(8192);
    desc.align = 1 << 21;
    let a = d.allocate(&desc).unwrap();
    assert_eq!(a.addr() % (1 << 21), 0);
    a.write(0, b"x").unwrap();
    desc.align = 3000;
    assert!(matches!(
        d.allocate(&desc),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn misaligned_ranges_are_refused_never_widened() {
    let d = dev();
    let a = d.allocate(&hal_core::AllocDesc::host(4 * 4096)).unwrap();
    for (off, len) in [(1, 4096), (0, 100), (4096, 4097), (2048, 2048)] {
        let e = d
            .export_memory(
                &a,
                &ExportOptions {
                    range: Some(ByteRange::new(off, len)),
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert!(matches!(e, Error::Misaligned { .. }), "{off}+{len}: {e}");
    }
    let e = d
        .export_memory(
            &a,
            &ExportOptions {
                range: Some(ByteRange::new(4096, 4 * 4096)),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    // A whole-page sub-range: the handle names exactly it.
    a.write(8192, b"third page").unwrap();
    let ex = d
        .export_memory(
            &a,
            &ExportOptions {
                range: Some(ByteRange::new(8192, 4096)),
                ..Default::default()
            },
        )
        .unwrap();
    let h = ex.handle();
    assert_eq!((h.offset, h.size), (8192, 4096));
    assert_eq!(h.address, a.addr() + 8192);
    assert_eq!(h.kind, HandleKind::Memory);
    assert!(h.flags.contains(HandleFlags::HAS_ADDRESS));
    assert!(h.flags.contains(HandleFlags::ANY_IMPORTER));
    assert_eq!(
        h.fds.count(),
        1,
        "the data memfd; the exporter keeps its leases"
    );
    let m = d
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert_eq!(m.len(), 4096);
    let mut b = [0u8; 10];
    m.read(0, &mut b).unwrap();
    assert_eq!(&b, b"third page");
}

#[test]
fn export_seals_the_memfd() {
    let d = dev();
    let a = d.allocate(&hal_core::AllocDesc::host(8192)).unwrap();
    assert!(!a.is_sealed());
    let _ex = d.export_memory(&a, &ExportOptions::default()).unwrap();
    assert!(a.is_sealed());
    assert!(os::set_len(a.fd(), 4096).is_err(), "shrinking refused");
    assert!(os::set_len(a.fd(), 1 << 20).is_err(), "growing refused");
    // Exporting again reuses the seals and the lease table.
    let _ex2 = d.export_memory(&a, &ExportOptions::default()).unwrap();
    a.write(0, b"still fine").unwrap();
}

/// A thread's view of the import cache never hands out a mapping that
/// went, and sees one another thread made: imports on two threads, all
/// dropped, then imported again, on both threads in turn.
#[test]
fn each_threads_view_of_the_import_cache_follows_the_process() {
    let d = std::sync::Arc::new(dev());
    let a = d.allocate(&hal_core::AllocDesc::host(8192)).unwrap();
    let ex = d.export_memory(&a, &ExportOptions::default()).unwrap();
    let text = ex.to_text();
    let import = {
        let d = std::sync::Arc::clone(&d);
        move |text: &str| {
            let h = hal_core::Handle::from_text(text).unwrap();
            d.import_memory(SharedHandle::from(h), &ImportOptions::default())
                .unwrap()
        }
    };
    // This thread imports twice: the second is a hit of its own view.
    let first = import(&text);
    let again = import(&text);
    assert!(first.same_mapping(&again));
    // Another thread finds the same mapping (through the process's cache).
    let other = {
        let (import, text) = (import.clone(), text.clone());
        std::thread::spawn(move || {
            let m = import(&text);
            let same = m.addr();
            let hit = import(&text);
            assert!(m.same_mapping(&hit));
            same
        })
        .join()
        .unwrap()
    };
    assert_eq!(other, first.addr());
    drop((first, again));
    assert_eq!(a.importers().unwrap(), 0, "every mapping went");
    // Imported again, the mapping is a new one with its lease: the views
    // that named the old one hand it out no more.
    let fresh = import(&text);
    assert_eq!(fresh.ref_count(), 1);
    assert_eq!(a.importers().unwrap(), 1);
    let theirs = {
        let (import, text) = (import.clone(), text.clone());
        std::thread::spawn(move || import(&text).ref_count())
            .join()
            .unwrap()
    };
    assert_eq!(theirs, 2, "the other thread found the live mapping");
    drop(fresh);
}

#[test]
fn import_cache_returns_the_same_mapping_and_counts_leases() {
    let d = dev();
    let a = d.allocate(&hal_core::AllocDesc::host(16384)).unwrap();
    let ex = d.export_memory(&a, &ExportOptions::default()).unwrap();
    assert_eq!(a.importers().unwrap(), 0);
    let m1 = d
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert_eq!(a.importers().unwrap(), 1);
    // The same handle again, once with descriptors and once from the text
    // alone: both hit the cache.
    let m2 = d
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let m3 = d
        .import_memory(
            SharedHandle::from(ex.handle().clone()),
            &ImportOptions::default(),
        )
        .unwrap();
    assert!(m1.same_mapping(&m2) && m1.same_mapping(&m3));
    assert_eq!(m1.addr(), m2.addr());
    assert_eq!(m1.ref_count(), 3);
    assert_eq!(a.importers().unwrap(), 1, "one mapping, one lease");
    assert_eq!(m1.handle().object_id, ex.handle().object_id);

    m1.write(100, b"from the mapping").unwrap();
    let mut b = [0u8; 16];
    a.read(100, &mut b).unwrap();
    assert_eq!(&b, b"from the mapping");

    // Another export of the same allocation is another object.
    let ex2 = d.export_memory(&a, &ExportOptions::default()).unwrap();
    let m4 = d
        .import_memory(ex2.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert!(!m4.same_mapping(&m1));
    assert_eq!(a.importers().unwrap(), 2);

    assert!(a
        .wait_unleased(Some(Duration::from_millis(10)))
        .unwrap_err()
        .is_timeout());
    drop((m1, m2, m3, m4));
    assert_eq!(a.importers().unwrap(), 0);
    a.wait_unleased(Some(Duration::from_secs(5))).unwrap();
    // After the last clone went, an import maps afresh.
    let m5 = d
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert_eq!(m5.ref_count(), 1);
    let mut b = [0u8; 16];
    m5.read(100, &mut b).unwrap();
    assert_eq!(&b, b"from the mapping");
}

#[test]
fn read_only_export_is_enforced_by_the_descriptor() {
    let d = dev();
    let a = d.allocate(&hal_core::AllocDesc::host(4096)).unwrap();
    a.write(0, b"read me").unwrap();
    let ex = d
        .export_memory(
            &a,
            &ExportOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(ex.handle().flags.contains(HandleFlags::READ_ONLY));
    let mode = nix::fcntl::fcntl(
        std::os::fd::AsRawFd::as_raw_fd(&ex.fds()[0]),
        nix::fcntl::FcntlArg::F_GETFL,
    )
    .unwrap();
    assert_eq!(
        mode & libc::O_ACCMODE,
        libc::O_RDONLY,
        "the data descriptor is read-only"
    );
    let m = d
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert!(m.is_read_only());
    let mut b = [0u8; 7];
    m.read(0, &mut b).unwrap();
    assert_eq!(&b, b"read me");
    let e = m.write(0, b"no").unwrap_err();
    assert!(matches!(e, Error::PermissionDenied { .. }), "{e}");
    // A forged handle that drops READ_ONLY still cannot map it writable.
    let mut shared = ex.share().unwrap();
    shared.handle.flags.0 &= !HandleFlags::READ_ONLY.0;
    let e = d
        .import_memory(shared, &ImportOptions::default())
        .unwrap_err();
    assert!(matches!(e, Error::PermissionDenied { .. }), "{e}");
}

/// The genuine handle with another data descriptor attached: such an
/// import is never answered from the import cache (its descriptors are not
/// the ones the exporter registered).
fn forged(ex: &hal_core::Exported, data: OwnedFd) -> SharedHandle {
    let mut shared = ex.share().unwrap();
    shared.fds[0] = data;
    shared
}

#[test]
fn unsealed_short_or_foreign_descriptors_are_refused_at_import() {
    let d = dev();
    let a = d.allocate(&hal_core::AllocDesc::host(8192)).unwrap();
    let ex = d.export_memory(&a, &ExportOptions::default()).unwrap();
    let descriptors = |e: &Error| matches!(e, Error::InvalidHandle(HandleError::Descriptors(_)));

    // Unsealed: a peer could truncate it under the mapping.
    let unsealed = os::memfd("unsealed", 8192, None).unwrap();
    let e = d
        .import_memory(forged(&ex, unsealed), &ImportOptions::default())
        .unwrap_err();
    assert!(descriptors(&e), "{e}");

    // Sealed but shorter than the handle says.
    let short = os::memfd("short", 4096, None).unwrap();
    os::add_seals(short.as_fd(), os::EXPORT_SEALS).unwrap();
    let e = d
        .import_memory(forged(&ex, short), &ImportOptions::default())
        .unwrap_err();
    assert!(descriptors(&e), "{e}");

    // Not a memory file at all.
    let (r, _w) = nix::unistd::pipe().unwrap();
    let e = d
        .import_memory(forged(&ex, r), &ImportOptions::default())
        .unwrap_err();
    assert!(descriptors(&e), "{e}");

    // The wrong number of descriptors: none, and two.
    let mut shared = ex.share().unwrap();
    shared.fds.pop();
    shared.handle.fds = FdSource::Attached { count: 1 };
    let e = d
        .import_memory(shared, &ImportOptions::default())
        .unwrap_err();
    assert!(descriptors(&e), "{e}");
    let mut shared = ex.share().unwrap();
    let extra = os::dup(shared.fds[0].as_fd()).unwrap();
    shared.fds.push(extra);
    let e = d
        .import_memory(shared, &ImportOptions::default())
        .unwrap_err();
    assert!(descriptors(&e), "{e}");

    // Wrong kind and wrong backend.
    let mut shared = ex.share().unwrap();
    shared.handle.kind = HandleKind::Notify;
    let e = d
        .import_memory(shared, &ImportOptions::default())
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidHandle(HandleError::WrongKind { .. })),
        "{e}"
    );
    let mut shared = ex.share().unwrap();
    shared.handle.backend = BackendId::MockCuda;
    let e = d
        .import_memory(shared, &ImportOptions::default())
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidHandle(HandleError::WrongBackend { .. })),
        "{e}"
    );

    // A range that is not whole pages.
    let mut shared = ex.share().unwrap();
    shared.handle.size = 100;
    let e = d
        .import_memory(shared, &ImportOptions::default())
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidHandle(HandleError::Malformed { .. })),
        "{e}"
    );
    assert_eq!(a.importers().unwrap(), 0, "no lease left by failed imports");
}

#[test]
fn fixed_address_import_where_the_range_is_taken() {
    let d = dev();
    let a = d.allocate(&hal_core::AllocDesc::host(8192)).unwrap();
    let ex = d.export_memory(&a, &ExportOptions::default()).unwrap();
    let opts = ImportOptions {
        placement: ImportPlacement::ExporterAddress,
        ..Default::default()
    };
    // In the exporter's own process its mapping occupies the address.
    let e = d.import_memory(ex.share().unwrap(), &opts).unwrap_err();
    match &e {
        Error::AlreadyExists { what } => assert!(what.contains("ImportPlacement::Anywhere"), "{e}"),
        other => panic!("expected AlreadyExists, got {other}"),
    }
    // Without the address flag, fixed placement is refused.
    let mut shared = ex.share().unwrap();
    shared.handle.flags.0 &= !HandleFlags::HAS_ADDRESS.0;
    assert!(matches!(
        d.import_memory(shared, &opts),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn pid_allow_lists_in_the_handle() {
    let d = dev();
    let a = d.allocate(&hal_core::AllocDesc::host(4096)).unwrap();
    let mut ex = d
        .export_memory(
            &a,
            &ExportOptions {
                importers: Importers::Pids(vec![]),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(!ex.handle().flags.contains(HandleFlags::ANY_IMPORTER));
    assert!(!ex.handle().allows(4242));
    d.allow_importers(&mut ex, &[4242]).unwrap();
    assert!(ex.handle().allows(4242));
    let too_many = ExportOptions {
        importers: Importers::Pids((1..=65).collect()),
        ..Default::default()
    };
    assert!(matches!(
        d.export_memory(&a, &too_many),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        ex.handle().fds,
        FdSource::Broker { count: 1, .. } | FdSource::Attached { count: 1 }
    ));
}

fn blocks(fd: std::os::fd::BorrowedFd<'_>) -> u64 {
    os::fstat(fd).unwrap().st_blocks as u64 * 512
}

#[test]
fn a_sparse_reservation_costs_only_what_is_touched() {
    let d = dev();
    let size = 64u64 << 30;
    let a = d.allocate(&hal_core::AllocDesc::host(size)).unwrap();
    assert_eq!(a.len(), size);
    assert!(
        blocks(a.fd()) < 1 << 20,
        "nothing allocated before the first touch"
    );
    let page = os::page_size();
    let base = 32u64 << 30;
    let mib = 1u64 << 20;
    let mut off = 0;
    while off < mib {
        a.write(base + off, &[0x5a]).unwrap();
        off += page;
    }
    let used = blocks(a.fd());
    assert!(used >= mib, "{used} bytes back 1 MiB of touched pages?");
    assert!(
        used <= 4 * mib,
        "{used} bytes used for 1 MiB touched in a 64 GiB region"
    );
    // The exported region is as sparse for the importer.
    let ex = d.export_memory(&a, &ExportOptions::default()).unwrap();
    let m = d
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let mut b = [0u8; 1];
    m.read(base + page, &mut b).unwrap();
    assert_eq!(b[0], 0x5a);
    assert!(blocks(a.fd()) <= 4 * mib);
}

/// The line of /proc/self/numa_maps for the mapping at `addr`.
fn numa_line(addr: u64) -> String {
    let maps = std::fs::read_to_string("/proc/self/numa_maps").unwrap();
    let key = format!("{addr:x} ");
    maps.lines()
        .find(|l| l.starts_with(&key))
        .unwrap_or_else(|| panic!("no numa_maps line for {addr:#x}"))
        .to_string()
}

#[test]
fn numa_policy_is_visible_in_numa_maps() {
    let d = dev();
    for (policy, label) in [
        (NumaPolicy::Bind(vec![0]), "bind:0"),
        (NumaPolicy::Interleave(vec![0]), "interleave"),
        (NumaPolicy::Preferred(0), "prefer"),
    ] {
        let mut desc = hal_core::AllocDesc::host(1 << 20);
        desc.placement.numa = policy.clone();
        let a = match d.allocate(&desc) {
            Ok(a) => a,
            Err(Error::PermissionDenied { reason, .. }) => {
                // A seccomp profile that forbids mbind: the error says so,
                // and the placement cannot be checked here (a failure with
                // HAL_TESTS_STRICT=1).
                assert!(reason.contains("mbind"), "{reason}");
                hal_core::testing::not_run(&format!("mbind is not permitted here: {reason}"));
                return;
            }
            Err(e) => panic!("{policy:?}: {e}"),
        };
        a.write(0, &[1; 4096]).unwrap();
        let line = numa_line(a.addr());
        assert!(line.contains(label), "{policy:?}: {line}");
    }
    let mut desc = hal_core::AllocDesc::host(4096);
    desc.placement.numa = NumaPolicy::Bind(vec![999]);
    let e = d.allocate(&desc).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { what } if what.contains("999")),
        "{e}"
    );
    assert!(hal_cpu_shm::numa_nodes().contains(&0));
}

#[test]
fn huge_pages_and_prefault() {
    let d = dev();
    // Transparent huge pages are advice: always accepted.
    let mut desc = hal_core::AllocDesc::host(4 << 20);
    desc.placement.huge_pages = HugePages::Transparent;
    let a = d.allocate(&desc).unwrap();
    a.write(0, b"thp").unwrap();

    // Prefault: every page is backed before the first touch.
    let mut desc = hal_core::AllocDesc::host(4 << 20);
    desc.placement.prefault = true;
    let a = d.allocate(&desc).unwrap();
    assert!(blocks(a.fd()) >= 4 << 20, "prefaulted: {}", blocks(a.fd()));

    // Explicit huge pages: they work, or the error says none are reserved.
    let mut desc = hal_core::AllocDesc::host(1 << 20);
    desc.placement.huge_pages = HugePages::Explicit(2 << 20);
    match d.allocate(&desc) {
        Ok(a) => {
            assert_eq!(a.len(), 2 << 20, "rounded up to the huge page");
            assert_eq!(a.addr() % (2 << 20), 0);
            a.write(0, b"huge").unwrap();
        }
        Err(Error::OutOfMemory { detail, .. }) => {
            assert!(detail.contains("nr_hugepages"), "{detail}")
        }
        Err(e) => panic!("explicit huge pages: {e}"),
    }
    desc.placement.huge_pages = HugePages::Explicit(12345);
    assert!(matches!(
        d.allocate(&desc),
        Err(Error::InvalidArgument { .. })
    ));
}
