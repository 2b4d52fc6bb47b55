//! Scenario rendezvous: N member processes join a group and all-gather
//! their handles (`hal::group`), against what each does next with one:
//! the first import of another member's handle, in the same processes.

use super::peer::Peer;
use super::proto::{self, Cmd};
use super::report::{summarize, Line};
use super::{two, Bench, REGION};
use crate::fail::CmdResult;
use crate::stats::ratio;

impl Bench<'_> {
    /// rendezvous of each of the plan's group sizes.
    pub(super) fn rendezvous(&mut self) -> CmdResult {
        for &size in &self.plan.group_sizes.clone() {
            let mut members = Vec::with_capacity(size);
            for _ in 0..size {
                let peer = Peer::spawn(None)?;
                peer.open(&self.backend, self.dev.info().ordinal)?;
                members.push(peer);
            }
            let name = format!("halctl-bench-{}-{size}", std::process::id());
            for m in &members {
                m.chan.send_json(
                    &Cmd::Rendezvous {
                        name: name.clone(),
                        size,
                        rounds: self.plan.group_rounds,
                        region: REGION,
                    },
                    &[],
                )?;
            }
            let (mut gathers, mut imports) = (Vec::new(), Vec::new());
            for m in &members {
                let (_, series) = proto::recv_reply(&m.chan, &m.who())?;
                let [g, i] = two(series)?;
                gathers.extend(g);
                imports.extend(i);
            }
            for m in members {
                m.quit()?;
            }
            let (g, i) = (summarize(gathers), summarize(imports));
            let mut line = Line::new(
                "rendezvous",
                &self.backend,
                g,
                Some((
                    "rendezvous: the first import (decode + import + first touch of 1 MiB) of \
                     another member's gathered handle, by the same members in the same run",
                    i,
                )),
            );
            line.config = Some(format!("members={size}"));
            line.importers = Some(size);
            line.note = Some(format!(
                "an all-gather of {size} handles costs {:.2}x one import",
                ratio(g.p50_ns as f64, i.p50_ns as f64)
            ));
            self.printer.emit(line)?;
        }
        Ok(())
    }
}
