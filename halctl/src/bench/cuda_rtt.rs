//! Scenario cuda-notify-rtt: a CPU in one process rings a GPU stream in
//! another and waits for the stream's answer.
//!
//! hal: the exporter signals notify `ping` from the host and waits for
//! notify `pong`; the consumer's stream waits on `ping`
//! (`stream_wait_notify`) and records `pong` (`record_notify`). Baseline,
//! interleaved in the same stream and the same run: two words of a shared
//! memfd page registered with the consumer's GPU, a bare
//! `cuStreamWaitValue32` on one and `cuStreamWriteValue32` on the other,
//! the exporter storing and busy-polling the words. Both host sides
//! busy-poll, so the ratio is what hal's notifies add to the driver's
//! stream memory operations.

use hal::DeviceExt;
use std::os::fd::AsFd;
use std::time::Instant;

use hal::cuda::CudaDevice;
use hal::{Device, ExportOptions, Notify};

use super::host::ns;
use super::options::spin_wait;
use super::proto::{self, Cmd, PEER_TIMEOUT};
use super::report::{summarize, Line};
use super::spin::SpinPair;
use super::Bench;
use crate::fail::{CmdResult, Context};
use crate::stats::ratio;

/// Round trips of each kind, at most (every one is queued on the stream
/// before the first runs).
const RTT_MAX: u32 = 4000;
/// Round trips of each kind left out of the figures (first stream uses
/// register pages and warm the paths).
const RTT_WARMUP: usize = 50;
/// Round trips of one kind in a row before the other kind's turn.
const RTT_BLOCK: usize = 25;

/// The order of the round trips: blocks of [`RTT_BLOCK`], hal's first,
/// `per_kind` of each in all; true is hal's.
fn schedule(per_kind: usize) -> Vec<bool> {
    let blocks = per_kind.div_ceil(RTT_BLOCK);
    let mut plan = Vec::with_capacity(2 * blocks * RTT_BLOCK);
    let (mut hal, mut raw) = (0, 0);
    for _ in 0..blocks {
        for kind in [true, false] {
            let done = if kind { &mut hal } else { &mut raw };
            let n = RTT_BLOCK.min(per_kind - *done);
            plan.extend(std::iter::repeat_n(kind, n));
            *done += n;
        }
    }
    plan
}

impl Bench<'_> {
    /// cuda-notify-rtt.
    pub(super) fn cuda_notify_rtt(&mut self, dev: &CudaDevice) -> CmdResult {
        let per_kind = self.plan.rounds.min(RTT_MAX) as usize + RTT_WARMUP;
        let plan = schedule(per_kind);
        let ping = dev.create_notify().ctx("creating the ping notify")?;
        let pong = dev.create_notify().ctx("creating the pong notify")?;
        let opts = ExportOptions::default();
        let ping_ex = dev.export_notify(&ping, &opts).ctx("exporting a notify")?;
        let pong_ex = dev.export_notify(&pong, &opts).ctx("exporting a notify")?;
        let (words, fd) = SpinPair::create()?;
        proto::send_handles(
            &self.peer.chan,
            &self.peer.who(),
            &[ping_ex.to_text(), pong_ex.to_text()],
        )?;
        self.peer
            .chan
            .send_json(&Cmd::CudaRttArm { plan: plan.clone() }, &[fd.as_fd()])?;
        proto::recv_reply(&self.peer.chan, &self.peer.who())?;
        let wait = spin_wait();
        let mut hal_ns = Vec::with_capacity(per_kind);
        let mut raw_ns = Vec::with_capacity(per_kind);
        let mut round = 0u32;
        for &hal in &plan {
            let t0 = Instant::now();
            if hal {
                ping.signal().ctx("signalling the ping notify")?;
                pong.wait(wait).ctx("waiting for the stream's pong")?;
                hal_ns.push(ns(t0.elapsed()));
            } else {
                round += 1;
                words.ping(round, PEER_TIMEOUT)?;
                raw_ns.push(ns(t0.elapsed()));
            }
        }
        self.peer.call(&Cmd::CudaRttDone)?;
        let v = summarize(hal_ns.into_iter().skip(RTT_WARMUP).collect());
        let b = summarize(raw_ns.into_iter().skip(RTT_WARMUP).collect());
        let r = ratio(v.p50_ns as f64, b.p50_ns as f64);
        let mut line = Line::new(
            "cuda-notify-rtt",
            &self.backend,
            v,
            Some((
                "cuda-notify-rtt: a bare cuStreamWaitValue32 / cuStreamWriteValue32 ping-pong \
                 on two words of a registered shared page, the host busy-polling",
                b,
            )),
        )
        .target("ratio_p50 <= 1.5", r <= 1.5);
        line.note = Some(
            "host signal -> the other process's stream waits and records -> host wait \
             (busy-polling); both kinds queued on one stream, interleaved"
                .into(),
        );
        self.printer.emit(line)?;
        drop((ping_ex, pong_ex));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_alternates_blocks_and_has_each_kind_per_kind_times() {
        let plan = schedule(60);
        assert_eq!(plan.iter().filter(|&&h| h).count(), 60);
        assert_eq!(plan.iter().filter(|&&h| !h).count(), 60);
        assert!(plan[..RTT_BLOCK].iter().all(|&h| h));
        assert!(plan[RTT_BLOCK..2 * RTT_BLOCK].iter().all(|&h| !h));
        assert!(schedule(0).is_empty());
    }
}
