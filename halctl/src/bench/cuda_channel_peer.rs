//! The consumer's side of scenario cuda-channel-rtt ([`super::cuda_channel`]),
//! and what both sides queue: the two stream-ordered channels of device
//! memory, one side's share of a round trip on them.

use std::time::{Duration, Instant};

use hal::channel::{ChannelOptions, Publisher, SubscribeOptions, Subscriber};
use hal::cuda::{CudaDevice, CudaStream};
use hal::dynamic::{DynDevice, DynMemRef, DynStream};
use hal::{Device, Error, Location};

use super::proto::PEER_TIMEOUT;
use super::spin::SpinPair;
use crate::fail::{CmdResult, Context, Fail};

/// Slots of each channel: how far the hosts may queue ahead.
pub(super) const SLOTS: usize = 8;
/// Bytes each side's device work writes into its slot.
pub(super) const WORK: u64 = 64;

/// The two channels' names for this exporter.
pub(super) fn names() -> (String, String) {
    let pid = std::process::id();
    (
        format!("halctl-bench-ping-{pid}"),
        format!("halctl-bench-pong-{pid}"),
    )
}

/// A stream-ordered channel of `SLOTS` slots of device memory on `dev`.
pub(super) fn channel(dev: &dyn DynDevice, name: &str) -> CmdResult<Publisher> {
    let page = dev.info().page_size();
    Publisher::create(
        dev,
        name,
        &ChannelOptions::default()
            .slots(SLOTS)
            .slot_size(page)
            .location(Location::Device(dev.info().ordinal))
            .timeout(PEER_TIMEOUT)
            .stream_ordered(true),
    )
    .ctx("creating a stream-ordered channel")
}

/// Subscribe to `name`, waiting for its publisher to create it.
pub(super) fn subscribe(dev: &dyn DynDevice, name: &str) -> CmdResult<Subscriber> {
    let deadline = Instant::now() + PEER_TIMEOUT;
    loop {
        match Subscriber::open(
            dev,
            name,
            &SubscribeOptions::default().timeout(Some(PEER_TIMEOUT)),
        ) {
            Err(Error::NotFound { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            other => return other.ctx("subscribing to a stream-ordered channel"),
        }
    }
}

/// The CUDA stream behind a stream of the dynamic API.
pub(super) fn cuda_stream(stream: &dyn DynStream) -> CmdResult<&CudaStream> {
    stream
        .as_any()
        .downcast_ref::<CudaStream>()
        .ok_or_else(|| Fail::failed("a stream of another backend than cuda"))
}

/// One side's share of a bare round trip on `stream`: write `round` to the
/// word at `write_at` and wait for `round` at `wait_at`, the write first
/// (`write_first`, the exporter's side) or the wait first.
///
/// # Safety
///
/// Both words are in host memory registered with `dev`, which stays
/// registered and mapped until the stream ran the operations.
pub(super) unsafe fn queue_bare(
    dev: &CudaDevice,
    stream: &CudaStream,
    round: u32,
    write_at: u64,
    wait_at: u64,
    write_first: bool,
) -> CmdResult {
    let write = || {
        // SAFETY: the caller's promise.
        unsafe { dev.bare_stream_write_value32(stream, write_at, round) }
            .ctx("queuing a bare write")
    };
    let wait = || {
        // SAFETY: the caller's promise.
        unsafe { dev.bare_stream_wait_value32(stream, wait_at, round) }.ctx("queuing a bare wait")
    };
    if write_first {
        write()?;
        wait()
    } else {
        wait()?;
        write()
    }
}

/// One side's share of a hal round trip: `publish` a sample after device
/// work on its slot, and wait for the other side's on the stream.
pub(super) fn queue_hal(
    dev: &dyn DynDevice,
    stream: &dyn DynStream,
    publisher: &mut Publisher,
    round: u64,
) -> CmdResult {
    let loan = publisher.loan().ctx("loaning a slot")?;
    let slot = DynMemRef::Allocation(loan.memory());
    dev.memset_async(stream, slot, loan.offset(), WORK, round as u8)
        .ctx("queuing the work on the slot")?;
    loan.publish_on(dev, stream, WORK)
        .ctx("publishing in stream order")?;
    Ok(())
}

/// Receive the other side's sample and queue the stream's wait for it,
/// releasing it in stream order behind that wait.
pub(super) fn queue_receive(
    dev: &dyn DynDevice,
    stream: &dyn DynStream,
    subscriber: &Subscriber,
) -> CmdResult {
    let sample = subscriber.receive().ctx("receiving a sample")?;
    sample.wait_on(dev, stream).ctx("queuing the wait")?;
    sample
        .release_on(dev, stream)
        .ctx("releasing in stream order")?;
    Ok(())
}

/// The consumer's side: subscribe to `ping`, publish `pong`, and for each
/// phase queue the mirror image of the exporter's round trips on a stream
/// of its own; series: none of interest (the exporter times the chain).
pub(super) fn peer(
    dev: &CudaDevice,
    ping_name: &str,
    pong_name: &str,
    rounds: u32,
    phases: u32,
    fd: &std::os::fd::OwnedFd,
) -> CmdResult<[Vec<u64>; 2]> {
    let ddev: &dyn DynDevice = dev;
    let words = SpinPair::open(fd)?;
    let (ptr, len) = words.page();
    // SAFETY: the page stays mapped as long as `words`, which outlives the
    // registration (dropped after the stream is synchronized below).
    let reg = unsafe { Device::register_host(dev, ptr, len as u64) }
        .ctx("registering the words' page")?;
    let (ping_at, pong_at) = SpinPair::word_addrs(hal::Memory::addr(&reg));
    let ping = subscribe(ddev, ping_name)?;
    let mut pong = channel(ddev, pong_name)?;
    let stream = ddev.create_stream().ctx("creating a stream")?;
    let bare_stream = cuda_stream(&*stream)?;
    let mut round = 0u32;
    for _ in 0..phases {
        for _ in 0..rounds {
            round += 1;
            // SAFETY: as above; the stream is synchronized before the page
            // is unregistered.
            unsafe { queue_bare(dev, bare_stream, round, pong_at, ping_at, false) }?;
        }
        for r in 0..rounds {
            queue_receive(ddev, &*stream, &ping)?;
            queue_hal(ddev, &*stream, &mut pong, u64::from(r))?;
        }
    }
    ddev.synchronize(&*stream, Some(PEER_TIMEOUT))
        .ctx("waiting for the round trips")?;
    drop((pong, ping, stream, reg, words));
    Ok([Vec::new(), Vec::new()])
}
