//! Scenarios remote-channel-throughput and remote-channel-pingpong: a
//! channel with a subscriber on another host ([`hal::remote`]'s
//! `Node::offer_channel`, `RemoteSubscriber`), between two bench processes
//! on the loopback address over UCX's TCP transport, against UCX's own
//! `ucx_perftest` run in the same run with the same transport and sizes
//! ([`perftest`](super::perftest)), in blocks that alternate.
//!
//! - **remote-channel-throughput**: one process publishes 1 MiB samples
//!   (a channel of 8 slots), the other receives, checks the number in each
//!   sample's first bytes and releases it; a block's figure is its mean
//!   time per sample, from the block's start to the last release over the
//!   samples. Beside
//!   `ucx_perftest -t ucp_am_bw -s 1048576`, whose figure is its mean time
//!   per message: the channel moves each sample by an active message with
//!   rendezvous, and UCX 1.13's `ucp_put_bw` over `tcp` (which it serves,
//!   by emulation) moves 1 MiB several times slower than `ucp_am_bw`, so a
//!   ratio against it would flatter the channel.
//! - **remote-channel-pingpong**: each process publishes a channel of
//!   64-byte samples and subscribes to the other's; a round trip is a
//!   sample published one way and its answer received back. Beside
//!   `ucx_perftest -t ucp_am_lat -s 64`, its half round trip doubled.

use super::peer::Peer;
use super::perftest::{PerfRun, Perftest};
use super::proto::{self, Cmd};
use super::remote::{transport, warmup, UCX_ENV};
use super::report::{summarize, Line};
use super::{one, Bench};
use crate::fail::CmdResult;
use crate::stats::ratio;

/// remote-channel-throughput's samples.
const BW_SIZE: u64 = 1 << 20;
/// remote-channel-throughput's channel's slots.
const BW_SLOTS: usize = 8;
/// remote-channel-pingpong's samples.
const RTT_SIZE: u64 = 64;
/// remote-channel-pingpong's channels' slots.
const RTT_SLOTS: usize = 4;

/// The remote channel scenarios, for `--only`.
pub(super) const REMOTE_CHANNEL_SCENARIOS: [&str; 2] =
    ["remote-channel-throughput", "remote-channel-pingpong"];

/// The two hal processes, each with a channel side of its own.
struct Pair {
    a: Peer,
    b: Peer,
}

impl Pair {
    fn start() -> CmdResult<Pair> {
        Ok(Pair {
            a: Peer::spawn_env(None, &UCX_ENV)?,
            b: Peer::spawn_env(None, &UCX_ENV)?,
        })
    }

    /// `a` publishes a channel of `slots` slots of `size` bytes, `b`
    /// subscribes to it; with `both`, the mirror image too.
    fn connect(&self, slots: usize, size: u64, both: bool) -> CmdResult {
        let offer = |p: &Peer| -> CmdResult<String> {
            let (r, _) = p.call(&Cmd::RemoteChannelOffer {
                slots,
                slot_size: size,
            })?;
            Ok(r.text.unwrap_or_default())
        };
        let text = offer(&self.a)?;
        if both {
            let back = offer(&self.b)?;
            self.a.call(&Cmd::RemoteChannelSubscribe { text: back })?;
        }
        self.b.call(&Cmd::RemoteChannelSubscribe { text })?;
        Ok(())
    }

    /// `a` publishes `n` samples of `len` bytes while `b` receives them;
    /// `b`'s times between releases.
    fn stream(&self, n: u32, len: u64) -> CmdResult<Vec<u64>> {
        self.a
            .chan
            .send_json(&Cmd::RemoteChannelPublish { n, len }, &[])?;
        let timed = self.b.call(&Cmd::RemoteChannelReceive { n });
        let published = proto::recv_reply(&self.a.chan, &self.a.who());
        let (_, s) = timed?;
        published?;
        let [s] = one(s)?;
        Ok(s)
    }

