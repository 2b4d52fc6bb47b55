//! Cross-process use with a real child process, and resource hygiene
//! measured in a dedicated child process.

use hal_core::growable::{GrowableBuffer, GrowableView};
use hal_core::wait::block_on;
use hal_core::DeviceExt;
use hal_core::{
    Access, Backend, ByteRange, Capabilities as C, Device, Error, Event, EventFlags, ExportOptions,
    ImportOptions, ImportPlacement, Memory, Notify, SharedHandle, WaitOptions,
};
use hal_core::{Vmm, VmmExt};

use super::sync::{block_stream, stream_model, StreamModel};
use super::util::{by_text, decode, share};
use crate::probe::{self, Snapshot};
use crate::process::{self, report};
use crate::support::{
    alloc_filled, assert_bytes, must, must_be_unsupported, must_time_out, open_export, pattern,
    read_vec, Suite, LONG, SHORT,
};

/// The child role that imports memory, an event and a notify from text.
pub(crate) const IMPORT_ROLE: &str = "import-signal";
/// The child role that measures a full cycle's leftovers.
pub(crate) const HYGIENE_ROLE: &str = "hygiene";

/// A real child process imports the parent's memory, IPC event and notify
/// from their handle texts alone (the parent's broker serves the
/// descriptors), sees the parent's bytes, waits for the parent's event,
/// writes, and signals; the parent sees the child's bytes. With
/// FIXED_ADDRESS_IMPORT the child maps at the parent's address.
pub fn cross_process_memory_event_notify<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let page = dev.info().page_size();
    let a = alloc_filled(&dev, 4, 80);
    if !caps.contains(C::IPC_MEMORY) {
        must_be_unsupported(
            dev.export_memory(&a, &ExportOptions::default()),
            "ipc-memory",
            "export_memory",
        );
        return;
    }
    let ex = must(dev.export_memory(&a, &open_export(caps)), "export_memory");
    let mut args: Vec<(&str, String)> = vec![("mem", ex.to_text()), ("seed", "80".into())];
    if caps.contains(C::FIXED_ADDRESS_IMPORT) {
        args.push(("fixed", a.addr().to_string()));
    }
    let done = must(dev.create_notify(), "create_notify");
    let ex_notify = if caps.contains(C::IPC_NOTIFY) {
        let ex = must(
            dev.export_notify(&done, &open_export(caps)),
            "export_notify",
        );
        args.push(("notify", ex.to_text()));
        Some(ex)
    } else {
        None
    };
    let stream = must(dev.create_stream(), "create_stream");
    let gate = super::gate::gate(&dev);
    let event = if caps.contains(C::IPC_EVENT) {
        let e = must(
            dev.create_event(EventFlags {
                interprocess: true,
                timing: false,
            }),
            "create_event",
        );
        let queued = stream_model(&dev) == StreamModel::Queued;
        if queued {
            block_stream(&dev, &stream, &gate);
        }
        must(
            dev.record_event(&stream, &e),
            "record_event (behind the gate on queued streams)",
        );
        let ex = must(dev.export_event(&e, &open_export(caps)), "export_event");
        args.push(("event", ex.to_text()));
        args.push(("event_pending", u8::from(queued).to_string()));
        Some((e, ex, queued))
    } else {
        None
    };

    let mut child = s.spawn(IMPORT_ROLE, &args);
    child.expect("imported");
    if let Some((_, _, true)) = &event {
        must(gate.signal(), "open the gate: the event completes");
    }
    if ex_notify.is_some() {
        must(
            done.wait(WaitOptions::timeout(LONG)),
            "the parent waits for the child's signal",
        );
    }
    child.expect("written");
    assert_bytes(
        &a,
        page,
        &pattern(81, page),
        "the parent sees the child's bytes",
    );
    child.finish();
    must(dev.synchronize(&stream, Some(LONG)), "synchronize");
    drop(event);
}

/// Child role for [`cross_process_memory_event_notify`].
pub(crate) fn child_import_signal<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let seed: u8 = process::arg("seed").parse().expect("seed");
    let h = decode(&process::arg("mem"));
    let len = h.size;
    let page = dev.info().page_size();
    let mut m = None;
    if let Some(addr) = process::opt_arg("fixed") {
        let addr: u64 = addr.parse().expect("fixed address");
        let opts = ImportOptions {
            placement: ImportPlacement::ExporterAddress,
            ..ImportOptions::default()
        };
        match dev.import_memory(SharedHandle::from(h.clone()), &opts) {
            Ok(fixed) => {
                assert_eq!(
                    fixed.addr(),
                    addr,
                    "a fixed-address import lands at the exporter's address"
                );
                m = Some(fixed);
            }
            // ASLR may have put something of ours there: then it is refused, as documented.
            Err(Error::AlreadyExists { .. }) => {
                eprintln!(
                    "the exporter's address {addr:#x} is taken in the child; refused as documented"
                )
            }
            Err(e) => panic!("fixed-address import in the child: {e}"),
        }
    }
    let m = match m {
        Some(m) => m,
        None => must(
            dev.import_memory(SharedHandle::from(h), &ImportOptions::default()),
            "the child imports memory from the handle text",
        ),
    };
    assert_eq!(m.len(), len, "child mapping length");
    assert_bytes(
        &m,
        0,
        &pattern(seed, len),
        "the child sees the parent's bytes",
    );
    let event = process::opt_arg("event").map(|t| {
        must(
            dev.import_event(SharedHandle::from(decode(&t)), &ImportOptions::default()),
            "the child imports the event",
        )
    });
    let notify = process::opt_arg("notify").map(|t| {
        must(
            dev.import_notify(SharedHandle::from(decode(&t)), &ImportOptions::default()),
            "the child imports the notify",
        )
    });
    if let Some(e) = &event {
        if process::arg("event_pending") == "1" {
            must_time_out(
                e.wait(WaitOptions::timeout(SHORT)),
                "the parent's event before its work ran",
            );
        }
    }
    report("imported", "");
    if let Some(e) = &event {
        must(
            e.wait(WaitOptions::timeout(LONG)),
            "the parent's event after its work ran",
        );
    }
    must(m.write(page, &pattern(seed + 1, page)), "the child writes");
    if let Some(n) = &notify {
        must(n.signal(), "the child signals the parent");
    }
    report("written", "");
}

