//! Memory: allocate, export, import, close; ranges, read-only, placement.

use hal_core::DeviceExt;
use hal_core::{
    Allocation, Backend, BackendId, ByteRange, Capabilities as C, Device, Error, ExportOptions,
    FdSource, HandleFlags, HandleKind, ImportOptions, ImportPlacement, Location, Mapping, Memory,
};

use super::util::{by_text, share};
use crate::support::{
    alloc_filled, assert_bytes, importers_of, must, must_be_unsupported, must_fail, must_time_out,
    open_export, pattern, read_vec, Suite, SHORT,
};

/// Require Unsupported from a memory export on a device without IPC memory.
/// Returns true when the case should go on.
#[track_caller]
pub(crate) fn ipc_memory_or_unsupported<D: Device>(dev: &D, alloc: &D::Allocation) -> bool {
    if dev.capabilities().contains(C::IPC_MEMORY) {
        return true;
    }
    must_be_unsupported(
        dev.export_memory(alloc, &ExportOptions::default()),
        "ipc-memory",
        "export_memory",
    );
    false
}

/// Export the whole allocation and import it in this process through
/// `Exported::share`: the handle describes the allocation, bytes written by
/// the exporter are seen by the mapping and the other way round (through
/// `read`/`write` and, on host-visible devices, through host pointers),
/// sizes and locations match, and accesses past the end are refused.
pub fn memory_export_import_roundtrip<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let info = dev.info().clone();
    let page = info.page_size();
    let a = alloc_filled(&dev, 4, 1);
    if !ipc_memory_or_unsupported(&dev, &a) {
        return;
    }
    let ex = must(dev.export_memory(&a, &open_export(caps)), "export_memory");
    let h = ex.handle().clone();
    assert_eq!(h.kind, HandleKind::Memory, "handle kind");
    assert_eq!(h.backend, s.backend().id(), "handle backend");
    assert_eq!(h.device, info.ordinal, "handle device ordinal");
    assert_eq!(h.device_uuid, info.uuid, "handle device UUID");
    assert_eq!(h.location, a.location(), "handle location");
    assert_eq!(h.size, a.len(), "handle size");
    assert_eq!(h.offset, 0, "handle offset of a whole export");
    assert_eq!(h.creator_pid, std::process::id(), "handle creator pid");
    assert_ne!(h.object_id, [0u8; 16], "handle object id");
    match &h.fds {
        FdSource::None => assert!(ex.fds().is_empty(), "FdSource::None but descriptors held"),
        other => assert_eq!(
            other.count(),
            ex.fds().len(),
            "descriptor count of the handle"
        ),
    }

    let m = must(
        dev.import_memory(share(&ex), &ImportOptions::default()),
        "import_memory",
    );
    assert_eq!(m.len(), a.len(), "mapping length");
    assert_eq!(m.location(), a.location(), "mapping location");
    assert_eq!(m.handle().object_id, h.object_id, "mapping's handle");
    assert_eq!(m.handle().kind, HandleKind::Memory);
    assert!(
        !m.is_read_only(),
        "a read-write export was imported read-only"
    );
    assert_ne!(m.addr(), 0, "mapping address");
    assert_bytes(
        &m,
        0,
        &pattern(1, a.len()),
        "the exporter's bytes seen by the importer",
    );

    m.write(page + 3, b"from the importer")
        .unwrap_or_else(|e| panic!("mapping write: {e}"));
    assert_bytes(
        &a,
        page + 3,
        b"from the importer",
        "importer's write seen by the exporter",
    );
    must(a.write(2 * page, b"from the exporter"), "allocation write");
    assert_bytes(
        &m,
        2 * page,
        b"from the exporter",
        "exporter's later write seen by the importer",
    );

    let mut four = [0u8; 4];
    let _ = must_fail(
        m.read(m.len() - 2, &mut four),
        "a mapping read past its end",
    );
    let _ = must_fail(m.write(m.len(), &[1]), "a mapping write past its end");
    let _ = must_fail(
        a.read(a.len() - 2, &mut four),
        "an allocation read past its end",
    );

    if caps.contains(C::MEMORY_IS_HOST) {
        let mp = m
            .host_ptr()
            .expect("host-visible mapping without a host pointer");
        let ap = a
            .host_ptr()
            .expect("host-visible allocation without a host pointer");
        // SAFETY: both pointers address live mappings at least four pages
        // long; offsets stay inside them; bytes are plain data.
        unsafe {
            assert_eq!(*mp.add(page as usize + 3), b'f');
            ap.add(3 * page as usize).write_volatile(0x5A);
            assert_eq!(mp.add(3 * page as usize).read_volatile(), 0x5A);
        }
        assert_eq!(
            m.addr(),
            mp as u64,
            "addr() of a host mapping is its host pointer"
        );
    } else {
        assert!(
            m.host_ptr().is_none(),
            "device-only mapping gave a host pointer"
        );
    }
    // Close order: the importer closes, then the exporter frees.
    drop(m);
    drop(ex);
    drop(a);
}

