//! The figures of one scenario, printed as one JSON object per line or as a
//! row of the text table.

use serde::Serialize;

use crate::fail::CmdResult;
use crate::out;
use crate::stats::{percentiles, ratio};

/// Nearest-rank percentiles of a series, p99.9 included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Samples.
    pub n: usize,
    /// Median.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest sample.
    pub max_ns: u64,
    /// Interquartile mean: the mean of the middle half of the samples.
    /// Robust to outliers like a median, and finer than the clock's steps,
    /// which quantize the percentiles of operations of about 100 ns.
    pub iqm_ns: f64,
}

/// Summarise a series of nanoseconds.
pub fn summarize(mut v: Vec<u64>) -> Summary {
    v.sort_unstable();
    let iqm_ns = {
        let mid = &v[v.len() / 4..v.len() - v.len() / 4];
        if mid.is_empty() {
            0.0
        } else {
            mid.iter().map(|&x| x as f64).sum::<f64>() / mid.len() as f64
        }
    };
    let p999_ns = if v.is_empty() {
        0
    } else {
        let rank = (999 * v.len()).div_ceil(1000).max(1);
        v[rank.min(v.len()) - 1]
    };
    let p = percentiles(v);
    Summary {
        n: p.n,
        p50_ns: p.p50_ns,
        p99_ns: p.p99_ns,
        p999_ns,
        max_ns: p.max_ns,
        iqm_ns,
    }
}

/// Another floor a scenario is compared with, beside its baseline.
#[derive(Debug, Clone, Serialize)]
pub struct OtherBaseline {
    pub baseline: String,
    pub n: usize,
    pub p50_ns: u64,
    pub iqm_ns: f64,
    /// value / this baseline, of the medians.
    pub ratio_p50: f64,
}

impl OtherBaseline {
    /// `value` against the baseline `b`, described by `desc`.
    pub fn new(desc: &str, value: Summary, b: Summary) -> OtherBaseline {
        OtherBaseline {
            baseline: desc.to_string(),
            n: b.n,
            p50_ns: b.p50_ns,
            iqm_ns: b.iqm_ns,
            ratio_p50: ratio(value.p50_ns as f64, b.p50_ns as f64),
        }
    }
}

/// One scenario's result: the fields every line has, then the extras some
/// scenarios add (left out of the JSON when absent).
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub scenario: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    pub backend: String,
    pub n: usize,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub iqm_ns: f64,
    /// What the figures are compared with; `None` for absolute figures.
    pub baseline: Option<String>,
    pub baseline_n: Option<usize>,
    pub baseline_p50_ns: Option<u64>,
    pub baseline_p99_ns: Option<u64>,
    pub baseline_p999_ns: Option<u64>,
    pub baseline_max_ns: Option<u64>,
    pub baseline_iqm_ns: Option<f64>,
    /// value / baseline of the medians (for bandwidth: shared GB/s over
    /// private GB/s, so higher is better there).
    pub ratio_p50: Option<f64>,
    /// value / baseline of the interquartile means.
    pub ratio_iqm: Option<f64>,
    /// More floors, with their ratios.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub other_baselines: Vec<OtherBaseline>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gbps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_gbps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_pass_gbps: Option<f64>,
    /// read-bandwidth: a raw memfd of the same size, mapped shared in the
    /// consumer, read the same way (the floor for memory that can be
    /// shared), and the region's bandwidth over it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_memfd_gbps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_vs_raw_memfd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_path: Option<String>,
    /// Percent of one CPU burnt by a waiter while nobody signals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_cpu_pct: Option<f64>,
    /// CPU nanoseconds burnt per second of idle waiting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_cpu_ns_per_s: Option<u64>,
    /// How long the idle wait lasted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_wait_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_p50_vs_raw_futex: Option<f64>,
    /// import-cached: whether every import returned the mapping already held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached: Option<bool>,
    /// import-cached: the median cost of reading the clock twice, included
    /// in every sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timer_overhead_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live_exports: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub importers: Option<usize>,
    /// The target of the issue this scenario answers, and whether it was met.
    pub target: Option<String>,
    pub target_met: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Where the exporter and the consumer ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
}

