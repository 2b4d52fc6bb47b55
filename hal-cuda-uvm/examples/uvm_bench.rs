//! What shared managed buffers cost on this machine's GPU, each figure
//! beside its raw baseline measured in the same run.
//!
//! ```text
//! cargo run --release -p hal-cuda-uvm --example uvm_bench [-- SIZE_MIB]
//! ```
//!
//! - **register**: a buffer's first registration in a process against a raw
//!   `register_host` of a fresh memfd mapping of the same size;
//! - **open cached**: a second import of a registered buffer in a process
//!   (the import and registration caches), median of 1000;
//! - **GPU reads home pages**: a copy from the buffer's registered pages into
//!   device memory against the same copy from pinned `cuMemAllocHost`
//!   memory (the GPU backend's own host allocation), medians of 5.
//!
//! On the driver `hal-cuda` finds (`HAL_CUDA_LIBRARY` names another, such
//! as the stand-in; its figures mean nothing). Without a driver it says so
//! and exits 0. One process: the attach of a second process and residency
//! (which needs VMM) are not measured here.

use std::time::{Duration, Instant};

use hal_core::{
    AllocDesc, Backend, Device, ExportOptions, ImportOptions, MemRef, Memory, SharedHandle,
};
use hal_cuda_uvm::UvmBackend;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> Res<()> {
    let mib: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(256);
    let size = mib << 20;
    let backend = UvmBackend::new();
    if let hal_core::Availability::Unavailable { reason, .. } = backend.availability() {
        println!("uvm_bench: no GPU here ({reason})");
        return Ok(());
    }
    let dev = backend.open(0)?;
    println!("uvm_bench on {}: {mib} MiB", dev.info().name);

    // Registration: the backend's first open against a raw registration.
    let t = Instant::now();
    let buffer = dev.allocate(&AllocDesc::managed(size))?;
    let first = t.elapsed();
    let raw_pages = hal_core::kit::export::SealedMemfd::create("uvm-bench", size)?;
    let t = Instant::now();
    // SAFETY: `raw_pages` stays mapped until after the registration drops.
    let raw = unsafe { dev.gpu().register_host(raw_pages.map().as_ptr(), size) }?;
    let raw_time = t.elapsed();
    drop(raw);
    drop(raw_pages);
    println!(
        "register      {:>10.2?}  raw register_host {:>10.2?}  ratio {:.2}",
        first,
        raw_time,
        first.as_secs_f64() / raw_time.as_secs_f64()
    );

    // A second open of a registered region: a lookup.
    let exported = dev.export_memory(&buffer, &ExportOptions::default())?;
    let held = dev.import_memory(exported.share()?, &ImportOptions::default())?;
    let text = exported.to_text();
    let mut opens = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let shared = SharedHandle::from(hal_core::Handle::from_text(&text)?);
        let t = Instant::now();
        let again = dev.import_memory(shared, &ImportOptions::default())?;
        opens.push(t.elapsed());
        drop(again);
    }
    println!(
        "open cached   {:>10.2?}  (median of 1000, handle decoded beforehand; target <= 1 us)",
        median(opens)
    );
    drop(held);

    // The GPU reading the home pages against reading pinned memory.
    let ordinal = dev.info().ordinal;
    let device = dev.allocate(&AllocDesc::device(ordinal, size))?;
    let pinned = dev.gpu().allocate(&AllocDesc::host(size))?;
    let inner = dev.gpu().allocate(&AllocDesc::device(ordinal, size))?;
    let stream = dev.create_stream()?;
    let gpu_stream = dev.gpu().create_stream()?;
    let (mut home, mut base) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let t = Instant::now();
        dev.copy_async(
            &stream,
            MemRef::Allocation(&device),
            0,
            MemRef::Allocation(&buffer),
            0,
            size,
        )?;
        dev.synchronize(&stream, None)?;
        home.push(t.elapsed());
        let t = Instant::now();
        dev.gpu().copy_async(
            &gpu_stream,
            MemRef::Allocation(&inner),
            0,
            MemRef::Allocation(&pinned),
            0,
            size,
        )?;
        dev.gpu().synchronize(&gpu_stream, None)?;
        base.push(t.elapsed());
    }
    let gbs = |d: Duration| size as f64 / d.as_secs_f64() / 1e9;
    let (h, b) = (median(home), median(base));
    println!(
        "GPU reads home pages {:>7.2} GB/s  pinned cuMemAllocHost {:>7.2} GB/s  ratio {:.2} (target >= 0.95)",
        gbs(h),
        gbs(b),
        b.as_secs_f64() / h.as_secs_f64()
    );
    let _ = buffer.len();
    Ok(())
}
