//! Scenario read-bandwidth.

use hal::AllocDesc;

use super::proto::{self, Cmd};
use super::report::{summarize, Line};
use super::{Bench, BANDWIDTH_FULL};
use crate::fail::{CmdResult, Context, Fail};
use crate::pattern::{self, Content};
use crate::stats::ratio;

impl Bench<'_> {
    /// read-bandwidth: the consumer reads a shared region in place, against
    /// a private buffer of the same size.
    pub(super) fn bandwidth(&mut self) -> CmdResult {
        let size = self.plan.bandwidth;
        crate::fits_in_memory(
            size.saturating_mul(3),
            "read-bandwidth (three times its region)",
        )?;
        let alloc = self
            .dev
            .allocate(&AllocDesc {
                size,
                ..self.desc.clone()
            })
            .ctx("allocating the read-bandwidth region")?;
        pattern::fill(alloc.as_ref(), Content::Pattern(7))?;
        let exported = self
            .dev
            .export_memory(alloc.as_ref(), &self.opts(&[self.peer.pid]))
            .ctx("exporting the read-bandwidth region")?;
        proto::send_handles(&self.peer.chan, &self.peer.who(), &[exported.to_text()])?;
        let (reply, series) = self.peer.call(&Cmd::Bandwidth {
            passes: self.plan.passes,
        })?;
        let [shared_ns, private_ns, memfd_ns]: [Vec<u64>; 3] = series
            .try_into()
            .map_err(|_| Fail::failed("the consumer sent the wrong number of series"))?;
        let bytes = reply.values.get(1).copied().unwrap_or(size as f64);
        let first = reply.values.first().copied().unwrap_or(0.0);
        let v = summarize(shared_ns);
        let b = summarize(private_ns);
        let gbps = |t: u64| ratio(bytes, t as f64);
        let mut line = Line::new(
            "read-bandwidth",
            &self.backend,
            v,
            Some((
                "read-bandwidth: a private buffer of the same size in the consumer, read the \
                 same way",
                b,
            )),
        );
        let m = summarize(memfd_ns);
        let r = ratio(gbps(v.p50_ns), gbps(b.p50_ns));
        line.ratio_p50 = Some(r);
        // Bandwidths: the baseline's time over ours.
        line.ratio_iqm = Some(ratio(b.iqm_ns, v.iqm_ns));
        line.raw_memfd_gbps = Some(gbps(m.p50_ns));
        line.ratio_vs_raw_memfd = Some(ratio(gbps(v.p50_ns), gbps(m.p50_ns)));
        line = line.target("ratio_p50 >= 0.95", r >= 0.95);
        line.gbps = Some(gbps(v.p50_ns));
        line.baseline_gbps = Some(gbps(b.p50_ns));
        line.first_pass_gbps = Some(ratio(bytes, first));
        line.size_bytes = Some(bytes as u64);
        line.read_path = reply.text;
        if size != BANDWIDTH_FULL {
            line.note = Some(format!(
                "{} run: a {} region instead of {}; times are per pass",
                self.plan.name,
                crate::out::bytes(size),
                crate::out::bytes(BANDWIDTH_FULL)
            ));
        } else {
            line.note = Some("times are per pass over the whole region".into());
        }
        self.printer.emit(line)
    }
}
