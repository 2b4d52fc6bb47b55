//! Scenario cuda-channel-rtt: device work in one process hands a sample to
//! device work in another and gets one back, through two stream-ordered
//! channels of device memory, with no host wait in the chain.
//!
//! hal: on the exporter's stream, a memset of a `ping` slot and
//! `publish_on`; on the consumer's stream, `wait_on` the ping sample, a
//! memset of a `pong` slot and `publish_on`; back on the exporter's stream,
//! `wait_on` the pong sample; the samples are released on the streams
//! (`release_on`). Baseline, in the same two streams and the same run: a
//! bare `cuStreamWriteValue32` of the round's number to one word of a
//! registered shared page and a bare `cuStreamWaitValue32` for the other,
//! the consumer's stream the mirror image. Each phase queues its round
//! trips and times the whole chain (the exporter's stream synchronized at
//! the end): a sample is one phase's time per round trip. The hosts queue
//! ahead of the streams, so the streams' chain is what is timed.

use std::time::{Duration, Instant};

use hal::channel::{ChannelOptions, Publisher, SubscribeOptions, Subscriber};
use hal::cuda::{CudaDevice, CudaStream};
use hal::dynamic::{DynDevice, DynMemRef, DynStream};
use hal::{Device, Error, Location};

use super::host::ns;
use super::proto::{self, Cmd, PEER_TIMEOUT};
use super::report::{summarize, Line};
use super::spin::SpinPair;
use super::{two, Bench};
use crate::fail::{CmdResult, Context, Fail};
use crate::stats::ratio;

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

impl Bench<'_> {
    /// cuda-channel-rtt.
    pub(super) fn cuda_channel_rtt(&mut self, dev: &CudaDevice) -> CmdResult {
        let ddev: &dyn DynDevice = dev;
        let (rounds, phases) = (self.plan.channel_rounds, self.plan.channel_phases);
        let (ping_name, pong_name) = names();
        let mut ping = channel(ddev, &ping_name)?;
        let (words, fd) = SpinPair::create()?;
        let (ptr, len) = words.page();
        // SAFETY: the page stays mapped as long as `words`, which outlives
        // the registration (dropped at the end of this function, after the
        // stream was synchronized).
        let reg = unsafe { Device::register_host(dev, ptr, len as u64) }
            .ctx("registering the words' page")?;
        let (ping_at, pong_at) = SpinPair::word_addrs(hal::Memory::addr(&reg));
        self.peer.chan.send_json(
            &Cmd::CudaChannelRtt {
                ping: ping_name,
                pong: pong_name.clone(),
                rounds,
                phases,
            },
            &[std::os::fd::AsFd::as_fd(&fd)],
        )?;
        let pong = subscribe(ddev, &pong_name)?;
        let deadline = Instant::now() + PEER_TIMEOUT;
        while ping.subscribers().ctx("counting subscribers")? == 0 {
            if Instant::now() > deadline {
                return Err(Fail::failed(
                    "the consumer did not subscribe to the ping channel",
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let stream = ddev.create_stream().ctx("creating a stream")?;
        let bare_stream = cuda_stream(&*stream)?;
        let (mut hal_ns, mut bare_ns) = (Vec::new(), Vec::new());
        let mut round = 0u32;
        for _ in 0..phases {
            let t0 = Instant::now();
            for _ in 0..rounds {
                round += 1;
                // SAFETY: the words are in the page registered above, which
                // stays registered and mapped until after the stream is
                // synchronized below.
                unsafe {
                    dev.bare_stream_write_value32(bare_stream, ping_at, round)
                        .ctx("queuing a bare write")?;
                    dev.bare_stream_wait_value32(bare_stream, pong_at, round)
                        .ctx("queuing a bare wait")?;
                }
            }
            ddev.synchronize(&*stream, Some(PEER_TIMEOUT))
                .ctx("waiting for the bare round trips")?;
            bare_ns.push(ns(t0.elapsed()) / u64::from(rounds));
            let t0 = Instant::now();
            for r in 0..rounds {
                queue_hal(ddev, &*stream, &mut ping, u64::from(r))?;
                queue_receive(ddev, &*stream, &pong)?;
            }
            ddev.synchronize(&*stream, Some(PEER_TIMEOUT))
                .ctx("waiting for the channel's round trips")?;
            hal_ns.push(ns(t0.elapsed()) / u64::from(rounds));
        }
        let (_, series) = proto::recv_reply(&self.peer.chan, &self.peer.who())?;
        two(series)?;
        drop((pong, ping, stream, reg, words));
        // The first phase warms the paths (first stream uses of pages).
        let v = summarize(hal_ns.into_iter().skip(1).collect());
        let b = summarize(bare_ns.into_iter().skip(1).collect());
        let r = ratio(v.p50_ns as f64, b.p50_ns as f64);
        let mut line = Line::new(
            "cuda-channel-rtt",
            &self.backend,
            v,
            Some((
                "cuda-channel-rtt: a bare cuStreamWriteValue32 / cuStreamWaitValue32 ping-pong \
                 between the two processes' streams on two words of a registered shared page",
                b,
            )),
        )
        .target("ratio_p50 <= 1.5", r <= 1.5);
        line.note = Some(format!(
            "stream -> the other process's stream -> stream, per round trip: a memset of \
             {WORK} bytes and publish_on, wait_on, release_on on each side; phases of {rounds} \
             round trips queued ahead ({SLOTS} slots), timed whole"
        ));
        self.printer.emit(line)
    }
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
            unsafe {
                dev.bare_stream_wait_value32(bare_stream, ping_at, round)
                    .ctx("queuing a bare wait")?;
                dev.bare_stream_write_value32(bare_stream, pong_at, round)
                    .ctx("queuing a bare write")?;
            }
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
