//! `halctl bench`: what sharing costs, scenario by scenario, against the
//! floor (raw system calls, plain memory) measured in the same run between
//! the same two real processes.
//!
//! This process is the exporter. It starts a consumer (this binary, hidden
//! subcommand `__bench-consumer`) and drives it over a control channel
//! ([`proto`]); the consumer times its own side (imports, reads, idle
//! waits) and sends the samples back. Round trips are timed here. Baselines
//! are interleaved with what they are compared to, so that drift on a busy
//! machine hits both alike.
//!
//! | scenario | hal | baseline |
//! |---|---|---|
//! | export | allocate + export a 1 MiB region | memfd_create + ftruncate + seals |
//! | import-first | decode + import + first touch, in the consumer, a new broker connection each | fd over a new Unix socket connection + fstat + mmap + touch; also shm_open + fstat + mmap + touch of a named region, and a received fd (recvmsg + seals + mmap + touch) |
//! | import-first-persistent | as import-first, the broker connection kept | the named region (and the other two) |
//! | import-batch-16 | `import_memory_batch` of 16 handles + first touch of each, per handle | the named region (and the other two), per handle |
//! | import-direct | as import-first-persistent, the direct path on in the consumer (the exporter's board, `pidfd_getfd`: no round trip) | the named region (and the other two) |
//! | import-direct-batch-16 | as import-batch-16, the direct path on | the named region (and the other two), per handle |
//! | import-cached | import of a handle already imported | none (absolute) |
//! | notify-pingpong | round trip, blocking waits | raw futex ping-pong |
//! | notify-spin-pingpong | round trip, busy polling | raw atomic spin ping-pong |
//! | notify-adaptive-pingpong | round trip, default waits | raw atomic spin ping-pong |
//! | channel-pingpong | loan + publish of a 64-byte sample, receive + release of the answer, over two channels, busy polling | raw atomic spin ping-pong |
//! | channel-throughput | one publisher, four subscriber processes: receive + in-place read + release of 1 MiB samples, per subscriber | the same subscribers reading 1 MiB pieces of a shared region as large as the channel's slots in place, in blocks alternating with the samples |
//! | read-bandwidth | in-place read of a shared region | a private buffer of the same size |
//! | scaling | import with 1/100/10,000 live exports, 1/8/32 importers | the smallest configuration |
//! | scaling-direct | import by 1/8/32 importers at once, the direct path on in each (no round trip: nothing to serialise on) | one importer |
//! | rendezvous | all-gather of a handle among 8 and 32 member processes (`hal::group`) | the first import of another member's handle, by the same members |
//! | remote-read-bw | 4 MiB reads of another process's memory over UCX (`hal::remote`, `UCX_TLS=tcp` on loopback) | `ucx_perftest -t ucp_get -s 4194304`, same transport |
//! | remote-read-lat | 8-byte reads, the same way | `ucx_perftest -t ucp_get -s 8` |
//! | remote-notify-rtt | round trip of signals between two remote notifies | `ucx_perftest -t ucp_am_lat -s 8` (its half round trip, doubled) |
//! | remote-cold | a new connection (the secret proved both ways) + first 8-byte read | none (absolute) |
//! | remote-channel-throughput | 1 MiB samples to a subscriber in another process (`Node::offer_channel`, `RemoteSubscriber`), mean time per sample | `ucx_perftest -t ucp_am_bw -s 1048576`, same transport (its mean time per message) |
//! | remote-channel-pingpong | round trip of 64-byte samples between two channels, each with a remote subscriber in the other process | `ucx_perftest -t ucp_am_lat -s 64` (its half round trip, doubled) |
//! | remote-rendezvous | a group across hosts of 8 and 32 member processes on 127.0.0.1 (`hal::remote::RemoteGroup`), from the first join call to every member's return | one TCP connect + accept on 127.0.0.1 (`std::net`), a baseline of scale only |
//!
//! The remote scenarios run only when `--only` names them (`--only remote`),
//! between two processes of their own started with the UCX environment.
//!
//! On the CUDA backend the scenarios whose baselines are host memory give
//! way to the CUDA ones, each against the bare driver call ([`cuda`]).

