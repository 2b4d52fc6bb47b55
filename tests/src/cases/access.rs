//! Who may import: pid allow-lists and the id an importer is listed under
//! (checked in real child processes), and peer access between devices.

use hal_core::kit::os;
use hal_core::DeviceExt;
use hal_core::{
    AllocDesc, Backend, Capabilities as C, Device, ExportOptions, HandleFlags, ImportOptions,
    Importers, Memory, Notify, PidKind, SharedHandle, WaitOptions,
};

use super::memory::ipc_memory_or_unsupported;
use super::util::{decode, share};
use crate::process::{self, report};
use crate::support::{
    alloc_filled, assert_bytes, location, must, must_be_denied, must_be_unsupported, must_fail,
    open_export, pattern, Suite, LONG,
};

/// The child role that tries imports against allow-lists.
pub(crate) const PID_ROLE: &str = "pid-allow";

/// The child role that reports its `process_id()` and imports under it.
pub(crate) const IDENTITY_ROLE: &str = "process-identity";

/// Pid allow-lists (PID_ALLOW_LIST), enforced in a real child process: an
/// export limited to another process is refused with PermissionDenied, and
/// works from the same handle text once `allow_importers` adds the id the
/// child's `Device::process_id` reports; an export to anyone works; the
/// backend's default refuses (with PID_ALLOW_LIST_DEFAULT_ON) or admits the
/// child. Notifies follow the same lists. Without PID_ALLOW_LIST, pid lists
/// are Unsupported and the default export admits the child.
pub fn pid_allow_list_in_child<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let a = alloc_filled(&dev, 1, 50);
    if !ipc_memory_or_unsupported(&dev, &a) {
        return;
    }
    let me = must(dev.process_id(), "process_id()");
    let to_me = ExportOptions {
        importers: Importers::Pids(vec![me]),
        ..ExportOptions::default()
    };
    let mut args: Vec<(&str, String)> = vec![("seed", "50".into())];
    let ex_default = must(
        dev.export_memory(&a, &ExportOptions::default()),
        "export with the backend's default importers",
    );
    args.push(("default", ex_default.to_text()));
    let default_denied = caps.contains(C::PID_ALLOW_LIST_DEFAULT_ON);
    args.push(("default_denied", u8::from(default_denied).to_string()));

    if !caps.contains(C::PID_ALLOW_LIST) {
        must_be_unsupported(
            dev.export_memory(&a, &to_me),
            "pid-allow-list",
            "an export to a pid list",
        );
        let mut ex = must(dev.export_memory(&a, &ExportOptions::default()), "export");
        must_be_unsupported(
            dev.allow_importers(&mut ex, &[1]),
            "pid-allow-list",
            "allow_importers",
        );
        let mut child = s.spawn(PID_ROLE, &args);
        child.expect("done");
        child.finish();
        return;
    }

    let mut ex_pids = must(dev.export_memory(&a, &to_me), "export to a pid list");
    assert_eq!(
        ex_pids.handle().allowed_pids,
        vec![me],
        "the handle lists the allowed pids"
    );
    assert!(!ex_pids.handle().flags.contains(HandleFlags::ANY_IMPORTER));
    let ex_any = must(
        dev.export_memory(
            &a,
            &ExportOptions {
                importers: Importers::Anyone,
                ..ExportOptions::default()
            },
        ),
        "export to anyone",
    );
    assert!(
        ex_any.handle().flags.contains(HandleFlags::ANY_IMPORTER),
        "an export to anyone has ANY_IMPORTER"
    );
    args.push(("pids", ex_pids.to_text()));
    args.push(("any", ex_any.to_text()));
    let mut ex_default = ex_default;

    let notify = must(dev.create_notify(), "create_notify");
    let mut ex_notify = if caps.contains(C::IPC_NOTIFY) {
        let ex = must(
            dev.export_notify(&notify, &to_me),
            "export_notify to a pid list",
        );
        args.push(("notify", ex.to_text()));
        Some(ex)
    } else {
        None
    };

    let mut child = s.spawn(PID_ROLE, &args);
    let pid: u32 = child
        .expect("refused")
        .trim()
        .parse()
        .expect("the child reports its process_id() with `refused`");
    must(
        dev.allow_importers(&mut ex_pids, &[pid]),
        "allow_importers(child)",
    );
    assert!(
        ex_pids.handle().allowed_pids.contains(&pid),
        "allow_importers updates the handle"
    );
    if default_denied {
        must(
            dev.allow_importers(&mut ex_default, &[pid]),
            "allow_importers(child) on the default export",
        );
    }
    if let Some(ex) = ex_notify.as_mut() {
        must(
            dev.allow_importers(ex, &[pid]),
            "allow_importers(child) on the notify",
        );
    }
    child.send("allowed");
    child.expect("done");
    if ex_notify.is_some() {
        must(
            notify.wait(WaitOptions::timeout(LONG)),
            "the creator waits for the child's signal",
        );
    }
    assert_bytes(&a, 0, b"child was allowed", "the allowed child's write");
    child.finish();
}