/// Import from the handle text alone (no descriptors attached): the
/// exporter's broker serves them. Text and binary forms round-trip.
pub fn memory_import_by_text_via_broker<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let a = alloc_filled(&dev, 2, 2);
    if !ipc_memory_or_unsupported(&dev, &a) {
        return;
    }
    let ex = must(dev.export_memory(&a, &open_export(caps)), "export_memory");
    let text = ex.to_text();
    assert_eq!(
        text,
        ex.handle().to_text(),
        "Exported::to_text is the handle's text"
    );
    let decoded = super::util::decode(&text);
    assert_eq!(&decoded, ex.handle(), "text round trip");
    let bytes = ex.handle().to_bytes();
    let back = must(
        hal_core::Handle::from_bytes(&bytes).map_err(Error::from),
        "decoding the binary form",
    );
    assert_eq!(&back, ex.handle(), "binary round trip");

    let m = must(
        dev.import_memory(by_text(&ex), &ImportOptions::default()),
        "import by text",
    );
    assert_eq!(m.len(), a.len());
    assert_bytes(&m, 0, &pattern(2, a.len()), "bytes through a text import");
    must(m.write(7, b"text"), "write through a text import");
    assert_bytes(&a, 7, b"text", "text importer's write seen by the exporter");
}

/// Export a page-aligned range that does not start at the allocation's
/// start: the handle names the offset, the mapping is the range.
pub fn memory_export_subrange_at_offset<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let page = dev.info().page_size();
    let a = alloc_filled(&dev, 4, 3);
    if !ipc_memory_or_unsupported(&dev, &a) {
        return;
    }
    let opts = ExportOptions {
        range: Some(ByteRange::new(page, 2 * page)),
        ..open_export(caps)
    };
    let ex = must(dev.export_memory(&a, &opts), "export of pages 1..3");
    assert_eq!(ex.handle().offset, page, "handle offset of a sub-range");
    assert_eq!(ex.handle().size, 2 * page, "handle size of a sub-range");
    let m = must(
        dev.import_memory(share(&ex), &ImportOptions::default()),
        "import_memory",
    );
    assert_eq!(m.len(), 2 * page, "mapping length of a sub-range");
    let whole = pattern(3, a.len());
    assert_bytes(
        &m,
        0,
        &whole[page as usize..3 * page as usize],
        "sub-range bytes",
    );
    must(m.write(0, b"head"), "write");
    assert_bytes(
        &a,
        page,
        b"head",
        "sub-range write lands at the range's offset",
    );
    let mut b = [0u8; 1];
    let _ = must_fail(m.read(2 * page, &mut b), "a read past the exported range");
    assert_bytes(
        &a,
        0,
        &whole[..page as usize],
        "bytes outside the range untouched",
    );
}

/// The exporting process imports its own export (with the descriptors and
/// from the text): the bytes are the allocation's, both ways; a device
/// mapping has the exporter's address for the range (the backend
/// short-circuits to the original memory where the vendor refuses to open
/// its own handle); and the import holds a lease like any importer.
pub fn same_process_import<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let a = alloc_filled(&dev, 3, 6);
    if !ipc_memory_or_unsupported(&dev, &a) {
        return;
    }
    let page = dev.info().page_size();
    let opts = ExportOptions {
        range: Some(ByteRange::new(page, page)),
        ..open_export(caps)
    };
    let ex = must(dev.export_memory(&a, &opts), "export_memory");
    assert!(ex.handle().is_own(), "an export names this process");
    let shared = must(
        dev.import_memory(share(&ex), &ImportOptions::default()),
        "import of this process's own export",
    );
    let text = must(
        dev.import_memory(by_text(&ex), &ImportOptions::default()),
        "import of this process's own export from its text",
    );
    let want = read_vec(&a, page, page);
    for m in [&shared, &text] {
        assert_bytes(m, 0, &want, "the allocation's bytes through the import");
        if matches!(a.location(), Location::Device(_)) {
            assert_eq!(
                m.addr(),
                a.addr() + page,
                "a same-process device import reaches the original memory"
            );
        }
    }
    must(
        shared.write(5, b"from the import"),
        "write through the import",
    );
    assert_bytes(&a, page + 5, b"from the import", "the allocation sees it");
    must(
        a.write(page + 40, b"from the allocation"),
        "write to the allocation",
    );
    assert_bytes(&text, 40, b"from the allocation", "the import sees it");
    if caps.contains(C::LEASES) {
        assert!(importers_of(&a) >= 1, "a same-process import holds a lease");
        must_time_out(
            a.wait_unleased(Some(SHORT)),
            "wait_unleased under a same-process import",
        );
        drop((shared, text));
        assert_eq!(importers_of(&a), 0, "its lease goes with it");
    }
}

