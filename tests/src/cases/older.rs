//! What a device on a runtime older than IPC and VMM (a stand-in copied
//! without their entry points) still does, and what it refuses.

use hal_core::{AllocDesc, Device, Error, ExportOptions, Memory};

/// Device memory of `dev` is written and read; exporting it and allocating
/// physical memory are [`Error::Unsupported`], the latter naming the
/// missing `Capabilities::VMM`. Panics on a failure, as the cases do.
pub fn older_runtime_keeps_plain_memory<D: Device>(dev: &D) {
    let a = dev
        .allocate(&AllocDesc::device(dev.info().ordinal, 4096))
        .expect("device memory on an older runtime");
    a.write(0, b"older").expect("write");
    let mut b = [0u8; 5];
    a.read(0, &mut b).expect("read");
    assert_eq!(&b, b"older");
    match dev.export_memory(&a, &ExportOptions::default()) {
        Err(Error::Unsupported { .. }) => {}
        Err(e) => panic!("an export: {e}"),
        Ok(_) => panic!("an export without the runtime's IPC"),
    }
    match dev.allocate_physical(2 << 20) {
        Err(e @ Error::Unsupported { .. }) => {
            assert!(e.to_string().contains("Capabilities::VMM"), "{e}")
        }
        Err(e) => panic!("a physical allocation: {e}"),
        Ok(_) => panic!("a physical allocation without VMM"),
    }
}
