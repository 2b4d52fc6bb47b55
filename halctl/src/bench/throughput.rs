//! Scenario channel-throughput: one publisher (this process) and four
//! subscriber processes pass 1 MiB samples through a channel, each
//! subscriber reading every sample in place; against the same processes
//! reading 1 MiB pieces of a shared region as large as the channel's slots
//! in place, in turn (so that caches hold as much of either).

use std::time::{Duration, Instant};

use hal::channel::{ChannelOptions, Publisher};
use hal::{AllocDesc, ExportOptions, Importers};

use super::peer::Peer;
use super::proto::{self, Cmd, PEER_TIMEOUT};
use super::report::{summarize, Line};
use super::{two, Bench};
use crate::fail::{CmdResult, Context, Fail};
use crate::pattern::{self, Content};
use crate::stats::ratio;

/// Subscribers of the scenario.
const SUBSCRIBERS: usize = 4;
/// Bytes of a sample (and of the baseline's region).
const SAMPLE: u64 = 1 << 20;
/// Slots of the channel.
const SLOTS: usize = 8;

impl Bench<'_> {
    /// channel-throughput (see the module).
    pub(super) fn channel_throughput(&mut self) -> CmdResult {
        let samples = self.plan.throughput_samples;
        let region = self
            .dev
            .allocate(&AllocDesc {
                size: SLOTS as u64 * SAMPLE,
                ..self.desc.clone()
            })
            .ctx("allocating the throughput baseline's region")?;
        pattern::fill(region.as_ref(), Content::Pattern(11))?;
        let exported = self
            .dev
            .export_memory(
                region.as_ref(),
                &ExportOptions {
                    importers: Importers::Anyone,
                    ..ExportOptions::default()
                },
            )
            .ctx("exporting the throughput baseline's region")?;
        let name = format!("halctl-bench-tp-{}", std::process::id());
        let mut publisher = Publisher::create(
            self.dev,
            &name,
            &ChannelOptions::default()
                .slots(SLOTS)
                .slot_size(SAMPLE)
                .timeout(PEER_TIMEOUT),
        )
        .ctx("creating the throughput channel")?;
        let mut members = Vec::with_capacity(SUBSCRIBERS);
        for _ in 0..SUBSCRIBERS {
            let peer = Peer::spawn(None)?;
            peer.open(&self.backend, self.dev.info().ordinal)?;
            members.push(peer);
        }
        for m in &members {
            m.chan.send_json(
                &Cmd::ChannelThroughput {
                    channel: name.clone(),
                    region: exported.to_text(),
                    sample: SAMPLE,
                    samples,
                    passes: samples,
                },
                &[],
            )?;
        }
        wait_for_subscribers(&publisher)?;
        // Samples are written by the subscribers' readers only in place: the
        // publisher stamps each with its number, as a producer that filled
        // the slot with device work would only tell its length.
        for i in 0..u64::from(samples) {
            let loan = publisher.loan().ctx("loaning a throughput slot")?;
            loan.write(0, &i.to_le_bytes())
                .ctx("stamping a throughput sample")?;
            loan.publish(SAMPLE).ctx("publishing a throughput sample")?;
        }
        let (mut baseline, mut channel) = (Vec::new(), Vec::new());
        for m in &members {
            let (_, series) = proto::recv_reply(&m.chan, &m.who())?;
            let [b, c] = two(series)?;
            baseline.extend(b);
            channel.extend(c);
        }
        for m in members {
            m.quit()?;
        }
        drop(publisher);
        let (c, b) = (summarize(channel), summarize(baseline));
        let gbps = |t: u64| ratio(SAMPLE as f64, t as f64);
        let mut line = Line::new(
            "channel-throughput",
            &self.backend,
            c,
            Some((
                "channel-throughput: each subscriber process reads 1 MiB pieces of a shared \
                 region as large as the channel's slots in place, in turn, in blocks of 20 \
                 alternating with blocks of 20 samples",
                b,
            )),
        );
        let r = ratio(gbps(c.p50_ns), gbps(b.p50_ns));
        line.ratio_p50 = Some(r);
        line.ratio_iqm = Some(ratio(b.iqm_ns, c.iqm_ns));
        line.importers = Some(SUBSCRIBERS);
        line.config = Some(format!("subscribers={SUBSCRIBERS}"));
        line.note = Some(format!(
            "per subscriber: {:.2} GB/s of 1 MiB samples (receive + in-place read + release) \
             vs {:.2} GB/s reading a region in place; {SLOTS} slots, broadcast",
            gbps(c.p50_ns),
            gbps(b.p50_ns)
        ));
        line = line.target("ratio_p50 >= 0.9", r >= 0.9);
        self.printer.emit(line)
    }
}

/// Wait until every subscriber subscribed: in broadcast mode a sample
/// published before reaches only those already there.
fn wait_for_subscribers(publisher: &Publisher) -> CmdResult {
    let deadline = Instant::now() + PEER_TIMEOUT;
    loop {
        let n = publisher
            .subscribers()
            .ctx("counting the channel's subscribers")?;
        if n == SUBSCRIBERS {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Fail::failed(format!(
                "{n} of {SUBSCRIBERS} subscribers subscribed to the throughput channel"
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
