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
            out::wrapped("", "  ", header)?;
            out::line("")?;
            out::line(
                row_text(
                    "scenario", "n", "p50", "p99", "base p50", "ratio", "", "target",
                )
                .trim_end(),
            )?;
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
        for text in self.row_lines(l) {
            out::line(text)?;
        }
        Ok(())
    }

    /// The text lines of one scenario: its row (after its label alone
    /// where the label is too long for the column), then what else it
    /// measured, wrapped; each within [`out::WIDTH`].
    fn row_lines(&mut self, l: &Line) -> Vec<String> {
        let mut lines = Vec::new();
        let note = match &l.baseline {
            Some(b) => format!("[{}]", self.note_for(b)),
            None => "-".to_string(),
        };
        let base = l.baseline_p50_ns.map_or("-".to_string(), out::nanos);
        let r = l.ratio_p50.map_or("-".to_string(), ratio_cell);
        let mut extra = Vec::new();
        let target = match (&l.target, l.target_met) {
            (Some(t), met) => {
                let verdict = if met == Some(true) { "met" } else { "MISSED" };
                let cell = format!("{verdict} ({})", short_target(t));
                if cell.len() <= TARGET_COLUMN {
                    cell
                } else {
                    extra.push(format!("target: {t}"));
                    verdict.to_string()
                }
            }
            _ => String::new(),
        };
        let label = l.label();
        let in_row = if label.len() > LABEL_COLUMN {
            lines.push(format!("  {label}"));
            String::new()
        } else {
            label
        };
        lines.push(
            row_text(
                &in_row,
                &l.n.to_string(),
                &out::nanos(l.p50_ns),
                &out::nanos(l.p99_ns),
                &base,
                &r,
                &note,
                &target,
            )
            .trim_end()
            .to_string(),
        );
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
            let indent = " ".repeat(6);
            lines.extend(out::wrap(&indent, &indent, &extra.join("; "), out::WIDTH));
        }
        lines
    }

    /// How many scenarios had a target, and how many of those missed it.
    pub fn targets(&self) -> (usize, usize) {
        let with: Vec<&Line> = self.lines.iter().filter(|l| l.target.is_some()).collect();
        let missed = with.iter().filter(|l| l.target_met != Some(true)).count();
        (with.len(), missed)
    }

    /// The baselines' notes and the closing line (text mode).
    pub fn finish(&self, footer: &[String]) -> CmdResult {
        if self.json {
            return Ok(());
        }
        out::line("")?;
        out::line("  baselines, measured in this run between the same processes:")?;
        for (k, n) in self.notes.iter().enumerate() {
            out::wrapped(&format!("  [{}] ", k + 1), "      ", n)?;
        }
        out::wrapped(
            "  ",
            "  ",
            "ratio = hal p50 / baseline p50 (lower is better), except read-bandwidth, \
             channel-throughput, cuda-read and remote-read-bw: hal GB/s / baseline GB/s (higher \
             is better); \
             p99.9 and max of each side are in --json (max is one sample: no ratio is made of it)",
        )?;
        for f in footer {
            out::wrapped("  ", "  ", f)?;
        }
        Ok(())
    }
}

/// The width of the scenario column; longer labels go on a line of their own.
const LABEL_COLUMN: usize = 24;
/// The most a target cell may take and keep the row within [`out::WIDTH`].
const TARGET_COLUMN: usize = out::WIDTH - 80;

/// A row of the table, its columns aligned.
#[allow(clippy::too_many_arguments)]
fn row_text(
    label: &str,
    n: &str,
    p50: &str,
    p99: &str,
    base: &str,
    ratio: &str,
    note: &str,
    target: &str,
) -> String {
    format!("  {label:<24} {n:>7} {p50:>9} {p99:>9} {base:>9} {ratio:>7} {note:<5} {target}")
}

/// A ratio in at most 7 columns.
fn ratio_cell(r: f64) -> String {
    if r >= 999_999.5 {
        format!("{r:.0e}x")
    } else if r >= 100.0 {
        format!("{r:.0}x")
    } else {
        format!("{r:.2}x")
    }
}

