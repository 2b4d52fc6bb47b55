//! Stream work on registered host memory (`MemRef::Registered`): the host
//! side of copies, writes and memsets in stream order, held by the stream
//! after the caller dropped its registration.

use hal_core::DeviceExt;
use std::os::fd::AsFd;

use hal_core::kit::os::{self, Prot, SharedMap};
use hal_core::{Backend, Capabilities as C, Device, MemRef, Notify};

use super::sync::{block_stream, stream_model, StreamModel};
use crate::support::{alloc_filled, must, must_time_out, pattern, read_vec, Suite, LONG, SHORT};

/// Without HOST_REGISTRATION, `register_host` is Unsupported. With it: a copy from the device's memory into a
/// registration and back, a memset and a write of host bytes on it, all in
/// stream order; on a queued stream, a copy into a registration dropped
/// behind a closed gate keeps the range registered (registering it again
/// is refused) and still lands in the caller's pages, and once the stream
/// ran it the range is registered no more (registering it again succeeds).
pub fn registered_memory_in_stream_order<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let page = os::page_size();
    let fd = must(os::memfd("hal-registered-streams", 2 * page, None), "memfd");
    let map = must(
        SharedMap::map(fd.as_fd(), 2 * page, 0, Prot::ReadWrite, None),
        "map",
    );
    if !dev.capabilities().contains(C::HOST_REGISTRATION) {
        // SAFETY: `map` outlives the call; nothing is registered.
        let refused = unsafe { dev.register_host(map.as_ptr(), 2 * page) };
        assert!(
            refused.as_ref().is_err_and(|e| e.is_unsupported()),
            "register_host without HOST_REGISTRATION: {:?}",
            refused.err()
        );
        return;
    }
    let host = |offset: u64, len: u64| {
        let mut v = vec![0u8; len as usize];
        must(map.read(offset, &mut v), "read the caller's pages");
        v
    };
    let stream = must(dev.create_stream(), "create_stream");
    let a = alloc_filled(&dev, 1, 41);
    let b = alloc_filled(&dev, 1, 42);
    let len = 256;
    {
        // SAFETY: `map` outlives the registration and the stream work on it
        // (synchronized below).
        let reg = must(
            unsafe { dev.register_host(map.as_ptr(), 2 * page) },
            "register_host",
        );
        let r = MemRef::Registered(&reg);
        must(
            dev.copy_async(&stream, r, 0, MemRef::Allocation(&a), 0, len),
            "copy into a registration",
        );
        must(
            dev.copy_async(&stream, MemRef::Allocation(&b), 0, r, 0, len),
            "copy out of a registration",
        );
        must(
            dev.memset_async(&stream, r, page, 16, 0x5a),
            "memset of a registration",
        );
        must(
            dev.write_async(&stream, r, page + 16, b"registered".to_vec()),
            "write_async into a registration",
        );
        must(dev.synchronize(&stream, Some(LONG)), "synchronize");
    }
    assert_eq!(host(0, len), pattern(41, len), "the copy into the pages");
    assert_eq!(
        read_vec(&b, 0, len),
        pattern(41, len),
        "the copy out of the pages"
    );
    let mut want = vec![0x5a; 16];
    want.extend_from_slice(b"registered");
    assert_eq!(host(page, 26), want, "the memset and the write");

    if stream_model(&dev) != StreamModel::Queued {
        return;
    }
    let gate = super::gate::gate(&dev);
    {
        // SAFETY: as above.
        let reg = must(
            unsafe { dev.register_host(map.as_ptr(), 2 * page) },
            "register_host again",
        );
        block_stream(&dev, &stream, &gate);
        must(
            dev.copy_async(
                &stream,
                MemRef::Registered(&reg),
                page,
                MemRef::Allocation(&b),
                0,
                len,
            ),
            "copy into a registration behind a gate",
        );
    }
    must_time_out(
        dev.synchronize(&stream, Some(SHORT)),
        "a stream behind a closed gate",
    );
    // SAFETY: as above; refused while the stream holds the registration.
    let held = unsafe { dev.register_host(map.as_ptr(), 2 * page) };
    assert!(
        held.is_err(),
        "the range must stay registered while queued work holds the dropped registration"
    );
    must(gate.signal(), "signal the gate");
    must(dev.synchronize(&stream, Some(LONG)), "synchronize");
    assert_eq!(
        host(page, len),
        pattern(41, len),
        "a copy into a registration its owner dropped while it was queued"
    );
    drop(stream);
    // SAFETY: as above; the stream that held the last registration is gone.
    let again = unsafe { dev.register_host(map.as_ptr(), 2 * page) };
    must(
        again,
        "registering the range once the stream let go of the dropped registration",
    );
}
