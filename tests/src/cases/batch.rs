//! Importing many memory handles at once (`Device::import_memory_batch`).

use hal_core::DeviceExt;
use hal_core::{
    Backend, Capabilities as C, Device, ExportOptions, ImportOptions, Importers, Memory,
    SharedHandle,
};

use super::memory::ipc_memory_or_unsupported;
use super::util::decode;
use crate::process::{self, report};
use crate::support::{
    alloc_filled, assert_bytes, must, must_be_denied, open_export, pattern, Suite,
};

/// The child role that imports a batch with a handle it may not import.
pub(crate) const BATCH_ROLE: &str = "import-batch";

/// `import_memory_batch` gives one result per handle, in order, each as
/// `import_memory` would: in the exporting process every handle imports;
/// in a real child, a handle whose allow-list leaves the child out is
/// refused with PermissionDenied while the handles around it are imported
/// (the batch is not all-or-nothing), and the same handle twice maps the
/// same bytes. Without PID_ALLOW_LIST every handle imports in the child.
pub fn memory_import_batch<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let a = alloc_filled(&dev, 1, 60);
    if !ipc_memory_or_unsupported(&dev, &a) {
        return;
    }
    let b = alloc_filled(&dev, 1, 61);
    let c = alloc_filled(&dev, 2, 62);
    let open = open_export(caps);
    let ex_a = must(dev.export_memory(&a, &open), "export a");
    let ex_c = must(dev.export_memory(&c, &open), "export c");
    let denied = caps.contains(C::PID_ALLOW_LIST);
    let to_me = if denied {
        ExportOptions {
            importers: Importers::Pids(vec![must(dev.process_id(), "process_id()")]),
            ..ExportOptions::default()
        }
    } else {
        open.clone()
    };
    let ex_b = must(dev.export_memory(&b, &to_me), "export b");
    // In the exporting process: every handle imports, from its text.
    let texts = [ex_a.to_text(), ex_b.to_text(), ex_c.to_text()];
    let shared: Vec<SharedHandle> = texts
        .iter()
        .map(|t| SharedHandle::from(decode(t)))
        .collect();
    let got = dev.import_memory_batch(shared, &ImportOptions::default());
    assert_eq!(got.len(), 3, "one result per handle");
    for (r, (seed, what)) in got.into_iter().zip([(60, "a"), (61, "b"), (62, "c")]) {
        let m = must(r, &format!("the exporter's batch import of {what}"));
        assert_bytes(&m, 0, &pattern(seed, 64), &format!("bytes of {what}"));
    }
    assert!(
        dev.import_memory_batch(Vec::new(), &ImportOptions::default())
            .is_empty(),
        "an empty batch gives no results"
    );
    let args: Vec<(&str, String)> = vec![
        ("a", texts[0].clone()),
        ("b", texts[1].clone()),
        ("c", texts[2].clone()),
        ("denied", u8::from(denied).to_string()),
    ];
    let mut child = s.spawn(BATCH_ROLE, &args);
    child.expect("done");
    child.finish();
    drop((ex_a, ex_b, ex_c));
}

/// Child role for [`memory_import_batch`].
pub(crate) fn child_import_batch<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let denied = process::arg("denied") == "1";
    let keys = ["a", "b", "c", "a"];
    let shared: Vec<SharedHandle> = keys
        .iter()
        .map(|k| SharedHandle::from(decode(&process::arg(k))))
        .collect();
    let mut got = dev
        .import_memory_batch(shared, &ImportOptions::default())
        .into_iter();
    let mut next = || got.next().expect("one result per handle");
    let a = must(next(), "the batch import of a");
    assert_bytes(&a, 0, &pattern(60, 64), "bytes of a");
    let b = next();
    if denied {
        must_be_denied(
            b.map(drop),
            "a handle of the batch whose allow-list leaves this process out",
        );
    } else {
        let b = must(b, "the batch import of b");
        assert_bytes(&b, 0, &pattern(61, 64), "bytes of b");
    }
    let c = must(next(), "the batch import of c, after a refused handle");
    assert_bytes(&c, 0, &pattern(62, 64), "bytes of c");
    let again = must(next(), "the batch import of a, twice");
    assert_bytes(&again, 0, &pattern(60, 64), "bytes of a, imported twice");
    assert_eq!(again.len(), a.len());
    report("done", "");
}
