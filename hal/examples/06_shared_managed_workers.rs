//! 06: PostgreSQL-style workers sharing one managed buffer with their GPUs.
//!
//! ```text
//! cargo run -p hal-ipc --features cuda-uvm --example 06_shared_managed_workers [-- mock|cuda-uvm] [WORKERS]
//! ```
//!
//! A coordinator creates a shared managed buffer (`hal-cuda-uvm`: memfd
//! pages registered with the GPU in every process) and starts `WORKERS`
//! worker processes (default 4), this program again. Each worker imports
//! the buffer from its handle text, works on its slice on the GPU through
//! the contract's stream operations (a memset and a copy into device
//! memory, a copy from device memory into its slice), and then appends a
//! result whose size only it knows to a result buffer that grows when the
//! worker asks: a growable buffer over the GPU's VMM where the GPU has it,
//! else one shared managed segment per append. The coordinator verifies
//! every byte of the slices and of the results.
//!
//! `cuda-uvm` (the default) runs on the NVIDIA driver, or on the stand-in
//! driver with `HAL_CUDA_LIBRARY=target/debug/deps/libhal_mock_libcuda.so`;
//! `mock` runs over the simulator's CUDA-like devices (with VMM).

use hal::DeviceExt;
use hal::Vmm;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};

use hal::cuda_uvm::{GpuDevice, UvmBackend, UvmDevice};
use hal::growable::{GrowableBuffer, GrowableView};
use hal::{
    AllocDesc, Backend, Capabilities, Device, ExportOptions, Granularity, Handle, ImportOptions,
    MemRef, Memory, SharedHandle,
};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const SLICE: u64 = 64 << 10;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let worker = args.first().is_some_and(|a| a == "--worker");
    let rest = if worker { &args[1..] } else { &args[..] };
    let backend = rest.first().map_or("cuda-uvm", String::as_str).to_owned();
    let workers: u64 = rest.get(1).and_then(|n| n.parse().ok()).unwrap_or(4);
    let result = match backend.as_str() {
        "mock" => run(
            UvmBackend::over(hal::mock::MockBackend::cuda()),
            &backend,
            worker,
            workers,
        ),
        "cuda-uvm" => run(UvmBackend::new(), &backend, worker, workers),
        other => Err(format!("unknown backend {other:?}: mock or cuda-uvm").into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("06_shared_managed_workers ({}): {e}", std::process::id());
            ExitCode::FAILURE
        }
    }
}

fn run<B, G>(backend: B, name: &str, worker: bool, workers: u64) -> Res<()>
where
    B: Backend<Device = UvmDevice<G>>,
    G: GpuDevice,
{
    let device = backend.open(0)?;
    if worker {
        return work(&device);
    }
    coordinate(&device, name, workers)
}

/// Worker `id`'s slice byte at `i`, and its result (of a size only it knows).
fn slice_byte(id: u64, i: u64) -> u8 {
    (id as u8).wrapping_mul(31) ^ (i % 251) as u8
}
fn result_len(id: u64) -> u64 {
    1000 * (id + 1) + 17
}
fn result_byte(id: u64, i: u64) -> u8 {
    (id as u8).wrapping_add(7) ^ (i % 13) as u8
}

/// Where appended results go.
enum Results<'d, D: Vmm> {
    Growable(Box<GrowableBuffer<'d, D>>),
    Segments(Vec<(D::Allocation, hal::Exported)>),
}

