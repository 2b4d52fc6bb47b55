//! VMM: granularity, physical allocations, reservations, map / access /
//! unmap, shareable physical handles, and growable buffers.

use hal_core::growable::{GrowableBuffer, GrowableView};
use hal_core::DeviceExt;
use hal_core::{
    Access, Backend, Capabilities as C, Device, Granularity, HandleKind, ImportOptions, Physical,
    Reservation, SharedHandle,
};
use hal_core::{Vmm, VmmExt};

use super::util::{by_text, decode, gran, read_res, share};
use crate::process::{self, report};
use crate::support::{must, must_be_unsupported, must_fail, open_export, pattern, Suite};

/// The child role that follows a growable buffer.
pub(crate) const GROW_ROLE: &str = "grow";

/// Require Unsupported from the VMM calls on a device without VMM. Returns
/// true when the case should go on.
fn vmm_or_unsupported<D: Vmm>(dev: &D) -> bool {
    if dev.capabilities().contains(C::VMM) {
        return true;
    }
    let g = dev.info().granularity_min;
    must_be_unsupported(dev.allocate_physical(g), "vmm", "allocate_physical");
    must_be_unsupported(dev.reserve(4 * g, g), "vmm", "reserve");
    false
}

/// The granularities match `DeviceInfo`, are powers of two, the recommended
/// one a multiple of the minimum, the minimum a multiple of the page size;
/// a physical allocation of the minimum has that size.
pub fn vmm_granularity<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    if !vmm_or_unsupported(&dev) {
        return;
    }
    let info = dev.info().clone();
    let gmin = gran(&dev);
    let grec = must(
        dev.granularity(Granularity::Recommended),
        "granularity(Recommended)",
    );
    assert_eq!(
        gmin, info.granularity_min,
        "granularity(Minimum) vs DeviceInfo"
    );
    assert_eq!(
        grec, info.granularity_recommended,
        "granularity(Recommended) vs DeviceInfo"
    );
    assert!(gmin.is_power_of_two() && grec.is_power_of_two());
    assert_eq!(
        grec % gmin,
        0,
        "recommended granularity is a multiple of the minimum"
    );
    assert_eq!(
        gmin % info.page_size(),
        0,
        "minimum granularity is whole pages"
    );
    let p = must(
        dev.allocate_physical(gmin),
        "allocate_physical(minimum granularity)",
    );
    assert_eq!(p.size(), gmin, "physical size");
}

/// Physical allocations and reservations whose sizes or alignments are not
/// multiples of the minimum granularity are refused; multiples work.
pub fn vmm_physical_size_refused<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    if !vmm_or_unsupported(&dev) {
        return;
    }
    let g = gran(&dev);
    for size in [0, g / 2, g + g / 2, 2 * g - 1] {
        let _ = must_fail(
            dev.allocate_physical(size),
            &format!("allocate_physical({size:#x}) with granularity {g:#x}"),
        );
    }
    let _ = must_fail(
        dev.reserve(g + g / 2, g),
        "reserve of a size that is not whole granules",
    );
    let _ = must_fail(dev.reserve(0, g), "reserve of zero bytes");
    let _ = must_fail(
        dev.reserve(2 * g, g / 2 + 1),
        "reserve with an alignment that is not a power of two",
    );
    let p = must(
        dev.allocate_physical(2 * g),
        "allocate_physical(2 granules)",
    );
    assert_eq!(p.size(), 2 * g);
}

