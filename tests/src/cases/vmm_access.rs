//! VMM as real devices need it: access lists over several devices (and the
//! host), mappings at an offset into a physical allocation, and the
//! properties a physical allocation is made with (location, shareable
//! handle type).

use hal_core::DeviceExt;
use hal_core::{
    Access, AccessGrant, AccessTarget, Backend, BackendId, Capabilities as C, Device,
    ImportOptions, Physical, PhysicalDesc, PhysicalLocation, Reservation, ShareableHandle,
};
use hal_core::{Vmm, VmmExt};

use super::util::{gran, read_res, share};
use crate::support::{must, must_be_unsupported, must_fail, open_export, pattern, Suite};

#[track_caller]
fn access_of<D: Vmm>(dev: &D, r: &D::Reservation, offset: u64, t: AccessTarget) -> Access {
    must(dev.access(r, offset, t), "access")
}

/// One `set_access_for` call gives every device of the backend access to a
/// mapped range, and `access` reports each; a later list changes only the
/// devices it names. A refused list (an unknown device, a target twice,
/// nothing at all) changes nothing, and an unmapped byte has no access to
/// report.
pub fn vmm_access_several_devices<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    if !dev.capabilities().contains(C::VMM) {
        let r = dev.reserve(dev.info().granularity_min, 0);
        must_be_unsupported(r, "vmm", "reserve");
        return;
    }
    let n = must(s.backend().devices(), "devices").len() as u32;
    let me = dev.info().ordinal;
    let g = gran(&dev);
    let p = must(dev.allocate_physical(g), "allocate_physical");
    let r = must(dev.reserve(2 * g, g), "reserve");
    must(dev.map(&r, 0, &p), "map");

    let all: Vec<AccessGrant> = (0..n)
        .map(|d| AccessGrant::device(d, Access::ReadWrite))
        .collect();
    must(
        dev.set_access_for(&r, 0, g, &all),
        "set_access_for every device",
    );
    for d in 0..n {
        assert_eq!(
            access_of(&dev, &r, 0, AccessTarget::Device(d)),
            Access::ReadWrite,
            "device {d} after one grant list for all {n}"
        );
    }
    let data = pattern(61, g);
    must(r.write(0, &data), "write under read-write access");

    if n >= 2 {
        let other = (me + 1) % n;
        must(
            dev.set_access_for(&r, 0, g, &[AccessGrant::device(other, Access::Read)]),
            "set_access_for one other device",
        );
        assert_eq!(
            access_of(&dev, &r, 0, AccessTarget::Device(other)),
            Access::Read,
            "the device named"
        );
        assert_eq!(
            access_of(&dev, &r, 0, AccessTarget::Device(me)),
            Access::ReadWrite,
            "a device not named keeps its access"
        );
    }

    let refused: [(&str, Vec<AccessGrant>); 3] = [
        ("an empty list", Vec::new()),
        (
            "a device that does not exist",
            vec![
                AccessGrant::device(me, Access::None),
                AccessGrant::device(n, Access::ReadWrite),
            ],
        ),
        (
            "the same device twice",
            vec![
                AccessGrant::device(me, Access::None),
                AccessGrant::device(me, Access::Read),
            ],
        ),
    ];
    for (what, grants) in refused {
        let _ = must_fail(dev.set_access_for(&r, 0, g, &grants), what);
        assert_eq!(
            access_of(&dev, &r, 0, AccessTarget::Device(me)),
            Access::ReadWrite,
            "{what}: a refused list changes nothing"
        );
    }
    assert_eq!(
        read_res(&r, 0, 64),
        &data[..64],
        "bytes after refused lists"
    );
    let _ = must_fail(
        dev.access(&r, g, AccessTarget::Device(me)),
        "access of an unmapped byte",
    );
    let _ = must_fail(
        dev.set_access_for(&r, g, g, &all),
        "set_access_for an unmapped range",
    );
    must(dev.unmap(&r, 0, g), "unmap");
}