impl Line {
    /// A line of figures `value`, against `baseline` when there is one.
    pub fn new(
        scenario: &'static str,
        backend: &str,
        value: Summary,
        baseline: Option<(&str, Summary)>,
    ) -> Line {
        let (desc, b) = match baseline {
            Some((d, b)) => (Some(d.to_string()), Some(b)),
            None => (None, None),
        };
        Line {
            scenario,
            config: None,
            backend: backend.to_string(),
            n: value.n,
            p50_ns: value.p50_ns,
            p99_ns: value.p99_ns,
            p999_ns: value.p999_ns,
            max_ns: value.max_ns,
            iqm_ns: value.iqm_ns,
            baseline: desc,
            baseline_n: b.map(|b| b.n),
            baseline_p50_ns: b.map(|b| b.p50_ns),
            baseline_p99_ns: b.map(|b| b.p99_ns),
            baseline_p999_ns: b.map(|b| b.p999_ns),
            baseline_max_ns: b.map(|b| b.max_ns),
            baseline_iqm_ns: b.map(|b| b.iqm_ns),
            ratio_p50: b.map(|b| ratio(value.p50_ns as f64, b.p50_ns as f64)),
            ratio_iqm: b.map(|b| ratio(value.iqm_ns, b.iqm_ns)),
            other_baselines: Vec::new(),
            gbps: None,
            baseline_gbps: None,
            first_pass_gbps: None,
            raw_memfd_gbps: None,
            ratio_vs_raw_memfd: None,
            size_bytes: None,
            read_path: None,
            idle_cpu_pct: None,
            idle_cpu_ns_per_s: None,
            idle_wait_ns: None,
            ratio_p50_vs_raw_futex: None,
            cached: None,
            timer_overhead_ns: None,
            live_exports: None,
            importers: None,
            target: None,
            target_met: None,
            note: None,
            placement: None,
        }
    }

    /// Set the target and whether it was met.
    pub fn target(mut self, what: &str, met: bool) -> Line {
        self.target = Some(what.to_string());
        self.target_met = Some(met);
        self
    }

    /// The scenario and its configuration, for the table and the plot.
    pub fn label(&self) -> String {
        match &self.config {
            Some(c) => format!("{} {c}", self.scenario),
            None => self.scenario.to_string(),
        }
    }
}

/// Prints lines as they come: JSON, or the rows of a table with the
/// baselines as numbered notes at the end.
pub struct Printer {
    json: bool,
    /// Where the processes run, recorded in every line.
    pub placement: String,
    notes: Vec<String>,
    pub lines: Vec<Line>,
}

impl Printer {
    /// A printer; the text table's header is printed at once.
    pub fn new(json: bool, header: &str, placement: String) -> CmdResult<Printer> {
        if !json {
            out::line(header)?;
            out::line("")?;
            out::line(format!(
                "  {:<28} {:>6} {:>9} {:>9} {:>9} {:>9}  {:>9} {:>7}  target",
                "scenario", "n", "p50", "p99", "p99.9", "max", "base p50", "ratio"
            ))?;
        }
        Ok(Printer {
            json,
            placement,
            notes: Vec::new(),
            lines: Vec::new(),
        })
    }

    /// Print one scenario's line.
    pub fn emit(&mut self, mut line: Line) -> CmdResult {
        line.placement = Some(self.placement.clone());
        if self.json {
            out::json(&line)?;
        } else {
            self.row(&line)?;
        }
        self.lines.push(line);
        Ok(())
    }

    /// The number of the note describing baseline `b` (added if new).
    fn note_for(&mut self, b: &str) -> usize {
        match self.notes.iter().position(|n| n == b) {
            Some(k) => k + 1,
            None => {
                self.notes.push(b.to_string());
                self.notes.len()
            }
        }
    }

