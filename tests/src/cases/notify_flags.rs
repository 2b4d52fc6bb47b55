//! Notify creation flags and the stream-ordered notify capability.

use hal_core::DeviceExt;
use hal_core::{Backend, Capabilities as C, Device, Error, Notify, NotifyFlags, WaitOptions};

use crate::support::{must, must_be_unsupported, must_fail, Suite, LONG};

/// With STREAM_ORDERED_NOTIFY, a device-only notify is recorded and waited
/// on streams, and its host-side signal and wait are refused with
/// InvalidArgument; without the capability, the device-only flag and the
/// stream operations answer Unsupported.
pub fn notify_device_only_flags<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let device_only = NotifyFlags { device_only: true };
    let stream = must(dev.create_stream(), "create_stream");
    if !dev.capabilities().contains(C::STREAM_ORDERED_NOTIFY) {
        must_be_unsupported(
            dev.create_notify_with(device_only),
            "stream-ordered-notify",
            "create_notify_with(device_only)",
        );
        let n = must(dev.create_notify(), "create_notify");
        must_be_unsupported(
            dev.record_notify(&stream, &n),
            "stream-ordered-notify",
            "record_notify",
        );
        return;
    }
    let n = must(dev.create_notify_with(device_only), "create_notify_with");
    for (what, r) in [
        ("host signal", n.signal()),
        ("host wait", n.wait(WaitOptions::timeout(LONG))),
    ] {
        assert!(
            matches!(must_fail(r, what), Error::InvalidArgument { .. }),
            "{what} of a device-only notify is InvalidArgument"
        );
    }
    must(dev.record_notify(&stream, &n), "record_notify");
    must(
        dev.stream_wait_notify(&stream, &n, Some(LONG)),
        "stream_wait_notify",
    );
    must(dev.synchronize(&stream, Some(LONG)), "synchronize");
    let plain = must(
        dev.create_notify_with(NotifyFlags::default()),
        "create_notify_with(default)",
    );
    must(plain.signal(), "a default notify signals from the host");
    must(plain.wait(WaitOptions::timeout(LONG)), "and waits");
}
