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
//! | import-first | decode + import + first touch, in the consumer | fd over a Unix socket + fstat + mmap + touch |
//! | import-cached | import of a handle already imported | none (absolute) |
//! | notify-pingpong | round trip, blocking waits | raw futex ping-pong |
//! | notify-spin-pingpong | round trip, busy polling | raw atomic spin ping-pong |
//! | notify-adaptive-pingpong | round trip, default waits | raw atomic spin ping-pong |
//! | read-bandwidth | in-place read of a shared region | a private buffer of the same size |
//! | scaling | import with 1/100/10,000 live exports, 1/8/32 importers | the smallest configuration |

mod consumer;
mod plot;
mod proto;
mod report;
mod spin;

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Args;
use hal::dynamic::{DynAllocation, DynDevice, DynNotify};
use hal::registry::Registry;
use hal::{
    AllocDesc, Capabilities, ExportOptions, Exported, Handle, ImportOptions, Importers,
    SharedHandle, WaitOptions,
};

pub use consumer::{consumer, ConsumerArgs};
use proto::{Block, Cmd, IdleMode, Pong, PEER_TIMEOUT};
use report::{summarize, Line, Printer, Summary};
use spin::SpinPair;

use crate::backend;
use crate::channel::{Channel, Listener};
use crate::fail::{CmdResult, Context, Fail};
use crate::pattern::{self, Content};
use crate::raw::{FutexPair, RawExport};
use crate::stats::ratio;

/// The byte at offset 0 of every region whose import is timed.
pub(crate) const PROBE_MARKER: u8 = 0xa5;
/// Size of the regions exported and imported (all but read-bandwidth).
const REGION: u64 = 1 << 20;
/// Imports of each kind before the timed ones, discarded.
const IMPORT_WARMUP: usize = 10;
/// Regions each importer process imports in the importer-scaling scenario.
const IMPORTER_REGIONS: usize = 16;
/// Samples of import-first per batch of fresh regions.
const IMPORT_BATCH: usize = 1000;
/// Full-run read-bandwidth size.
const BANDWIDTH_FULL: u64 = 256 << 20;

/// Arguments of `halctl bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Backend to measure (cpu-shm, mock-cuda, mock-ascend; `mock` means mock-cuda).
    #[arg(long, value_name = "NAME", default_value = "cpu-shm")]
    backend: String,
    /// Print one JSON object per scenario per line instead of a table.
    #[arg(long)]
    json: bool,
    /// Fewer samples and a 64 MiB read-bandwidth region: a few seconds on
    /// two cores instead of about twenty.
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
    /// Only these scenarios (comma-separated names; a prefix selects
    /// several, e.g. `notify`).
    #[arg(long, hide = true, value_delimiter = ',', value_name = "NAMES")]
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
            }
        }
    }
}

/// Who may import: the given pids where the backend has allow-lists, else
/// the backend's default.
pub(crate) fn export_options(dev: &dyn DynDevice, pids: &[u32]) -> ExportOptions {
    let importers = if dev.capabilities().contains(Capabilities::PID_ALLOW_LIST) {
        Importers::Pids(pids.to_vec())
    } else {
        Importers::BackendDefault
    };
    ExportOptions {
        importers,
        ..Default::default()
    }
}

/// A wait that sleeps at once.
pub(crate) fn blocking_wait() -> WaitOptions {
    WaitOptions {
        timeout: Some(PEER_TIMEOUT),
        spin: Duration::ZERO,
    }
}

/// A wait that busy-polls for as long as it may last.
pub(crate) fn spin_wait() -> WaitOptions {
    WaitOptions {
        timeout: Some(PEER_TIMEOUT),
        spin: PEER_TIMEOUT,
    }
}

/// A consumer process and its control channel; killed if still running
/// when dropped.
struct Peer {
    child: Option<Child>,
    chan: Channel,
    pid: u32,
}

impl Peer {
    fn spawn(cpu: Option<usize>) -> CmdResult<Peer> {
        let exe = std::env::current_exe().map_err(|e| {
            Fail::failed(format!(
                "finding the halctl binary to start the consumer: {e}"
            ))
        })?;
        let control = Listener::bind("halctl-bench")?;
        let mut cmd = Command::new(exe);
        cmd.arg("__bench-consumer")
            .arg("--control")
            .arg(control.name());
        if let Some(cpu) = cpu {
            cmd.arg("--cpu").arg(cpu.to_string());
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Fail::failed(format!("starting a consumer process: {e}")))?;
        let pid = child.id();
        let mut peer_child = Some(child);
        let chan = match control.accept_from(pid, PEER_TIMEOUT) {
            Ok(c) => c,
            Err(e) => {
                if let Some(mut c) = peer_child.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(e);
            }
        };
        let peer = Peer {
            child: peer_child,
            chan,
            pid,
        };
        peer.chan.set_timeout(PEER_TIMEOUT)?;
        Ok(peer)
    }

