//! 03: ping-pong a notify between two processes.
//!
//! ```text
//! cargo run -p hal-ipc --example 03_notify                  # the best backend here
//! cargo run -p hal-ipc --features mock --example 03_notify -- mock-ascend
//! ```
//!
//! A notify is a wake-up signal: one side records (signals) it, the other
//! waits for it and resets it. Some backends (Ascend) let only the creator of
//! a notify wait on it, so each side creates the notify it waits on and
//! exports it to the other, which only signals:
//!
//! - the producer creates `ping`, exports it to the consumer (this program
//!   again, with `--consumer`) and sends its handle down the consumer's stdin;
//! - the consumer imports `ping`, creates `pong`, and prints `pong`'s handle;
//! - each round the producer records `pong` on a stream and waits for `ping`;
//!   the consumer waits for `pong` and signals `ping` from the host.
//!
//! The producer prints the round-trip percentiles and exits 0 only if every
//! round completed and the consumer succeeded. Dynamic API, like `01`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use hal::dynamic::DynDevice;
use hal::WaitOptions;
use hal::{Capabilities, ExportOptions, ImportOptions, Importers, Registry, SharedHandle};

const ROUNDS: usize = 1000;
const TIMEOUT: Duration = Duration::from_secs(10);

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
            eprintln!("03_notify ({}): {e}", std::process::id());
            ExitCode::FAILURE
        }
    }
}

/// Export options that let only `pid` import, where the backend keeps allow-lists.
fn only(device: &dyn DynDevice, pid: u32) -> ExportOptions {
    let importers = if device.capabilities().contains(Capabilities::PID_ALLOW_LIST) {
        Importers::Pids(vec![pid])
    } else {
        Importers::BackendDefault
    };
    ExportOptions {
        importers,
        ..Default::default()
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
        "producer {}: backend {}, device {}",
        std::process::id(),
        backend.name(),
        device.info().name
    );

    let ping = device.create_notify()?;
    let mut child = Command::new(std::env::current_exe()?)
        .arg("--consumer")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let exported = device.export_notify(&*ping, &only(&*device, child.id()))?;
    let mut stdin = child.stdin.take().ok_or("the consumer has no stdin")?;
    writeln!(stdin, "{}", exported.to_text())?;
    drop(stdin);

    let mut lines =
        BufReader::new(child.stdout.take().ok_or("the consumer has no stdout")?).lines();
    let first = lines.next().ok_or("the consumer sent no handle")??;
    let pong = device.import_notify(
        SharedHandle::from(hal::exchange::decode(&first)?),
        &ImportOptions::default(),
    )?;

    let stream = device.create_stream()?;
    let mut rtt = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let start = Instant::now();
        device.record_notify(&stream, &*pong)?;
        ping.wait(WaitOptions::timeout(TIMEOUT))?;
        rtt.push(start.elapsed());
    }
    for line in lines {
        println!("  {}", line?);
    }
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("the consumer failed: {status}").into());
    }
    rtt.sort();
    let pct = |p: usize| rtt[(rtt.len() - 1) * p / 100];
    println!(
        "producer: {ROUNDS} round trips, p50 {:?}, p99 {:?}, max {:?}",
        pct(50),
        pct(99),
        pct(100)
    );
    Ok(())
}

fn consumer() -> Res<()> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let handle = hal::exchange::decode(&line)?;
    let registry = Registry::new();
    let backend = registry.for_handle(&handle)?;
    let device = backend.open(handle.device)?;
    let ping = device.import_notify(SharedHandle::from(handle), &ImportOptions::default())?;

    let pong = device.create_notify()?;
    let exported =
        device.export_notify(&*pong, &only(&*device, std::os::unix::process::parent_id()))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", exported.to_text())?;
    out.flush()?;

    for _ in 0..ROUNDS {
        pong.wait(WaitOptions::timeout(TIMEOUT))?;
        ping.signal()?;
    }
    writeln!(
        out,
        "consumer {}: answered {ROUNDS} pings on backend {}",
        std::process::id(),
        backend.name()
    )?;
    Ok(())
}