    fn row(&mut self, l: &Line) -> CmdResult {
        let note = match &l.baseline {
            Some(b) => format!("[{}]", self.note_for(b)),
            None => "-".to_string(),
        };
        let base = l.baseline_p50_ns.map_or("-".to_string(), out::nanos);
        let r = l.ratio_p50.map_or("-".to_string(), |r| format!("{r:.2}x"));
        let target = match (&l.target, l.target_met) {
            (Some(t), Some(true)) => format!("met ({t})"),
            (Some(t), _) => format!("MISSED ({t})"),
            _ => String::new(),
        };
        out::line(format!(
            "  {:<28} {:>6} {:>9} {:>9} {:>9} {:>9}  {:>9} {:>7}{note:<4} {target}",
            l.label(),
            l.n,
            out::nanos(l.p50_ns),
            out::nanos(l.p99_ns),
            out::nanos(l.p999_ns),
            out::nanos(l.max_ns),
            base,
            r,
        ))?;
        let mut extra = Vec::new();
        for o in &l.other_baselines {
            let k = self.note_for(&o.baseline);
            extra.push(format!(
                "{:.2}x [{k}] (its p50 {})",
                o.ratio_p50,
                out::nanos(o.p50_ns)
            ));
        }
        if let (Some(g), Some(b)) = (l.gbps, l.baseline_gbps) {
            extra.push(format!("{g:.2} GB/s shared vs {b:.2} GB/s private"));
        }
        if let (Some(m), Some(r)) = (l.raw_memfd_gbps, l.ratio_vs_raw_memfd) {
            extra.push(format!(
                "a raw memfd of the same size {m:.2} GB/s ({r:.2}x of it)"
            ));
        }
        if let Some(f) = l.first_pass_gbps {
            extra.push(format!("first pass (page faults) {f:.2} GB/s"));
        }
        if let Some(c) = l.idle_cpu_pct {
            extra.push(format!("idle waiter burns {c:.3}% of a CPU"));
        }
        if let Some(r) = l.ratio_p50_vs_raw_futex {
            extra.push(format!("{r:.2}x the raw futex p50"));
        }
        if let Some(t) = l.timer_overhead_ns {
            extra.push(format!("clock overhead {t} ns per sample"));
        }
        if l.cached == Some(false) {
            extra.push("not served from an import cache".to_string());
        }
        if let Some(n) = &l.note {
            extra.push(n.clone());
        }
        if !extra.is_empty() {
            out::line(format!("  {:<28} {}", "", extra.join("; ")))?;
        }
        Ok(())
    }

    /// The baselines' notes and the closing line (text mode).
    pub fn finish(&self, footer: &[String]) -> CmdResult {
        if self.json {
            return Ok(());
        }
        out::line("")?;
        out::line("  baselines, measured in this run between the same processes:")?;
        for (k, n) in self.notes.iter().enumerate() {
            out::line(format!("  [{}] {n}", k + 1))?;
        }
        out::line(
            "  ratio = hal p50 / baseline p50 (lower is better), except read-bandwidth, \
             channel-throughput and cuda-read: hal GB/s / baseline GB/s (higher is better)",
        )?;
        for f in footer {
            out::line(format!("  {f}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p999_is_nearest_rank() {
        let s = summarize((1..=1000).rev().collect());
        assert_eq!(
            (s.n, s.p50_ns, s.p99_ns, s.p999_ns, s.max_ns),
            (1000, 500, 990, 999, 1000)
        );
        let s = summarize(vec![3]);
        assert_eq!((s.p50_ns, s.p999_ns, s.max_ns), (3, 3, 3));
        assert_eq!(summarize(Vec::new()), Summary::default());
        assert_eq!(summarize(vec![1, 2, 6]).iqm_ns, 3.0);
        assert_eq!(summarize(vec![100, 1, 2, 3, 4, 5, 6, 1000]).iqm_ns, 4.5);
    }

    #[test]
    fn lines_carry_every_required_field() {
        let v = summarize(vec![10, 20, 30]);
        let b = summarize(vec![5, 10, 15]);
        let l = Line::new("export", "cpu-shm", v, Some(("raw", b))).target("x", true);
        let j = serde_json::to_value(&l).unwrap();
        for k in [
            "scenario",
            "backend",
            "n",
            "p50_ns",
            "p99_ns",
            "p999_ns",
            "max_ns",
            "baseline",
            "baseline_p50_ns",
            "ratio_p50",
        ] {
            assert!(j.get(k).is_some(), "{k} missing: {j}");
        }
        assert_eq!(j["ratio_p50"], 2.0);
        assert!(j.get("gbps").is_none());
    }
}