/// Import the same handle twice in one process: both mappings see the same
/// bytes (on CUDA they are the same mapping, reference counted), and closing
/// one leaves the other working.
pub fn memory_import_twice<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let a = alloc_filled(&dev, 2, 4);
    if !ipc_memory_or_unsupported(&dev, &a) {
        return;
    }
    let ex = must(dev.export_memory(&a, &open_export(caps)), "export_memory");
    let m1 = must(
        dev.import_memory(share(&ex), &ImportOptions::default()),
        "first import",
    );
    let m2 = must(
        dev.import_memory(share(&ex), &ImportOptions::default()),
        "second import",
    );
    if matches!(s.backend().id(), BackendId::Cuda | BackendId::MockCuda) {
        // cuIpcOpenMemHandle: a second open in one process returns the same
        // mapping, reference counted.
        assert_eq!(
            m1.addr(),
            m2.addr(),
            "a second open of one handle must return the same mapping"
        );
    }
    must(m1.write(11, b"one"), "write through the first mapping");
    assert_bytes(&m2, 11, b"one", "second mapping sees the first's write");
    drop(m1);
    assert_bytes(
        &m2,
        0,
        &pattern(4, 11),
        "second mapping after the first closed",
    );
    must(a.write(20, b"two"), "exporter write");
    assert_bytes(&m2, 20, b"two", "second mapping after the first closed");
}

/// A read-only export (READ_ONLY_EXPORT): the importer's mapping says so
/// and refuses writes; the exporter's later writes still show. The first
/// export decides: a writable export of the same allocation is then refused
/// with `PermissionDenied`, and so is a read-only export of an allocation
/// first exported writable.
pub fn memory_read_only_export<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let a = alloc_filled(&dev, 1, 5);
    if !ipc_memory_or_unsupported(&dev, &a) {
        return;
    }
    let opts = ExportOptions {
        read_only: true,
        ..open_export(caps)
    };
    if !caps.contains(C::READ_ONLY_EXPORT) {
        must_be_unsupported(
            dev.export_memory(&a, &opts),
            "read-only-export",
            "a read-only export",
        );
        return;
    }
    let ex = must(dev.export_memory(&a, &opts), "read-only export");
    assert!(
        ex.handle().flags.contains(HandleFlags::READ_ONLY),
        "a read-only export's handle lacks the READ_ONLY flag"
    );
    for (how, shared) in [("shared", share(&ex)), ("text", by_text(&ex))] {
        let m = must(
            dev.import_memory(shared, &ImportOptions::default()),
            "read-only import",
        );
        assert!(
            m.is_read_only(),
            "{how}: the mapping of a read-only export is not read-only"
        );
        let _ = must_fail(m.write(0, b"nope"), "a write into a read-only mapping");
        assert_bytes(&a, 0, &pattern(5, 4), "bytes after a refused write");
        must(a.write(100, b"later"), "exporter write");
        assert_bytes(
            &m,
            100,
            b"later",
            "read-only importer sees the exporter's write",
        );
    }
    let writable = ExportOptions {
        read_only: false,
        ..opts.clone()
    };
    let e = must_fail(
        dev.export_memory(&a, &writable),
        "a writable export of an allocation first exported read-only",
    );
    assert!(
        matches!(e, Error::PermissionDenied { .. }),
        "a writable export after a read-only one: {e:?}"
    );
    let b = alloc_filled(&dev, 1, 6);
    // Dropped at once: the allocation remembers that it was exported writable.
    let _ = must(dev.export_memory(&b, &writable), "writable export");
    let e = must_fail(
        dev.export_memory(&b, &opts),
        "a read-only export of an allocation first exported writable",
    );
    assert!(
        matches!(e, Error::PermissionDenied { .. }),
        "a read-only export after a writable one: {e:?}"
    );
}