mod bandwidth;
#[allow(unsafe_code)]
mod baselines;
#[allow(unsafe_code)]
mod consumer;
mod cuda;
#[allow(unsafe_code)]
mod cuda_channel;
#[allow(unsafe_code)]
mod cuda_channel_peer;
mod cuda_consumer;
mod cuda_rtt;
#[allow(unsafe_code)]
mod cuda_rtt_peer;
mod export;
mod firsts;
mod host;
mod notify;
mod options;
mod peer;
mod perftest;
mod plot;
mod proto;
mod remote;
mod remote_channel;
mod remote_channel_peer;
mod remote_group_peer;
mod remote_peer;
mod remote_rendezvous;
mod rendezvous;
mod report;
mod scaling;
mod spin;
mod throughput;
mod throughput_peer;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use hal::dynamic::{DynAllocation, DynDevice};
use hal::registry::Registry;
use hal::{AllocDesc, Capabilities, ExportOptions, Exported};

pub use consumer::{consumer, ConsumerArgs};
use host::{allowed_cpus, pin_pair, raise_nofile, unpin_all, Rng};
use options::{export_options, PROBE_MARKER};
use peer::Peer;
use report::Printer;

use crate::backend;
use crate::fail::{CmdResult, Context, Fail};

/// Size of the regions exported and imported (all but read-bandwidth).
const REGION: u64 = 1 << 20;
/// Imports of each kind before the timed ones, discarded.
const IMPORT_WARMUP: usize = 10;
/// Regions each importer process imports in the importer-scaling scenario.
const IMPORTER_REGIONS: usize = 16;
/// Handles per `import_memory_batch` call in import-batch-16.
const BATCH_GROUP: usize = 16;
/// Samples of import-first per batch of fresh regions.
const IMPORT_BATCH: usize = 1000;
/// Full-run read-bandwidth size.
const BANDWIDTH_FULL: u64 = 256 << 20;

/// Arguments of `halctl bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Backend to measure: cpu-shm, cuda, cuda-uvm, ascend, mock-cuda,
    /// mock-ascend (`mock` means mock-cuda).
    #[arg(long, value_name = "NAME", default_value = "cpu-shm")]
    backend: String,
    /// Print one JSON object per scenario per line instead of a table.
    #[arg(long)]
    json: bool,
    /// Fewer samples and a 64 MiB read-bandwidth region: about 10 s on a
    /// 2-core VM instead of about 46.
    #[arg(long)]
    quick: bool,
    /// Also write an SVG of p50 and p99 per scenario beside its baseline.
    #[arg(long, value_name = "PATH")]
    plot: Option<PathBuf>,
    /// Let the kernel place the two processes. By default the exporter and
    /// the consumer are pinned to two different CPUs, so that every figure
    /// and its baseline see the same placement (a blocking wake-up on the
    /// same CPU and on another CPU differ tenfold on virtual machines).
    #[arg(long)]
    no_pin: bool,
    /// A tiny run for tests: a handful of samples, small regions, small
    /// scaling configurations.
    #[arg(long, hide = true)]
    tiny: bool,
    /// Exit 1 when a scenario misses its target (by default a run exits 0
    /// whatever it measured, and its last line says how many missed).
    #[arg(long)]
    check: bool,
    /// Only these scenarios (comma-separated names; a prefix selects
    /// several, e.g. `notify`). The remote scenarios (hal across UCX's TCP
    /// transport beside `ucx_perftest`) run only when named: `remote`.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    only: Vec<String>,
}

/// How many samples and how large, by run length.
#[derive(Debug, Clone)]
struct Plan {
    name: &'static str,
    export_n: usize,
    import_n: usize,
    cached_n: u32,
    rounds: u32,
    warmup_rounds: u32,
    blocks: u32,
    idle: Duration,
    bandwidth: u64,
    passes: u32,
    live_exports: Vec<usize>,
    scale_n: usize,
    importers: Vec<usize>,
    importer_regions: usize,
    importer_samples: usize,
    group_sizes: Vec<usize>,
    group_rounds: u32,
    /// Samples of channel-throughput (and baseline passes per subscriber).
    throughput_samples: u32,
    /// cuda-channel-rtt: round trips per phase, and phases.
    channel_rounds: u32,
    channel_phases: u32,
    /// Remote scenarios: blocks of hal's samples, each followed by a run
    /// of ucx_perftest; samples per block of each scenario.
    remote_blocks: u32,
    remote_bw_n: u32,
    remote_lat_n: u32,
    remote_rtt_n: u32,
    remote_cold_n: u32,
    /// remote-channel-throughput: samples per block.
    remote_channel_bw_n: u32,
    /// remote-rendezvous: groups formed per size (after one discarded).
    remote_group_rounds: u32,
}

