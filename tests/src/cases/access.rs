//! Who may import: pid allow-lists (checked in a real child process) and
//! peer access between devices.

use hal_core::{
    AllocDesc, Backend, Capabilities as C, Device, ExportOptions, HandleFlags, ImportOptions,
    Importers, Memory, Notify, SharedHandle, WaitOptions,
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

/// Pid allow-lists (PID_ALLOW_LIST), enforced in a real child process: an
/// export limited to another pid is refused with PermissionDenied, and works
/// from the same handle text once `allow_importers` adds the child's pid; an
/// export to anyone works; the backend's default refuses (with
/// PID_ALLOW_LIST_DEFAULT_ON) or admits the child. Notifies follow the same
/// lists. Without PID_ALLOW_LIST, pid lists are Unsupported and the default
/// export admits the child.
pub fn pid_allow_list_in_child<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let a = alloc_filled(&dev, 1, 50);
    if !ipc_memory_or_unsupported(&dev, &a) {
        return;
    }
    let me = std::process::id();
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
    child.expect("refused");
    let pid = child.pid();
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
    report("refused", "");
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
        eprintln!("peer access needs two devices and {} has {n}: checked only that a missing device is refused", s.backend().id());
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
