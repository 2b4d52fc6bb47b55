//! How fast samples reach a remote subscriber, beside a plain remote read
//! of the same size (one rendezvous each way): a channel of cpu-shm
//! memory offered on one node, a remote subscriber on another, both in
//! this process on `ADDRESS` (127.0.0.1 unless given). Every sample is
//! received and released; its bytes are not read, as a subscriber that
//! works on them in place would not copy them.
//!
//! ```sh
//! UCX_TLS=tcp cargo run --release -p hal-ucx --example channel_throughput -- [ADDRESS] [SAMPLES] [BYTES]
//! ```

use std::sync::Arc;
use std::time::Instant;

use hal_core::channel::{ChannelOptions, Publisher};
use hal_core::{AllocDesc, Device};
use hal_cpu_shm::CpuShm;
use hal_ucx::{
    Node, RemoteChannelOptions, RemoteOptions, RemoteSubscribeOptions, RemoteSubscriber,
};

fn main() -> hal_core::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ip = args.first().map_or("127.0.0.1", String::as_str);
    let samples: u64 = args.get(1).map_or(200, |s| s.parse().expect("SAMPLES"));
    let bytes: u64 = args.get(2).map_or(1 << 20, |s| s.parse().expect("BYTES"));
    let at = format!("{ip}:0").parse().expect("ADDRESS");
    let device = Arc::new(CpuShm::new().host());
    let name = format!("throughput-{}", std::process::id());
    let options = ChannelOptions::default().slots(8).slot_size(bytes);
    let mut publisher = Publisher::create(&*device, &name, &options)?;
    let (a, b) = (Node::bind(at)?, Node::bind(at)?);
    println!("{}", a.ucx());
    let offer = a.offer_channel(device.clone(), &name, &RemoteChannelOptions::default())?;
    let sub = RemoteSubscriber::connect(
        &b,
        &*device,
        offer.text(),
        &RemoteSubscribeOptions::default(),
    )?;

    let started = Instant::now();
    let feeder = std::thread::spawn(move || -> hal_core::Result<()> {
        for _ in 0..samples {
            let loan = publisher.loan()?;
            loan.publish(bytes)?;
        }
        Ok(())
    });
    for _ in 0..samples {
        drop(sub.receive()?);
    }
    let channel = started.elapsed();
    feeder.join().expect("the publisher's thread")?;
    report("remote subscriber", samples, bytes, channel);

    let memory = device.allocate(&AllocDesc::host(bytes))?;
    let export = a.export(&memory, RemoteOptions::default())?;
    let remote = b.connect(&export.text())?;
    let mut buf = vec![0u8; bytes as usize];
    let started = Instant::now();
    for _ in 0..samples {
        remote.read(0, &mut buf)?;
    }
    report("remote read", samples, bytes, started.elapsed());
    Ok(())
}

fn report(what: &str, samples: u64, bytes: u64, took: std::time::Duration) {
    let total = (samples * bytes) as f64;
    println!(
        "{what:>18}: {samples} × {bytes} bytes in {:.1} ms: {:.0} MB/s, {:.1} µs each",
        took.as_secs_f64() * 1e3,
        total / took.as_secs_f64() / 1e6,
        took.as_secs_f64() * 1e6 / samples as f64
    );
}
