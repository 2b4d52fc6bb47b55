//! One hop of a channel in one thread: loan a slot, write 64 bytes,
//! publish, receive and release the sample. No other process and no other
//! CPU: what is timed is the channel's own instructions, without the cache
//! line transfers of `halctl bench`'s channel-pingpong. Run with
//! `cargo bench -p hal-cpu-shm --bench channel_hop`.

use std::time::Duration;

use divan::Bencher;
use hal_core::channel::{ChannelOptions, Publisher, SubscribeOptions, Subscriber};
use hal_cpu_shm::CpuDevice;

fn main() {
    divan::main();
}

#[divan::bench(sample_count = 1000, sample_size = 100)]
fn hop(b: Bencher<'_, '_>) {
    let d = CpuDevice::new();
    let name = format!("bench-hop-{}", std::process::id());
    let mut publisher = Publisher::create(
        &d,
        &name,
        &ChannelOptions::default()
            .slots(2)
            .slot_size(4096)
            .spin(Duration::from_secs(1)),
    )
    .expect("create the channel");
    let subscriber = Subscriber::open(
        &d,
        &name,
        &SubscribeOptions::default().spin(Duration::from_secs(1)),
    )
    .expect("subscribe");
    let bytes = [7u8; 64];
    b.bench_local(|| {
        let loan = publisher.loan().expect("loan");
        loan.write(0, &bytes).expect("write");
        loan.publish(bytes.len() as u64).expect("publish");
        drop(subscriber.receive().expect("receive"));
    });
}
