//! `halctl demo`: share a buffer between two real processes and measure what
//! sharing costs against the raw system calls, in the same run.
//!
//! The exporter (this process) allocates a buffer, fills it with a
//! pseudo-random pattern and exports it. It starts the consumer (this same
//! binary, hidden subcommand `__demo-consumer`), which connects to a control
//! socket and receives the handle texts, nothing else: the descriptors come
//! from the exporter's descriptor broker. The consumer imports the buffer,
//! checks every byte and the checksum, measures its read bandwidth, and both
//! sides ping-pong a notify. Each side waits only on the notify it created and
//! signals the one the other exported, which works on backends where only the
//! creator may wait.
//!
//! Baselines, measured in the same run between the same two processes:
//! - import: a sealed memfd of the same size received over a Unix socket
//!   (connect, `SCM_RIGHTS`), `fstat`, `mmap` and the first touch;
//! - notify round trip: a blocking futex ping-pong on a shared memfd (the
//!   notify waits block too, with no spin phase, so both sides do the same);
//! - read bandwidth: a private buffer of the same size in the consumer, read
//!   the same way.
//!
//! Ratios are hal / baseline: above 1 means slower for times, below 1 means
//! slower for bandwidth.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use clap::Args;
use hal::dynamic::{DynDevice, DynMapping, DynNotify};
use hal::registry::Registry;
use hal::{
    AllocDesc, Capabilities, ExportOptions, Exported, Handle, ImportOptions, Importers, Memory,
    SharedHandle, WaitOptions,
};
use serde::{Deserialize, Serialize};

use crate::backend;
use crate::channel::Channel;
use crate::child::ConsumerProcess;
use crate::fail::{CmdResult, Context, Fail};
use crate::out;
use crate::pattern::{self, Content, ReadPath};
use crate::raw::{self, FutexPair, RawExport};
use crate::stats::{median, median_u64, percentiles, ratio, Percentiles};

/// How long either side waits for the other before giving up.
const PEER_TIMEOUT: Duration = Duration::from_secs(60);
/// Untimed round trips of each kind before the timed ones.
const WARMUP: u32 = 100;
/// Timed blocks of each kind, interleaved so that drift hits both alike.
const BLOCKS: u32 = 4;
/// Bandwidth passes over each buffer; the median is reported.
const PASSES: u32 = 5;
/// First imports timed of each kind (interleaved); the median is reported.
const IMPORT_SAMPLES: usize = 5;
/// The byte at offset 0 of the probe buffers whose imports are timed.
const PROBE_MARKER: u8 = 0xa5;

/// Arguments of `halctl demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Backend to share on: cpu-shm, cuda, cuda-uvm, ascend, mock-cuda,
    /// mock-ascend (`mock` means mock-cuda).
    #[arg(long, value_name = "NAME", default_value = "cpu-shm")]
    backend: String,
    /// Size of the shared buffer (4096, 64K, 16M, 1G); rounded up to whole pages.
    #[arg(long, value_name = "BYTES", default_value = "64M", value_parser = crate::parse_size)]
    size: u64,
    /// Notify round trips to time (and as many raw futex round trips).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 2000,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000)
    )]
    round_trips: u32,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of the hidden consumer subcommand.