/// Ranges that are not whole pages of `info.page_size()` are refused with
/// `Error::Misaligned` (never widened); an aligned range works.
pub fn memory_misaligned_export_refused<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let page = dev.info().page_size();
    let a = alloc_filled(&dev, 4, 6);
    if !ipc_memory_or_unsupported(&dev, &a) {
        return;
    }
    for (offset, len) in [
        (page / 2, page),
        (0, page + page / 2),
        (page, page / 2),
        (1, page),
        (page, 2 * page - 1),
    ] {
        let opts = ExportOptions {
            range: Some(ByteRange::new(offset, len)),
            ..open_export(caps)
        };
        match dev.export_memory(&a, &opts) {
            Err(Error::Misaligned {
                offset: o,
                len: l,
                page_size,
            }) => {
                assert_eq!((o, l), (offset, len), "Misaligned names the refused range");
                assert_eq!(page_size, page, "Misaligned names the device's page size");
            }
            Err(e) => panic!("range {offset:#x}+{len:#x}: expected Misaligned, got {e} ({e:?})"),
            Ok(_) => panic!("range {offset:#x}+{len:#x} is not whole pages but was exported"),
        }
    }
    let opts = ExportOptions {
        range: Some(ByteRange::new(page, page)),
        ..open_export(caps)
    };
    drop(must(dev.export_memory(&a, &opts), "an aligned range"));

    // Small allocations with the backend's default alignment: where the
    // vendor hands out sub-allocations that do not start or end on a page
    // (Ascend's pool), exporting them whole is refused, never widened.
    let small: Vec<_> = (0..3)
        .map(|_| {
            let desc = hal_core::AllocDesc {
                location: crate::support::location(&dev),
                ..hal_core::AllocDesc::host(512)
            };
            must(dev.allocate(&desc), "allocate(512)")
        })
        .collect();
    for (i, b) in small.iter().enumerate() {
        let aligned = b.addr() % page == 0 && b.len() % page == 0;
        let r = dev.export_memory(b, &open_export(caps));
        match (aligned, r) {
            (true, Ok(_)) | (false, Err(Error::Misaligned { .. })) => {}
            (true, Err(e)) => {
                panic!("small allocation {i} is whole pages but its export failed: {e}")
            }
            (false, Ok(_)) => panic!(
                "small allocation {i} at {:#x}+{:#x} is not whole pages but was exported",
                b.addr(),
                b.len()
            ),
            (false, Err(e)) => {
                panic!("small allocation {i} (not whole pages): expected Misaligned, got {e}")
            }
        }
    }
}

/// Ranges outside the allocation (past its end, empty, overflowing) are
/// refused; the last page works.
pub fn memory_out_of_range_export_refused<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let page = dev.info().page_size();
    let a = alloc_filled(&dev, 4, 7);
    if !ipc_memory_or_unsupported(&dev, &a) {
        return;
    }
    let len = a.len();
    for (offset, l) in [
        (0, len + page),
        (len, page),
        (len - page, 2 * page),
        (0, 0),
        (page, u64::MAX - page + 1),
        (u64::MAX - page + 1, page),
    ] {
        let opts = ExportOptions {
            range: Some(ByteRange::new(offset, l)),
            ..open_export(caps)
        };
        let _ = must_fail(
            dev.export_memory(&a, &opts),
            &format!("export of range {offset:#x}+{l:#x} of a {len:#x}-byte allocation"),
        );
    }
    let opts = ExportOptions {
        range: Some(ByteRange::new(len - page, page)),
        ..open_export(caps)
    };
    let ex = must(dev.export_memory(&a, &opts), "export of the last page");
    let m = must(
        dev.import_memory(share(&ex), &ImportOptions::default()),
        "import",
    );
    let whole = pattern(7, len);
    assert_eq!(read_vec(&m, 0, page), &whole[(len - page) as usize..]);
}

/// Import at the exporter's address (FIXED_ADDRESS_IMPORT). In the
/// exporter's own process that address is taken by the allocation itself, so
/// the import is refused with AlreadyExists (or returns the exporter's own
/// address); the cross-process case checks the address in a child.
pub fn memory_fixed_address_import<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let a = alloc_filled(&dev, 1, 8);
    if !ipc_memory_or_unsupported(&dev, &a) {
        return;
    }
    let ex = must(dev.export_memory(&a, &open_export(caps)), "export_memory");
    let opts = ImportOptions {
        placement: ImportPlacement::ExporterAddress,
        ..ImportOptions::default()
    };
    if !caps.contains(C::FIXED_ADDRESS_IMPORT) {
        must_be_unsupported(
            dev.import_memory(share(&ex), &opts),
            "fixed-address-import",
            "an import at the exporter's address",
        );
        return;
    }
    let h = ex.handle();
    assert!(
        h.flags.contains(HandleFlags::HAS_ADDRESS),
        "handle lacks HAS_ADDRESS"
    );
    assert_eq!(
        h.address,
        a.addr(),
        "handle address is the exporter's address"
    );
    match dev.import_memory(share(&ex), &opts) {
        Err(Error::AlreadyExists { .. }) => {}
        Ok(m) => assert_eq!(m.addr(), a.addr(), "a fixed-address import elsewhere"),
        Err(e) => panic!(
            "fixed-address import over the exporter's own mapping: expected AlreadyExists, got {e}"
        ),
    }
}
