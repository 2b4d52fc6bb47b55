//! The thread rule of the contract: every call and every drop may happen on
//! any thread and leaves the calling thread's current context as it found
//! it ([`ContextProbe::current_context`]).

use hal_core::testing::ContextProbe;
use hal_core::DeviceExt;
use hal_core::{
    Backend, Capabilities as C, Device, Event, EventFlags, ImportOptions, MemRef, Memory, Notify,
    WaitOptions,
};

use super::util::share;
use crate::support::{alloc_filled, assert_bytes, must, open_export, Suite};

/// Long enough for any wait of the case.
const LONG: std::time::Duration = std::time::Duration::from_secs(20);

/// Check that `f` leaves the calling thread's current context as it was.
#[track_caller]
fn unchanged<D: Device + ContextProbe, T>(dev: &D, what: &str, f: impl FnOnce() -> T) -> T {
    let before = must(dev.current_context(), "current_context");
    let out = f();
    let after = must(dev.current_context(), "current_context");
    assert_eq!(
        before, after,
        "{what} changed the calling thread's current context"
    );
    out
}

/// Resources made on one thread are used on a second and dropped on a
/// third, and every call and drop leaves each thread's current context as
/// it was: allocation, stream work, events, notifies, and (with
/// IPC_MEMORY) an export imported on another thread.
pub fn context_unchanged_across_threads<B: Backend>(s: &Suite<B>)
where
    B::Device: ContextProbe,
{
    let dev = s.device();
    let caps = dev.capabilities();
    let dev = &dev;
    let main_before = must(dev.current_context(), "current_context");
    let made = std::thread::scope(|t| {
        t.spawn(|| {
            let a = unchanged(dev, "allocate", || alloc_filled(dev, 1, 71));
            let stream = unchanged(dev, "create_stream", || {
                must(dev.create_stream(), "create_stream")
            });
            let event = unchanged(dev, "create_event", || {
                must(dev.create_event(EventFlags::default()), "create_event")
            });
            let notify = unchanged(dev, "create_notify", || {
                must(dev.create_notify(), "create_notify")
            });
            let exported = caps.contains(C::IPC_MEMORY).then(|| {
                unchanged(dev, "export_memory", || {
                    must(dev.export_memory(&a, &open_export(caps)), "export_memory")
                })
            });
            (a, stream, event, notify, exported)
        })
        .join()
        .expect("the creating thread")
    });
    let (a, stream, event, notify, exported) = made;
    let kept = std::thread::scope(|t| {
        t.spawn(|| {
            unchanged(dev, "memset_async", || {
                must(
                    dev.memset_async(&stream, MemRef::Allocation(&a), 0, 64, 0x5a),
                    "memset_async",
                )
            });
            unchanged(dev, "record_event", || {
                must(dev.record_event(&stream, &event), "record_event")
            });
            unchanged(dev, "synchronize", || {
                must(dev.synchronize(&stream, Some(LONG)), "synchronize")
            });
            unchanged(dev, "event wait", || {
                must(event.wait(WaitOptions::timeout(LONG)), "event wait")
            });
            unchanged(dev, "query_stream", || {
                must(dev.query_stream(&stream), "query_stream")
            });
            unchanged(dev, "read", || {
                assert_bytes(&a, 0, &[0x5a; 64], "memset bytes")
            });
            unchanged(dev, "write", || must(a.write(64, b"threads"), "write"));
            unchanged(dev, "notify signal", || must(notify.signal(), "signal"));
            unchanged(dev, "notify wait", || {
                must(notify.wait(WaitOptions::timeout(LONG)), "notify wait")
            });
            unchanged(dev, "synchronize_device", || {
                must(dev.synchronize_device(Some(LONG)), "synchronize_device")
            });
            exported.as_ref().map(|ex| {
                unchanged(dev, "import_memory", || {
                    must(
                        dev.import_memory(share(ex), &ImportOptions::default()),
                        "import_memory",
                    )
                })
            })
        })
        .join()
        .expect("the using thread")
    });
    std::thread::scope(|t| {
        t.spawn(|| {
            if let Some(m) = &kept {
                unchanged(dev, "read an import", || {
                    assert_bytes(m, 64, b"threads", "the import sees the write")
                });
            }
            unchanged(dev, "drop of an import", || drop(kept));
            unchanged(dev, "drop of an export", || drop(exported));
            unchanged(dev, "drop of an event", || drop(event));
            unchanged(dev, "drop of a notify", || drop(notify));
            unchanged(dev, "drop of a stream", || drop(stream));
            unchanged(dev, "drop of an allocation", || drop(a));
        })
        .join()
        .expect("the dropping thread")
    });
    assert_eq!(
        must(dev.current_context(), "current_context"),
        main_before,
        "the test's own thread"
    );
}
