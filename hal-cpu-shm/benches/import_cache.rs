//! The import cache: importing a handle this process already maps returns
//! the existing mapping. Run with `cargo bench -p hal-cpu-shm`.
//!
//! Exporter and importer are one process here (the exporter's broker serves
//! its own process too); the first import is made before timing and held, so
//! every timed import is a cache hit.

use divan::Bencher;
use hal_core::{AllocDesc, Device, ExportOptions, ImportOptions, SharedHandle};
use hal_cpu_shm::CpuDevice;

fn main() {
    divan::main();
}

/// A hit with the handle alone (decoded from text: no descriptors attached):
/// no system call at all.
#[divan::bench]
fn hit_handle_only(b: Bencher<'_, '_>) {
    let d = CpuDevice::new();
    let region = d.allocate(&AllocDesc::host(1 << 20)).expect("allocate");
    let exported = d
        .export_memory(&region, &ExportOptions::default())
        .expect("export");
    let handle = exported.handle().clone();
    let opts = ImportOptions::default();
    let held = d
        .import_memory(SharedHandle::from(handle.clone()), &opts)
        .expect("first import");
    b.with_inputs(|| SharedHandle::from(handle.clone()))
        .bench_local_values(|shared| d.import_memory(shared, &opts));
    drop(held);
}

/// A hit with the descriptors attached (a handle received on a socket):
/// the hit closes them, two `close` calls.
#[divan::bench]
fn hit_with_descriptors(b: Bencher<'_, '_>) {
    let d = CpuDevice::new();
    let region = d.allocate(&AllocDesc::host(1 << 20)).expect("allocate");
    let exported = d
        .export_memory(&region, &ExportOptions::default())
        .expect("export");
    let opts = ImportOptions::default();
    let held = d
        .import_memory(exported.share().expect("share"), &opts)
        .expect("first import");
    b.with_inputs(|| exported.share().expect("share"))
        .bench_local_values(|shared| d.import_memory(shared, &opts));
    drop(held);
}
