//! Read-only paths: a region opened read-only stays read-only through its
//! exports, allocations and imports say truthfully whether they are
//! read-only, and the refusals name the region they refuse.

mod common;

use common::*;
use hal_core::{Allocation, Device, Error, ExportOptions, HandleFlags, ImportOptions, Memory};
use hal_cpu_shm::named::{META_PREFIX, SHM_DIR};
use hal_cpu_shm::{create_named, open_named_read_only, CpuDevice, NamedOptions};

/// Removes a region and its metadata whatever happens to the test.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = nix::sys::mman::shm_unlink(format!("/{}", self.0).as_str());
        let _ = std::fs::remove_file(format!("{SHM_DIR}/{META_PREFIX}{}", self.0));
    }
}

fn reason(e: &Error) -> String {
    match e {
        Error::PermissionDenied { reason, .. } => reason.clone(),
        other => panic!("not PermissionDenied: {other}"),
    }
}

#[test]
fn a_region_opened_read_only_is_exported_read_only_only() {
    let d = CpuDevice::new();
    let name = unique("ro-open");
    let _c = Cleanup(name.clone());
    let owner = create_named(&name, 8192, &NamedOptions::default()).unwrap();
    assert!(!owner.is_read_only(), "a region created here is writable");
    owner.write(0, b"owner's").unwrap();

    let ro = open_named_read_only(&name, None).unwrap();
    assert!(ro.is_read_only());
    // A writable export would hand out what this process cannot do itself.
    let e = d.export_memory(&ro, &ExportOptions::default()).unwrap_err();
    let why = reason(&e);
    assert!(why.contains(&name) && why.contains("read-only"), "{why}");
    // Read-only is what it may export; its importers map read-only.
    let ex = d
        .export_memory(
            &ro,
            &ExportOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(ex.handle().flags.contains(HandleFlags::READ_ONLY));
    let m = d
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert!(m.is_read_only());
    let mut b = [0u8; 7];
    m.read(0, &mut b).unwrap();
    assert_eq!(&b, b"owner's");

    // Refused writes name the region: the allocation opened read-only and
    // the read-only import of it.
    let why = reason(&ro.write(0, b"x").unwrap_err());
    assert!(why.contains(&name), "{why}");
    let why = reason(&m.write(0, b"x").unwrap_err());
    assert!(why.contains(&name) && why.contains("imported"), "{why}");
    // So does the refusal to count the importers of a region opened by name.
    let e = ro.importers().unwrap_err();
    assert!(e.is_unsupported() && e.to_string().contains(&name), "{e}");
    drop((m, ex, ro, owner));
    assert!(shm_entries(&name).is_empty(), "{:?}", shm_entries(&name));
}

#[test]
fn writable_allocations_and_imports_say_so() {
    let d = CpuDevice::new();
    let a = d.allocate(&hal_core::AllocDesc::host(4096)).unwrap();
    assert!(!a.is_read_only());
    let ex = d.export_memory(&a, &ExportOptions::default()).unwrap();
    let m = d
        .import_memory(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert!(!m.is_read_only());
    m.write(0, b"w").unwrap();

    // A read-only import of an anonymous region says what it is.
    let b = d.allocate(&hal_core::AllocDesc::host(4096)).unwrap();
    let ro = d
        .export_memory(
            &b,
            &ExportOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .unwrap();
    let m = d
        .import_memory(ro.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let why = reason(&m.write(0, b"x").unwrap_err());
    assert!(why.contains("imported region"), "{why}");
}