#[derive(Debug, Args)]
pub struct ConsumerArgs {
    /// Abstract socket name of the exporter's control channel.
    #[arg(long)]
    control: String,
    /// The backend: the consumer first reports its `process_id()` on it,
    /// the id the exporter's allow-list needs (an Ascend bare tgid is not
    /// the OS pid).
    #[arg(long)]
    backend: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Kind {
    Raw,
    Hal,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Block {
    kind: Kind,
    rounds: u32,
    timed: bool,
}

/// What the exporter tells the consumer (the futex memfd travels with it).
#[derive(Debug, Serialize, Deserialize)]
struct Hello {
    backend: String,
    device: u32,
    /// The exporter's `Device::process_id()`, for the consumer's allow-list.
    exporter_id: u32,
    memory: String,
    probes: Vec<String>,
    notify: String,
    size: u64,
    seed: u64,
    crc32: u32,
    raw_socket: String,
    schedule: Vec<Block>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Report {
    raw_import_ns: Vec<u64>,
    import_ns: Vec<u64>,
    markers_ok: bool,
    buffer_import_ns: u64,
    first_byte_ok: bool,
    mapped_len: u64,
    bytes: u64,
    mismatches: u64,
    first_mismatch: Option<(u64, u8, u8)>,
    crc32: u32,
    read_path: String,
    shared_gbps: f64,
    private_gbps: f64,
    notify: String,
}

#[derive(Debug, Serialize, Deserialize)]
enum FromConsumer {
    /// The consumer's `Device::process_id()`, sent first.
    Identity(u32),
    Report(Box<Report>),
    Done,
    Failed(String),
}

fn schedule(round_trips: u32) -> Vec<Block> {
    let mut s = vec![
        Block {
            kind: Kind::Raw,
            rounds: WARMUP,
            timed: false,
        },
        Block {
            kind: Kind::Hal,
            rounds: WARMUP,
            timed: false,
        },
    ];
    let per = round_trips / BLOCKS;
    for i in 0..BLOCKS {
        let rounds = if i == 0 {
            per + round_trips % BLOCKS
        } else {
            per
        };
        if rounds == 0 {
            continue;
        }
        for kind in [Kind::Raw, Kind::Hal] {
            s.push(Block {
                kind,
                rounds,
                timed: true,
            });
        }
    }
    s
}

fn export_options(dev: &dyn DynDevice, peer: u32) -> ExportOptions {
    let importers = if dev.capabilities().contains(Capabilities::PID_ALLOW_LIST) {
        Importers::Pids(vec![peer])
    } else {
        Importers::BackendDefault
    };
    ExportOptions {
        importers,
        ..Default::default()
    }
}

fn blocking_wait() -> WaitOptions {
    WaitOptions {
        timeout: Some(PEER_TIMEOUT),
        spin: Duration::ZERO,
    }
}

fn decode(text: &str, what: &str) -> CmdResult<Handle> {
    Handle::from_text(text).map_err(|e| Fail::failed(format!("decoding the {what} handle: {e}")))
}

#[derive(Debug, Serialize)]
struct Mismatch {
    offset: u64,
    expected: u8,
    found: u8,
}

#[derive(Debug, Serialize)]
struct VerifiedOut {
    ok: bool,
    bytes: u64,
    mismatches: u64,
    first_mismatch: Option<Mismatch>,
    crc32_exporter: String,
    crc32_consumer: String,
}

#[derive(Debug, Serialize)]
struct ImportOut {
    value_ns: u64,
    baseline_ns: u64,
    ratio: f64,
    samples: usize,
    value_samples_ns: Vec<u64>,
    baseline_samples_ns: Vec<u64>,
    /// The (untimed-for-the-ratio) import of the demo buffer itself.
    buffer_import_ns: u64,
    baseline: &'static str,
}

#[derive(Debug, Serialize)]
struct NotifyOut {
    ok: bool,
    wait: &'static str,
    value: Percentiles,
    baseline: Percentiles,
    ratio_p50: f64,
    ratio_p99: f64,
    ratio_max: f64,
    baseline_desc: &'static str,
}

#[derive(Debug, Serialize)]
struct BandwidthOut {
    value_gbps: f64,
    baseline_gbps: f64,
    ratio: f64,
    path: String,
    passes: u32,
    baseline: &'static str,
}

#[derive(Debug, Serialize)]
struct LeasesOut {
    ok: bool,
    while_mapped: Option<usize>,
    after_exit: Option<usize>,
}

#[derive(Debug, Serialize)]
struct DemoOut {
    ok: bool,
    backend: String,
    device: String,
    size: u64,
    exporter_pid: u32,
    consumer_pid: u32,
    handle: String,
    /// Who may import the exports: the consumer's pid alone where the
    /// backend has pid allow-lists, else the backend's default.
    importers: String,
    verified: VerifiedOut,
    leases: LeasesOut,
    import: ImportOut,
    notify_round_trip: NotifyOut,
    read_bandwidth: BandwidthOut,
}

const IMPORT_BASELINE: &str =
    "raw memfd: connect + SCM_RIGHTS receipt + fstat + mmap + first touch";
const NOTIFY_BASELINE: &str = "raw futex ping-pong on a shared memfd, blocking waits";
const BANDWIDTH_BASELINE: &str = "a private buffer of the same size in the consumer";

/// Run the demo as the exporter.
pub fn run(args: &DemoArgs) -> CmdResult {
    let size = crate::nonzero_size(args.size)?;
    // The exporter's buffer, the probes' first pages, and the consumer's
    // private buffer of the same size: about twice the size in memory.
    crate::fits_in_memory(size.saturating_mul(2), "the demo (about twice --size)")?;
    let registry = Registry::new();
    let backend = backend::open(&registry, &args.backend)?;
    let dev = backend::device(backend.as_ref(), 0)?;
    let info = dev.info().clone();
    let page = info.page_size().max(8);
    let size = size
        .div_ceil(page)
        .checked_mul(page)
        .ok_or_else(|| Fail::usage("--size is too large"))?;

    let desc = if info.capabilities.contains(Capabilities::MEMORY_IS_HOST) {
        AllocDesc::host(size)
    } else {
        AllocDesc::device(info.ordinal, size)
    };
    let alloc = dev.allocate(&desc).ctx("allocating the demo buffer")?;
    let size = alloc.len();
    let seed = u64::from_le_bytes(hal::kit::os::random_id()[..8].try_into().unwrap_or([7; 8]));
    let crc32 = pattern::fill(&alloc, Content::Pattern(seed))?;

    // The imports that are timed: probe buffers of the same size, their
    // first page written, against raw memfds of the same size likewise.
    let mut probes = Vec::with_capacity(IMPORT_SAMPLES);
    for _ in 0..IMPORT_SAMPLES {
        let probe = dev.allocate(&desc).ctx("allocating a probe buffer")?;
        probe
            .write(0, &[PROBE_MARKER])
            .ctx("writing a probe buffer")?;
        probes.push(probe);
    }
    let raw_export = RawExport::new(size, IMPORT_SAMPLES)?;
    let raw_name = raw_export.name().to_string();
    let (futex, futex_fd) = FutexPair::create()?;

    let (consumer, chan) = ConsumerProcess::spawn(
        "__demo-consumer",
        &["--backend".to_string(), backend.name()],
        "halctl-demo",
        "the consumer",
        PEER_TIMEOUT,
    )?;
    let consumer_pid = consumer.pid();
    // The id the consumer's backend puts on allow-lists (its OS pid, or an
    // Ascend bare tgid), which only the consumer can tell.
    let consumer_id = match chan.recv_json::<FromConsumer>()?.0 {
        FromConsumer::Identity(id) => id,
        FromConsumer::Failed(m) => return Err(Fail::failed(format!("consumer: {m}"))),
        _ => return Err(Fail::failed("consumer: did not say who it is")),
    };

    let opts = export_options(dev.as_ref(), consumer_id);
    let exported: Exported = dev
        .export_memory(alloc.as_ref(), &opts)
        .ctx("exporting the demo buffer")?;
    let handle_text = exported.to_text();
    let pid_kind = exported.handle().pid_kind;
    let probe_exports = probes
        .iter()
        .map(|p| dev.export_memory(p.as_ref(), &opts))
        .collect::<hal::Result<Vec<Exported>>>()
        .ctx("exporting the probe buffers")?;
    let notify = dev.create_notify().ctx("creating the exporter's notify")?;
    let notify_exported = dev
        .export_notify(notify.as_ref(), &opts)
        .ctx("exporting the exporter's notify")?;

    let raw_server = raw_export.serve(consumer_pid, PEER_TIMEOUT);
    let plan = schedule(args.round_trips);
    let hello = Hello {
        backend: backend.name(),
        device: info.ordinal,
        exporter_id: dev
            .process_id()
            .ctx("asking the backend for this process's id")?,
        memory: handle_text.clone(),
        probes: probe_exports.iter().map(Exported::to_text).collect(),
        notify: notify_exported.to_text(),
        size,
        seed,
        crc32,
        raw_socket: raw_name,
        schedule: plan.clone(),
    };
    chan.send_json(&hello, &[futex_fd.as_fd()])?;

    let report = match chan.recv_json::<FromConsumer>()?.0 {
        FromConsumer::Report(r) => r,
        FromConsumer::Failed(m) => return Err(Fail::failed(format!("consumer: {m}"))),
        FromConsumer::Done | FromConsumer::Identity(_) => {
            return Err(Fail::failed("consumer: ended early"))
        }
    };
    match raw_server.join() {
        Ok(r) => r?,
        Err(_) => return Err(Fail::failed("the raw baseline's server thread failed")),
    }
    let while_mapped = alloc.importers().ok();

    // Notify ping-pong: signal the consumer's notify, wait on our own.
    let theirs = dev
        .import_notify(
            SharedHandle::from(decode(&report.notify, "consumer's notify")?),
            &ImportOptions::default(),
        )
        .ctx("importing the consumer's notify")?;
    let mut raw_times = Vec::with_capacity(args.round_trips as usize);
    let mut hal_times = Vec::with_capacity(args.round_trips as usize);
    let mut raw_round = 0u32;
    for block in &plan {
        for _ in 0..block.rounds {
            let t0 = Instant::now();
            match block.kind {
                Kind::Raw => {
                    raw_round += 1;
                    futex.ping(raw_round, PEER_TIMEOUT)?;
                }
                Kind::Hal => {
                    theirs.signal().ctx("signalling the consumer's notify")?;
                    notify
                        .wait(blocking_wait())
                        .ctx("waiting for the consumer's answer on our notify")?;
                }
            }
            let dt = t0.elapsed().as_nanos() as u64;
            if block.timed {
                match block.kind {
                    Kind::Raw => raw_times.push(dt),
                    Kind::Hal => hal_times.push(dt),
                }
            }
        }
    }
    let pingpong_done = hal_times.len() == args.round_trips as usize;
    match chan.recv_json::<FromConsumer>()?.0 {
        FromConsumer::Done => {}
        FromConsumer::Failed(m) => return Err(Fail::failed(format!("consumer: {m}"))),
        FromConsumer::Report(_) | FromConsumer::Identity(_) => {
            return Err(Fail::failed("consumer: unexpected message"))
        }
    }
    drop(theirs);
    let consumer_ok = consumer.wait()?;
    let after_exit = alloc.importers().ok();
    drop(exported);
    drop(probe_exports);
    drop(probes);
    drop(notify_exported);

    let verified_ok = report.mismatches == 0
        && report.bytes == size
        && report.mapped_len == size
        && report.crc32 == crc32
        && report.first_byte_ok
        && report.markers_ok;
    let leases_ok = match (while_mapped, after_exit) {
        (Some(during), Some(after)) => during >= 1 && after == 0,
        _ => true,
    };
    let raw_p = percentiles(raw_times);
    let hal_p = percentiles(hal_times);
    let ok = verified_ok && leases_ok && pingpong_done && consumer_ok;
    let result = DemoOut {
        ok,
        backend: backend.name(),
        device: format!("{} {}", info.ordinal, info.name),
        size,
        exporter_pid: std::process::id(),
        consumer_pid,
        handle: handle_text,
        importers: match (&opts.importers, pid_kind) {
            // The vendor's own id for the consumer, which is not its pid
            // (Ascend's bare tgid): labelled, with the pid it stands for.
            (Importers::Pids(p), hal::PidKind::Vendor) => format!(
                "runtime process id {} only (the consumer, pid {consumer_pid})",
                p.first().copied().unwrap_or(0)
            ),
            (Importers::Pids(p), _) => format!(
                "pid {} only (the consumer)",
                p.first().copied().unwrap_or(0)
            ),
            _ => "the backend's default".to_string(),
        },
        verified: VerifiedOut {
            ok: verified_ok,
            bytes: report.bytes,
            mismatches: report.mismatches,
            first_mismatch: report
                .first_mismatch
                .map(|(offset, expected, found)| Mismatch {
                    offset,
                    expected,
                    found,
                }),
            crc32_exporter: format!("{crc32:#010x}"),
            crc32_consumer: format!("{:#010x}", report.crc32),
        },
        leases: LeasesOut {
            ok: leases_ok,
            while_mapped,
            after_exit,
        },
        import: {
            let value_ns = median_u64(&report.import_ns);
            let baseline_ns = median_u64(&report.raw_import_ns);
            ImportOut {
                value_ns,
                baseline_ns,
                ratio: ratio(value_ns as f64, baseline_ns as f64),
                samples: report.import_ns.len(),
                value_samples_ns: report.import_ns.clone(),
                baseline_samples_ns: report.raw_import_ns.clone(),
                buffer_import_ns: report.buffer_import_ns,
                baseline: IMPORT_BASELINE,
            }
        },
        notify_round_trip: NotifyOut {
            ok: pingpong_done,
            wait: "blocking (no spin phase)",
            value: hal_p,
            baseline: raw_p,
            ratio_p50: ratio(hal_p.p50_ns as f64, raw_p.p50_ns as f64),
            ratio_p99: ratio(hal_p.p99_ns as f64, raw_p.p99_ns as f64),
            ratio_max: ratio(hal_p.max_ns as f64, raw_p.max_ns as f64),
            baseline_desc: NOTIFY_BASELINE,
        },
        read_bandwidth: BandwidthOut {
            value_gbps: report.shared_gbps,
            baseline_gbps: report.private_gbps,
            ratio: ratio(report.shared_gbps, report.private_gbps),
            path: report.read_path.clone(),
            passes: PASSES,
            baseline: BANDWIDTH_BASELINE,
        },
    };
    if args.json {
        out::json(&result)?;
    } else {
        print_human(&result)?;
    }
    if ok {
        Ok(())
    } else {
        Err(Fail::failed(failure_summary(&result, consumer_ok)))
    }
}

fn failure_summary(r: &DemoOut, consumer_ok: bool) -> String {
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

fn gbps(v: f64) -> String {
    format!("{v:.2} GB/s")
}

fn print_human(r: &DemoOut) -> CmdResult {
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

/// Run the consumer side (started by the exporter).
pub fn consumer(args: &ConsumerArgs) -> CmdResult {
    let chan = Channel::connect(&args.control)?;
    chan.set_timeout(PEER_TIMEOUT)?;
    let r = consumer_steps(&chan, args);
    if let Err(f) = &r {
        let _ = chan.send_json(&FromConsumer::Failed(f.message.clone()), &[]);
    }
    r
}

fn consumer_steps(chan: &Channel, args: &ConsumerArgs) -> CmdResult {
    {
        let registry = Registry::new();
        let backend = backend::open(&registry, &args.backend)?;
        let dev = backend::device(backend.as_ref(), 0)?;
        let id = dev
            .process_id()
            .ctx("asking the backend for this process's id")?;
        chan.send_json(&FromConsumer::Identity(id), &[])?;
    }
    let (hello, mut fds) = chan.recv_json::<Hello>()?;
    let futex_fd = fds
        .pop()
        .ok_or_else(|| Fail::failed("the futex memfd did not arrive"))?;
    let futex = FutexPair::open(&futex_fd)?;
    let registry = Registry::new();
    let backend = backend::open(&registry, &hello.backend)?;
    let dev = backend::device(backend.as_ref(), hello.device)?;

    // First imports, timed: the raw descriptor path and the hal import from
    // the handle text alone, interleaved, each of a buffer of the demo's size.
    let mut raw_ns = Vec::with_capacity(hello.probes.len());
    let mut hal_ns = Vec::with_capacity(hello.probes.len());
    let mut markers_ok = true;
    for probe in &hello.probes {
        let (t, byte) = raw::raw_import(&hello.raw_socket, hello.size)?;
        raw_ns.push(t.as_nanos() as u64);
        markers_ok &= byte == raw::RAW_MARKER;
        let (t, byte, mapping) = hal_import(dev.as_ref(), probe, "probe")?;
        hal_ns.push(t.as_nanos() as u64);
        markers_ok &= byte == PROBE_MARKER;
        drop(mapping);
    }

    // The demo buffer itself.
    let (buffer_time, first, mapping) = hal_import(dev.as_ref(), &hello.memory, "demo buffer")?;

    let content = Content::Pattern(hello.seed);
    let checked = pattern::verify(&mapping, Some(content))?;

    // Read bandwidth: the shared buffer and a private one, read the same way.
    let path = ReadPath::for_memory(&mapping);
    let words = (mapping.len() / 8) as usize;
    let mut private: Vec<u64> = Vec::new();
    private.try_reserve_exact(words).map_err(|_| {
        Fail::failed(format!(
            "cannot allocate the {}-byte private buffer of the bandwidth baseline",
            words * 8
        ))
    })?;
    private.extend((0..words as u64).map(|k| pattern::word(hello.seed, k)));
    let mut bounce = vec![0u8; pattern::CHUNK];
    let mut shared_rates = Vec::new();
    let mut private_rates = Vec::new();
    let bytes = (words * 8) as f64;
    for _ in 0..PASSES {
        let t = Instant::now();
        pattern::read_pass(&mapping, path, &mut bounce)?;
        shared_rates.push(bytes / t.elapsed().as_secs_f64().max(1e-9) / 1e9);
        let t = Instant::now();
        pattern::read_private(&private, path, &mut bounce);
        private_rates.push(bytes / t.elapsed().as_secs_f64().max(1e-9) / 1e9);
    }
    drop(private);

    // Our notify (we wait on it), and the exporter's (we signal it).
    let mine = dev.create_notify().ctx("creating the consumer's notify")?;
    let mine_exported = dev
        .export_notify(
            mine.as_ref(),
            &export_options(dev.as_ref(), hello.exporter_id),
        )
        .ctx("exporting the consumer's notify")?;
    let theirs: Box<dyn DynNotify> = dev
        .import_notify(
            SharedHandle::from(decode(&hello.notify, "exporter's notify")?),
            &ImportOptions::default(),
        )
        .ctx("importing the exporter's notify")?;

    let report = Report {
        raw_import_ns: raw_ns,
        import_ns: hal_ns,
        markers_ok,
        buffer_import_ns: buffer_time.as_nanos() as u64,
        first_byte_ok: first == pattern::byte(hello.seed, 0),
        mapped_len: mapping.len(),
        bytes: checked.bytes,
        mismatches: checked.mismatches,
        first_mismatch: checked.first_mismatch,
        crc32: checked.crc32,
        read_path: path.label().to_string(),
        shared_gbps: median(shared_rates),
        private_gbps: median(private_rates),
        notify: mine_exported.to_text(),
    };
    chan.send_json(&FromConsumer::Report(Box::new(report)), &[])?;

    let mut raw_round = 0u32;
    for block in &hello.schedule {
        for _ in 0..block.rounds {
            match block.kind {
                Kind::Raw => {
                    raw_round += 1;
                    futex.pong(raw_round, PEER_TIMEOUT)?;
                }
                Kind::Hal => {
                    mine.wait(blocking_wait())
                        .ctx("waiting for the exporter's ping on our notify")?;
                    theirs.signal().ctx("signalling the exporter's notify")?;
                }
            }
        }
    }
    drop(mapping);
    chan.send_json(&FromConsumer::Done, &[])?;
    drop(mine_exported);
    Ok(())
}

/// Import `text` and touch its first byte; returns the time taken, the byte
/// and the mapping.
fn hal_import(
    dev: &dyn DynDevice,
    text: &str,
    what: &str,
) -> CmdResult<(Duration, u8, Box<dyn DynMapping>)> {
    let t0 = Instant::now();
    let handle = decode(text, what)?;
    let mapping = dev
        .import_memory(SharedHandle::from(handle), &ImportOptions::default())
        .ctx(&format!("importing the {what}"))?;
    let mut first = [0u8; 1];
    mapping.read(0, &mut first).ctx("first touch")?;
    Ok((t0.elapsed(), first[0], mapping))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_times_exactly_n_of_each() {
        for n in [1, 3, 4, 2000, 2001] {
            let s = schedule(n);
            for kind in [Kind::Raw, Kind::Hal] {
                let timed: u32 = s
                    .iter()
                    .filter(|b| b.kind == kind && b.timed)
                    .map(|b| b.rounds)
                    .sum();
                assert_eq!(timed, n);
            }
        }
    }
}
