//! 05: a shared buffer that grows after it was exported.
//!
//! ```text
//! cargo run -p hal-ipc --example 05_growable
//! ```
//!
//! When the final size of shared data is unknown (a join's result, a log), a
//! [`GrowableBuffer`] reserves address space for the largest size up front
//! and maps physical chunks as the data grows, with the device's VMM
//! operations. A small shared header publishes the chunks; an importer's
//! [`GrowableView`] maps the new ones when it calls `refresh`.
//!
//! The producer creates the buffer, sends its handle to a consumer (this
//! program again, with `--consumer`), then grows it chunk by chunk, filling
//! each new chunk and telling the consumer the new length through a pipe.
//! The consumer refreshes its view, checks the new chunk and answers. Static
//! API on `hal::cpu_shm`; the buffer is generic over any device with
//! [`Capabilities::VMM`](hal::Capabilities::VMM).

use hal::Vmm;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};

use hal::cpu_shm::CpuShm;
use hal::growable::{GrowableBuffer, GrowableView};
use hal::{Backend, ExportOptions, Granularity, ImportOptions, Importers, SharedHandle};

const CHUNKS: u64 = 4;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> ExitCode {
    let device = match CpuShm::new().open(0) {
        Ok(device) => device,
        Err(e) => {
            eprintln!("05_growable: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match std::env::args().nth(1).as_deref() {
        Some("--consumer") => consumer(&device),
        _ => producer(&device),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("05_growable ({}): {e}", std::process::id());
            ExitCode::FAILURE
        }
    }
}

/// The byte at offset `i`.
fn pattern(i: u64) -> u8 {
    (i / 4096 + i % 7) as u8
}

fn producer<D: Vmm>(device: &D) -> Res<()> {
    let chunk = device.granularity(Granularity::Minimum)?.max(64 << 10);
    let mut child = Command::new(std::env::current_exe()?)
        .arg("--consumer")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut buffer = GrowableBuffer::create(
        device,
        16 * CHUNKS * chunk,
        chunk,
        ExportOptions {
            importers: Importers::Pids(vec![child.id()]),
            ..Default::default()
        },
    )?;
    println!(
        "producer: reserved {} bytes, growing in chunks of {chunk}",
        buffer.capacity()
    );

    let mut to_child = child.stdin.take().ok_or("the consumer has no stdin")?;
    let mut from_child =
        BufReader::new(child.stdout.take().ok_or("the consumer has no stdout")?).lines();
    writeln!(to_child, "{}", buffer.handle().to_text())?;

    for n in 1..=CHUNKS {
        let old = buffer.len();
        buffer.grow_to(n * chunk)?;
        let fresh: Vec<u8> = (old..buffer.len()).map(pattern).collect();
        buffer.write(old, &fresh)?;
        writeln!(to_child, "{}", buffer.len())?;
        let reply = from_child
            .next()
            .ok_or("the consumer stopped answering")??;
        if reply != format!("ok {}", buffer.len()) {
            return Err(format!("the consumer answered {reply:?}").into());
        }
        println!(
            "producer: grew to {} bytes; the consumer followed",
            buffer.len()
        );
    }
    drop(to_child);
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("the consumer failed: {status}").into());
    }
    println!("producer: {CHUNKS} growth steps verified across processes");
    Ok(())
}

fn consumer<D: Vmm>(device: &D) -> Res<()> {
    let mut lines = std::io::stdin().lock().lines();
    let first = lines.next().ok_or("the producer sent no handle")??;
    let handle = hal::exchange::decode(&first)?;
    let mut view = GrowableView::open(
        device,
        SharedHandle::from(handle),
        &ImportOptions::default(),
    )?;
    let mut checked = view.len();
    let mut out = std::io::stdout().lock();
    for line in lines {
        let told: u64 = line?.trim().parse()?;
        let len = view.refresh()?;
        if len < told {
            return Err(format!("told {told} bytes, the view maps only {len}").into());
        }
        let mut data = vec![0u8; (len - checked) as usize];
        view.read(checked, &mut data)?;
        if let Some(bad) = (checked..).zip(&data).position(|(i, &b)| b != pattern(i)) {
            return Err(format!("byte {} is not what was written", checked + bad as u64).into());
        }
        checked = len;
        writeln!(out, "ok {len}")?;
        out.flush()?;
    }
    Ok(())
}
