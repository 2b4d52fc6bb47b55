//! Work on streams: asynchronous copies in every direction, memset, stream
//! queries and a device-wide synchronize, in stream order.

use hal_core::DeviceExt;
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

/// Every stream operation of a device refuses a stream of another device
/// with `InvalidArgument` (work queued on the wrong device's stream would
/// run in the wrong context), and the operations the device lacks answer
/// `Unsupported` as anywhere. With one device there is no other device's
/// stream: the case checks that no second device opens (so no stream of
/// one exists), and says so.
pub fn stream_of_another_device_refused<B: Backend>(s: &Suite<B>) {
    let n = must(s.backend().devices(), "devices").len();
    if n < 2 {
        let _ = must_fail(
            s.backend().open(n as u32),
            "opening a device past the last one",
        );
        crate::report::not_exercised(&format!(
            "one device, no other device's stream; checked that device {n} does not open"
        ));
        return;
    }
    let (dev, other) = (s.open(0), s.open(1));
    let caps = dev.capabilities();
    let theirs = must(other.create_stream(), "create_stream on device 1");
    let a = alloc_filled(&dev, 1, 7);
    let b = alloc_filled(&dev, 1, 8);
    let e = must(
        dev.create_event(hal_core::EventFlags::default()),
        "create_event",
    );
    let n = must(dev.create_notify(), "create_notify");
    let mut refused: Vec<(&str, hal_core::Result<()>, bool)> = vec![
        ("synchronize", dev.synchronize(&theirs, Some(LONG)), true),
        ("query_stream", dev.query_stream(&theirs).map(drop), true),
        ("record_event", dev.record_event(&theirs, &e), true),
        (
            "stream_wait_event",
            dev.stream_wait_event(&theirs, &e),
            true,
        ),
        (
            "copy_async",
            dev.copy_async(
                &theirs,
                MemRef::Allocation(&a),
                0,
                MemRef::Allocation(&b),
                0,
                4,
            ),
            true,
        ),
        (
            "memset_async",
            dev.memset_async(&theirs, MemRef::Allocation(&a), 0, 4, 1),
            true,
        ),
        (
            "write_async",
            dev.write_async(&theirs, MemRef::Allocation(&a), 0, b"four".to_vec()),
            true,
        ),
        (
            "hold_until_done",
            dev.hold_until_done(&theirs, Box::new(())),
            true,
        ),
    ];
    let ordered = caps.contains(C::STREAM_ORDERED_NOTIFY);
    refused.push(("record_notify", dev.record_notify(&theirs, &n), ordered));
    refused.push((
        "stream_wait_notify",
        dev.stream_wait_notify(&theirs, &n, Some(LONG)),
        ordered,
    ));
    if caps.contains(C::MANAGED_MEMORY) {
        let m = must(dev.allocate(&AllocDesc::managed(4096)), "allocate managed");
        let to = Location::Device(dev.info().ordinal);
        refused.push((
            "prefetch_async",
            dev.prefetch_async(&theirs, MemRef::Allocation(&m), 0, 4096, to),
            true,
        ));
    }
    for (what, r, offered) in refused {
        match r {
            Err(Error::InvalidArgument { .. }) if offered => {}
            Err(e) if !offered && e.is_unsupported() => {}
            other => panic!(
                "{what} on device 0 with a stream of device 1 must be refused with {}, got \
                 {other:?}",
                if offered {
                    "InvalidArgument"
                } else {
                    "Unsupported (the capability is absent)"
                }
            ),
        }
    }
}