/// Child role for [`pid_allow_list_in_child`].
pub(crate) fn child_pid_allow<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let opts = ImportOptions::default();
    let seed: u8 = process::arg("seed").parse().expect("seed");
    let import = |key: &str| {
        let h = decode(&process::arg(key));
        dev.import_memory(SharedHandle::from(h), &opts)
    };
    let default_denied = process::arg("default_denied") == "1";
    if process::opt_arg("pids").is_none() {
        // No allow-lists: the default export admits anyone.
        let m = must(import("default"), "import of a default export");
        assert_bytes(&m, 0, &pattern(seed, 64), "bytes of a default export");
        report("done", "");
        return;
    }
    must_be_denied(
        import("pids"),
        "an import by a pid not on the export's list",
    );
    if default_denied {
        must_be_denied(
            import("default"),
            "an import of a default export (allow-list on by default)",
        );
    } else {
        let m = must(import("default"), "an import of a default export");
        assert_bytes(&m, 0, &pattern(seed, 64), "bytes of a default export");
    }
    let any = must(import("any"), "an import of an export to anyone");
    assert_bytes(&any, 0, &pattern(seed, 64), "bytes of an export to anyone");
    let notify_text = process::opt_arg("notify");
    if let Some(t) = &notify_text {
        must_be_denied(
            dev.import_notify(SharedHandle::from(decode(t)), &opts),
            "a notify import by a pid not on the list",
        );
    }
    let id = must(dev.process_id(), "process_id() in the child");
    report("refused", &id.to_string());
    process::wait_for("allowed");
    let m = must(
        import("pids"),
        "an import after allow_importers added this pid (same handle text)",
    );
    assert_bytes(&m, 0, &pattern(seed, 64), "bytes after being allowed");
    if default_denied {
        drop(must(
            import("default"),
            "an import of the default export after being allowed",
        ));
    }
    must(
        m.write(0, b"child was allowed"),
        "write after being allowed",
    );
    if let Some(t) = &notify_text {
        let n = must(
            dev.import_notify(SharedHandle::from(decode(t)), &opts),
            "a notify import after being allowed",
        );
        must(n.signal(), "signal the parent");
    }
    report("done", "");
}

/// The identity an allow-list names, in a real child process:
/// `Device::process_id` is the id the backend's allow-list accepts (an
/// export to exactly the child's reported id imports there; where the
/// handle's pid kind is `Os`, the id is the child's OS pid), and an
/// exported handle names this process's pid namespace (`creator_pid_ns`),
/// `is_own()` here and not in the child. Without PID_ALLOW_LIST the id is
/// still reported and the child imports an open export.
pub fn process_id_is_what_allow_lists_accept<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let a = alloc_filled(&dev, 1, 55);
    if !ipc_memory_or_unsupported(&dev, &a) {
        return;
    }
    let own = must(dev.process_id(), "process_id()");
    let ex = must(dev.export_memory(&a, &open_export(caps)), "export_memory");
    let h = ex.handle();
    let ns = os::pid_namespace();
    assert_eq!(h.creator_pid, os::pid(), "the handle names this process");
    assert_eq!(
        h.creator_pid_ns, ns,
        "the handle names this process's pid namespace"
    );
    if ns == 0 {
        eprintln!("this process cannot read /proc/self/ns/pid: is_own() cannot be told here");
        assert!(!h.is_own(), "is_own() is false when it cannot be told");
    } else {
        assert_eq!(h.same_pid_namespace(), Some(true), "same_pid_namespace()");
        assert!(h.is_own(), "is_own() in the exporting process");
        assert!(
            super::util::decode(&ex.to_text()).is_own(),
            "is_own() of the handle decoded from its text"
        );
    }
    if h.pid_kind == PidKind::Os {
        assert_eq!(
            own,
            os::pid(),
            "process_id() of a backend whose allow-lists hold OS pids"
        );
    }

    let mut child = s.spawn(IDENTITY_ROLE, &[("seed", "55".into())]);
    let id: u32 = child
        .expect("id")
        .trim()
        .parse()
        .expect("the child reports its process_id()");
    let importers = if caps.contains(C::PID_ALLOW_LIST) {
        Importers::Pids(vec![id])
    } else {
        open_export(caps).importers
    };
    let ex = must(
        dev.export_memory(
            &a,
            &ExportOptions {
                importers,
                ..ExportOptions::default()
            },
        ),
        "export to the child's process_id()",
    );
    let h = ex.handle();
    if caps.contains(C::PID_ALLOW_LIST) {
        assert_eq!(h.allowed_pids, vec![id], "the handle lists the child's id");
        assert!(!h.flags.contains(HandleFlags::ANY_IMPORTER));
    }
    if h.pid_kind == PidKind::Os && h.same_pid_namespace() == Some(true) {
        assert_eq!(
            id,
            child.pid(),
            "process_id() in a child of this pid namespace is its OS pid"
        );
    }
    child.send(&format!("handle {}", ex.to_text()));
    child.expect("done");
    assert_bytes(&a, 0, b"imported under process_id()", "the child's write");
    child.finish();
}