/// A target as the row shows it: `ratio_p50` is the ratio column, so
/// `ratio_p50 <= 2` reads `<= 2`.
fn short_target(t: &str) -> String {
    t.strip_prefix("ratio_p50 ").unwrap_or(t).to_string()
}

/// The last line of a text run: how many targets were missed, and what
/// the exit status says about it.
pub fn verdict_line(with: usize, missed: usize, check: bool) -> String {
    if with == 0 {
        "no scenario of this run has a target".to_string()
    } else if missed == 0 {
        format!("all {with} targets met")
    } else if check {
        format!("{missed} of {with} targets MISSED: exit status 1 (--check)")
    } else {
        format!(
            "{missed} of {with} targets MISSED; exit status 0 all the same (a benchmark): \
             --check exits 1 on a miss"
        )
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

    /// A line with everything a row can show, long values included.
    fn busy_line(scenario: &'static str, config: Option<&str>, target: &str) -> Line {
        let v = summarize(vec![123_456_789, 987_654_321, 1_000_000_000_000]);
        let b = summarize(vec![1, 2, 3]);
        let mut l = Line::new(scenario, "cpu-shm", v, Some((&"a baseline ".repeat(20), b)))
            .target(target, false);
        l.config = config.map(str::to_string);
        l.n = 1_000_000;
        l.other_baselines = vec![OtherBaseline::new("another floor", v, b); 3];
        l.gbps = Some(12345.678);
        l.baseline_gbps = Some(12345.678);
        l.raw_memfd_gbps = Some(12345.678);
        l.ratio_vs_raw_memfd = Some(1234.5);
        l.first_pass_gbps = Some(12345.678);
        l.idle_cpu_pct = Some(100.0);
        l.ratio_p50_vs_raw_futex = Some(12345.0);
        l.timer_overhead_ns = Some(12345);
        l.cached = Some(false);
        l.note = Some("a note ".repeat(30));
        l
    }

    #[test]
    fn every_text_line_fits_in_100_columns() {
        let mut p = Printer {
            json: true,
            placement: String::new(),
            notes: (0..12).map(|k| format!("note {k}")).collect(),
            lines: Vec::new(),
        };
        let mut all = Vec::new();
        for (scenario, config, target) in [
            ("export", None, "ratio_p50 <= 2"),
            (
                "notify-adaptive-pingpong",
                None,
                "ratio_p50 <= 2 and idle_cpu_pct < 1",
            ),
            (
                "channel-throughput",
                Some("subscribers=4"),
                "ratio_p50 >= 0.9",
            ),
            ("import-cached", None, "p50_ns <= 60"),
            ("cuda-import-cached", None, "ratio_p50 <= 1/300"),
        ] {
            all.extend(p.row_lines(&busy_line(scenario, config, target)));
        }
        all.push(row_text(
            "scenario", "n", "p50", "p99", "base p50", "ratio", "", "target",
        ));
        for l in &all {
            assert!(
                l.chars().count() <= out::WIDTH,
                "{} columns: {l:?}",
                l.len()
            );
        }
        assert!(all.iter().any(|l| l.contains("MISSED (<= 2)")), "{all:#?}");
        assert!(
            all.iter()
                .any(|l| l.contains("target: ratio_p50 <= 2 and idle_cpu_pct < 1")),
            "{all:#?}"
        );
    }

    #[test]
    fn the_last_line_says_what_the_exit_status_means() {
        assert!(verdict_line(14, 6, false).contains("exit status 0"));
        assert!(verdict_line(14, 6, false).contains("--check"));
        assert!(verdict_line(14, 6, true).contains("exit status 1"));
        assert_eq!(verdict_line(14, 0, false), "all 14 targets met");
        for (w, m, c) in [(14, 6, false), (14, 6, true), (0, 0, false)] {
            assert!(verdict_line(w, m, c).len() + 2 <= out::WIDTH);
        }
    }
}
