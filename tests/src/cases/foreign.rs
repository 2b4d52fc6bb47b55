//! Memory the library did not allocate: a range of an allocation adopted by
//! address and exported, and existing host memory registered with the
//! device.

use hal_core::DeviceExt;
use std::os::fd::AsFd;

use hal_core::kit::os::{self, Prot, SharedMap};
use hal_core::{
    Allocation, Backend, Capabilities as C, Device, Error, ImportOptions, Location, Memory,
};

use super::util::{by_text, share};
use crate::support::{
    alloc_filled, assert_bytes, importers_of, must, must_be_unsupported, must_fail, open_export,
    pattern, read_vec, Suite,
};

/// A range inside an allocation, adopted by its address as a framework's
/// pointer would be, is exported and imported (shared and by text) with
/// the allocation's bytes at that offset; the adopted allocation counts its
/// importers and frees nothing when dropped. A range that leaves the
/// allocation or was never allocated is refused, and an adopted range that
/// is not whole pages is exported never (Misaligned), not widened.
pub fn foreign_memory_export<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let page = dev.info().page_size();
    let a = alloc_filled(&dev, 4, 81);
    // SAFETY: the range is inside `a`, which outlives every use below.
    let adopted = unsafe { dev.adopt_memory(a.addr() + page, 2 * page) };
    if !caps.contains(C::FOREIGN_MEMORY) {
        must_be_unsupported(adopted, "foreign-memory", "adopt_memory");
        return;
    }
    let adopted = must(adopted, "adopt_memory of a range inside an allocation");
    assert_eq!(adopted.addr(), a.addr() + page, "the adopted address");
    assert_eq!(adopted.len(), 2 * page, "the adopted length");
    let whole = read_vec(&a, 0, a.len());
    let expect = &whole[page as usize..3 * page as usize];
    assert_eq!(read_vec(&adopted, 0, 2 * page), expect, "adopted bytes");

    if caps.contains(C::IPC_MEMORY) {
        let ex = must(
            dev.export_memory(&adopted, &open_export(caps)),
            "export of the adopted range",
        );
        for (how, shared) in [("shared", share(&ex)), ("text", by_text(&ex))] {
            let m = must(
                dev.import_memory(shared, &ImportOptions::default()),
                "import of the adopted range",
            );
            assert_eq!(m.len(), 2 * page, "{how}: the import is the adopted range");
            assert_bytes(&m, 0, expect, how);
            assert_eq!(importers_of(&adopted), 1, "{how}: counted");
            drop(m);
            must(
                adopted.wait_unleased(Some(std::time::Duration::from_secs(20))),
                "wait_unleased",
            );
        }
        // SAFETY: inside `a`, which outlives the value.
        let odd = must(
            unsafe { dev.adopt_memory(a.addr() + page + 1, page) },
            "adopt_memory of a range that is not whole pages",
        );
        assert!(
            matches!(
                must_fail(dev.export_memory(&odd, &open_export(caps)), "export"),
                Error::Misaligned { .. }
            ),
            "a range that is not whole pages is not exported"
        );
    }
    // SAFETY: refused before any byte is touched.
    let past = unsafe { dev.adopt_memory(a.addr() + 3 * page, 2 * page) };
    let _ = must_fail(past, "adopt_memory of a range past the allocation's end");
    let elsewhere = must(
        dev.allocate(&hal_core::AllocDesc {
            location: a.location(),
            ..hal_core::AllocDesc::host(page)
        }),
        "allocate",
    );
    let gap = elsewhere.addr().max(a.addr()) + 64 * page * 1024;
    // SAFETY: refused before any byte is touched.
    let _ = must_fail(
        unsafe { dev.adopt_memory(gap, page) },
        "adopt_memory of memory never allocated",
    );
    drop(adopted);
    must(
        a.write(0, b"alive"),
        "the allocation outlives its adopted range",
    );
    assert_bytes(&a, 0, b"alive", "after the adopted range was dropped");
}

/// Existing host memory (a memfd mapping, as a PostgreSQL dynamic shared
/// memory segment is) registered with the device: the registration reads
/// and writes the caller's pages where they are, at a host location; a
/// range that is not whole pages or overlaps a registration is refused;
/// dropping unregisters, so the range can be registered again.
pub fn host_registration<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let page = os::page_size();
    let fd = must(os::memfd("hal-host-registration", 4 * page, None), "memfd");
    let map = must(
        SharedMap::map(fd.as_fd(), 4 * page, 0, Prot::ReadWrite, None),
        "map",
    );
    // SAFETY: `map` outlives every registration of this case.
    let reg = unsafe { dev.register_host(map.as_ptr(), 2 * page) };
    if !dev.capabilities().contains(C::HOST_REGISTRATION) {
        must_be_unsupported(reg, "host-registration", "register_host");
        return;
    }
    let reg = must(reg, "register_host");
    assert_eq!(
        reg.location(),
        Location::Host,
        "registered memory is host memory"
    );
    assert_eq!(reg.len(), 2 * page, "length");
    let data = pattern(82, 64);
    must(
        reg.write(page - 32, &data),
        "write through the registration",
    );
    let mut got = vec![0u8; 64];
    must(map.read(page - 32, &mut got), "read the mapping");
    assert_eq!(got, data, "the caller's pages hold the write");
    must(map.write(0, b"from the owner"), "write the mapping");
    assert_bytes(
        &reg,
        0,
        b"from the owner",
        "the registration sees the owner's write",
    );
    let _ = must_fail(
        reg.write(2 * page - 1, b"xy"),
        "write past the registration",
    );

    // SAFETY: inside `map`; refused.
    let overlap = unsafe { dev.register_host(map.as_ptr().wrapping_add(page as usize), 2 * page) };
    let _ = must_fail(
        overlap,
        "register_host of a range overlapping a registration",
    );
    // SAFETY: inside `map`; refused.
    let odd = unsafe { dev.register_host(map.as_ptr().wrapping_add(1), page) };
    assert!(
        matches!(
            must_fail(odd, "register_host of a misaligned range"),
            Error::Misaligned { .. }
        ),
        "a range that is not whole pages is Misaligned"
    );
    // SAFETY: inside `map`, after `reg` is dropped.
    let beside = must(
        unsafe { dev.register_host(map.as_ptr().wrapping_add(2 * page as usize), 2 * page) },
        "register_host of the pages beside it",
    );
    drop(reg);
    // SAFETY: inside `map`.
    let again = must(
        unsafe { dev.register_host(map.as_ptr(), 2 * page) },
        "register_host again after the drop",
    );
    drop((again, beside));
}