/// Child role for [`process_id_is_what_allow_lists_accept`].
pub(crate) fn child_process_identity<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let seed: u8 = process::arg("seed").parse().expect("seed");
    let id = must(dev.process_id(), "process_id() in the child");
    report("id", &id.to_string());
    let h = decode(&process::wait_for("handle"));
    assert!(!h.is_own(), "is_own() of the parent's handle in the child");
    assert_ne!(h.creator_pid, os::pid(), "the handle names the parent");
    assert_eq!(
        h.creator_pid_ns,
        os::pid_namespace(),
        "the parent's pid namespace is the child's"
    );
    let m = must(
        dev.import_memory(SharedHandle::from(h), &ImportOptions::default()),
        "an import of an export that allows the id process_id() gave",
    );
    assert_bytes(&m, 0, &pattern(seed, 64), "bytes of the export");
    must(
        m.write(0, b"imported under process_id()"),
        "write to the import",
    );
    report("done", "");
}

/// Peer access (PEER_ACCESS, two devices): importing memory of device 0
/// onto device 1 fails without peer access and works with it. With fewer
/// than two devices, importing onto a device that does not exist is
/// refused.
pub fn peer_access_import<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let n = must(s.backend().devices(), "devices()").len() as u32;
    let a = alloc_filled(&dev, 1, 60);
    if !ipc_memory_or_unsupported(&dev, &a) {
        return;
    }
    let ex = must(dev.export_memory(&a, &open_export(caps)), "export_memory");
    if n < 2 {
        let opts = ImportOptions {
            device: Some(n),
            peer_access: true,
            ..ImportOptions::default()
        };
        let _ = must_fail(
            dev.import_memory(share(&ex), &opts),
            "an import onto a device that does not exist",
        );
        crate::report::not_exercised(&format!(
            "peer access needs two devices and {} has {n}: checked only that a missing device is \
             refused",
            s.backend().id()
        ));
        return;
    }
    let d1 = s.open(1);
    let without = ImportOptions {
        device: Some(1),
        peer_access: false,
        ..ImportOptions::default()
    };
    let with = ImportOptions {
        peer_access: true,
        ..without.clone()
    };
    if !caps.contains(C::PEER_ACCESS) {
        must_be_unsupported(
            d1.import_memory(share(&ex), &with),
            "peer-access",
            "an import onto another device with peer access",
        );
        return;
    }
    let _ = must_fail(
        d1.import_memory(share(&ex), &without),
        "an import onto another device without peer access",
    );
    let m = must(
        d1.import_memory(share(&ex), &with),
        "an import onto another device with peer access",
    );
    assert_eq!(m.len(), a.len(), "peer mapping length");
    peer_bytes(&m, &pattern(60, 64));
    // Memory of device 1 imported onto device 0 the same way.
    let b = must(
        d1.allocate(&AllocDesc {
            location: location(&d1),
            align: d1.info().page_size(),
            ..AllocDesc::host(a.len())
        }),
        "allocate on device 1",
    );
    must(b.write(0, b"device one"), "write on device 1");
    let exb = must(
        d1.export_memory(&b, &open_export(caps)),
        "export on device 1",
    );
    let back = ImportOptions {
        device: Some(0),
        peer_access: true,
        ..ImportOptions::default()
    };
    let mb = must(
        dev.import_memory(share(&exb), &back),
        "import of device 1 memory onto device 0",
    );
    peer_bytes(&mb, b"device one");
}

/// The bytes of a mapping imported onto another device. Ascend allows such
/// mappings only as the source or target of device-to-device copies, so a
/// host read may answer Unsupported there; anything else must read back.
#[track_caller]
fn peer_bytes(m: &impl Memory, expect: &[u8]) {
    let mut got = vec![0u8; expect.len()];
    match m.read(0, &mut got) {
        Ok(()) => assert_eq!(got, expect, "bytes of a peer mapping"),
        Err(e) if e.is_unsupported() => {
            eprintln!("host reads of a peer mapping are unsupported here: {e}")
        }
        Err(e) => panic!("read of a peer mapping: {e}"),
    }
}