impl Plan {
    fn of(args: &BenchArgs) -> Plan {
        if args.tiny {
            Plan {
                name: "tiny",
                export_n: 20,
                import_n: 20,
                cached_n: 1000,
                rounds: 100,
                warmup_rounds: 20,
                blocks: 2,
                idle: Duration::from_millis(20),
                bandwidth: 4 << 20,
                passes: 3,
                live_exports: vec![1, 10, 100],
                scale_n: 20,
                importers: vec![1, 2, 4],
                importer_regions: 4,
                importer_samples: 16,
                group_sizes: vec![2, 4],
                group_rounds: 3,
                throughput_samples: 8,
                channel_rounds: 10,
                channel_phases: 3,
                remote_blocks: 2,
                remote_bw_n: 4,
                remote_lat_n: 20,
                remote_rtt_n: 20,
                remote_cold_n: 3,
                remote_channel_bw_n: 16,
                remote_group_rounds: 2,
            }
        } else if args.quick {
            Plan {
                name: "quick",
                export_n: 2000,
                import_n: 2000,
                cached_n: 200_000,
                rounds: 20_000,
                warmup_rounds: 1000,
                blocks: 10,
                idle: Duration::from_secs(1),
                bandwidth: 64 << 20,
                passes: 11,
                live_exports: vec![1, 100, 10_000],
                scale_n: 1000,
                importers: vec![1, 8, 32],
                importer_regions: IMPORTER_REGIONS,
                importer_samples: 1024,
                group_sizes: vec![8, 32],
                group_rounds: 20,
                throughput_samples: 100,
                channel_rounds: 200,
                channel_phases: 11,
                remote_blocks: 5,
                remote_bw_n: 20,
                remote_lat_n: 200,
                remote_rtt_n: 500,
                remote_cold_n: 10,
                remote_channel_bw_n: 100,
                remote_group_rounds: 5,
            }
        } else {
            Plan {
                name: "full",
                export_n: 10_000,
                import_n: 10_000,
                cached_n: 1_000_000,
                rounds: 100_000,
                warmup_rounds: 2000,
                blocks: 20,
                idle: Duration::from_secs(2),
                bandwidth: BANDWIDTH_FULL,
                passes: 21,
                live_exports: vec![1, 100, 10_000],
                scale_n: 5000,
                importers: vec![1, 8, 32],
                importer_regions: IMPORTER_REGIONS,
                importer_samples: 4096,
                group_sizes: vec![8, 32],
                group_rounds: 100,
                throughput_samples: 400,
                channel_rounds: 500,
                channel_phases: 21,
                remote_blocks: 11,
                remote_bw_n: 50,
                remote_lat_n: 1000,
                remote_rtt_n: 2000,
                remote_cold_n: 40,
                remote_channel_bw_n: 200,
                remote_group_rounds: 20,
            }
        }
    }
}

/// An allocation of the backend measured.
type Allocation = Box<dyn DynAllocation>;

/// Everything the scenarios share.
struct Bench<'a> {
    plan: Plan,
    backend: String,
    dev: &'a dyn DynDevice,
    desc: AllocDesc,
    peer: Peer,
    printer: Printer,
    only: Vec<String>,
    rng: Rng,
    file_limit: u64,
    /// Scenarios (prefixes) this backend does not run.
    skip: Vec<&'static str>,
}

