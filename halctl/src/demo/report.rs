//! What the demo reports: its JSON form, the human one, and the summary of a failure.

use serde::Serialize;

use crate::fail::CmdResult;
use crate::out;
use crate::stats::{median_u64, ratio, Percentiles};

#[derive(Debug, Serialize)]
pub(super) struct Mismatch {
    pub(super) offset: u64,
    pub(super) expected: u8,
    pub(super) found: u8,
}

#[derive(Debug, Serialize)]
pub(super) struct VerifiedOut {
    pub(super) ok: bool,
    pub(super) bytes: u64,
    pub(super) mismatches: u64,
    pub(super) first_mismatch: Option<Mismatch>,
    pub(super) crc32_exporter: String,
    pub(super) crc32_consumer: String,
}

/// One import path's first imports against the raw calls of that path.
#[derive(Debug, Serialize)]
pub(super) struct PathOut {
    pub(super) value_ns: u64,
    pub(super) baseline_ns: u64,
    pub(super) ratio: f64,
    pub(super) samples: usize,
    pub(super) value_samples_ns: Vec<u64>,
    pub(super) baseline_samples_ns: Vec<u64>,
    pub(super) baseline: &'static str,
}

impl PathOut {
    /// The medians of `value` and `baseline` and their ratio.
    pub(super) fn new(value: &[u64], baseline: &[u64], desc: &'static str) -> PathOut {
        let value_ns = median_u64(value);
        let baseline_ns = median_u64(baseline);
        PathOut {
            value_ns,
            baseline_ns,
            ratio: ratio(value_ns as f64, baseline_ns as f64),
            samples: value.len(),
            value_samples_ns: value.to_vec(),
            baseline_samples_ns: baseline.to_vec(),
            baseline: desc,
        }
    }
}

/// hal's default import: the path it took, against the raw calls of that
/// path.
#[derive(Debug, Serialize)]
pub(super) struct ImportOut {
    /// `direct` (every timed import taken from the exporter's board with
    /// `pidfd_getfd`), `broker` (every one asked the broker) or `mixed`.
    pub(super) path: &'static str,
    #[serde(flatten)]
    pub(super) figures: PathOut,
    /// The (untimed-for-the-ratio) import of the demo buffer itself.
    pub(super) buffer_import_ns: u64,
    /// How many of the timed imports took the direct path (the exporter's
    /// board, no request); the others asked the exporter's broker.
    pub(super) direct: u64,
    /// Why the raw `pidfd_getfd` floor could not be measured, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) direct_baseline_error: Option<String>,
}

/// How `samples` timed imports of which `direct` took the direct path
/// came to the consumer.
fn import_path(direct: u64, samples: usize) -> String {
    let samples = samples as u64;
    if direct == 0 {
        "each asked the exporter's broker (the consumer may not take the exporter's \
         descriptors itself, or HAL_PIDFD_GETFD=0)"
            .to_string()
    } else if direct >= samples {
        "each taken from the exporter's board through /proc/PID/fd (the direct path, where \
         pidfd_getfd is allowed; the board itself came from the exporter's broker once, before \
         the timed imports)"
            .to_string()
    } else {
        format!(
            "{direct} of {samples} taken from the exporter's board (the direct path), the others \
             through its broker"
        )
    }
}

#[derive(Debug, Serialize)]
pub(super) struct NotifyOut {
    pub(super) ok: bool,
    pub(super) wait: &'static str,
    pub(super) value: Percentiles,
    pub(super) baseline: Percentiles,
    pub(super) ratio_p50: f64,
    pub(super) ratio_p99: f64,
    pub(super) baseline_desc: &'static str,
}

#[derive(Debug, Serialize)]
pub(super) struct BandwidthOut {
    pub(super) value_gbps: f64,
    pub(super) baseline_gbps: f64,
    pub(super) ratio: f64,
    pub(super) path: String,
    pub(super) passes: u32,
    pub(super) baseline: &'static str,
}

#[derive(Debug, Serialize)]
pub(super) struct LeasesOut {
    pub(super) ok: bool,
    pub(super) while_mapped: Option<usize>,
    pub(super) after_exit: Option<usize>,
}

