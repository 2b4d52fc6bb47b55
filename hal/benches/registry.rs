//! The backend registry: creating it, probing and opening backends. Run with
//! `cargo bench -p hal-ipc`.

use divan::{black_box, Bencher};
use hal::Registry;

fn main() {
    divan::main();
}

/// A registry: nothing is probed yet.
#[divan::bench]
fn new() -> Registry {
    Registry::new()
}

/// Open `cpu-shm` on a fresh registry: construct and probe it, then open.
#[divan::bench]
fn open_cold(b: Bencher<'_, '_>) {
    b.with_inputs(Registry::new)
        .bench_local_values(|r| r.open(black_box("cpu-shm")).map(|_| r));
}

/// Open `cpu-shm` again on a registry that has probed it.
#[divan::bench]
fn open_warm(b: Bencher<'_, '_>) {
    let r = Registry::new();
    let _ = r.open("cpu-shm");
    b.bench_local(|| r.open(black_box("cpu-shm")));
}

/// List every backend compiled in with its availability (probes them all
/// on a fresh registry).
#[divan::bench]
fn entries_cold(b: Bencher<'_, '_>) {
    b.with_inputs(Registry::new)
        .bench_local_values(|r| r.entries());
}

/// The best usable backend, on a registry that has probed them.
#[divan::bench]
fn best_warm(b: Bencher<'_, '_>) {
    let r = Registry::new();
    let _ = r.entries();
    b.bench_local(|| r.best());
}