/// Reserve, map, set access, read and write, unmap: misaligned, overlapping
/// or out-of-range maps are refused; unmapped or inaccessible parts refuse
/// access; a physical allocation keeps its bytes across unmap and remap.
pub fn vmm_reserve_map_access_unmap<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    if !vmm_or_unsupported(&dev) {
        return;
    }
    let g = gran(&dev);
    let p0 = must(dev.allocate_physical(g), "allocate_physical");
    let p1 = must(dev.allocate_physical(g), "allocate_physical");
    let p2 = must(dev.allocate_physical(2 * g), "allocate_physical");
    let r = must(dev.reserve(4 * g, g), "reserve");
    assert_eq!(r.len(), 4 * g, "reservation length");
    assert_ne!(r.base(), 0, "reservation base");
    assert_eq!(
        r.base() % g,
        0,
        "reservation base aligned to the granularity"
    );

    let _ = must_fail(
        dev.map(&r, g / 2, &p0),
        "map at an offset that is not whole granules",
    );
    let _ = must_fail(dev.map(&r, 4 * g, &p0), "map past the reservation's end");
    let _ = must_fail(
        dev.map(&r, 3 * g, &p2),
        "map that runs past the reservation's end",
    );
    must(dev.map(&r, 0, &p0), "map chunk 0");
    must(dev.map(&r, g, &p1), "map chunk 1");
    let _ = must_fail(dev.map(&r, 0, &p2), "map over a mapped range");

    let mut b = [0u8; 8];
    must(
        dev.set_access(&r, 0, 2 * g, Access::ReadWrite),
        "set_access(ReadWrite)",
    );
    let data = pattern(30, 2 * g);
    must(r.write(0, &data), "write across two mapped chunks");
    assert_eq!(
        read_res(&r, 0, 2 * g),
        data,
        "bytes read back across chunks"
    );
    let _ = must_fail(r.read(2 * g, &mut b), "read of an unmapped range");
    let _ = must_fail(r.write(3 * g, &b), "write into an unmapped range");
    let _ = must_fail(
        r.read(2 * g - 4, &mut b),
        "read that runs into an unmapped range",
    );
    let _ = must_fail(
        dev.set_access(&r, 2 * g, g, Access::ReadWrite),
        "set_access on an unmapped range",
    );

    must(dev.set_access(&r, 0, g, Access::Read), "set_access(Read)");
    assert_eq!(read_res(&r, 0, 16), &data[..16], "read under Read access");
    let _ = must_fail(r.write(0, b"refused"), "write under Read access");
    assert_eq!(
        read_res(&r, 0, 16),
        &data[..16],
        "bytes after a refused write"
    );
    must(dev.set_access(&r, 0, g, Access::None), "set_access(None)");
    let _ = must_fail(r.read(0, &mut b), "read under no access");
    must(
        dev.set_access(&r, 0, g, Access::ReadWrite),
        "set_access(ReadWrite) again",
    );
    assert_eq!(
        read_res(&r, 0, 16),
        &data[..16],
        "bytes after access came back"
    );

    must(dev.unmap(&r, g, g), "unmap chunk 1");
    let _ = must_fail(r.read(g, &mut b), "read of an unmapped chunk");
    must(dev.map(&r, 2 * g, &p1), "map chunk 1 again elsewhere");
    must(
        dev.set_access(&r, 2 * g, g, Access::ReadWrite),
        "set_access",
    );
    assert_eq!(
        read_res(&r, 2 * g, g),
        &data[g as usize..],
        "a physical allocation keeps its bytes across unmap and map"
    );
    must(dev.unmap(&r, 0, g), "unmap chunk 0");
    must(dev.unmap(&r, 2 * g, g), "unmap chunk 1");
}

