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

use hal::cuda::CudaDevice;
use hal::dynamic::DynDevice;
use hal::Device;

use super::cuda_channel_peer::{
    channel, cuda_stream, names, queue_bare, queue_hal, queue_receive, subscribe, SLOTS, WORK,
};
use super::host::ns;
use super::proto::{self, Cmd, PEER_TIMEOUT};
use super::report::{summarize, Line};
use super::spin::SpinPair;
use super::{two, Bench};
use crate::fail::{CmdResult, Context, Fail};
use crate::stats::ratio;

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
                unsafe { queue_bare(dev, bare_stream, round, ping_at, pong_at, true) }?;
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