    fn who(&self) -> String {
        format!("consumer (pid {})", self.pid)
    }

    fn call(&self, cmd: &Cmd) -> CmdResult<(proto::Reply, Vec<Vec<u64>>)> {
        proto::call(&self.chan, &self.who(), cmd)
    }

    fn open(&self, backend: &str, device: u32) -> CmdResult {
        self.call(&Cmd::Open {
            backend: backend.to_string(),
            device,
        })
        .map(|_| ())
    }

    fn quit(mut self) -> CmdResult {
        self.call(&Cmd::Quit)?;
        if let Some(mut c) = self.child.take() {
            let ok = c
                .wait()
                .map_err(|e| Fail::failed(format!("waiting for a consumer: {e}")))?
                .success();
            if !ok {
                return Err(Fail::failed(format!("{} exited with an error", self.who())));
            }
        }
        Ok(())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A small deterministic generator for picking regions.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = u64::from_le_bytes(hal::os::random_id()[..8].try_into().unwrap_or([7; 8]));
        Rng(seed | 1)
    }

    fn below(&mut self, n: usize) -> usize {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1) as u64) as usize
    }
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// Raise the open-file limit to at least `need` if the hard limit allows
/// (or the process may raise that too); returns the limit in force.
fn raise_nofile(need: u64) -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft >= need {
        return soft;
    }
    if need <= hard && setrlimit(Resource::RLIMIT_NOFILE, need, hard).is_ok() {
        return need;
    }
    // Raising the hard limit needs CAP_SYS_RESOURCE; try, then settle.
    if setrlimit(Resource::RLIMIT_NOFILE, need, need.max(hard)).is_ok() {
        return need;
    }
    if setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    use nix::sched::{sched_getaffinity, CpuSet};
    use nix::unistd::Pid;
    match sched_getaffinity(Pid::from_raw(0)) {
        Ok(set) => (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Pin the calling thread (and the threads it starts later) to `cpu`.
pub(crate) fn pin_to(cpu: usize) -> CmdResult {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    set.set(cpu)
        .map_err(|e| Fail::usage(format!("CPU {cpu}: {e}")))?;
    sched_setaffinity(Pid::from_raw(0), &set)
        .map_err(|e| Fail::failed(format!("pinning to CPU {cpu}: {e}")))
}

/// Let every thread of this process run on any of `cpus` again (the
/// descriptor broker's thread was started pinned).
fn unpin_all(cpus: &[usize]) {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    for &c in cpus {
        let _ = set.set(c);
    }
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            if let Some(tid) = t.file_name().to_str().and_then(|n| n.parse().ok()) {
                let _ = sched_setaffinity(Pid::from_raw(tid), &set);
            }
        }
    }
}

/// Pin this process to the first CPU it may use and return it with the
/// second, for the consumer; `None` (nothing pinned) with fewer than two.
fn pin_pair() -> Option<(usize, usize)> {
    let cpus = allowed_cpus();
    let (&a, &b) = (cpus.first()?, cpus.get(1)?);
    pin_to(a).ok()?;
    Some((a, b))
}

/// Descriptors open in this process now.
fn open_files() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(64, |d| d.count() as u64)
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
}