/// Export a physical allocation and import it (shared and by text): the
/// importer maps it into its own reservation and both sides see each
/// other's bytes.
pub fn vmm_export_import_physical<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    if !vmm_or_unsupported(&dev) {
        return;
    }
    let caps = dev.capabilities();
    let g = gran(&dev);
    let p = must(dev.allocate_physical(2 * g), "allocate_physical");
    if !caps.contains(C::IPC_MEMORY) {
        must_be_unsupported(
            dev.export_physical(&p, &open_export(caps)),
            "ipc-memory",
            "export_physical",
        );
        return;
    }
    let r = must(dev.reserve(2 * g, g), "reserve");
    must(dev.map(&r, 0, &p), "map");
    must(
        dev.set_access(&r, 0, 2 * g, Access::ReadWrite),
        "set_access",
    );
    let data = pattern(31, 2 * g);
    must(r.write(0, &data), "write");

    let ex = must(
        dev.export_physical(&p, &open_export(caps)),
        "export_physical",
    );
    assert_eq!(ex.handle().kind, HandleKind::Physical, "handle kind");
    assert_eq!(ex.handle().size, 2 * g, "handle size");
    for (how, shared) in [("shared", share(&ex)), ("text", by_text(&ex))] {
        let q = must(
            dev.import_physical(shared, &ImportOptions::default()),
            "import_physical",
        );
        assert_eq!(q.size(), 2 * g, "{how}: imported physical size");
        let r2 = must(dev.reserve(2 * g, g), "reserve");
        must(dev.map(&r2, 0, &q), "map an imported physical allocation");
        must(
            dev.set_access(&r2, 0, 2 * g, Access::ReadWrite),
            "set_access",
        );
        assert_eq!(
            read_res(&r2, 0, 2 * g),
            data,
            "{how}: importer sees the exporter's bytes"
        );
        must(r2.write(g + 1, how.as_bytes()), "importer write");
        assert_eq!(
            read_res(&r, g + 1, how.len() as u64),
            how.as_bytes(),
            "{how}: exporter sees the importer's write"
        );
        must(
            r.write(g + 1, &data[g as usize + 1..g as usize + 1 + how.len()]),
            "restore",
        );
        must(dev.unmap(&r2, 0, 2 * g), "unmap");
    }
    must(dev.unmap(&r, 0, 2 * g), "unmap");
}

fn growable_or_unsupported<D: Vmm>(dev: &D) -> bool {
    let caps = dev.capabilities();
    if caps.contains(C::GROWABLE) || (caps.contains(C::VMM) && caps.contains(C::IPC_MEMORY)) {
        return true;
    }
    let g = dev.info().granularity_min;
    must_be_unsupported(
        GrowableBuffer::create(dev, 4 * g, g, open_export(caps)).map(drop),
        "vmm and ipc-memory",
        "GrowableBuffer::create",
    );
    false
}

/// A growable buffer (GROWABLE, or VMM with IPC memory): the exporter maps
/// more chunks after export; an importer in this process (shared and by
/// text) follows with `refresh`, and writes flow both ways.
pub fn vmm_growable_in_process<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    if !growable_or_unsupported(&dev) {
        return;
    }
    let caps = dev.capabilities();
    let g = gran(&dev);
    let mut buf = must(
        GrowableBuffer::create(&dev, 4 * g, g, open_export(caps)),
        "GrowableBuffer::create",
    );
    assert!(buf.is_empty());
    must(buf.grow_to(g), "grow to one chunk");
    let a = pattern(40, g);
    must(buf.write(0, &a), "write chunk 0");
    let mut view = must(
        GrowableView::open(&dev, must(buf.share(), "share"), &ImportOptions::default()),
        "GrowableView::open",
    );
    let text_shared = SharedHandle::from(decode(&buf.handle().to_text()));
    let mut view2 = must(
        GrowableView::open(&dev, text_shared, &ImportOptions::default()),
        "GrowableView::open by text",
    );
    assert_eq!(view.len(), g, "the view maps the published chunk");
    let mut got = vec![0u8; g as usize];
    must(view.read(0, &mut got), "view read");
    assert_eq!(got, a, "view sees chunk 0");

    must(buf.grow_to(3 * g), "grow to three chunks after export");
    assert_eq!(buf.len(), 3 * g);
    let b = pattern(41, g);
    must(buf.write(2 * g, &b), "write chunk 2");
    for v in [&mut view, &mut view2] {
        assert_eq!(
            must(v.refresh(), "refresh"),
            3 * g,
            "the view follows the growth"
        );
        must(v.read(2 * g, &mut got), "view read");
        assert_eq!(got, b, "view sees the new chunk");
    }
    must(view.write(g + 5, b"view"), "view write");
    let mut four = [0u8; 4];
    must(buf.read(g + 5, &mut four), "buffer read");
    assert_eq!(&four, b"view", "exporter sees the view's write");
    let _ = must_fail(buf.grow_to(5 * g), "growing past the reserved capacity");
}

