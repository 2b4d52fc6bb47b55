//! Streams, events and notifies: ordering, timeouts, awaitable waits, IPC.
//!
//! Work that is "still running" is made with the contract alone: a stream
//! told to wait for a local notify (the gate) blocks everything queued after
//! it until the case signals the gate. No timing is asserted: a wait that
//! must time out does so because its condition cannot hold yet.

use hal_core::DeviceExt;
use std::task::{Context, Poll, Waker};

use hal_core::wait::block_on;
use hal_core::{
    Backend, BackendId, Capabilities as C, Device, Event, EventFlags, HandleFlags, HandleKind,
    ImportOptions, Notify, WaitFuture, WaitOptions,
};

use super::util::{by_text, share};
use crate::support::{
    must, must_be_denied, must_be_unsupported, must_fail, must_time_out, open_export, Suite, LONG,
    SHORT,
};

fn short() -> WaitOptions {
    WaitOptions::timeout(SHORT)
}

fn long() -> WaitOptions {
    WaitOptions::timeout(LONG)
}

/// Poll `fut` once with a waker that does nothing; true when still pending.
pub(crate) fn pending_after_one_poll(fut: &mut WaitFuture<'_>) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        Poll::Pending => true,
        Poll::Ready(r) => panic!("the awaitable wait completed before its condition held: {r:?}"),
    }
}

/// How a backend runs its streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamModel {
    /// Work is queued and runs later, in order (device streams): a queued
    /// wait returns at once and holds back later work.
    Queued,
    /// Work runs at once on the calling thread, in order (host streams): a
    /// queued wait blocks the caller, and a recorded event is complete.
    HostSynchronous,
    /// Work is queued, but nothing the suite can queue holds it back: the
    /// device has no STREAM_ORDERED_NOTIFY, so no gate. The cases check
    /// what needs no gate (work runs, events complete, waits return), and
    /// `stream_model` that the stream-ordered notify operations answer
    /// Unsupported.
    Ungated,
}

/// Find out how `dev` runs streams: queue a wait, with a short timeout, for
/// a notify nobody signals. A queued stream accepts it at once; a
/// host-synchronous one waits on the calling thread and times out. Without
/// STREAM_ORDERED_NOTIFY the wait and `record_notify` must answer
/// Unsupported, and the model is [`StreamModel::Ungated`].
#[track_caller]
pub fn stream_model<D: Device>(dev: &D) -> StreamModel {
    let stream = must(dev.create_stream(), "create_stream");
    let never = must(dev.create_notify(), "create_notify");
    if !dev.capabilities().contains(C::STREAM_ORDERED_NOTIFY) {
        must_be_unsupported(
            dev.stream_wait_notify(&stream, &never, Some(SHORT)),
            "STREAM_ORDERED_NOTIFY",
            "stream_wait_notify",
        );
        must_be_unsupported(
            dev.record_notify(&stream, &never),
            "STREAM_ORDERED_NOTIFY",
            "record_notify",
        );
        return StreamModel::Ungated;
    }
    match dev.stream_wait_notify(&stream, &never, Some(SHORT)) {
        Ok(()) => {
            // Let the queued wait finish before the stream goes.
            must(never.signal(), "signal");
            let _ = dev.synchronize(&stream, Some(LONG));
            StreamModel::Queued
        }
        Err(e) if e.is_timeout() => StreamModel::HostSynchronous,
        Err(e) => panic!("stream_wait_notify with a timeout failed: {e}"),
    }
}

/// Queue on `stream` a wait for `gate`: work queued after it runs only once
/// the case signals the gate. On a host-synchronous stream this blocks until
/// then.
#[track_caller]
pub(crate) fn block_stream<D: Device>(dev: &D, stream: &D::Stream, gate: &D::Notify) {
    must(
        dev.stream_wait_notify(stream, gate, Some(LONG)),
        "stream_wait_notify (gate)",
    );
}

/// Queue `enqueue` on `stream` behind a wait for `gate`, then run `check`,
/// which must signal the gate. Queued streams take the work at once; on a
/// host-synchronous stream a helper thread queues it (and blocks until the
/// gate opens), so `check` runs while the work is pending either way.
pub(crate) fn gated<D: Device>(
    model: StreamModel,
    dev: &D,
    stream: &D::Stream,
    gate: &D::Notify,
    enqueue: impl FnOnce() + Send,
    check: impl FnOnce(),
) {
    match model {
        StreamModel::Queued => {
            block_stream(dev, stream, gate);
            enqueue();
            check();
        }
        StreamModel::HostSynchronous => std::thread::scope(|scope| {
            let helper = scope.spawn(move || {
                block_stream(dev, stream, gate);
                enqueue();
            });
            check();
            if let Err(p) = helper.join() {
                std::panic::resume_unwind(p);
            }
        }),
        StreamModel::Ungated => panic!(
            "a gated check needs STREAM_ORDERED_NOTIFY: the case handles StreamModel::Ungated first"
        ),
    }
}

