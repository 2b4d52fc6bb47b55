//! Scenarios notify-pingpong, notify-spin-pingpong,
//! notify-adaptive-pingpong and channel-pingpong.

use std::os::fd::AsFd;
use std::time::Instant;

use hal::channel::{Publisher, Subscriber};
use hal::dynamic::DynNotify;
use hal::{Handle, ImportOptions, SharedHandle, WaitOptions};

use super::host::ns;
use super::options::{blocking_wait, busy_channel, busy_subscriber, spin_wait, CHANNEL_SAMPLE};
use super::proto::{self, Block, Cmd, IdleMode, Pong, PEER_TIMEOUT};
use super::report::{summarize, Line, Summary};
use super::spin::SpinPair;
use super::Bench;
use crate::fail::{CmdResult, Context, Fail};
use crate::raw::FutexPair;
use crate::stats::ratio;

impl Bench<'_> {
    /// The three notify ping-pongs against the raw futex and spin ones, and
    /// the CPU an idle waiter burns.
    pub(super) fn notifies(&mut self) -> CmdResult {
        let pid = self.peer.pid;
        let (futex, futex_fd) = FutexPair::create()?;
        let (spin, spin_fd) = SpinPair::create()?;
        let mine = self
            .dev
            .create_notify()
            .ctx("creating the exporter's notify")?;
        let mine_exported = self
            .dev
            .export_notify(mine.as_ref(), &self.opts(&[pid]))
            .ctx("exporting the exporter's notify")?;
        let channel = format!("halctl-bench-{}", std::process::id());
        let mut chan_out = Publisher::create(self.dev, &channel, &busy_channel())
            .ctx("creating the exporter's channel")?;
        self.peer.chan.send_json(
            &Cmd::NotifySetup {
                notify: mine_exported.to_text(),
                channel: channel.clone(),
            },
            &[futex_fd.as_fd(), spin_fd.as_fd()],
        )?;
        let (reply, _) = proto::recv_reply(&self.peer.chan, &self.peer.who())?;
        let text = reply
            .text
            .ok_or_else(|| Fail::failed("the consumer sent no notify handle"))?;
        let handle = Handle::from_text(&text)
            .map_err(|e| Fail::failed(format!("decoding the consumer's notify: {e}")))?;
        let theirs = self
            .dev
            .import_notify(SharedHandle::from(handle), &ImportOptions::default())
            .ctx("importing the consumer's notify")?;
        let chan_in = Subscriber::open(self.dev, &format!("{channel}-back"), &busy_subscriber())
            .ctx("subscribing to the consumer's channel")?;

        let kinds = [
            Pong::RawFutex,
            Pong::RawSpin,
            Pong::HalBlocking,
            Pong::HalSpin,
            Pong::HalAdaptive,
            Pong::HalChannel,
        ];
        let plan = schedule(
            &[
                &[Pong::RawFutex, Pong::HalBlocking],
                &[
                    Pong::RawSpin,
                    Pong::HalSpin,
                    Pong::HalAdaptive,
                    Pong::HalChannel,
                ],
            ],
            self.plan.rounds,
            self.plan.warmup_rounds,
            self.plan.blocks,
        );
        self.peer
            .chan
            .send_json(&Cmd::PingPong { plan: plan.clone() }, &[])?;
        let mut times: Vec<Vec<u64>> = (0..kinds.len())
            .map(|_| Vec::with_capacity(self.plan.rounds as usize))
            .collect();
        let (mut futex_round, mut spin_round) = (0u32, 0u32);
        for block in &plan {
            for kind in (0..block.cycles).flat_map(|_| block.kinds.iter().copied()) {
                let t0 = Instant::now();
                match kind {
                    Pong::RawFutex => {
                        futex_round = futex_round.wrapping_add(1);
                        futex.ping(futex_round, PEER_TIMEOUT)?;
                    }
                    Pong::RawSpin => {
                        spin_round = spin_round.wrapping_add(1);
                        spin.ping(spin_round, PEER_TIMEOUT)?;
                    }
                    Pong::HalChannel => channel_round_trip(&mut chan_out, &chan_in)?,
                    kind => round_trip(mine.as_ref(), theirs.as_ref(), kind)?,
                }
                let dt = ns(t0.elapsed());
                if block.timed {
                    let k = kinds.iter().position(|&k| k == kind).unwrap_or(0);
                    times[k].push(dt);
                }
            }
        }
        proto::recv_reply(&self.peer.chan, &self.peer.who())?;

        let idle_ns = ns(self.plan.idle);
        let mut idle = Vec::new();
        for mode in [IdleMode::Blocking, IdleMode::Spin, IdleMode::Adaptive] {
            let (reply, _) = self.peer.call(&Cmd::Idle {
                mode,
                wait_ns: idle_ns,
            })?;
            let cpu = reply.values.first().copied().unwrap_or(0.0);
            let wall = reply.values.get(1).copied().unwrap_or(0.0);
            idle.push((cpu, wall));
        }
        drop(theirs);
        drop(mine_exported);
        drop(chan_in);
        drop(chan_out);

        let s: Vec<Summary> = times.into_iter().map(summarize).collect();
        let (raw_futex, raw_spin) = (s[0], s[1]);
        const FUTEX: &str = "notify: raw futex ping-pong on two words of a shared memfd, \
                             blocking waits (FUTEX_WAIT / FUTEX_WAKE), same two processes";
        const SPIN: &str = "notify: raw atomic ping-pong on two words of a shared memfd, \
                            both sides busy polling, same two processes";
        let rows: [(&'static str, Summary, &str, Summary, f64); 3] = [
            ("notify-pingpong", s[2], FUTEX, raw_futex, 1.2),
            ("notify-spin-pingpong", s[3], SPIN, raw_spin, 1.3),
            ("notify-adaptive-pingpong", s[4], SPIN, raw_spin, 2.0),
        ];
        for (i, (name, v, desc, b, bound)) in rows.into_iter().enumerate() {
            let (cpu, wall) = idle[i];
            let pct = ratio(cpu, wall) * 100.0;
            let r = ratio(v.p50_ns as f64, b.p50_ns as f64);
            let mut line = Line::new(name, &self.backend, v, Some((desc, b)));
            line = if name == "notify-adaptive-pingpong" {
                line.target(
                    "ratio_p50 <= 2 and idle_cpu_pct < 1",
                    r <= bound && pct < 1.0,
                )
            } else {
                line.target(&format!("ratio_p50 <= {bound}"), r <= bound)
            };
            line.idle_cpu_pct = Some(pct);
            line.idle_cpu_ns_per_s = Some((ratio(cpu, wall) * 1e9) as u64);
            line.idle_wait_ns = Some(wall as u64);
            if name != "notify-pingpong" {
                line.ratio_p50_vs_raw_futex = Some(ratio(v.p50_ns as f64, raw_futex.p50_ns as f64));
            }
            self.printer.emit(line)?;
        }
        if self.wants("channel-pingpong") {
            const CHAN: &str = "channel: raw atomic ping-pong on two words of a shared memfd, \
                                both sides busy polling, same two processes";
            let v = s[5];
            let r = ratio(v.p50_ns as f64, raw_spin.p50_ns as f64);
            let line = Line::new("channel-pingpong", &self.backend, v, Some((CHAN, raw_spin)))
                .target("ratio_p50 <= 2", r <= 2.0);
            self.printer.emit(line)?;
        }
        Ok(())
    }
}

