//! Scenario scaling: imports with many live exports, and many importers.

use hal::dynamic::DynAllocation;
use hal::Exported;

use super::host::open_files;
use super::peer::Peer;
use super::proto::{self, Cmd};
use super::report::{summarize, Line, Summary};
use super::{one, Bench, IMPORT_WARMUP};
use crate::fail::{CmdResult, Context};
use crate::stats::ratio;

impl Bench<'_> {
    /// scaling: import latency with more live exports.
    ///
    /// A live memory export holds two descriptors here (the region's
    /// memfd and its duplicate registered with the broker). Where the open-file limit cannot hold that many, the
    /// configuration is made of as many memory exports as fit (the ones
    /// imported) and notify exports (one descriptor each) for the rest:
    /// every one of them is an entry of the exporter's broker. The imports
    /// ask the broker (`HAL_PIDFD_GETFD=0`): its table is what this scales;
    /// the direct path's board states at most 4,096 live exports, and
    /// imports of the others ask the broker as these do.
    pub(super) fn scaling_exports(&mut self) -> CmdResult {
        let pid = self.peer.pid;
        let opts = self.opts(&[pid]);
        let mut memory: Vec<(Box<dyn DynAllocation>, Exported)> = Vec::new();
        let mut others: Vec<Exported> = Vec::new();
        let mut reference: Option<Summary> = None;
        let budget = self.file_limit.saturating_sub(open_files() + 256);
        let configs = self.plan.live_exports.clone();
        for (i, &want) in configs.iter().enumerate() {
            let k = want.min(budget as usize).max(1);
            // m memory exports (two descriptors each) and k - m notify
            // exports (one each) hold m + k descriptors.
            let mem_target = if 2 * k as u64 <= budget {
                k
            } else {
                budget.saturating_sub(k as u64).clamp(1, k as u64) as usize
            };
            while memory.len() < mem_target {
                let p = self.probe()?;
                let e = self
                    .dev
                    .export_memory(p.as_ref(), &opts)
                    .ctx("exporting a region")?;
                memory.push((p, e));
            }
            while memory.len() + others.len() < k {
                let n = self.dev.create_notify().ctx("creating a notify")?;
                others.push(
                    self.dev
                        .export_notify(n.as_ref(), &opts)
                        .ctx("exporting a notify")?,
                );
            }
            let mut notes = Vec::new();
            if k < want {
                notes.push(format!(
                    "{k} live exports instead of {want}: the open-file limit is {}",
                    self.file_limit
                ));
            }
            if !others.is_empty() {
                notes.push(format!(
                    "{} memory exports (the ones imported) and {} notify exports: a live \
                     memory export holds 2 descriptors here and the open-file limit is {}",
                    memory.len(),
                    others.len(),
                    self.file_limit
                ));
            }
            let picks: Vec<String> = (0..self.plan.scale_n + IMPORT_WARMUP)
                .map(|_| memory[self.rng.below(memory.len())].1.to_text())
                .collect();
            proto::send_handles(&self.peer.chan, &self.peer.who(), &picks)?;
            let (_, series) = self.peer.call(&Cmd::ImportEach { direct: false })?;
            let [hal_ns] = one(series)?;
            let v = summarize(hal_ns.into_iter().skip(IMPORT_WARMUP).collect());
            let r = *reference.get_or_insert(v);
            let mut line = Line::new(
                "scaling",
                &self.backend,
                v,
                Some((
                    "scaling: the same import (decode + import + first touch of a 1 MiB \
                     region, in the consumer, asking the broker) with the fewest live exports",
                    r,
                )),
            );
            // The target is on the largest configuration.
            if i > 0 && i + 1 == configs.len() {
                let q = ratio(v.p50_ns as f64, r.p50_ns as f64);
                line = line.target("ratio_p50 <= 1.2", q <= 1.2);
            }
            line.config = Some(format!("live-exports={}", memory.len() + others.len()));
            line.live_exports = Some(memory.len() + others.len());
            line.note = (!notes.is_empty()).then(|| notes.join("; "));
            self.printer.emit(line)?;
        }
        Ok(())
    }

    /// scaling: import latency with several importer processes at once;
    /// `direct`: each with the direct path on (scaling-direct).
    pub(super) fn scaling_importers(&mut self, direct: bool) -> CmdResult {
        let mut reference: Option<Summary> = None;
        for &p in &self.plan.importers {
            let mut peers = Vec::with_capacity(p);
            for _ in 0..p {
                let peer = Peer::spawn(None)?;
                peer.open(&self.backend, self.dev.info().ordinal)?;
                peers.push(peer);
            }
            let pids: Vec<u32> = peers.iter().map(|x| x.pid).collect();
            let opts = self.opts(&pids);
            let m = self.plan.importer_regions;
            let mut regions = Vec::with_capacity(m);
            for _ in 0..m {
                let r = self.probe()?;
                let e = self
                    .dev
                    .export_memory(r.as_ref(), &opts)
                    .ctx("exporting a region")?;
                regions.push((r, e));
            }
            let texts: Vec<String> = regions.iter().map(|(_, e)| e.to_text()).collect();
            for peer in &peers {
                proto::send_handles(&peer.chan, &peer.who(), &texts)?;
            }
            let rounds = self.plan.importer_samples.div_ceil(p * m).max(1) as u32;
            // Every importer starts as soon as it reads the command: they
            // import at once, contending for the exporter's broker.
            for peer in &peers {
                peer.chan
                    .send_json(&Cmd::ImportKeep { rounds, direct }, &[])?;
            }
            let mut all = Vec::new();
            for peer in &peers {
                let (_, series) = proto::recv_reply(&peer.chan, &peer.who())?;
                let [s] = one(series)?;
                all.extend(s);
            }
            for peer in peers {
                peer.quit()?;
            }
            let v = summarize(all);
            let r = *reference.get_or_insert(v);
            let mut line = Line::new(
                if direct { "scaling-direct" } else { "scaling" },
                &self.backend,
                v,
                Some((
                    "scaling: the same imports (decode + import + first touch of 1 MiB \
                     regions, kept until the round ends) by a single importer process",
                    r,
                )),
            );
            line.config = Some(format!("importers={p}"));
            line.importers = Some(p);
            self.printer.emit(line)?;
        }
        Ok(())
    }
}