/// An event recorded after work that has not run yet: the work queued after
/// the event waits too; on queued streams the event itself is incomplete
/// (`query` false, a short `wait` times out). Once the work runs the event
/// completes. On host-synchronous streams a queued wait with a timeout
/// times out on the caller.
pub fn event_wait_timeout_and_stream_order<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let model = stream_model(&dev);
    let stream = must(dev.create_stream(), "create_stream");
    let gate = super::gate::gate(&dev);
    let after = must(dev.create_notify(), "create_notify");
    let e = must(dev.create_event(EventFlags::default()), "create_event");
    if model == StreamModel::Ungated {
        // Nothing holds the work back: the event completes.
        must(dev.record_event(&stream, &e), "record_event");
        must(e.wait(long()), "the recorded event");
        assert!(must(e.query(), "query"), "query() after completion");
        must(dev.synchronize(&stream, Some(LONG)), "synchronize");
        return;
    }
    gated(
        model,
        &dev,
        &stream,
        &gate,
        || {
            must(
                dev.record_event(&stream, &e),
                "record_event after pending work",
            );
            must(
                dev.record_notify(&stream, &after),
                "record_notify after the event",
            );
        },
        || {
            must_time_out(after.wait(short()), "a notify recorded after pending work");
            if model == StreamModel::Queued {
                must_time_out(e.wait(short()), "an event recorded after pending work");
                assert!(
                    !must(e.query(), "query"),
                    "query() says complete before the work ran"
                );
            }
            must(gate.signal(), "signal the gate");
            must(after.wait(long()), "the notify after the work ran");
        },
    );
    must(e.wait(long()), "the event after the work ran");
    assert!(must(e.query(), "query"), "query() after completion");
    must(dev.synchronize(&stream, Some(LONG)), "synchronize");
    if model == StreamModel::HostSynchronous {
        must_time_out(
            dev.stream_wait_notify(&stream, &gate, Some(SHORT)),
            "a host-synchronous stream's wait for a notify nobody signals",
        );
    }
}

/// `stream_wait_event`: on queued streams, work queued on a second stream
/// after a wait for an event of the first does not run before that event
/// completes. On host-synchronous streams, a wait for a recorded event
/// returns and the work after it runs.
pub fn event_stream_wait_event<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let model = stream_model(&dev);
    let s1 = must(dev.create_stream(), "create_stream");
    let s2 = must(dev.create_stream(), "create_stream");
    let gate = super::gate::gate(&dev);
    let done = must(dev.create_notify(), "create_notify");
    let e1 = must(dev.create_event(EventFlags::default()), "create_event");
    if model == StreamModel::Queued {
        block_stream(&dev, &s1, &gate);
        must(dev.record_event(&s1, &e1), "record_event");
        must(dev.stream_wait_event(&s2, &e1), "stream_wait_event");
        must(dev.record_notify(&s2, &done), "record_notify");
        must_time_out(done.wait(short()), "work queued behind an incomplete event");
        must(gate.signal(), "signal the gate");
    } else if model == StreamModel::Ungated {
        // Without a notify to record, a second event tells that the work
        // behind the wait ran.
        let e2 = must(dev.create_event(EventFlags::default()), "create_event");
        must(dev.record_event(&s1, &e1), "record_event");
        must(dev.stream_wait_event(&s2, &e1), "stream_wait_event");
        must(dev.record_event(&s2, &e2), "record_event behind the wait");
        must(e2.wait(long()), "work queued behind the event");
        must(dev.synchronize(&s1, Some(LONG)), "synchronize");
        must(dev.synchronize(&s2, Some(LONG)), "synchronize");
        return;
    } else {
        must(dev.record_event(&s1, &e1), "record_event");
        must(
            dev.stream_wait_event(&s2, &e1),
            "stream_wait_event on a recorded event",
        );
        must(dev.record_notify(&s2, &done), "record_notify");
    }
    must(
        done.wait(long()),
        "work queued behind the event after it completed",
    );
    must_time_out(
        done.wait(short()),
        "the notify after its one signal was taken",
    );
    must(dev.synchronize(&s1, Some(LONG)), "synchronize");
    must(dev.synchronize(&s2, Some(LONG)), "synchronize");
}