#[derive(Debug, Serialize)]
pub(super) struct DemoOut {
    pub(super) ok: bool,
    pub(super) backend: String,
    pub(super) device: String,
    pub(super) size: u64,
    pub(super) exporter_pid: u32,
    pub(super) consumer_pid: u32,
    pub(super) handle: String,
    /// Who may import the exports: the consumer's pid alone where the
    /// backend has pid allow-lists, else the backend's default.
    pub(super) importers: String,
    pub(super) verified: VerifiedOut,
    pub(super) leases: LeasesOut,
    pub(super) import: ImportOut,
    /// hal's import with the direct path off: a request to the exporter's
    /// broker, against a raw request and `SCM_RIGHTS` reply.
    pub(super) import_broker: PathOut,
    pub(super) notify_round_trip: NotifyOut,
    pub(super) read_bandwidth: BandwidthOut,
}

pub(super) const DIRECT_BASELINE: &str =
    "raw pidfd_getfd of a sealed memfd in the exporter + fstat + mmap + first touch \
     (the pidfd opened once, beforehand)";
pub(super) const BROKER_BASELINE: &str =
    "raw request + SCM_RIGHTS reply of a sealed memfd over a kept Unix socket connection \
     + fstat + mmap + first touch";
pub(super) const NOTIFY_BASELINE: &str = "raw futex ping-pong on a shared memfd, blocking waits";
pub(super) const BANDWIDTH_BASELINE: &str = "a private buffer of the same size in the consumer";

pub(super) fn failure_summary(r: &DemoOut, consumer_ok: bool) -> String {
    let mut what = Vec::new();
    if !r.verified.ok {
        what.push("the consumer did not read back what was written");
    }
    if !r.leases.ok {
        what.push("the lease count was wrong");
    }
    if !r.notify_round_trip.ok {
        what.push("the notify ping-pong did not complete");
    }
    if !consumer_ok {
        what.push("the consumer exited with an error");
    }
    format!("demo failed: {}", what.join("; "))
}

pub(super) fn gbps(v: f64) -> String {
    format!("{v:.2} GB/s")
}

pub(super) fn print_human(r: &DemoOut) -> CmdResult {
    let short: String = r.handle.chars().take(28).collect();
    out::wrapped(
        "",
        "  ",
        &format!(
            "halctl demo on {} (device {}): {} buffer, exporter pid {}, consumer pid {}",
            r.backend,
            r.device,
            out::bytes(r.size),
            r.exporter_pid,
            r.consumer_pid
        ),
    )?;
    out::wrapped(
        "  export  ",
        "           ",
        &format!(
            "filled with a pattern (crc32 {}), handle {short}... ({} chars), importers: {}",
            r.verified.crc32_exporter,
            r.handle.len(),
            r.importers
        ),
    )?;
    let verdict = if r.verified.ok {
        format!(
            "every byte matches, crc32 {} matches",
            r.verified.crc32_consumer
        )
    } else {
        match &r.verified.first_mismatch {
            Some(m) => format!(
                "{} byte(s) differ, first at offset {} (expected {:#04x}, found {:#04x}); crc32 {}",
                r.verified.mismatches, m.offset, m.expected, m.found, r.verified.crc32_consumer
            ),
            None => format!(
                "MISMATCH: crc32 {} or the length differs",
                r.verified.crc32_consumer
            ),
        }
    };
    out::wrapped(
        "  verify  ",
        "           ",
        &format!("the consumer read {} bytes: {verdict}", r.verified.bytes),
    )?;
    let lease = |v: Option<usize>| v.map_or("n/a".to_string(), |n| n.to_string());
    out::wrapped(
        "  leases  ",
        "           ",
        &format!(
            "importers while mapped: {}, after the consumer exited: {}",
            lease(r.leases.while_mapped),
            lease(r.leases.after_exit)
        ),
    )?;
    out::line("")?;
    for l in table(r) {
        out::line(l)?;
    }
    out::line("")?;
    out::line(if r.ok {
        format!(
            "ok: every byte verified in the consumer, {} notify round trips completed",
            r.notify_round_trip.value.n
        )
    } else {
        "FAILED: see above".to_string()
    })
}