/// A growable buffer followed by a real child process: the child opens it
/// from the handle text, the parent grows it after that, the child maps the
/// new chunk, reads the parent's bytes and writes its own.
pub fn vmm_growable_child_follows<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    if !growable_or_unsupported(&dev) {
        return;
    }
    let caps = dev.capabilities();
    let g = gran(&dev);
    let mut buf = must(
        GrowableBuffer::create(&dev, 4 * g, g, open_export(caps)),
        "GrowableBuffer::create",
    );
    must(buf.grow_to(g), "grow");
    must(buf.write(0, &pattern(42, g)), "write chunk 0");
    let mut child = s.spawn(
        GROW_ROLE,
        &[("grow", buf.handle().to_text()), ("chunk", g.to_string())],
    );
    child.expect("opened");
    must(buf.grow_to(3 * g), "grow after the child opened the buffer");
    must(buf.write(2 * g, &pattern(43, g)), "write chunk 2");
    child.send("grown");
    child.expect("written");
    let mut got = vec![0u8; g as usize];
    must(buf.read(g, &mut got), "read chunk 1");
    assert_eq!(got, pattern(44, g), "the parent sees the child's write");
    child.finish();
}

/// Child role: open the growable buffer named by `grow`, follow the
/// parent's growth, write chunk 1.
pub(crate) fn child_grow<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let g: u64 = process::arg("chunk").parse().expect("chunk");
    let shared = SharedHandle::from(decode(&process::arg("grow")));
    let mut view = must(
        GrowableView::open(&dev, shared, &ImportOptions::default()),
        "child GrowableView::open",
    );
    assert_eq!(view.len(), g, "the child maps the published chunk");
    let mut got = vec![0u8; g as usize];
    must(view.read(0, &mut got), "child read");
    assert_eq!(got, pattern(42, g), "the child sees chunk 0");
    report("opened", "");
    process::wait_for("grown");
    assert_eq!(
        must(view.refresh(), "child refresh"),
        3 * g,
        "the child follows the growth"
    );
    must(view.read(2 * g, &mut got), "child read");
    assert_eq!(got, pattern(43, g), "the child sees the new chunk");
    must(view.write(g, &pattern(44, g)), "child write");
    report("written", "");
}

/// A vendor backend's check of a physical handle (not a case of the suite:
/// each backend's own tests call it): a handle whose size is not whole
/// granules, is 0, or has an offset names part of an allocation and is
/// refused as malformed before anything is opened. `p` is one granule of
/// `dev`'s physical memory. Panics on a failure.
pub fn partial_physical_handles_are_refused<D: Vmm>(dev: &D, p: &D::Physical) {
    let g = must(dev.granularity(Granularity::Minimum), "granularity");
    let ex = must(
        dev.export_physical(p, &Default::default()),
        "export_physical",
    );
    for (what, size, offset) in [
        ("half a granule", g / 2, 0),
        ("no bytes", 0, 0),
        ("an offset", g, g),
    ] {
        let mut shared = must(ex.share(), "share");
        shared.handle.size = size;
        shared.handle.offset = offset;
        match dev.import_physical(shared, &ImportOptions::default()) {
            Err(hal_core::Error::InvalidHandle(hal_core::HandleError::Malformed { .. })) => {}
            other => panic!("a physical handle of {what}: {:?}", other.map(|_| ())),
        }
    }
}