    /// `rounds` round trips of samples of `len` bytes: `b` answers, `a`
    /// pings and times.
    fn pingpong(&self, rounds: u32, len: u64) -> CmdResult<Vec<u64>> {
        self.b.chan.send_json(
            &Cmd::RemoteChannelPingPong {
                rounds,
                len,
                ping: false,
            },
            &[],
        )?;
        let timed = self.a.call(&Cmd::RemoteChannelPingPong {
            rounds,
            len,
            ping: true,
        });
        let answered = proto::recv_reply(&self.b.chan, &self.b.who());
        let (_, s) = timed?;
        answered?;
        let [s] = one(s)?;
        Ok(s)
    }

    /// Each drops its subscription first, then its channel.
    fn close(&self) -> CmdResult {
        for p in [&self.b, &self.a] {
            p.call(&Cmd::RemoteChannelClose)?;
        }
        Ok(())
    }

    fn quit(self) -> CmdResult {
        self.close()?;
        self.b.quit()?;
        self.a.quit()
    }
}

/// The mean of a block's samples, in nanoseconds.
fn mean(v: &[u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    (v.iter().map(|&t| t as u128).sum::<u128>() / v.len() as u128) as u64
}

impl Bench<'_> {
    /// The remote channel scenarios asked for with `--only` (they run
    /// only then).
    pub(super) fn remote_channel(&mut self) -> CmdResult {
        let pair = Pair::start()?;
        let placement = std::mem::replace(
            &mut self.printer.placement,
            "the remote scenarios' two processes and ucx_perftest's placed by the kernel".into(),
        );
        let perftest = Perftest::find();
        let p = self.plan.clone();
        if self.wants("remote-channel-throughput") {
            pair.connect(BW_SLOTS, BW_SIZE, false)?;
            let n = p.remote_channel_bw_n;
            // Warm-up, discarded.
            pair.stream(warmup(n), BW_SIZE)?;
            let (mut hal, mut blocks, mut runs) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..p.remote_blocks {
                self.keep_consumer()?;
                let block = pair.stream(n, BW_SIZE)?;
                blocks.push(mean(&block));
                hal.extend(block);
                if let Some(pt) = &perftest {
                    runs.push(pt.run(&UCX_ENV, "ucp_am_bw", BW_SIZE, n, warmup(n))?);
                }
            }
            pair.close()?;
            self.throughput_line(hal, blocks, &runs, perftest.is_some(), n)?;
        }
        if self.wants("remote-channel-pingpong") {
            pair.connect(RTT_SLOTS, RTT_SIZE, true)?;
            let n = p.remote_rtt_n;
            pair.pingpong(warmup(n), RTT_SIZE)?;
            let (mut hal, mut runs) = (Vec::new(), Vec::new());
            for _ in 0..p.remote_blocks {
                self.keep_consumer()?;
                hal.extend(pair.pingpong(n, RTT_SIZE)?);
                if let Some(pt) = &perftest {
                    runs.push(pt.run(&UCX_ENV, "ucp_am_lat", RTT_SIZE, n, warmup(n))?);
                }
            }
            self.pingpong_line(hal, &runs, perftest.is_some(), n)?;
        }
        self.printer.placement = placement;
        pair.quit()
    }

    /// The bench's own consumer idles while these scenarios run; an empty
    /// command between blocks keeps it.
    fn keep_consumer(&self) -> CmdResult {
        self.peer.call(&Cmd::AddHandles {
            clear: true,
            texts: Vec::new(),
        })?;
        Ok(())
    }

    fn throughput_line(
        &mut self,
        hal: Vec<u64>,
        blocks: Vec<u64>,
        runs: &[PerfRun],
        installed: bool,
        n: u32,
    ) -> CmdResult {
        const SCENARIO: &str = "remote-channel-throughput";
        let v = summarize(hal);
        let what = format!(
            "{} samples to a remote subscriber (Publisher::loan + publish; RemoteSubscriber::\
             receive + release), a channel of {BW_SLOTS} slots, each block's figure its mean \
             time per sample (from the block's start to its last release, over its samples)",
            crate::out::bytes(BW_SIZE)
        );
        let gbps = |t: u64| ratio(BW_SIZE as f64, t as f64);
        let hal_block = summarize(blocks);
        if !installed {
            let mut line = Line::new(SCENARIO, &self.backend, v, None);
            line.note = Some(format!(
                "{what}; {:.2} GB/s (the median block); no baseline and no ratio: {} is not \
                 installed (package ucx-utils); {}",
                gbps(hal_block.p50_ns),
                super::perftest::PROGRAM,
                transport()
            ));
            line.gbps = Some(gbps(hal_block.p50_ns));
            line.size_bytes = Some(BW_SIZE);
            return self.printer.emit(line);
        }
        let cmd = Perftest::command(&UCX_ENV, "ucp_am_bw", BW_SIZE, n, warmup(n));
        let base: Vec<u64> = runs
            .iter()
            .map(|r| (r.avg_us * 1000.0).round() as u64)
            .collect();
        let b = summarize(base);
        let desc = format!(
            "{SCENARIO}: ucx_perftest's mean time per message (its bandwidth), one figure per \
             run, each run alternating with a block of hal's, same transport and size: {cmd}"
        );
        let mut line = Line::new(SCENARIO, &self.backend, v, Some((&desc, b)));
        let r = ratio(gbps(hal_block.p50_ns), gbps(b.p50_ns));
        line.ratio_p50 = Some(r);
        line.ratio_iqm = Some(ratio(b.iqm_ns, hal_block.iqm_ns));
        line.gbps = Some(gbps(hal_block.p50_ns));
        line.baseline_gbps = Some(gbps(b.p50_ns));
        line.size_bytes = Some(BW_SIZE);
        line.note = Some(format!(
            "{:.2} GB/s vs ucx_perftest's {:.2} GB/s (the median block and run; ratio: hal's \
             GB/s over its); {what}; {}",
            gbps(hal_block.p50_ns),
            gbps(b.p50_ns),
            transport()
        ));
        line = line.target("ratio_p50 >= 0.9", r >= 0.9);
        self.printer.emit(line)
    }

    fn pingpong_line(
        &mut self,
        hal: Vec<u64>,
        runs: &[PerfRun],
        installed: bool,
        n: u32,
    ) -> CmdResult {
        const SCENARIO: &str = "remote-channel-pingpong";
        let v = summarize(hal);
        let what = format!(
            "round trips of {RTT_SIZE}-byte samples between two channels, each with a \
             subscriber in the other process (Publisher::loan + publish, RemoteSubscriber::\
             receive + release; the receive drives the worker: nodes with a spin of 1 s, as \
             ucx_perftest polls)"
        );
        if !installed {
            let mut line = Line::new(SCENARIO, &self.backend, v, None);
            line.note = Some(format!(
                "{what}; no baseline and no ratio: {} is not installed (package ucx-utils); {}",
                super::perftest::PROGRAM,
                transport()
            ));
            line.size_bytes = Some(RTT_SIZE);
            return self.printer.emit(line);
        }
        let cmd = Perftest::command(&UCX_ENV, "ucp_am_lat", RTT_SIZE, n, warmup(n));
        let base: Vec<u64> = runs
            .iter()
            .map(|r| (r.p50_us * 2.0 * 1000.0).round() as u64)
            .collect();
        let b = summarize(base);
        let desc = format!(
            "{SCENARIO}: ucx_perftest's p50 times two (it reports half a round trip), one \
             figure per run, each run alternating with a block of hal's, same transport and \
             size: {cmd}"
        );
        let mut line = Line::new(SCENARIO, &self.backend, v, Some((&desc, b)));
        line.size_bytes = Some(RTT_SIZE);
        line.note = Some(format!("{what}; {}", transport()));
        let r = line.ratio_p50.unwrap_or(f64::INFINITY);
        line = line.target("ratio_p50 <= 1.5", r <= 1.5);
        self.printer.emit(line)
    }
}
