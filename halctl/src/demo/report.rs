//! What the demo reports: its JSON form, the human one, and the summary of a failure.

use serde::Serialize;

use crate::fail::CmdResult;
use crate::out;
use crate::stats::Percentiles;

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

#[derive(Debug, Serialize)]
pub(super) struct ImportOut {
    pub(super) value_ns: u64,
    pub(super) baseline_ns: u64,
    pub(super) ratio: f64,
    pub(super) samples: usize,
    pub(super) value_samples_ns: Vec<u64>,
    pub(super) baseline_samples_ns: Vec<u64>,
    /// The (untimed-for-the-ratio) import of the demo buffer itself.
    pub(super) buffer_import_ns: u64,
    /// How many of the timed imports took the direct path (the exporter's
    /// board, no request); the others asked the exporter's broker.
    pub(super) direct: u64,
    pub(super) baseline: &'static str,
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
        "each taken from the exporter's board with pidfd_getfd (the direct path; the board \
         itself came from the exporter's broker once)"
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
    pub(super) ratio_max: f64,
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
    pub(super) notify_round_trip: NotifyOut,
    pub(super) read_bandwidth: BandwidthOut,
}

pub(super) const IMPORT_BASELINE: &str =
    "raw memfd: connect + SCM_RIGHTS receipt + fstat + mmap + first touch";
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
    out::line(format!(
        "halctl demo on {} (device {}): {} buffer, exporter pid {}, consumer pid {}",
        r.backend,
        r.device,
        out::bytes(r.size),
        r.exporter_pid,
        r.consumer_pid
    ))?;
    out::line(format!(
        "  export   filled with a pattern (crc32 {}), handle {short}... ({} chars), importers: {}",
        r.verified.crc32_exporter,
        r.handle.len(),
        r.importers
    ))?;
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
    out::line(format!(
        "  verify   the consumer read {} bytes: {verdict}",
        r.verified.bytes
    ))?;
    let lease = |v: Option<usize>| v.map_or("n/a".to_string(), |n| n.to_string());
    out::line(format!(
        "  leases   importers while mapped: {}, after the consumer exited: {}",
        lease(r.leases.while_mapped),
        lease(r.leases.after_exit)
    ))?;
    out::line("")?;
    out::line(format!(
        "  {:<24} {:>12} {:>12} {:>8}",
        "", "hal", "baseline", "ratio"
    ))?;
    let i = &r.import;
    out::line(format!(
        "  {:<24} {:>12} {:>12} {:>7.2}x  [1]",
        "import + first touch",
        out::nanos(i.value_ns),
        out::nanos(i.baseline_ns),
        i.ratio,
    ))?;
    let n = &r.notify_round_trip;
    let rows = [
        (
            "p50",
            n.value.p50_ns,
            n.baseline.p50_ns,
            n.ratio_p50,
            "  [2]",
        ),
        ("p99", n.value.p99_ns, n.baseline.p99_ns, n.ratio_p99, ""),
        ("max", n.value.max_ns, n.baseline.max_ns, n.ratio_max, ""),
    ];
    for (k, (label, v, b, q, note)) in rows.into_iter().enumerate() {
        let head = if k == 0 { "notify round trip" } else { "" };
        out::line(format!(
            "  {head:<20} {label} {:>12} {:>12} {q:>7.2}x{note}",
            out::nanos(v),
            out::nanos(b)
        ))?;
    }
    let b = &r.read_bandwidth;
    out::line(format!(
        "  {:<24} {:>12} {:>12} {:>7.2}x  [3]",
        "read bandwidth",
        gbps(b.value_gbps),
        gbps(b.baseline_gbps),
        b.ratio,
    ))?;
    out::line("")?;
    out::line("  baselines, measured in this run between the same two processes:")?;
    out::line(format!(
        "  [1] {}; median of {} first imports of each, interleaved",
        i.baseline, i.samples
    ))?;
    out::line(format!(
        "      hal's imports: {}",
        import_path(i.direct, i.samples)
    ))?;
    out::line(format!(
        "  [2] {}; {} round trips of each, interleaved",
        n.baseline_desc, n.value.n
    ))?;
    out::line(format!(
        "  [3] {}, read the same way: {}; median of {} passes",
        b.baseline, b.path, b.passes
    ))?;
    out::line(
        "  ratio = hal / baseline: for times lower is better, for bandwidth higher is better",
    )?;
    out::line("")?;
    out::line(if r.ok {
        format!(
            "ok: every byte verified in the consumer, {} notify round trips completed",
            n.value.n
        )
    } else {
        "FAILED: see above".to_string()
    })
}
