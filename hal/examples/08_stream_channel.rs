//! 08: a channel published in stream order: device work in one process
//! feeds device work in two others with no host round trip between them.
//!
//! ```text
//! cargo run -p hal-ipc --example 08_stream_channel                       # the best backend here
//! cargo run -p hal-ipc --features mock --example 08_stream_channel -- mock-cuda
//! ```
//!
//! The producer creates a stream-ordered broadcast channel of 4 slots in
//! its device's memory (device memory on a GPU), starts two consumers (this
//! program again, with `--consumer`), and for each of 100 samples queues
//! the work that fills the slot on its stream (a memset of the slot, then
//! the sample's number written over its first bytes) and publishes it in
//! stream order (`Loan::publish_on`): the slot's event is recorded on the
//! stream, and the sample reaches the consumers at once. Each consumer's
//! stream waits for that event (`Sample::wait_on`) and copies the slot into
//! memory of its own, then releases the sample in stream order
//! (`Sample::release_on`); it checks each copy once its stream ran it. The
//! producer exits 0 only when both consumers report every sample verified.
//! On a backend whose streams run on the host (cpu-shm) the same calls run
//! at once, in the same order.

use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};

use hal::channel::{ChannelOptions, Publisher, SubscribeOptions, Subscriber};
use hal::dynamic::{DynDevice, DynMemRef};
use hal::{AllocDesc, Capabilities, Error, Location, Registry};

const SAMPLES: u64 = 100;
const CONSUMERS: usize = 2;
const SLOT: u64 = 64 << 10;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let consumer = args.first().is_some_and(|a| a == "--consumer");
    let backend = if consumer { args.get(2) } else { args.first() };
    let result = (|| -> Res<()> {
        let registry = Registry::new();
        let backend = match backend {
            Some(name) => registry.open(name)?,
            None => registry.best()?,
        };
        let device = backend.open(0)?;
        if consumer {
            consumer_part(&*device, args.get(1).map_or("", String::as_str))
        } else {
            producer(&*device, &backend.name())
        }
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("08_stream_channel ({}): {e}", std::process::id());
            ExitCode::FAILURE
        }
    }
}

/// Where this device's slots and copies go: its own memory.
fn location(device: &dyn DynDevice) -> Location {
    if device.capabilities().contains(Capabilities::MEMORY_IS_HOST) {
        Location::Host
    } else {
        Location::Device(device.info().ordinal)
    }
}

/// The byte sample `seq` is filled with, after its 8-byte number.
fn fill(seq: u64) -> u8 {
    (seq * 13 % 251) as u8
}

fn producer(device: &dyn DynDevice, backend: &str) -> Res<()> {
    let name = format!("08-stream-channel-{}", std::process::id());
    let options = ChannelOptions::default()
        .slots(4)
        .slot_size(SLOT)
        .location(location(device))
        .stream_ordered(true);
    let mut publisher = Publisher::create(device, &name, &options)?;
    println!(
        "producer {}: stream-ordered channel {name:?} on {backend} ({}), {} slots of {} KiB",
        std::process::id(),
        device.info().name,
        options.slots,
        SLOT >> 10
    );
    let mut consumers = Vec::new();
    for _ in 0..CONSUMERS {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["--consumer", &name, backend])
            .stdout(Stdio::piped())
            .spawn()?;
        let mut out = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut line = String::new();
        out.read_line(&mut line)?;
        if !line.starts_with("subscribed") {
            return Err(format!("a consumer did not subscribe: {line:?}").into());
        }
        consumers.push((child, out));
    }
    let stream = device.create_stream()?;
    for seq in 0..SAMPLES {
        let loan = publisher.loan()?;
        let slot = DynMemRef::Allocation(loan.memory());
        // The device work that fills the slot, queued on the stream.
        device.memset_async(&*stream, slot, loan.offset(), SLOT, fill(seq))?;
        device.write_async(&*stream, slot, loan.offset(), seq.to_le_bytes().to_vec())?;
        loan.publish_on(device, &*stream, SLOT)?;
    }
    device.synchronize(&*stream, None)?;
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
    println!(
        "producer: {SAMPLES} samples filled on its stream reached both consumers' streams \
         through 4 slots"
    );
    Ok(())
}

fn consumer_part(device: &dyn DynDevice, name: &str) -> Res<()> {
    let subscriber = Subscriber::open(device, name, &SubscribeOptions::default())?;
    println!("subscribed");
    let stream = device.create_stream()?;
    let copy = device.allocate(&AllocDesc {
        location: location(device),
        ..AllocDesc::host(SLOT)
    })?;
    let mut next = 0u64;
    let mut got = vec![0u8; SLOT as usize];
    loop {
        let sample = match subscriber.receive() {
            Ok(s) => s,
            Err(Error::Closed { .. }) => break,
            Err(e) => return Err(e.into()),
        };
        // The device work that reads the slot, queued behind the
        // producer's stream: no host wait between the two.
        sample.wait_on(device, &*stream)?;
        device.copy_async(
            &*stream,
            DynMemRef::Allocation(&*copy),
            0,
            DynMemRef::Mapping(subscriber.memory()),
            sample.offset(),
            SLOT,
        )?;
        let seq = sample.sequence();
        sample.release_on(device, &*stream)?;
        // Checked on the host here only to prove the bytes right.
        device.synchronize(&*stream, None)?;
        copy.read(0, &mut got)?;
        let number = u64::from_le_bytes(got[..8].try_into()?);
        if seq != next || number != seq || got[8..].iter().any(|&b| b != fill(seq)) {
            return Err(
                format!("sample {next} arrived wrong (sequence {seq}, number {number})").into(),
            );
        }
        next += 1;
    }
    println!("consumer {}: {next} samples verified", std::process::id());
    Ok(())
}