impl Bench<'_> {
    fn wants(&self, scenario: &str) -> bool {
        if scenario.starts_with("remote-") {
            // Only when asked for: they need UCX, and processes of their own.
            return self.only.iter().any(|o| scenario.starts_with(o.as_str()));
        }
        !self.skip.iter().any(|s| scenario.starts_with(s))
            && (self.only.is_empty() || self.only.iter().any(|o| scenario.starts_with(o.as_str())))
    }

    fn opts(&self, pids: &[u32]) -> ExportOptions {
        export_options(self.dev, pids)
    }

    /// A region of the probe size with its first byte written.
    fn probe(&self) -> CmdResult<Box<dyn DynAllocation>> {
        let a = self.dev.allocate(&self.desc).ctx("allocating a region")?;
        a.write(0, &[PROBE_MARKER]).ctx("writing a region")?;
        Ok(a)
    }

    fn texts(exports: &[Exported]) -> Vec<String> {
        exports.iter().map(Exported::to_text).collect()
    }
}

fn two(series: Vec<Vec<u64>>) -> CmdResult<[Vec<u64>; 2]> {
    series
        .try_into()
        .map_err(|_| Fail::failed("the consumer sent the wrong number of series"))
}

fn one(series: Vec<Vec<u64>>) -> CmdResult<[Vec<u64>; 1]> {
    series
        .try_into()
        .map_err(|_| Fail::failed("the consumer sent the wrong number of series"))
}

const SCENARIOS: [&str; 30] = [
    "export",
    "import-first",
    "import-first-persistent",
    "import-batch-16",
    "import-direct",
    "import-direct-batch-16",
    "import-cached",
    "notify-pingpong",
    "notify-spin-pingpong",
    "notify-adaptive-pingpong",
    "channel-pingpong",
    "channel-throughput",
    "read-bandwidth",
    "scaling",
    "scaling-direct",
    "rendezvous",
    "cuda-import-first",
    "cuda-import-cached",
    "cuda-read",
    "cuda-vmm-import",
    "cuda-free",
    "cuda-notify-rtt",
    "cuda-channel-rtt",
    "remote-read-bw",
    "remote-read-lat",
    "remote-notify-rtt",
    "remote-cold",
    "remote-channel-throughput",
    "remote-channel-pingpong",
    "remote-rendezvous",
];

/// The scenarios whose baselines are host memory (a memfd, a private
/// buffer): on the CUDA backend its own scenarios replace them.
const HOST_MEMORY_SCENARIOS: [&str; 7] = [
    "export",
    "import-first",
    "import-batch-16",
    "import-direct",
    "import-cached",
    "read-bandwidth",
    "scaling",
];

/// Run `halctl bench`.
/// Refuse (exit 2) a `--plot` path that cannot be written, before the run
/// rather than after it. An existing file is opened for writing and left as
/// it is; a new one is created and removed again.
fn writable(path: &std::path::Path) -> CmdResult {
    let refuse = |e: std::io::Error| {
        Fail::usage(format!(
            "--plot {}: cannot write there ({e})",
            path.display()
        ))
    };
    match std::fs::OpenOptions::new().append(true).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(refuse)?;
            let _ = std::fs::remove_file(path);
            Ok(())
        }
        Err(e) => Err(refuse(e)),
    }
}

