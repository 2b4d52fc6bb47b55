//! 01: share a buffer between two processes, choosing the backend at run time.
//!
//! ```text
//! cargo run -p hal-ipc --example 01_share_buffer                 # the best backend here
//! cargo run -p hal-ipc --example 01_share_buffer -- cpu-shm
//! cargo run -p hal-ipc --features mock --example 01_share_buffer -- mock-ascend
//! ```
//!
//! The producer allocates 2 MiB, fills it with a pattern and starts a
//! consumer: this program again, with `--consumer`. It exports the buffer (to
//! the consumer's pid alone where the backend keeps allow-lists) and sends the
//! handle's text down the consumer's stdin; the text is all the consumer
//! needs, the descriptors come from the producer's broker. The consumer finds
//! the backend from the handle, imports, checks every byte, writes an answer
//! into the buffer and exits. The producer checks the answer, waits until the
//! consumer's lease is gone, and exits 0 only if everything verified.
//!
//! This example speaks the dynamic API ([`hal::Registry`] and
//! [`hal::dynamic`]); `02_event` shows the static one.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use hal::{AllocDesc, Capabilities, DeviceInfo, ExportOptions, ImportOptions, Importers};
use hal::{Registry, SharedHandle};

const SIZE: u64 = 2 << 20;
const ANSWER: &[u8] = b"verified by the consumer";

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> ExitCode {
    let arg = std::env::args().nth(1);
    let result = match arg.as_deref() {
        Some("--consumer") => consumer(),
        name => producer(name),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("01_share_buffer ({}): {e}", std::process::id());
            ExitCode::FAILURE
        }
    }
}

/// The byte at offset `i`.
fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(31).wrapping_add(7) % 251) as u8
}

/// Host memory where the device is host-visible, device memory otherwise.
fn alloc_desc(info: &DeviceInfo, size: u64) -> AllocDesc {
    if info.capabilities.contains(Capabilities::MEMORY_IS_HOST) {
        AllocDesc::host(size)
    } else {
        AllocDesc::device(info.ordinal, size)
    }
}

fn producer(backend: Option<&str>) -> Res<()> {
    let registry = Registry::new();
    let backend = match backend {
        Some(name) => registry.open(name)?,
        None => registry.best()?,
    };
    let device = backend.open(0)?;
    println!(
        "producer {}: backend {}, device {} ({})",
        std::process::id(),
        backend.name(),
        device.info().ordinal,
        device.info().name
    );

    let buffer = device.allocate(&alloc_desc(device.info(), SIZE))?;
    let data: Vec<u8> = (0..SIZE).map(pattern).collect();
    buffer.write(0, &data)?;

    let mut child = Command::new(std::env::current_exe()?)
        .arg("--consumer")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let importers = if device.capabilities().contains(Capabilities::PID_ALLOW_LIST) {
        Importers::Pids(vec![child.id()])
    } else {
        Importers::BackendDefault
    };
    let exported = device.export_memory(
        &*buffer,
        &ExportOptions {
            importers,
            ..Default::default()
        },
    )?;
    println!("producer: exported {SIZE} bytes as {}", exported.to_text());

    let mut stdin = child.stdin.take().ok_or("the consumer has no stdin")?;
    writeln!(stdin, "{}", exported.to_text())?;
    drop(stdin);
    let stdout = child.stdout.take().ok_or("the consumer has no stdout")?;
    for line in BufReader::new(stdout).lines() {
        println!("  {}", line?);
    }
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("the consumer failed: {status}").into());
    }

    let mut answer = vec![0u8; ANSWER.len()];
    buffer.read(0, &mut answer)?;
    if answer != ANSWER {
        return Err("the consumer's answer is not in the buffer".into());
    }
    // The consumer has exited, so its lease is gone; an exporter that frees
    // while importers may still map the memory waits like this first.
    buffer.wait_unleased(Some(Duration::from_secs(10)))?;
    println!("producer: the consumer verified the data and answered; no importer left");
    Ok(())
}

fn consumer() -> Res<()> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let handle = hal::exchange::decode(&line)?;

    let registry = Registry::new();
    let backend = registry.for_handle(&handle)?;
    let device = backend.open(handle.device)?;
    let mapping = device.import_memory(SharedHandle::from(handle), &ImportOptions::default())?;

    let mut data = vec![0u8; mapping.len() as usize];
    mapping.read(0, &mut data)?;
    if let Some(bad) = (0..).zip(&data).position(|(i, &b)| b != pattern(i)) {
        return Err(format!("byte {bad} differs from what the producer wrote").into());
    }
    mapping.write(0, ANSWER)?;
    println!(
        "consumer {}: imported {} bytes from backend {}, every byte verified",
        std::process::id(),
        data.len(),
        backend.name()
    );
    Ok(())
}