/// One round trip on two channels: publish a sample of
/// [`CHANNEL_SAMPLE`] bytes to the consumer, receive its answer.
fn channel_round_trip(out: &mut Publisher, back: &Subscriber) -> CmdResult {
    let loan = out.loan().ctx("loaning a slot of the exporter's channel")?;
    loan.write(0, &[0u8; CHANNEL_SAMPLE])
        .ctx("writing a sample")?;
    loan.publish(CHANNEL_SAMPLE as u64)
        .ctx("publishing a sample")?;
    drop(back.receive().ctx("receiving the consumer's answer")?);
    Ok(())
}

/// One round trip on hal notifies of the given kind: signal the consumer's,
/// wait on ours.
fn round_trip(mine: &dyn DynNotify, theirs: &dyn DynNotify, kind: Pong) -> CmdResult {
    let opts = match kind {
        Pong::HalBlocking => blocking_wait(),
        Pong::HalSpin => spin_wait(),
        _ => WaitOptions::timeout(PEER_TIMEOUT),
    };
    theirs.signal().ctx("signalling the consumer's notify")?;
    mine.wait(opts)
        .ctx("waiting for the consumer's answer on our notify")
}

/// For each group of kinds, a warm-up block, then `blocks` timed blocks of
/// `rounds / blocks` cycles (the groups alternating, the order within a
/// group rotating from block to block), so that every kind is timed exactly
/// `rounds` times and drift hits all alike.
fn schedule(groups: &[&[Pong]], rounds: u32, warmup: u32, blocks: u32) -> Vec<Block> {
    let mut s: Vec<Block> = groups
        .iter()
        .map(|g| Block {
            kinds: g.to_vec(),
            cycles: warmup,
            timed: false,
        })
        .collect();
    let blocks = blocks.max(1);
    let per = rounds / blocks;
    for b in 0..blocks {
        let cycles = if b == 0 { per + rounds % blocks } else { per };
        if cycles == 0 {
            continue;
        }
        for g in groups {
            let mut kinds = g.to_vec();
            kinds.rotate_left(b as usize % g.len().max(1));
            s.push(Block {
                kinds,
                cycles,
                timed: true,
            });
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_times_exactly_n_of_each_kind() {
        let groups: [&[Pong]; 2] = [
            &[Pong::RawFutex, Pong::HalBlocking],
            &[Pong::RawSpin, Pong::HalSpin, Pong::HalAdaptive],
        ];
        for n in [1, 7, 100, 2001] {
            let s = schedule(&groups, n, 5, 4);
            for k in groups.iter().flat_map(|g| g.iter()) {
                let timed: u32 = s
                    .iter()
                    .filter(|b| b.timed)
                    .map(|b| b.cycles * b.kinds.iter().filter(|&x| x == k).count() as u32)
                    .sum();
                assert_eq!(timed, n, "{k:?}");
            }
        }
    }
}
