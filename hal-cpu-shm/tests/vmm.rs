//! VMM in one process: reserve, map, access, unmap, physical export/import
//! (the growing-buffer cases across processes are in cross.rs).

use hal_core::kit::os;
use hal_core::{
    Access, Error, ExportOptions, Granularity, HandleKind, ImportOptions, Physical, Reservation,
};
use hal_core::{Vmm, VmmExt};
use hal_cpu_shm::CpuDevice;

const P: u64 = 64 * 1024;

#[test]
fn granularity() {
    let d = CpuDevice::new();
    assert_eq!(
        d.granularity(Granularity::Minimum).unwrap(),
        os::page_size()
    );
    assert_eq!(d.granularity(Granularity::Recommended).unwrap(), 2 << 20);
}

#[test]
fn reserve_map_access_unmap() {
    let d = CpuDevice::new();
    assert!(matches!(
        d.allocate_physical(100),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        d.reserve(100, 0),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        d.reserve(P, 3 * 4096),
        Err(Error::InvalidArgument { .. })
    ));

    let r = d.reserve(4 * P, 1 << 21).unwrap();
    assert_eq!(r.base() % (1 << 21), 0);
    assert_eq!(r.len(), 4 * P);
    let mut b = [0u8; 4];
    assert!(r.read(0, &mut b).is_err(), "nothing mapped yet");

    let a = d.allocate_physical(2 * P).unwrap();
    assert_eq!(a.size(), 2 * P);
    d.map(&r, P, &a).unwrap();
    assert_eq!(
        d.access(&r, P, hal_core::AccessTarget::Host).unwrap(),
        Access::None,
        "a new mapping starts with no access, as on every backend"
    );
    assert!(matches!(
        r.read(P, &mut b),
        Err(Error::PermissionDenied { .. })
    ));
    d.set_access(&r, P, 2 * P, Access::ReadWrite).unwrap();
    r.write(P, b"abcd").unwrap();
    r.read(P, &mut b).unwrap();
    assert_eq!(&b, b"abcd");
    assert!(r.read(0, &mut b).is_err(), "the first chunk is not mapped");
    assert!(
        r.read(3 * P - 2, &mut b).is_err(),
        "straddles the end of the mapping"
    );
    // Overlapping maps are refused; the range must be unmapped first.
    let c = d.allocate_physical(P).unwrap();
    assert!(matches!(
        d.map(&r, 2 * P, &c),
        Err(Error::AlreadyExists { .. })
    ));
    assert!(d.map(&r, 4 * P, &c).is_err(), "past the reservation");
    d.map(&r, 3 * P, &c).unwrap();
    d.set_access(&r, 3 * P, P, Access::ReadWrite).unwrap();
    r.write(3 * P - 2, b"xyzw").unwrap(); // across two chunks

    // Access: read-only, then none, then back.
    d.set_access(&r, P, P, Access::Read).unwrap();
    r.read(P, &mut b).unwrap();
    assert!(matches!(
        r.write(P, b"no"),
        Err(Error::PermissionDenied { .. })
    ));
    r.write(2 * P, b"ok").unwrap(); // the other half keeps read-write
    d.set_access(&r, P, 2 * P, Access::None).unwrap();
    assert!(matches!(
        r.read(P, &mut b),
        Err(Error::PermissionDenied { .. })
    ));
    d.set_access(&r, P, 3 * P, Access::ReadWrite).unwrap();
    r.read(P, &mut b).unwrap();
    assert_eq!(&b, b"abcd");
    assert!(d.set_access(&r, 0, P, Access::Read).is_err(), "unmapped");

    // Unmap part of a chunk, then the rest; the memory stays in the chunk.
    d.unmap(&r, 2 * P, P).unwrap();
    assert!(r.read(2 * P, &mut b).is_err());
    r.read(P, &mut b).unwrap();
    d.unmap(&r, P, P).unwrap();
    assert!(d.unmap(&r, P, P).is_err(), "already unmapped");
    d.map(&r, 0, &a).unwrap();
    d.set_access(&r, 0, 2 * P, Access::Read).unwrap();
    r.read(P, &mut b).unwrap();
    assert_eq!(&b[..2], b"ok", "the same chunk, mapped elsewhere");
}

