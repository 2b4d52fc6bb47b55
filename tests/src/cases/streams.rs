//! Work on streams: asynchronous copies in every direction, memset, stream
//! queries and a device-wide synchronize, in stream order.

use hal_core::{
    Advice, AllocDesc, Backend, Capabilities as C, Device, Error, Location, MemRef, Memory, Notify,
};

use super::sync::{gated, stream_model, StreamModel};
use crate::support::{
    alloc_filled, assert_bytes, must, must_be_unsupported, must_fail, pattern, read_vec, Suite,
    LONG,
};

/// Host bytes into device memory, device to device, and device into host
/// memory, all queued on one stream: after `synchronize` every destination
/// holds its bytes; a copy past either end is refused at once.
pub fn async_copy_roundtrip<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let page = dev.info().page_size();
    let stream = must(dev.create_stream(), "create_stream");
    let a = alloc_filled(&dev, 2, 3);
    let b = alloc_filled(&dev, 2, 4);
    must(
        dev.write_async(&stream, MemRef::Allocation(&a), 10, b"async bytes".to_vec()),
        "write_async (host to device)",
    );
    must(
        dev.copy_async(
            &stream,
            MemRef::Allocation(&b),
            page,
            MemRef::Allocation(&a),
            0,
            page,
        ),
        "copy_async (device to device)",
    );
    // Device into host memory, where the device has host allocations.
    let host = match dev.allocate(&AllocDesc::host(page)) {
        Ok(h) => Some(h),
        Err(Error::Unsupported { .. }) => None,
        Err(e) => panic!("a host allocation: {e}"),
    };
    if let Some(h) = &host {
        must(
            dev.copy_async(
                &stream,
                MemRef::Allocation(h),
                0,
                MemRef::Allocation(&a),
                0,
                page,
            ),
            "copy_async (device to host)",
        );
    }
    must(dev.synchronize(&stream, Some(LONG)), "synchronize");
    let mut want = pattern(3, page);
    want[10..21].copy_from_slice(b"async bytes");
    assert_bytes(&a, 0, &want, "the written bytes");
    assert_bytes(&b, page, &want, "the device-to-device copy");
    assert_bytes(
        &b,
        0,
        &pattern(4, 2 * page)[..page as usize],
        "bytes before the copy",
    );
    if let Some(h) = &host {
        assert_eq!(h.location(), Location::Host);
        assert_bytes(h, 0, &want, "the device-to-host copy");
    }
    assert!(
        must(dev.query_stream(&stream), "query_stream"),
        "all work ran"
    );
    let past = dev.copy_async(
        &stream,
        MemRef::Allocation(&b),
        page + 1,
        MemRef::Allocation(&a),
        0,
        page,
    );
    assert!(
        matches!(
            must_fail(past, "a copy past the end"),
            Error::InvalidArgument { .. }
        ),
        "a copy past the end is InvalidArgument"
    );
    must(dev.synchronize_device(Some(LONG)), "synchronize_device");
}

/// `memset_async` sets exactly its range, in stream order: while the stream
/// is held back the bytes are unchanged and `query_stream` says the work has
/// not run; after it, they are set, and `synchronize_device` returns.
pub fn memset_on_stream<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let model = stream_model(&dev);
    let a = alloc_filled(&dev, 1, 5);
    let before = read_vec(&a, 0, a.len());
    let stream = must(dev.create_stream(), "create_stream");
    let gate = super::gate::gate(&dev);
    let memset = || {
        must(
            dev.memset_async(&stream, MemRef::Allocation(&a), 100, 50, 0xab),
            "memset_async",
        )
    };
    if model == StreamModel::Ungated {
        // Nothing holds it back: the bytes are checked after it ran.
        memset();
    } else {
        gated(model, &dev, &stream, &gate, memset, || {
            if model == StreamModel::Queued {
                assert!(
                    !must(dev.query_stream(&stream), "query_stream"),
                    "work behind the gate has not run"
                );
                assert_bytes(&a, 100, &before[100..150], "bytes before the memset ran");
            }
            must(gate.signal(), "open the gate");
        });
    }
    must(dev.synchronize(&stream, Some(LONG)), "synchronize");
    assert_bytes(&a, 100, &[0xab; 50], "the memset range");
    assert_bytes(&a, 99, &before[99..100], "the byte before it");
    assert_bytes(&a, 150, &before[150..151], "the byte after it");
    let past = dev.memset_async(&stream, MemRef::Allocation(&a), a.len() - 1, 2, 0);
    assert!(
        matches!(
            must_fail(past, "a memset past the end"),
            Error::InvalidArgument { .. }
        ),
        "a memset past the end is InvalidArgument"
    );
    must(dev.synchronize_device(Some(LONG)), "synchronize_device");
    assert!(must(dev.query_stream(&stream), "query_stream"));
}

/// Advise and prefetch on managed memory where the device has it: the
/// advice is taken, a prefetch to the device and back to the host leaves
/// the bytes as they were, and other memory is refused. Elsewhere both
/// answer `Unsupported`.
pub fn managed_advise_and_prefetch<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let page = dev.info().page_size();
    let stream = must(dev.create_stream(), "create_stream");
    let plain = alloc_filled(&dev, 1, 8);
    if !dev.capabilities().contains(C::MANAGED_MEMORY) {
        must_be_unsupported(
            dev.advise(MemRef::Allocation(&plain), 0, page, Advice::ReadMostly),
            "managed memory",
            "advise",
        );
        must_be_unsupported(
            dev.prefetch_async(&stream, MemRef::Allocation(&plain), 0, page, Location::Host),
            "managed memory",
            "prefetch_async",
        );
        return;
    }
    let m = must(
        dev.allocate(&AllocDesc::managed(2 * page)),
        "a managed allocation",
    );
    must(m.write(0, &pattern(8, 2 * page)), "write managed memory");
    let ordinal = dev.info().ordinal;
    for advice in [
        Advice::ReadMostly,
        Advice::PreferredLocation(Location::Device(ordinal)),
        Advice::PreferredLocation(Location::Host),
        Advice::AccessedBy(ordinal),
    ] {
        must(
            dev.advise(MemRef::Allocation(&m), 0, 2 * page, advice),
            &format!("advise {advice:?}"),
        );
    }
    for to in [Location::Device(ordinal), Location::Host] {
        must(
            dev.prefetch_async(&stream, MemRef::Allocation(&m), page, page, to),
            &format!("prefetch to {to:?}"),
        );
    }
    must(dev.synchronize(&stream, Some(LONG)), "synchronize");
    assert_bytes(&m, 0, &pattern(8, 2 * page), "bytes after the prefetches");
    if plain.location() != Location::Managed {
        must_fail(
            dev.advise(MemRef::Allocation(&plain), 0, page, Advice::ReadMostly),
            "advise on memory that is not managed",
        );
    }
    must_fail(
        dev.advise(MemRef::Allocation(&m), page, 2 * page, Advice::ReadMostly),
        "advise past the end",
    );
    must_fail(
        dev.advise(
            MemRef::Allocation(&m),
            0,
            page,
            Advice::AccessedBy(u32::MAX),
        ),
        "advise for a device that does not exist",
    );
}
