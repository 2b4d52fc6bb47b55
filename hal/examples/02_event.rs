//! 02: an event across two processes, with the static API.
//!
//! ```text
//! cargo run -p hal-ipc --example 02_event
//! ```
//!
//! An event marks a point in a stream: it completes when the work queued
//! before it has run. The producer shares a buffer and an IPC event (created
//! with [`EventFlags::interprocess`]) with a consumer (this program again,
//! with `--consumer`). Each round it writes the buffer, records the event on
//! its stream and tells the consumer through a pipe; the consumer makes its
//! own stream wait for the event, waits for it from the host too, and only
//! then reads and checks the buffer.
//!
//! This example names its backend at compile time (`hal::cpu_shm::CpuShm`)
//! and calls the traits of `hal::device` directly: no dynamic dispatch. The
//! two sides are generic over [`Device`], so the same code serves any backend
//! type; `01_share_buffer` shows the run-time choice instead.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use hal::cpu_shm::CpuShm;
use hal::{AllocDesc, Backend, Device, Event, EventFlags, Memory, WaitOptions};
use hal::{ExportOptions, ImportOptions, Importers, SharedHandle};

const SIZE: u64 = 64 << 10;
const ROUNDS: u8 = 5;
const TIMEOUT: Duration = Duration::from_secs(10);

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> ExitCode {
    let device = match CpuShm::new().open(0) {
        Ok(device) => device,
        Err(e) => {
            eprintln!("02_event: {e}");
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
            eprintln!("02_event ({}): {e}", std::process::id());
            ExitCode::FAILURE
        }
    }
}

/// The byte at offset `i` in round `round`.
fn pattern(round: u8, i: u64) -> u8 {
    (i as u8).wrapping_mul(7).wrapping_add(round)
}

fn producer<D: Device>(device: &D) -> Res<()> {
    let buffer = device.allocate(&AllocDesc::host(SIZE))?;
    let event = device.create_event(EventFlags {
        interprocess: true,
        timing: false,
    })?;
    let stream = device.create_stream()?;

    let mut child = Command::new(std::env::current_exe()?)
        .arg("--consumer")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let only_child = ExportOptions {
        importers: Importers::Pids(vec![child.id()]),
        ..Default::default()
    };
    let buffer_export = device.export_memory(&buffer, &only_child)?;
    let event_export = device.export_event(&event, &only_child)?;

    let mut to_child = child.stdin.take().ok_or("the consumer has no stdin")?;
    let mut from_child =
        BufReader::new(child.stdout.take().ok_or("the consumer has no stdout")?).lines();
    writeln!(to_child, "{}", buffer_export.to_text())?;
    writeln!(to_child, "{}", event_export.to_text())?;

    for round in 1..=ROUNDS {
        let data: Vec<u8> = (0..SIZE).map(|i| pattern(round, i)).collect();
        buffer.write(0, &data)?;
        // The event completes once everything queued on `stream` before it
        // (here: the write above) has run.
        device.record_event(&stream, &event)?;
        writeln!(to_child, "{round}")?;
        let reply = from_child
            .next()
            .ok_or("the consumer stopped answering")??;
        if reply != format!("ok {round}") {
            return Err(format!("round {round}: the consumer answered {reply:?}").into());
        }
        println!("producer: round {round} verified by the consumer");
    }
    drop(to_child);
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("the consumer failed: {status}").into());
    }
    println!("producer: {ROUNDS} rounds ordered by the event and verified");
    Ok(())
}

fn consumer<D: Device>(device: &D) -> Res<()> {
    let mut lines = std::io::stdin().lock().lines();
    let mut next = || -> Res<String> { Ok(lines.next().ok_or("the producer closed the pipe")??) };
    let buffer_handle = hal::exchange::decode(&next()?)?;
    let event_handle = hal::exchange::decode(&next()?)?;
    let opts = ImportOptions::default();
    let buffer = device.import_memory(SharedHandle::from(buffer_handle), &opts)?;
    let event = device.import_event(SharedHandle::from(event_handle), &opts)?;
    let stream = device.create_stream()?;

    let mut out = std::io::stdout().lock();
    for round in 1..=ROUNDS {
        let told: u8 = next()?.trim().parse()?;
        if told != round {
            return Err(format!("expected round {round}, the producer said {told}").into());
        }
        // Order this process's stream after the producer's work, and wait
        // for it from the host as well.
        device.stream_wait_event(&stream, &event)?;
        device.synchronize(&stream, Some(TIMEOUT))?;
        event.wait(WaitOptions::timeout(TIMEOUT))?;
        let mut data = vec![0u8; buffer.len() as usize];
        buffer.read(0, &mut data)?;
        if let Some(bad) = (0..).zip(&data).position(|(i, &b)| b != pattern(round, i)) {
            return Err(format!("round {round}: byte {bad} is not what was written").into());
        }
        writeln!(out, "ok {round}")?;
        out.flush()?;
    }
    Ok(())
}