/// Resource hygiene: a child process runs a full cycle of everything the
/// backend can do once (to start lazily created helpers), measures its open
/// descriptors, memfd mappings and `/dev/shm`, runs the cycle twice more, and
/// requires nothing more to be held.
pub fn hygiene_full_cycle_in_child<B: Backend>(s: &Suite<B>) {
    let child = s.spawn(HYGIENE_ROLE, &[]);
    child.finish();
}

/// Child role for [`hygiene_full_cycle_in_child`].
pub(crate) fn child_hygiene<B: Backend>(s: &Suite<B>) {
    full_cycle(s);
    let before = Snapshot::take();
    full_cycle(s);
    full_cycle(s);
    let after = Snapshot::take();
    let pid = std::process::id();
    let leaks = before.leaks_in(&after, |name| probe::names_pid(name, pid));
    assert!(
        leaks.is_empty(),
        "a full cycle left resources behind:\n{}",
        leaks.join("\n")
    );
    report("clean", "");
}

/// Everything the device can do, once, in this process; every resource is
/// dropped at the end.
pub fn full_cycle<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let page = dev.info().page_size();
    let opts = open_export(caps);
    let io = ImportOptions::default();
    let a = alloc_filled(&dev, 4, 90);
    if caps.contains(C::IPC_MEMORY) {
        let ex = must(dev.export_memory(&a, &opts), "export_memory");
        let m1 = must(dev.import_memory(share(&ex), &io), "import");
        let m2 = must(dev.import_memory(by_text(&ex), &io), "import by text");
        must(m1.write(0, b"cycle"), "write");
        assert_eq!(read_vec(&m2, 0, 5), b"cycle");
        let sub = ExportOptions {
            range: Some(ByteRange::new(page, page)),
            read_only: caps.contains(C::READ_ONLY_EXPORT),
            ..opts.clone()
        };
        // Read-only or not, from an allocation of its own: one first
        // exported writable is never exported read-only.
        let b = alloc_filled(&dev, 2, 91);
        let ex_sub = must(dev.export_memory(&b, &sub), "export of a range");
        let m3 = must(
            dev.import_memory(by_text(&ex_sub), &io),
            "import of a range",
        );
        assert_eq!(m3.len(), page);
        if caps.contains(C::LEASES) {
            must(hal_core::Allocation::importers(&a), "importers");
        }
        drop((m1, m2, m3, ex, ex_sub, b));
    }
    let stream = must(dev.create_stream(), "create_stream");
    let gate = super::gate::gate(&dev);
    let e = must(dev.create_event(EventFlags::default()), "create_event");
    let queued = stream_model(&dev) == StreamModel::Queued;
    if queued {
        block_stream(&dev, &stream, &gate);
    }
    must(dev.record_event(&stream, &e), "record_event");
    let fut = e.wait_async(WaitOptions::timeout(LONG));
    if queued {
        must(gate.signal(), "signal");
    }
    must(block_on(fut), "awaited event");
    if caps.contains(C::IPC_EVENT) {
        let ie = must(
            dev.create_event(EventFlags {
                interprocess: true,
                timing: false,
            }),
            "create_event",
        );
        let ex = must(dev.export_event(&ie, &opts), "export_event");
        let imported = must(dev.import_event(by_text(&ex), &io), "import_event");
        must(dev.record_event(&stream, &ie), "record_event");
        must(imported.wait(WaitOptions::timeout(LONG)), "imported event");
        drop((imported, ex));
    }
    let n = must(dev.create_notify(), "create_notify");
    if caps.contains(C::IPC_NOTIFY) {
        let ex = must(dev.export_notify(&n, &opts), "export_notify");
        let imported = must(dev.import_notify(by_text(&ex), &io), "import_notify");
        must(imported.signal(), "signal");
        must(
            block_on(n.wait_async(WaitOptions::timeout(LONG))),
            "awaited notify",
        );
        drop((imported, ex));
    }
    must(dev.synchronize(&stream, Some(LONG)), "synchronize");
    if caps.contains(C::VMM) {
        let g = dev.info().granularity_min;
        let p = must(dev.allocate_physical(g), "allocate_physical");
        let r = must(dev.reserve(2 * g, g), "reserve");
        must(dev.map(&r, 0, &p), "map");
        must(dev.set_access(&r, 0, g, Access::ReadWrite), "set_access");
        if caps.contains(C::IPC_MEMORY) {
            let ex = must(dev.export_physical(&p, &opts), "export_physical");
            let q = must(dev.import_physical(by_text(&ex), &io), "import_physical");
            must(dev.map(&r, g, &q), "map the import");
            must(dev.unmap(&r, g, g), "unmap");
            drop((q, ex));
            let mut buf = must(
                GrowableBuffer::create(&dev, 2 * g, g, opts.clone()),
                "GrowableBuffer::create",
            );
            must(buf.grow_to(g), "grow");
            let mut view = must(
                GrowableView::open(&dev, must(buf.share(), "share"), &io),
                "GrowableView::open",
            );
            must(buf.grow_to(2 * g), "grow");
            must(view.refresh(), "refresh");
            drop(view);
            drop(buf);
        }
        must(dev.unmap(&r, 0, g), "unmap");
    }
}
