//! Lifetimes and leases: importer counts, waiting for importers, close
//! order, and importers that die.

use hal_core::DeviceExt;
use std::time::Duration;

use hal_core::{
    Allocation, Backend, BackendId, Capabilities as C, Device, Error, Event, EventFlags, FreeError,
    ImportOptions, Memory, Notify, SharedHandle, WaitOptions,
};

use super::memory::ipc_memory_or_unsupported;
use super::util::{decode, share};
use crate::process::{self, report};
use crate::support::{
    alloc_filled, assert_bytes, importers_of, must, must_be_unsupported, must_time_out,
    open_export, pattern, Suite, LONG, SHORT,
};

/// The child role that imports memory and holds it until killed.
pub(crate) const HOLD_ROLE: &str = "hold-lease";

/// Require Unsupported from the lease calls on a device without LEASES.
/// Returns true when the case should go on.
fn leases_or_unsupported<A: Allocation>(caps: C, a: &A) -> bool {
    if caps.contains(C::LEASES) {
        return true;
    }
    must_be_unsupported(a.importers(), "leases", "importers()");
    must_be_unsupported(a.wait_unleased(Some(SHORT)), "leases", "wait_unleased()");
    false
}

/// `importers()` counts live mappings: 0, then at least 1 per importing
/// process, and 0 again once every mapping is dropped.
pub fn lease_count_and_release<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let a = alloc_filled(&dev, 1, 10);
    if !ipc_memory_or_unsupported(&dev, &a) || !leases_or_unsupported(caps, &a) {
        return;
    }
    let ex = must(dev.export_memory(&a, &open_export(caps)), "export_memory");
    assert_eq!(importers_of(&a), 0, "importers before any import");
    let m1 = must(
        dev.import_memory(share(&ex), &ImportOptions::default()),
        "import",
    );
    assert_eq!(
        importers_of(&a),
        1,
        "importers with one mapping in one process"
    );
    let m2 = must(
        dev.import_memory(share(&ex), &ImportOptions::default()),
        "second import",
    );
    assert!(importers_of(&a) >= 1, "importers with two mappings");
    drop(m1);
    assert!(
        importers_of(&a) >= 1,
        "importers while the second mapping lives"
    );
    drop(m2);
    assert_eq!(
        importers_of(&a),
        0,
        "importers after every mapping was dropped"
    );
    let m3 = must(
        dev.import_memory(share(&ex), &ImportOptions::default()),
        "import again",
    );
    assert_eq!(importers_of(&a), 1, "importers after importing again");
    drop(m3);
    assert_eq!(importers_of(&a), 0, "importers after the last drop");
}

/// `wait_unleased` returns at once with no importer, times out while a
/// mapping is held, and returns once another thread drops the mapping.
pub fn lease_wait_unleased_times_out_then_returns<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let a = alloc_filled(&dev, 1, 11);
    if !ipc_memory_or_unsupported(&dev, &a) || !leases_or_unsupported(caps, &a) {
        return;
    }
    let ex = must(dev.export_memory(&a, &open_export(caps)), "export_memory");
    must(
        a.wait_unleased(Some(SHORT)),
        "wait_unleased with no importer",
    );
    let m = must(
        dev.import_memory(share(&ex), &ImportOptions::default()),
        "import",
    );
    must_time_out(
        a.wait_unleased(Some(SHORT)),
        "wait_unleased while a mapping is held",
    );
    std::thread::scope(|scope| {
        scope.spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(m);
        });
        must(
            a.wait_unleased(Some(LONG)),
            "wait_unleased while the mapping is dropped",
        );
    });
    assert_eq!(importers_of(&a), 0);
}

/// Close order: freeing an allocation that an importer still maps is either
/// refused with Busy (the allocation comes back, still usable; required on
/// Ascend, whose documented close order is importers first) or deferred (the
/// mapping keeps working until dropped). Never a silent free under the
/// importer.
pub fn lease_free_while_imported<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let a = alloc_filled(&dev, 1, 12);
    if !ipc_memory_or_unsupported(&dev, &a) {
        return;
    }
    let ex = must(dev.export_memory(&a, &open_export(caps)), "export_memory");
    let m = must(
        dev.import_memory(share(&ex), &ImportOptions::default()),
        "import",
    );
    let page = pattern(12, 64);
    match a.free() {
        Err(FreeError { resource, error }) => {
            match error {
                Error::Busy { holders, .. } => assert!(holders >= 1, "Busy with {holders} holders"),
                e => panic!("free() under an importer must be refused with Busy, got {e}"),
            }
            assert_bytes(
                &resource,
                0,
                &page,
                "the refused allocation still holds its bytes",
            );
            drop(m);
            if let Err(e) = resource.free() {
                panic!("free() after the importer closed: {}", e.error);
            }
        }
        Ok(()) => {
            let id = s.backend().id();
            assert!(
                !matches!(id, BackendId::Ascend | BackendId::MockAscend),
                "{id}: the vendor's close order requires free() under an importer to be refused"
            );
            assert_bytes(&m, 0, &page, "a deferred free keeps the importer's bytes");
            must(m.write(0, b"still mapped"), "write after a deferred free");
            assert_bytes(&m, 0, b"still mapped", "mapping after a deferred free");
            drop(m);
        }
    }
    drop(ex);
}