/// A row of the figures table: label, hal, baseline, ratio, note.
fn row(label: &str, hal: &str, base: &str, ratio: &str, note: &str) -> String {
    format!("  {label:<26} {hal:>11} {base:>11} {ratio:>7}  {note}")
        .trim_end()
        .to_string()
}

fn times(q: f64) -> String {
    format!("{q:.2}x")
}

/// The figures table and its notes, each line within [`out::WIDTH`].
pub(super) fn table(r: &DemoOut) -> Vec<String> {
    let mut lines = vec![row("", "hal", "raw", "ratio", "")];
    let mut notes: Vec<String> = Vec::new();
    let mut note = |text: String| {
        notes.push(text);
        format!("[{}]", notes.len())
    };
    let i = &r.import;
    let f = &i.figures;
    let b = &r.import_broker;
    let import_label = match i.path {
        "direct" => "import, direct path",
        "mixed" => "import, default (mixed)",
        _ => "import, default path",
    };
    if i.path != "broker" {
        let k = note(format!(
            "{import_label}: hal's default import + first touch, {}; against {}; median of {} \
             of each, interleaved",
            import_path(i.direct, f.samples),
            f.baseline,
            f.samples
        ));
        lines.push(row(
            import_label,
            &out::nanos(f.value_ns),
            &out::nanos(f.baseline_ns),
            &times(f.ratio),
            &k,
        ));
    }
    let mut broker_note = format!(
        "import, broker path: hal's import + first touch with the direct path off (a request \
         to the exporter's broker, the descriptor over SCM_RIGHTS on a kept connection); \
         against {}; median of {} of each, interleaved",
        b.baseline, b.samples
    );
    if i.path == "broker" {
        broker_note.push_str(&format!(
            ". hal's default imports took this path too: {}",
            import_path(i.direct, f.samples)
        ));
        if let Some(e) = &i.direct_baseline_error {
            broker_note.push_str(&format!(" (a raw pidfd_getfd here: {e})"));
        }
    }
    let k = note(broker_note);
    lines.push(row(
        "import, broker path",
        &out::nanos(b.value_ns),
        &out::nanos(b.baseline_ns),
        &times(b.ratio),
        &k,
    ));
    let n = &r.notify_round_trip;
    let k = note(format!(
        "notify round trip: {}; {} round trips of each, interleaved; max is the single worst \
         round trip of each, shown without a ratio (one preempted sample decides it)",
        n.baseline_desc, n.value.n
    ));
    lines.push(row(
        "notify round trip p50",
        &out::nanos(n.value.p50_ns),
        &out::nanos(n.baseline.p50_ns),
        &times(n.ratio_p50),
        &k,
    ));
    lines.push(row(
        "notify round trip p99",
        &out::nanos(n.value.p99_ns),
        &out::nanos(n.baseline.p99_ns),
        &times(n.ratio_p99),
        "",
    ));
    lines.push(row(
        "notify round trip max",
        &out::nanos(n.value.max_ns),
        &out::nanos(n.baseline.max_ns),
        "-",
        "",
    ));
    let bw = &r.read_bandwidth;
    let k = note(format!(
        "read bandwidth: {}, read the same way: {}; median of {} passes",
        bw.baseline, bw.path, bw.passes
    ));
    lines.push(row(
        "read bandwidth",
        &gbps(bw.value_gbps),
        &gbps(bw.baseline_gbps),
        &times(bw.ratio),
        &k,
    ));
    lines.push(String::new());
    lines.push(
        "  raw: the same job done with the raw system calls, in this run, between the same two \
                processes:"
            .to_string(),
    );
    for (k, text) in notes.iter().enumerate() {
        lines.extend(out::wrap(
            &format!("  [{}] ", k + 1),
            "      ",
            text,
            out::WIDTH,
        ));
    }
    lines.extend(out::wrap(
        "  ",
        "  ",
        "ratio = hal / raw: for times lower is better, for bandwidth higher is better",
        out::WIDTH,
    ));
    lines
}
