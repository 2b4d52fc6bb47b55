//! What a device on a runtime older than IPC and VMM (a stand-in copied
//! without their entry points) still does, and what it refuses.

use hal_core::{AllocDesc, Error, EventFlags, ExportOptions, Memory};
use hal_core::{Vmm, VmmExt};

/// What an older runtime lacks: for each refusal, the entry point whose
/// absence explains it.
#[derive(Debug, Clone, Copy)]
pub struct Lacks<'a> {
    /// What an export of memory misses (`Capabilities::IPC_MEMORY`).
    pub export: &'a str,
    /// What a physical allocation misses (`Capabilities::VMM`).
    pub physical: &'a str,
    /// What an interprocess event misses (`Capabilities::IPC_EVENT`).
    pub event: &'a str,
}

/// The refusal `result` must be: [`Error::Unsupported`] naming the absent
/// `capability` and the entry point `lacks`.
fn refused<T>(what: &str, result: hal_core::Result<T>, capability: &str, lacks: &str) {
    match result {
        Err(e @ Error::Unsupported { .. }) => {
            let e = e.to_string();
            assert!(
                e.contains(&format!("Capabilities::{capability} is absent")),
                "{what}: {e}"
            );
            assert!(
                e.contains(&format!("no entry point {lacks}")),
                "{what}: {e}"
            );
        }
        Err(e) => panic!("{what}: {e}"),
        Ok(_) => panic!("{what} without the runtime's {capability}"),
    }
}

/// Device memory of `dev` is written and read; exporting it, allocating
/// physical memory and creating an interprocess event are
/// [`Error::Unsupported`], each naming its absent capability and the entry
/// point of `lacks` that explains it. Panics on a failure, as the cases do.
pub fn older_runtime_keeps_plain_memory<D: Vmm>(dev: &D, lacks: Lacks<'_>) {
    let a = dev
        .allocate(&AllocDesc::device(dev.info().ordinal, 4096))
        .expect("device memory on an older runtime");
    a.write(0, b"older").expect("write");
    let mut b = [0u8; 5];
    a.read(0, &mut b).expect("read");
    assert_eq!(&b, b"older");
    let export = dev.export_memory(&a, &ExportOptions::default());
    refused("an export", export, "IPC_MEMORY", lacks.export);
    let physical = dev.allocate_physical(2 << 20);
    refused("a physical allocation", physical, "VMM", lacks.physical);
    let event = dev.create_event(EventFlags {
        interprocess: true,
        timing: false,
    });
    refused("an interprocess event", event, "IPC_EVENT", lacks.event);
}