/// `Event::wait_async` does not block: on queued streams one poll before
/// completion is pending, `block_on` completes it once the work runs, and an
/// awaitable wait with a short timeout times out. On host-synchronous
/// streams the awaited recorded event completes.
pub fn event_wait_async<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let model = stream_model(&dev);
    let stream = must(dev.create_stream(), "create_stream");
    let gate = super::gate::gate(&dev);
    let e = must(dev.create_event(EventFlags::default()), "create_event");
    if model != StreamModel::Queued {
        // Nothing to hold the work back with (host-synchronous, or no
        // gate): the awaited event completes.
        must(dev.record_event(&stream, &e), "record_event");
        must(block_on(e.wait_async(long())), "awaited recorded event");
        must(
            block_on(e.wait_async(short())),
            "awaited recorded event (short timeout)",
        );
        return;
    }
    block_stream(&dev, &stream, &gate);
    must(dev.record_event(&stream, &e), "record_event");
    let mut fut = e.wait_async(long());
    assert!(pending_after_one_poll(&mut fut));
    must(gate.signal(), "signal the gate");
    must(block_on(fut), "awaited event");

    block_stream(&dev, &stream, &gate);
    must(dev.record_event(&stream, &e), "record_event again");
    must_time_out(
        block_on(e.wait_async(short())),
        "an awaited incomplete event",
    );
    must(gate.signal(), "signal the gate");
    must(dev.synchronize(&stream, Some(LONG)), "synchronize");
}

/// IPC events (IPC_EVENT): export, import (shared and by text); the
/// importer's host wait and stream wait follow the exporter's record (on
/// queued streams they time out while it is pending); `query` on the
/// imported event works only with IPC_EVENT_QUERY and the handle says
/// NO_QUERY otherwise.
pub fn event_ipc_export_import<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let ipc = EventFlags {
        interprocess: true,
        timing: false,
    };
    if !caps.contains(C::IPC_EVENT) {
        match dev.create_event(ipc) {
            Err(e) if e.is_unsupported() => {}
            Err(e) => panic!(
                "without ipc-event, create_event(interprocess) must answer Unsupported, got {e}"
            ),
            Ok(e) => must_be_unsupported(
                dev.export_event(&e, &open_export(caps)),
                "ipc-event",
                "export_event",
            ),
        }
        return;
    }
    let model = stream_model(&dev);
    let e = must(dev.create_event(ipc), "create_event(interprocess)");
    let ex = must(dev.export_event(&e, &open_export(caps)), "export_event");
    let h = ex.handle();
    assert_eq!(h.kind, HandleKind::Event, "handle kind");
    assert_eq!(h.backend, s.backend().id(), "handle backend");
    assert_eq!(
        h.flags.contains(HandleFlags::NO_QUERY),
        !caps.contains(C::IPC_EVENT_QUERY),
        "the handle's NO_QUERY flag must match the absence of ipc-event-query"
    );
    let imported = must(
        dev.import_event(share(&ex), &ImportOptions::default()),
        "import_event",
    );
    let by_text = must(
        dev.import_event(by_text(&ex), &ImportOptions::default()),
        "import_event by text",
    );
    if !caps.contains(C::IPC_EVENT_QUERY) {
        must_be_unsupported(
            imported.query(),
            "ipc-event-query",
            "query() of an imported event",
        );
    }

    let stream = must(dev.create_stream(), "create_stream");
    let gate = super::gate::gate(&dev);
    let s2 = must(dev.create_stream(), "create_stream");
    let done = must(dev.create_notify(), "create_notify");
    if model == StreamModel::Queued {
        block_stream(&dev, &stream, &gate);
        must(dev.record_event(&stream, &e), "record_event");
        must_time_out(
            imported.wait(short()),
            "an imported event whose record is pending",
        );
        must_time_out(
            by_text.wait(short()),
            "an event imported by text, record pending",
        );
        if caps.contains(C::IPC_EVENT_QUERY) {
            assert!(!must(imported.query(), "query of an imported event"));
        }
        must(
            dev.stream_wait_event(&s2, &imported),
            "stream_wait_event on an imported event",
        );
        must(dev.record_notify(&s2, &done), "record_notify");
        must_time_out(
            done.wait(short()),
            "work behind an imported, incomplete event",
        );
        must(gate.signal(), "signal the gate");
    } else {
        must(dev.record_event(&stream, &e), "record_event");
        must(
            dev.stream_wait_event(&s2, &imported),
            "stream_wait_event on an imported event",
        );
        if model == StreamModel::HostSynchronous {
            must(dev.record_notify(&s2, &done), "record_notify");
        }
    }
    must(
        imported.wait(long()),
        "imported event after the exporter's work ran",
    );
    must(
        by_text.wait(long()),
        "event imported by text after the work ran",
    );
    if model != StreamModel::Ungated {
        must(done.wait(long()), "work behind the imported event");
    }
    if caps.contains(C::IPC_EVENT_QUERY) {
        assert!(must(imported.query(), "query"), "imported event complete");
    }
    must(dev.synchronize(&stream, Some(LONG)), "synchronize");
    must(dev.synchronize(&s2, Some(LONG)), "synchronize");
}