fn coordinate<G: GpuDevice>(device: &UvmDevice<G>, name: &str, workers: u64) -> Res<()> {
    let shared = device.allocate(&AllocDesc::managed(workers * SLICE))?;
    let exported = device.export_memory(&shared, &ExportOptions::default())?;
    let mut results = if device.capabilities().contains(Capabilities::GROWABLE) {
        let chunk = device.granularity(Granularity::Minimum)?;
        Results::Growable(Box::new(GrowableBuffer::create(
            device,
            chunk * 16,
            chunk,
            ExportOptions::default(),
        )?))
    } else {
        println!("coordinator: no VMM on this GPU backend: results are appended as segments");
        Results::Segments(Vec::new())
    };
    let growable = match &results {
        Results::Growable(g) => g.handle().to_text(),
        Results::Segments(_) => "none".into(),
    };
    let mut children: Vec<(
        Child,
        ChildStdin,
        std::io::Lines<BufReader<std::process::ChildStdout>>,
    )> = Vec::new();
    for id in 0..workers {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["--worker", name])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut to = child.stdin.take().ok_or("no stdin")?;
        let from = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        writeln!(to, "{}\n{id}\n{growable}", exported.to_text())?;
        children.push((child, to, from));
    }
    let mut appended = Vec::new();
    let mut end = 0u64;
    for (id, (_, to, from)) in children.iter_mut().enumerate() {
        let id = id as u64;
        let line = from.next().ok_or("a worker stopped")??;
        let len: u64 = line
            .strip_prefix("need ")
            .ok_or_else(|| format!("worker {id} said {line:?}"))?
            .parse()?;
        match &mut results {
            Results::Growable(g) => {
                let chunk = g.chunk_size();
                g.grow_to((end + len).div_ceil(chunk) * chunk)?;
                writeln!(to, "at {end}")?;
            }
            Results::Segments(segments) => {
                let page = device.info().page_size();
                let seg = device.allocate(&AllocDesc::managed(len.div_ceil(page) * page))?;
                let ex = device.export_memory(&seg, &ExportOptions::default())?;
                writeln!(to, "into {}", ex.to_text())?;
                segments.push((seg, ex));
            }
        }
        let done = from.next().ok_or("a worker stopped")??;
        if done != "done" {
            return Err(format!("worker {id} said {done:?}").into());
        }
        appended.push((id, end, len));
        end += len;
    }
    for (mut child, to, _) in children {
        drop(to);
        let status = child.wait()?;
        if !status.success() {
            return Err(format!("a worker failed: {status}").into());
        }
    }
    // Every byte of every slice, and of every result.
    let mut all = vec![0u8; (workers * SLICE) as usize];
    shared.read(0, &mut all)?;
    for id in 0..workers {
        let at = (id * SLICE) as usize;
        if let Some(bad) = (0..SLICE).position(|i| all[at + i as usize] != slice_byte(id, i)) {
            return Err(format!("worker {id}'s slice differs at byte {bad}").into());
        }
    }
    for (n, &(id, at, len)) in appended.iter().enumerate() {
        let mut got = vec![0u8; len as usize];
        match &results {
            Results::Growable(g) => g.read(at, &mut got)?,
            Results::Segments(s) => s[n].0.read(0, &mut got)?,
        }
        if let Some(bad) = (0..len).position(|i| got[i as usize] != result_byte(id, i)) {
            return Err(format!("worker {id}'s result differs at byte {bad}").into());
        }
    }
    println!(
        "coordinator: {workers} workers on {name} ({}); {} slice bytes and {end} result bytes \
         verified",
        device.info().name,
        workers * SLICE
    );
    Ok(())
}

fn work<G: GpuDevice>(device: &UvmDevice<G>) -> Res<()> {
    let mut lines = std::io::stdin().lock().lines();
    let mut next = || -> Res<String> { Ok(lines.next().ok_or("the coordinator stopped")??) };
    let buffer = device.import_memory(
        SharedHandle::from(Handle::from_text(&next()?)?),
        &ImportOptions::default(),
    )?;
    let id: u64 = next()?.parse()?;
    let growable = next()?;
    // On the GPU: this worker's bytes into device memory, then into its slice.
    let ordinal = device.info().ordinal;
    let scratch = device.allocate(&AllocDesc::device(ordinal, SLICE))?;
    let stream = device.create_stream()?;
    device.memset_async(&stream, MemRef::Allocation(&scratch), 0, SLICE, 0)?;
    let bytes: Vec<u8> = (0..SLICE).map(|i| slice_byte(id, i)).collect();
    device.write_async(&stream, MemRef::Allocation(&scratch), 0, bytes)?;
    device.copy_async(
        &stream,
        MemRef::Mapping(&buffer),
        id * SLICE,
        MemRef::Allocation(&scratch),
        0,
        SLICE,
    )?;
    device.synchronize(&stream, None)?;
    // A result whose size nobody knew in advance.
    let len = result_len(id);
    let result: Vec<u8> = (0..len).map(|i| result_byte(id, i)).collect();
    let mut out = std::io::stdout().lock();
    writeln!(out, "need {len}")?;
    out.flush()?;
    let answer = next()?;
    if let Some(at) = answer.strip_prefix("at ") {
        let mut view = GrowableView::open(
            device,
            SharedHandle::from(Handle::from_text(&growable)?),
            &ImportOptions::default(),
        )?;
        view.refresh()?;
        view.write(at.parse()?, &result)?;
    } else if let Some(text) = answer.strip_prefix("into ") {
        let seg = device.import_memory(
            SharedHandle::from(Handle::from_text(text)?),
            &ImportOptions::default(),
        )?;
        seg.write(0, &result)?;
    } else {
        return Err(format!("the coordinator said {answer:?}").into());
    }
    writeln!(out, "done")?;
    out.flush()?;
    Ok(())
}
