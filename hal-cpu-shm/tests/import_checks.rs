//! What an import checks before it maps: the device, the named region's size
//! against the range the handle names, the bound on importer pids; and that
//! copies through a named import's descriptor start at its range.

mod common;

use common::*;
use hal_core::handle::wire::MAX_PIDS;
use hal_core::{
    ByteRange, Device, Error, ExportOptions, ImportOptions, Importers, Memory, SharedHandle,
};
use hal_cpu_shm::named::{META_PREFIX, SHM_DIR};
use hal_cpu_shm::{create_named, CpuDevice, NamedOptions};

/// Removes a region and its metadata whatever happens to the test.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = nix::sys::mman::shm_unlink(format!("/{}", self.0).as_str());
        let _ = std::fs::remove_file(format!("{SHM_DIR}/{META_PREFIX}{}", self.0));
    }
}

fn range(offset: u64, len: u64) -> ExportOptions {
    ExportOptions {
        range: Some(ByteRange::new(offset, len)),
        ..Default::default()
    }
}

#[test]
fn only_device_zero_imports() {
    let d = CpuDevice::new();
    let a = d.allocate(&hal_core::AllocDesc::host(4096)).unwrap();
    let ex = d.export_memory(&a, &ExportOptions::default()).unwrap();
    let on = |device| ImportOptions {
        device: Some(device),
        ..Default::default()
    };
    let e = d.import_memory(ex.share().unwrap(), &on(1)).unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e}");
    let m = d.import_memory(ex.share().unwrap(), &on(0)).unwrap();
    m.write(0, b"device 0").unwrap();
}

#[test]
fn a_named_import_fits_the_region_it_names() {
    let d = CpuDevice::new();
    let name = unique("fits");
    let _c = Cleanup(name.clone());
    let a = create_named(&name, 3 * 4096, &NamedOptions::default()).unwrap();
    // A part of the region imports.
    let ex = d.export_memory(&a, &range(0, 4096)).unwrap();
    let m = d
        .import_memory(SharedHandle::from(ex.handle().clone()), &Default::default())
        .unwrap();
    assert_eq!(m.len(), 4096);
    // A handle naming more than the region holds does not: its pages past
    // the end would fault on access.
    let whole = d.export_memory(&a, &ExportOptions::default()).unwrap();
    for (offset, size) in [(0, 4 * 4096), (4096, 3 * 4096)] {
        let mut h = whole.handle().clone();
        h.offset = offset;
        h.size = size;
        let e = d
            .import_memory(SharedHandle::from(h), &Default::default())
            .unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument { what } if what.contains(&name)),
            "{offset:#x}+{size:#x}: {e}"
        );
    }
    drop((m, ex, whole, a));
    assert!(shm_entries(&name).is_empty(), "{:?}", shm_entries(&name));
}

#[test]
fn copies_through_a_named_import_start_at_its_range() {
    let d = CpuDevice::new();
    let name = unique("copies");
    let _c = Cleanup(name.clone());
    let a = create_named(&name, 3 * 4096, &NamedOptions::default()).unwrap();
    let bytes = pattern(3 * 4096, 7);
    a.write(0, &bytes).unwrap();
    let ex = d.export_memory(&a, &range(4096, 2 * 4096)).unwrap();
    let m = d
        .import_memory(SharedHandle::from(ex.handle().clone()), &Default::default())
        .unwrap();
    for at in [0usize, 16, 4095, 4096 + 100] {
        let mut got = [0u8; 32];
        let n = got.len().min(2 * 4096 - at);
        m.read(at as u64, &mut got[..n]).unwrap();
        assert_eq!(&got[..n], &bytes[4096 + at..4096 + at + n], "at {at}");
    }
    drop((m, ex, a));
    assert!(shm_entries(&name).is_empty(), "{:?}", shm_entries(&name));
}

#[test]
fn importer_pids_up_to_the_bound() {
    let d = CpuDevice::new();
    let a = d.allocate(&hal_core::AllocDesc::host(4096)).unwrap();
    let pids = |n: u32| ExportOptions {
        importers: Importers::Pids((1..=n).collect()),
        ..Default::default()
    };
    let ex = d.export_memory(&a, &pids(MAX_PIDS as u32)).unwrap();
    assert_eq!(ex.handle().allowed_pids.len(), MAX_PIDS);
    let e = d.export_memory(&a, &pids(MAX_PIDS as u32 + 1)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
}