/// IPC events need the interprocess flag at creation: exporting an event
/// created without it is refused (CUDA's `CU_EVENT_INTERPROCESS`, Ascend's
/// `ACL_EVENT_IPC`).
pub fn event_ipc_needs_interprocess_flag<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let e = must(dev.create_event(EventFlags::default()), "create_event");
    if caps.contains(C::IPC_EVENT) {
        let _ = must_fail(
            dev.export_event(&e, &open_export(caps)),
            "export of an event created without the interprocess flag",
        );
        // CUDA and Ascend IPC events cannot time.
        if matches!(
            s.backend().id(),
            BackendId::Cuda | BackendId::MockCuda | BackendId::Ascend | BackendId::MockAscend
        ) {
            let both = EventFlags {
                interprocess: true,
                timing: true,
            };
            let _ = must_fail(dev.create_event(both), "an interprocess event with timing");
        }
    } else {
        must_be_unsupported(
            dev.export_event(&e, &open_export(caps)),
            "ipc-event",
            "export_event",
        );
    }
}

/// Stream timeouts: on queued streams `synchronize` (and
/// `synchronize_device`) with a timeout times out while queued work cannot
/// run and returns once it has; on
/// host-synchronous streams the queued wait itself times out on the caller
/// and `synchronize` has nothing to wait for.
pub fn stream_synchronize_timeout<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let model = stream_model(&dev);
    let stream = must(dev.create_stream(), "create_stream");
    let gate = super::gate::gate(&dev);
    must(
        dev.synchronize(&stream, Some(LONG)),
        "synchronize of an idle stream",
    );
    if model == StreamModel::Ungated {
        // Nothing to block it with: work queued runs, and synchronize
        // returns after it.
        let e = must(dev.create_event(EventFlags::default()), "create_event");
        must(dev.record_event(&stream, &e), "record_event");
        must(
            dev.synchronize(&stream, Some(LONG)),
            "synchronize of a stream with work",
        );
        assert!(
            must(e.query(), "query"),
            "the work before the synchronize ran"
        );
        return;
    }
    if model == StreamModel::Queued {
        block_stream(&dev, &stream, &gate);
        must_time_out(
            dev.synchronize(&stream, Some(SHORT)),
            "synchronize of a blocked stream",
        );
        must_time_out(
            dev.synchronize_device(Some(SHORT)),
            "synchronize_device while a stream is blocked",
        );
        must(gate.signal(), "signal the gate");
    } else {
        must_time_out(
            dev.stream_wait_notify(&stream, &gate, Some(SHORT)),
            "a host-synchronous stream's wait for a notify nobody signals",
        );
        must(
            dev.synchronize(&stream, Some(SHORT)),
            "synchronize of a host-synchronous stream",
        );
        must(gate.signal(), "signal the gate");
        block_stream(&dev, &stream, &gate);
    }
    must(
        dev.synchronize(&stream, Some(LONG)),
        "synchronize after the gate opened",
    );
}

/// A notify that nobody signals: a wait with a short timeout answers
/// Timeout (with and without the spin phase); after a signal it succeeds.
pub fn notify_wait_timeout<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let n = must(dev.create_notify(), "create_notify");
    must_time_out(n.wait(short()), "a notify nobody signalled");
    let no_spin = WaitOptions {
        timeout: Some(SHORT),
        spin: std::time::Duration::ZERO,
    };
    must_time_out(n.wait(no_spin), "a notify nobody signalled (no spin)");
    must(n.signal(), "signal");
    must(n.wait(long()), "wait after a signal");
}