pub fn run(args: &BenchArgs) -> CmdResult {
    for o in &args.only {
        if !SCENARIOS.iter().any(|s| s.starts_with(o.as_str())) {
            return Err(Fail::usage(format!(
                "unknown scenario `{o}` (scenarios: {})",
                SCENARIOS.join(", ")
            )));
        }
    }
    if let Some(path) = &args.plot {
        writable(path)?;
    }
    let started = Instant::now();
    let plan = Plan::of(args);
    let registry = Registry::new();
    let backend = backend::open(&registry, &args.backend)?;
    let dev = backend::device(backend.as_ref(), 0)?;
    let info = dev.info().clone();
    let desc = if info.capabilities.contains(Capabilities::MEMORY_IS_HOST) {
        AllocDesc::host(REGION)
    } else {
        AllocDesc::device(info.ordinal, REGION)
    };
    let max_exports = *plan.live_exports.iter().max().unwrap_or(&1) as u64;
    let file_limit = raise_nofile(2 * max_exports + 5 * IMPORT_BATCH as u64 + 1024);

    let cpus = allowed_cpus();
    let placement = if args.no_pin { None } else { pin_pair() };
    let peer = Peer::spawn(placement.map(|(_, consumer)| consumer))?;
    peer.open(&backend.name(), info.ordinal)?;
    let place = match placement {
        Some((e, c)) => format!("exporter pinned to CPU {e}, consumer to CPU {c}"),
        None => "placed by the kernel".to_string(),
    };
    let header = format!(
        "halctl bench ({} run) on {} (device {} {}): exporter pid {}, consumer pid {}, {} CPUs",
        plan.name,
        backend.name(),
        info.ordinal,
        info.name,
        std::process::id(),
        peer.pid,
        cpus.len()
    ) + "; "
        + &place;
    let printer = Printer::new(args.json, &header, place)?;
    let mut b = Bench {
        plan,
        backend: backend.name(),
        dev: dev.as_ref(),
        desc,
        peer,
        printer,
        only: args.only.clone(),
        rng: Rng::new(),
        file_limit,
        skip: Vec::new(),
    };
    let cuda = info.backend == hal::BackendId::Cuda;
    b.skip = if cuda {
        HOST_MEMORY_SCENARIOS.to_vec()
    } else {
        vec!["cuda-"]
    };
    if cuda {
        b.cuda()?;
    }
    if b.wants("export") {
        b.export()?;
    }
    if [
        "import-first",
        "import-first-persistent",
        "import-batch-16",
        "import-direct",
        "import-direct-batch-16",
        "import-cached",
    ]
    .iter()
    .any(|s| b.wants(s))
    {
        b.imports()?;
    }
    if [
        "notify-pingpong",
        "notify-spin-pingpong",
        "notify-adaptive-pingpong",
        "channel-pingpong",
    ]
    .iter()
    .any(|s| b.wants(s))
    {
        b.notifies()?;
    }
    if b.wants("read-bandwidth") {
        b.bandwidth()?;
    }
    if b.wants("channel-throughput") {
        b.channel_throughput()?;
    }
    if b.wants("scaling") || b.wants("scaling-direct") {
        if b.wants("scaling") {
            b.scaling_exports()?;
        }
        if placement.is_some() {
            // Many importers at once: every process, the exporter's broker
            // included, goes where the kernel puts it.
            unpin_all(&cpus);
            b.printer.placement = "importers and exporter placed by the kernel".into();
        }
        if b.wants("scaling") {
            b.scaling_importers(false)?;
        }
        if b.wants("scaling-direct") {
            b.scaling_importers(true)?;
        }
    }
    if b.wants("rendezvous") {
        b.rendezvous()?;
    }
    if remote::REMOTE_SCENARIOS.iter().any(|s| b.wants(s)) {
        // Their processes (hal's and ucx_perftest's) inherit this one's
        // CPUs: every CPU, for the kernel to place them.
        if placement.is_some() {
            unpin_all(&cpus);
        }
        b.remote()?;
    }
    if remote_channel::REMOTE_CHANNEL_SCENARIOS
        .iter()
        .any(|s| b.wants(s))
    {
        if placement.is_some() {
            unpin_all(&cpus);
        }
        b.remote_channel()?;
    }
    if b.wants("remote-rendezvous") {
        if placement.is_some() {
            unpin_all(&cpus);
        }
        b.remote_rendezvous()?;
    }
    let Bench { peer, printer, .. } = b;
    peer.quit()?;
    let wall = started.elapsed();
    let (with, missed) = printer.targets();
    printer.finish(&[
        format!(
            "{} scenario lines in {:.1} s; run `halctl bench --json` for every field",
            printer.lines.len(),
            wall.as_secs_f64()
        ),
        report::verdict_line(with, missed, args.check),
    ])?;
    if let Some(path) = &args.plot {
        let doc = plot::svg(
            &printer.lines,
            &format!(
                "halctl bench on {}: hal vs the raw floor, same run",
                backend.name()
            ),
        );
        std::fs::write(path, doc)
            .map_err(|e| Fail::failed(format!("writing the plot to {}: {e}", path.display())))?;
    }
    if args.check && missed > 0 {
        return Err(Fail::failed(format!(
            "{missed} of {with} targets missed (--check)"
        )));
    }
    Ok(())
}