/// An importer child process killed with SIGKILL while it holds a mapping
/// counts as gone: `importers()` drops to 0 and `wait_unleased` returns.
pub fn lease_killed_importer_is_gone<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let a = alloc_filled(&dev, 2, 13);
    if !ipc_memory_or_unsupported(&dev, &a) || !leases_or_unsupported(caps, &a) {
        return;
    }
    let ex = must(dev.export_memory(&a, &open_export(caps)), "export_memory");
    let mut child = s.spawn(HOLD_ROLE, &[("mem", ex.to_text()), ("seed", "13".into())]);
    child.expect("held");
    assert_eq!(
        importers_of(&a),
        1,
        "importers while the child holds a mapping"
    );
    must_time_out(
        a.wait_unleased(Some(SHORT)),
        "wait_unleased while the child holds a mapping",
    );
    child.kill();
    must(
        a.wait_unleased(Some(LONG)),
        "wait_unleased after the importer was killed with SIGKILL",
    );
    assert_eq!(importers_of(&a), 0, "a killed importer must not be counted");
}

/// Child role: import the memory named by the `mem` argument, check its
/// bytes, report `held` and hold it until killed.
pub(crate) fn child_hold<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let seed: u8 = process::arg("seed").parse().expect("seed");
    let h = decode(&process::arg("mem"));
    let len = h.size;
    let m = must(
        dev.import_memory(SharedHandle::from(h), &ImportOptions::default()),
        "child import",
    );
    assert_bytes(&m, 0, &pattern(seed, len), "child sees the parent's bytes");
    report("held", "");
    process::wait_for_eof();
    drop(m);
}

/// The child role that imports an event (and a notify) and uses them after
/// the exporter dropped its own.
pub(crate) const HOLD_SYNC_ROLE: &str = "hold-sync";

/// An exporter drops its IPC event and notify (and their exports) while an
/// importer in another process holds them: the importer's event and notify
/// keep working (CUDA makes using an IPC event after its exporter destroyed
/// it undefined, Ascend forbids destroying one before the importer is done:
/// the exporter's drop waits for its importers' leases).
pub fn exported_event_outlives_exporter_drop<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let ipc = EventFlags {
        interprocess: true,
        timing: false,
    };
    if !caps.contains(C::IPC_EVENT) {
        match dev.create_event(ipc) {
            Ok(ev) => must_be_unsupported(
                dev.export_event(&ev, &open_export(caps)),
                "IPC events",
                "export_event",
            ),
            Err(e) => assert!(
                matches!(e, Error::Unsupported { .. }),
                "an IPC event without the capability: {e}"
            ),
        }
        return;
    }
    let ev = must(dev.create_event(ipc), "create an IPC event");
    let stream = must(dev.create_stream(), "create_stream");
    must(dev.record_event(&stream, &ev), "record_event");
    must(dev.synchronize(&stream, Some(LONG)), "synchronize");
    let ex = must(dev.export_event(&ev, &open_export(caps)), "export_event");
    let notify = caps.contains(C::IPC_NOTIFY).then(|| {
        let n = must(dev.create_notify(), "create_notify");
        let exn = must(dev.export_notify(&n, &open_export(caps)), "export_notify");
        (n, exn)
    });
    let notify_text = notify.as_ref().map_or(String::new(), |(_, e)| e.to_text());
    let mut child = s.spawn(
        HOLD_SYNC_ROLE,
        &[("event", ex.to_text()), ("notify", notify_text)],
    );
    assert_eq!(child.expect("imported"), "ok", "the child's imports");
    drop(ex);
    drop(ev);
    drop(notify);
    drop(stream);
    child.send("go");
    assert_eq!(
        child.expect("used"),
        "ok",
        "the importer's event and notify after the exporter dropped its own"
    );
    child.finish();
}

pub(crate) fn child_hold_sync<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let ev = dev.import_event(
        SharedHandle::from(decode(&process::arg("event"))),
        &ImportOptions::default(),
    );
    let text = process::arg("notify");
    let n = (!text.is_empty())
        .then(|| dev.import_notify(SharedHandle::from(decode(&text)), &ImportOptions::default()));
    let imported = match (&ev, &n) {
        (Err(e), _) | (_, Some(Err(e))) => e.to_string(),
        _ => "ok".to_string(),
    };
    report("imported", &imported);
    if imported != "ok" {
        return;
    }
    assert_eq!(process::wait_for("go"), "");
    let mut used = Ok(());
    if let Ok(ev) = &ev {
        used = used.and_then(|()| ev.wait(WaitOptions::timeout(LONG)));
    }
    if let Some(Ok(n)) = &n {
        used = used.and_then(|()| n.signal());
    }
    report(
        "used",
        &used.map_or_else(|e| e.to_string(), |()| "ok".to_string()),
    );
}