impl Bench<'_> {
    fn wants(&self, scenario: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| scenario.starts_with(o.as_str()))
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

    /// export: allocate + export a 1 MiB region, against the raw memfd.
    fn export(&mut self) -> CmdResult {
        let opts = self.opts(&[self.peer.pid]);
        let n = self.plan.export_n;
        let mut hal_ns = Vec::with_capacity(n);
        let mut raw_ns = Vec::with_capacity(n);
        for i in 0..n + IMPORT_WARMUP {
            for step in 0..2 {
                if (i + step) % 2 == 0 {
                    let t0 = Instant::now();
                    let fd = hal::os::memfd("halctl-bench-raw", REGION, None)
                        .and_then(|fd| {
                            hal::os::add_seals(fd.as_fd(), hal::os::EXPORT_SEALS).map(|()| fd)
                        })
                        .ctx("raw memfd")?;
                    let dt = ns(t0.elapsed());
                    drop(fd);
                    if i >= IMPORT_WARMUP {
                        raw_ns.push(dt);
                    }
                } else {
                    let t0 = Instant::now();
                    let alloc = self.dev.allocate(&self.desc).ctx("allocating")?;
                    let exported = self
                        .dev
                        .export_memory(alloc.as_ref(), &opts)
                        .ctx("exporting")?;
                    let dt = ns(t0.elapsed());
                    drop(exported);
                    drop(alloc);
                    if i >= IMPORT_WARMUP {
                        hal_ns.push(dt);
                    }
                }
            }
        }
        let line = Line::new(
            "export",
            &self.backend,
            summarize(hal_ns),
            Some((
                "export: raw memfd_create + ftruncate + F_ADD_SEALS of 1 MiB, in the exporter",
                summarize(raw_ns),
            )),
        );
        self.printer.emit(line)
    }

    /// `n` regions of the probe size, exported to `opts`.
    fn probes(
        &self,
        n: usize,
        opts: &ExportOptions,
    ) -> CmdResult<(Vec<Allocation>, Vec<Exported>)> {
        let mut probes = Vec::with_capacity(n);
        let mut exports = Vec::with_capacity(n);
        for _ in 0..n {
            let p = self.probe()?;
            exports.push(
                self.dev
                    .export_memory(p.as_ref(), opts)
                    .ctx("exporting a region")?,
            );
            probes.push(p);
        }
        Ok((probes, exports))
    }

    /// import-first and import-cached.
    fn imports(&mut self) -> CmdResult {
        let pid = self.peer.pid;
        let opts = self.opts(&[pid]);
        if self.wants("import-first") {
            // Fresh regions and raw memfds for every sample, made in batches
            // so that the descriptors they hold stay well under the
            // open-file limit.
            let total = self.plan.import_n + IMPORT_WARMUP;
            let mut hal_all = Vec::with_capacity(total);
            let mut raw_all = Vec::with_capacity(total);
            while hal_all.len() < total {
                let n = (total - hal_all.len()).min(IMPORT_BATCH);
                let (probes, exports) = self.probes(n, &opts)?;
                let size = probes[0].len();
                let raw = RawExport::new(size, n)?;
                let raw_socket = raw.name().to_string();
                let server = raw.serve(pid, PEER_TIMEOUT);
                proto::send_handles(&self.peer.chan, &self.peer.who(), &Self::texts(&exports))?;
                let (_, series) = self.peer.call(&Cmd::ImportFirst { raw_socket, size })?;
                match server.join() {
                    Ok(r) => r?,
                    Err(_) => return Err(Fail::failed("the raw baseline's server thread failed")),
                }
                let [hal_ns, raw_ns] = two(series)?;
                hal_all.extend(hal_ns);
                raw_all.extend(raw_ns);
            }
            let v = summarize(hal_all.into_iter().skip(IMPORT_WARMUP).collect());
            let b = summarize(raw_all.into_iter().skip(IMPORT_WARMUP).collect());
            let r = ratio(v.p50_ns as f64, b.p50_ns as f64);
            let line = Line::new(
                "import-first",
                &self.backend,
                v,
                Some((
                    "import-first: raw memfd of 1 MiB received over a Unix socket (connect + \
                     SCM_RIGHTS) + fstat + mmap + first touch, in the consumer",
                    b,
                )),
            )
            .target("ratio_p50 <= 1.3", r <= 1.3);
            self.printer.emit(line)?;
        }
        if self.wants("import-cached") {
            let (_probes, exports) = self.probes(1, &opts)?;
            proto::send_handles(&self.peer.chan, &self.peer.who(), &Self::texts(&exports))?;
            let (reply, series) = self.peer.call(&Cmd::ImportCached {
                n: self.plan.cached_n,
            })?;
            let [hal_ns, timer_ns] = two(series)?;
            let v = summarize(hal_ns);
            let mut line = Line::new("import-cached", &self.backend, v, None)
                .target("p50_ns < 200", v.p50_ns < 200);
            line.cached = Some(reply.values.first().copied() == Some(1.0));
            line.timer_overhead_ns = Some(summarize(timer_ns).p50_ns);
            line.note = Some(
                "the handle is decoded and cloned before the clock starts; the clock overhead \
                 is included"
                    .into(),
            );
            self.printer.emit(line)?;
        }
        Ok(())
    }

    /// The three notify ping-pongs against the raw futex and spin ones, and
    /// the CPU an idle waiter burns.
    fn notifies(&mut self) -> CmdResult {
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
        self.peer.chan.send_json(
            &Cmd::NotifySetup {
                notify: mine_exported.to_text(),
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

        let kinds = [
            Pong::RawFutex,
            Pong::RawSpin,
            Pong::HalBlocking,
            Pong::HalSpin,
            Pong::HalAdaptive,
        ];
        let plan = schedule(
            &[
                &[Pong::RawFutex, Pong::HalBlocking],
                &[Pong::RawSpin, Pong::HalSpin, Pong::HalAdaptive],
            ],
            self.plan.rounds,
            self.plan.warmup_rounds,
            self.plan.blocks,
        );
        self.peer
            .chan
            .send_json(&Cmd::PingPong { plan: plan.clone() }, &[])?;
        let mut times: Vec<Vec<u64>> = (0..5)
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
        Ok(())
    }

    /// read-bandwidth: the consumer reads a shared region in place, against
    /// a private buffer of the same size.
    fn bandwidth(&mut self) -> CmdResult {
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

    /// scaling: import latency with more live exports.
    ///
    /// A live memory export holds two descriptors here (the region's
    /// memfd and its duplicate registered with the broker). Where the open-file limit cannot hold that many, the
    /// configuration is made of as many memory exports as fit (the ones
    /// imported) and notify exports (one descriptor each) for the rest:
    /// every one of them is an entry of the exporter's broker.
    fn scaling_exports(&mut self) -> CmdResult {
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
                     memory export holds 4 descriptors here and the open-file limit is {}",
                    memory.len(),
                    others.len(),
                    self.file_limit
                ));
            }
            let picks: Vec<String> = (0..self.plan.scale_n + IMPORT_WARMUP)
                .map(|_| memory[self.rng.below(memory.len())].1.to_text())
                .collect();
            proto::send_handles(&self.peer.chan, &self.peer.who(), &picks)?;
            let (_, series) = self.peer.call(&Cmd::ImportEach)?;
            let [hal_ns] = one(series)?;
            let v = summarize(hal_ns.into_iter().skip(IMPORT_WARMUP).collect());
            let r = *reference.get_or_insert(v);
            let mut line = Line::new(
                "scaling",
                &self.backend,
                v,
                Some((
                    "scaling: the same import (decode + import + first touch of a 1 MiB \
                     region, in the consumer) with the fewest live exports",
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

    /// scaling: import latency with several importer processes at once.
    fn scaling_importers(&mut self) -> CmdResult {
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
                peer.chan.send_json(&Cmd::ImportKeep { rounds }, &[])?;
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
                "scaling",
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

const SCENARIOS: [&str; 8] = [
    "export",
    "import-first",
    "import-cached",
    "notify-pingpong",
    "notify-spin-pingpong",
    "notify-adaptive-pingpong",
    "read-bandwidth",
    "scaling",
];

/// Run `halctl bench`.
pub fn run(args: &BenchArgs) -> CmdResult {
    for o in &args.only {
        if !SCENARIOS.iter().any(|s| s.starts_with(o.as_str())) {
            return Err(Fail::usage(format!(
                "unknown scenario `{o}` (scenarios: {})",
                SCENARIOS.join(", ")
            )));
        }
    }
    let started = Instant::now();
    let plan = Plan::of(args);
    let registry = Registry::new();
    let backend = backend::open(&registry, &args.backend)?;
    let dev = backend::device(backend.as_ref(), 0)?;
    let info = dev.info().clone();
    let desc = if info.capabilities.contains(Capabilities::HOST_VISIBLE) {
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
    };
    if b.wants("export") {
        b.export()?;
    }
    if b.wants("import-first") || b.wants("import-cached") {
        b.imports()?;
    }
    if [
        "notify-pingpong",
        "notify-spin-pingpong",
        "notify-adaptive-pingpong",
    ]
    .iter()
    .any(|s| b.wants(s))
    {
        b.notifies()?;
    }
    if b.wants("read-bandwidth") {
        b.bandwidth()?;
    }
    if b.wants("scaling") {
        b.scaling_exports()?;
        if placement.is_some() {
            // Many importers at once: every process, the exporter's broker
            // included, goes where the kernel puts it.
            unpin_all(&cpus);
            b.printer.placement = "importers and exporter placed by the kernel".into();
        }
        b.scaling_importers()?;
    }
    let Bench { peer, printer, .. } = b;
    peer.quit()?;
    let wall = started.elapsed();
    printer.finish(&[format!(
        "{} scenario lines in {:.1} s; run `halctl bench --json` for every field",
        printer.lines.len(),
        wall.as_secs_f64()
    )])?;
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
    Ok(())
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

    #[test]
    fn rng_stays_in_range() {
        let mut r = Rng::new();
        for n in [1, 2, 10_000] {
            for _ in 0..1000 {
                assert!(r.below(n) < n);
            }
        }
    }
}