/// Signal then wait succeeds and resets the notify (the next short wait
/// times out); a signal from another thread wakes a waiter.
pub fn notify_signal_then_wait_resets<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let n = must(dev.create_notify(), "create_notify");
    must(n.signal(), "signal");
    must(n.wait(long()), "wait after a signal");
    must_time_out(
        n.wait(short()),
        "a second wait after one signal (the wait resets)",
    );
    std::thread::scope(|scope| {
        let n = &n;
        scope.spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            must(n.signal(), "signal from another thread");
        });
        must(n.wait(long()), "wait woken by another thread");
    });
}

/// `Notify::wait_async` does not block: pending after one poll, completed by
/// `block_on` after the signal; an awaitable wait times out.
pub fn notify_wait_async<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let n = must(dev.create_notify(), "create_notify");
    let mut fut = n.wait_async(long());
    assert!(pending_after_one_poll(&mut fut));
    must(n.signal(), "signal");
    must(block_on(fut), "awaited notify");
    must_time_out(
        block_on(n.wait_async(short())),
        "an awaited notify nobody signalled",
    );
}

/// `record_notify` on a stream signals only after the work queued before
/// it ran.
pub fn notify_stream_record_and_wait<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let model = stream_model(&dev);
    if model == StreamModel::Ungated {
        // stream_model required Unsupported of record_notify.
        return;
    }
    let stream = must(dev.create_stream(), "create_stream");
    let gate = super::gate::gate(&dev);
    let n = must(dev.create_notify(), "create_notify");
    gated(
        model,
        &dev,
        &stream,
        &gate,
        || must(dev.record_notify(&stream, &n), "record_notify"),
        || {
            must_time_out(n.wait(short()), "a notify recorded after pending work");
            must(gate.signal(), "signal the gate");
            must(n.wait(long()), "the notify after the work ran");
        },
    );
    must(dev.synchronize(&stream, Some(LONG)), "synchronize");
}

/// IPC notifies (IPC_NOTIFY): an importer's signal (host or stream) wakes
/// the creator. With CREATOR_ONLY_NOTIFY_WAIT an importer's wait is refused
/// with PermissionDenied; otherwise the importer can wait for the creator's
/// signal.
pub fn notify_ipc_export_import<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let n = must(dev.create_notify(), "create_notify");
    if !caps.contains(C::IPC_NOTIFY) {
        must_be_unsupported(
            dev.export_notify(&n, &open_export(caps)),
            "ipc-notify",
            "export_notify",
        );
        return;
    }
    let ex = must(dev.export_notify(&n, &open_export(caps)), "export_notify");
    assert_eq!(ex.handle().kind, HandleKind::Notify, "handle kind");
    assert_eq!(ex.handle().backend, s.backend().id(), "handle backend");
    let imported = must(
        dev.import_notify(share(&ex), &ImportOptions::default()),
        "import_notify",
    );
    let by_text = must(
        dev.import_notify(by_text(&ex), &ImportOptions::default()),
        "import_notify by text",
    );

    must(imported.signal(), "importer signal");
    must(n.wait(long()), "creator wait after the importer's signal");
    must(by_text.signal(), "signal through the text import");
    must(
        n.wait(long()),
        "creator wait after the text importer's signal",
    );
    let stream = must(dev.create_stream(), "create_stream");
    if caps.contains(C::STREAM_ORDERED_NOTIFY) {
        must(
            dev.record_notify(&stream, &imported),
            "record_notify on an imported notify",
        );
        must(
            n.wait(long()),
            "creator wait after the importer's stream record",
        );
    } else {
        must_be_unsupported(
            dev.record_notify(&stream, &imported),
            "STREAM_ORDERED_NOTIFY",
            "record_notify on an imported notify",
        );
    }
    must_time_out(n.wait(short()), "creator wait with no signal");

    if caps.contains(C::CREATOR_ONLY_NOTIFY_WAIT) {
        must_be_denied(
            imported.wait(short()),
            "an importer's wait on a creator-only notify",
        );
        must_be_denied(
            block_on(imported.wait_async(short())),
            "an importer's awaitable wait on a creator-only notify",
        );
    } else {
        must(n.signal(), "creator signal");
        must(
            imported.wait(long()),
            "importer wait after the creator's signal",
        );
        must_time_out(imported.wait(short()), "importer wait with no signal");
    }
    must(dev.synchronize(&stream, Some(LONG)), "synchronize");
}
