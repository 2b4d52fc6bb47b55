//! 07: a producer and three consumers on a channel.
//!
//! ```text
//! cargo run -p hal-ipc --example 07_channel                   # CPU shared memory
//! cargo run -p hal-ipc --features mock --example 07_channel -- mock-cuda
//! ```
//!
//! The producer creates a broadcast channel of 4 slots, starts three
//! consumers (this program again, with `--consumer`), waits until each
//! subscribed, and publishes 200 samples: the pool is far smaller than the
//! stream, so the producer waits for the slowest consumer (back-pressure).
//! Each consumer receives every sample in order, checks its bytes in the
//! shared slot, and releases it. The producer exits 0 only when all three
//! report every sample verified; nothing is left in /dev/shm.

use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};

use hal::channel::{ChannelOptions, Publisher, SubscribeOptions, Subscriber};
use hal::{Backend, Error, Vmm};

const SAMPLES: u64 = 200;
const CONSUMERS: usize = 3;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let consumer = args.first().is_some_and(|a| a == "--consumer");
    let backend = if consumer { args.get(2) } else { args.first() };
    let result = on_backend(backend.map(String::as_str), &args);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("07_channel ({}): {e}", std::process::id());
            ExitCode::FAILURE
        }
    }
}

/// Play this process's part on device 0 of the backend `name` (CPU shared
/// memory unless named).
fn on_backend(name: Option<&str>, args: &[String]) -> Res<()> {
    match name.unwrap_or("cpu-shm") {
        #[cfg(feature = "cpu-shm")]
        "cpu-shm" => part(&hal::cpu_shm::CpuShm::new().open(0)?, name, args),
        #[cfg(feature = "mock")]
        "mock-cuda" => part(&hal::mock::MockBackend::cuda().open(0)?, name, args),
        #[cfg(feature = "mock")]
        "mock-ascend" => part(&hal::mock::MockBackend::ascend().open(0)?, name, args),
        other => Err(format!(
            "backend {other:?} is not compiled in or not one this example runs on \
             (cpu-shm; mock-cuda and mock-ascend with --features mock)"
        )
        .into()),
    }
}

fn part<D: Vmm>(device: &D, backend: Option<&str>, args: &[String]) -> Res<()> {
    match args.first().map(String::as_str) {
        Some("--consumer") => consumer(device, args.get(1).map_or("", String::as_str)),
        _ => producer(device, backend),
    }
}

/// What the producer writes in sample `seq`: its number, then bytes
/// derived from it.
fn sample(seq: u64) -> Vec<u8> {
    let mut bytes = seq.to_le_bytes().to_vec();
    bytes.extend((0..1000u64).map(|i| (seq.wrapping_mul(7) + i) as u8));
    bytes
}

fn producer<D: Vmm>(device: &D, backend: Option<&str>) -> Res<()> {
    let name = format!("07-channel-{}", std::process::id());
    let options = ChannelOptions::default().slots(4).slot_size(4096);
    let mut publisher = Publisher::create(device, &name, &options)?;
    println!(
        "producer {}: channel {name:?} on {}, {} slots of {} bytes",
        std::process::id(),
        device.info().name,
        options.slots,
        options.slot_size
    );
    let mut consumers = Vec::new();
    for _ in 0..CONSUMERS {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("--consumer").arg(&name);
        if let Some(b) = backend {
            cmd.arg(b);
        }
        let mut child = cmd.stdout(Stdio::piped()).spawn()?;
        let mut out = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut line = String::new();
        out.read_line(&mut line)?;
        if !line.starts_with("subscribed") {
            return Err(format!("a consumer did not subscribe: {line:?}").into());
        }
        consumers.push((child, out));
    }
    for seq in 0..SAMPLES {
        let loan = publisher.loan()?;
        let bytes = sample(seq);
        loan.write(0, &bytes)?;
        loan.publish(bytes.len() as u64)?;
    }
    drop(publisher); // closes the channel: the consumers finish
    let mut verified = 0;
    for (mut child, mut out) in consumers {
        let mut line = String::new();
        out.read_line(&mut line)?;
        print!("{line}");
        if child.wait()?.success() && line.contains(&format!("{SAMPLES} samples verified")) {
            verified += 1;
        }
    }
    if verified != CONSUMERS {
        return Err(format!("{verified} of {CONSUMERS} consumers verified every sample").into());
    }
    println!("producer: {SAMPLES} samples reached all {CONSUMERS} consumers through 4 slots");
    Ok(())
}

fn consumer<D: Vmm>(device: &D, name: &str) -> Res<()> {
    let subscriber = Subscriber::open(device, name, &SubscribeOptions::default())?;
    println!("subscribed");
    let mut next = 0u64;
    loop {
        let sample_in = match subscriber.receive() {
            Ok(s) => s,
            Err(Error::Closed { .. }) => break,
            Err(e) => return Err(e.into()),
        };
        let bytes = sample_in.to_vec()?;
        if sample_in.sequence() != next || bytes != sample(next) {
            return Err(format!("sample {next} arrived wrong").into());
        }
        next += 1;
    }
    println!("consumer {}: {next} samples verified", std::process::id());
    Ok(())
}