#[test]
fn physical_export_import_in_process() {
    let d = CpuDevice::new();
    let a = d.allocate_physical(P).unwrap();
    let r1 = d.reserve(P, 0).unwrap();
    d.map(&r1, 0, &a).unwrap();
    d.set_access(&r1, 0, P, Access::ReadWrite).unwrap();
    r1.write(0, b"shared chunk").unwrap();
    let ex = d.export_physical(&a, &ExportOptions::default()).unwrap();
    assert_eq!(ex.handle().kind, HandleKind::Physical);
    assert_eq!(ex.handle().size, P);
    let b = d
        .import_physical(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert!(!b.is_read_only());
    let r2 = d.reserve(2 * P, 0).unwrap();
    d.map(&r2, P, &b).unwrap();
    d.set_access(&r2, P, P, Access::ReadWrite).unwrap();
    let mut got = [0u8; 12];
    r2.read(P, &mut got).unwrap();
    assert_eq!(&got, b"shared chunk");
    r2.write(P, b"S").unwrap();
    r1.read(0, &mut got[..1]).unwrap();
    assert_eq!(&got[..1], b"S");

    // A read-only export maps read-only on the other side.
    let ro = d
        .export_physical(
            &a,
            &ExportOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .unwrap();
    let c = d
        .import_physical(ro.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert!(c.is_read_only());
    let r3 = d.reserve(P, 0).unwrap();
    d.map(&r3, 0, &c).unwrap();
    d.set_access(&r3, 0, P, Access::Read).unwrap();
    r3.read(0, &mut got[..1]).unwrap();
    assert!(matches!(
        r3.write(0, b"x"),
        Err(Error::PermissionDenied { .. })
    ));
    assert!(matches!(
        d.set_access(&r3, 0, P, Access::ReadWrite),
        Err(Error::PermissionDenied { .. })
    ));
    // An unsealed descriptor is refused.
    let mut forged = ex.share().unwrap();
    forged.fds[0] = os::memfd("unsealed", P, None).unwrap();
    let e = d
        .import_physical(forged, &ImportOptions::default())
        .unwrap_err();
    assert!(matches!(e, Error::InvalidHandle(_)), "{e}");
    // A range is meaningless for a physical export.
    assert!(d
        .export_physical(
            &a,
            &ExportOptions {
                range: Some(hal_core::ByteRange::new(0, 4096)),
                ..Default::default()
            }
        )
        .is_err());
}

#[test]
fn device_zero_and_the_host_share_one_access_right() {
    use hal_core::{AccessGrant, AccessTarget};
    let d = CpuDevice::new();
    let p = d.allocate_physical(P).unwrap();
    let r = d.reserve(P, 0).unwrap();
    d.map(&r, 0, &p).unwrap();
    d.set_access_for(&r, 0, P, &[AccessGrant::host(Access::Read)])
        .unwrap();
    for t in [AccessTarget::Host, AccessTarget::Device(0)] {
        assert_eq!(d.access(&r, 0, t).unwrap(), Access::Read, "{t:?}");
    }
    assert!(r.write(0, b"x").is_err(), "read-only for the one processor");
    let mixed = [
        AccessGrant::device(0, Access::ReadWrite),
        AccessGrant::host(Access::None),
    ];
    assert!(matches!(
        d.set_access_for(&r, 0, P, &mixed),
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(d.access(&r, 0, AccessTarget::Host).unwrap(), Access::Read);
    let same = [
        AccessGrant::device(0, Access::ReadWrite),
        AccessGrant::host(Access::ReadWrite),
    ];
    d.set_access_for(&r, 0, P, &same).unwrap();
    r.write(0, b"x").unwrap();
    assert!(d.access(&r, 0, AccessTarget::Device(1)).is_err());
}

#[test]
fn physical_properties_travel_and_refusals_say_why() {
    use hal_core::{PhysicalDesc, PhysicalLocation, ShareableHandle};
    let d = CpuDevice::new();
    let none = d
        .allocate_physical_with(&PhysicalDesc::new(P).handle(ShareableHandle::None))
        .unwrap();
    let err = d
        .export_physical(&none, &ExportOptions::default())
        .unwrap_err();
    assert!(
        err.to_string().contains("ShareableHandle::PosixFd"),
        "{err}"
    );
    let fabric = d
        .allocate_physical_with(&PhysicalDesc::new(P).handle(ShareableHandle::Fabric))
        .unwrap();
    assert_eq!(fabric.handle_type(), ShareableHandle::PosixFd, "fell back");
    assert!(d
        .allocate_physical_with(&PhysicalDesc::new(P).location(PhysicalLocation::Device(1)))
        .is_err());
    let node = *hal_core::kit::os::numa_nodes().last().unwrap();
    let numa = d
        .allocate_physical_with(&PhysicalDesc::new(P).location(PhysicalLocation::HostNuma(node)))
        .unwrap();
    let ex = d.export_physical(&numa, &ExportOptions::default()).unwrap();
    let back = d
        .import_physical(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert_eq!(back.location(), PhysicalLocation::HostNuma(node));
    let plain = d.allocate_physical(P).unwrap();
    let ex = d
        .export_physical(&plain, &ExportOptions::default())
        .unwrap();
    let back = d
        .import_physical(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert_eq!(back.location(), PhysicalLocation::Device(0));
}