/// `map_range` maps part of a physical allocation at an offset: the bytes
/// are the allocation's at that offset, seen through a second mapping of the
/// whole; ranges that do not fit are refused. A physical allocation reports
/// where it lives and the handle it was made for; a fabric request the
/// device refuses falls back to a POSIX descriptor, never failing and never
/// silently; host NUMA memory (with [`C::HOST_NUMA_VMM`]) is mapped,
/// written by the host and, when exported, imported with its location.
pub fn vmm_physical_properties<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    if !dev.capabilities().contains(C::VMM) {
        let desc = PhysicalDesc::new(dev.info().granularity_min);
        must_be_unsupported(
            dev.allocate_physical_with(&desc),
            "vmm",
            "allocate_physical_with",
        );
        return;
    }
    let caps = dev.capabilities();
    let me = dev.info().ordinal;
    let g = gran(&dev);
    let p = must(dev.allocate_physical(2 * g), "allocate_physical");
    assert_eq!(
        p.location(),
        PhysicalLocation::Device(me),
        "default location"
    );
    assert_eq!(p.handle_type(), ShareableHandle::PosixFd, "default handle");

    let whole = must(dev.reserve(2 * g, g), "reserve");
    must(dev.map(&whole, 0, &p), "map the whole");
    must(
        dev.set_access(&whole, 0, 2 * g, Access::ReadWrite),
        "set_access",
    );
    let part = must(dev.reserve(g, g), "reserve");
    let partial = dev.map_range(&part, 0, &p, g, g);
    match (dev.info().backend, partial) {
        // `cuMemMap` maps a physical allocation from its start only (its
        // offset is 0; driver 580 answered CUDA_ERROR_NOT_SUPPORTED).
        (BackendId::Cuda, r) => assert!(
            r.as_ref().is_err_and(|e| e.is_unsupported()),
            "CUDA maps a physical allocation from its start only: {r:?}"
        ),
        // Over CUDA, the same answer; over another device, a mapping.
        (BackendId::CudaUvm, Err(e)) if e.is_unsupported() => {}
        (_, r) => {
            must(r, "map the second granule alone");
            must(dev.set_access(&part, 0, g, Access::ReadWrite), "set_access");
            let data = pattern(62, g);
            must(part.write(0, &data), "write through the partial mapping");
            assert_eq!(
                read_res(&whole, g, g),
                data,
                "the partial mapping shows the allocation from its offset"
            );
            must(dev.unmap(&part, 0, g), "unmap the part");
        }
    }
    for (what, off, len) in [
        ("past the allocation's end", g, 2 * g),
        ("an offset that is not whole granules", g / 2, g),
        ("zero bytes", 0, 0),
    ] {
        let _ = must_fail(dev.map_range(&part, 0, &p, off, len), what);
    }
    must(dev.unmap(&whole, 0, 2 * g), "unmap the whole");

    let fabric = must(
        dev.allocate_physical_with(&PhysicalDesc::new(g).handle(ShareableHandle::Fabric)),
        "a fabric request is served, by fabric or by a POSIX descriptor",
    );
    assert!(
        matches!(
            fabric.handle_type(),
            ShareableHandle::Fabric | ShareableHandle::PosixFd
        ),
        "the handle type says what was made: {:?}",
        fabric.handle_type()
    );

    let numa = PhysicalDesc::new(g).location(PhysicalLocation::HostNuma(0));
    if !caps.contains(C::HOST_NUMA_VMM) {
        must_be_unsupported(
            dev.allocate_physical_with(&numa),
            "host-numa-vmm",
            "allocate_physical_with(HostNuma)",
        );
        return;
    }
    let h = must(dev.allocate_physical_with(&numa), "host NUMA physical");
    assert_eq!(h.location(), PhysicalLocation::HostNuma(0), "host location");
    let r = must(dev.reserve(g, g), "reserve");
    must(dev.map(&r, 0, &h), "map host NUMA memory");
    must(
        dev.set_access_for(
            &r,
            0,
            g,
            &[
                AccessGrant::device(me, Access::ReadWrite),
                AccessGrant::host(Access::ReadWrite),
            ],
        ),
        "device and host access to host NUMA memory",
    );
    assert_eq!(
        access_of(&dev, &r, 0, AccessTarget::Host),
        Access::ReadWrite,
        "host access"
    );
    let bytes = pattern(63, 256);
    must(r.write(0, &bytes), "write host NUMA memory");
    assert_eq!(read_res(&r, 0, 256), bytes, "read it back");
    if caps.contains(C::IPC_MEMORY) {
        let ex = must(dev.export_physical(&h, &open_export(caps)), "export");
        let q = must(
            dev.import_physical(share(&ex), &ImportOptions::default()),
            "import host NUMA memory",
        );
        assert_eq!(
            q.location(),
            PhysicalLocation::HostNuma(0),
            "an import says where the exporter put the pages"
        );
    }
    must(dev.unmap(&r, 0, g), "unmap");
}

/// A copy through a reservation needs this device's access to every byte
/// it touches: a new mapping gives none (on every backend, host memory
/// included), with access taken away (`Access::None`) reads and writes are
/// refused, with read access writes are, an unmapped byte is refused, and
/// a refused write copies nothing. (How a backend refuses is its own: the
/// vendor backends answer `PermissionDenied` before the driver is asked,
/// the simulator its vendor's code.)
pub fn vmm_copies_need_access<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    if !dev.capabilities().contains(C::VMM) {
        must_be_unsupported(
            dev.allocate_physical(dev.info().granularity_min),
            "vmm",
            "allocate_physical",
        );
        return;
    }
    let me = dev.info().ordinal;
    let g = gran(&dev);
    let p = must(dev.allocate_physical(2 * g), "allocate_physical");
    let r = must(dev.reserve(3 * g, g), "reserve");
    must(dev.map(&r, 0, &p), "map");
    assert_eq!(
        access_of(&dev, &r, 0, AccessTarget::Device(me)),
        Access::None,
        "a new mapping starts with no access"
    );
    must_fail(r.write(0, b"x"), "a write before any access was given");
    must_fail(
        r.read(g, &mut [0u8; 1]),
        "a read before any access was given",
    );
    let grant = |access| {
        must(
            dev.set_access_for(&r, 0, 2 * g, &[AccessGrant::device(me, access)]),
            &format!("set_access_for ({access:?})"),
        )
    };
    grant(Access::ReadWrite);
    must(r.write(g, b"kept"), "a write with read-write access");
    grant(Access::None);
    must_fail(r.write(0, b"x"), "a write with no access");
    must_fail(r.read(0, &mut [0u8; 1]), "a read with no access");
    grant(Access::Read);
    must_fail(r.write(g, b"lost"), "a write with read access");
    let mut back = [0u8; 4];
    must(r.read(g, &mut back), "a read with read access");
    assert_eq!(&back, b"kept", "the refused write copied nothing");
    must_fail(r.read(2 * g, &mut [0u8; 1]), "a read of an unmapped byte");
}
