//! Scenarios export, import-first, import-first-persistent, import-batch-16
//! and import-cached.

use std::os::fd::AsFd;
use std::time::Instant;

use hal::{ExportOptions, Exported};

use super::baselines::{RecvQueue, ShmSet};
use super::host::ns;
use super::proto::{self, Cmd, PEER_TIMEOUT};
use super::report::{summarize, Line, OtherBaseline};
use super::{two, Allocation, Bench, BATCH_GROUP, IMPORT_BATCH, IMPORT_WARMUP, REGION};
use crate::fail::{CmdResult, Context, Fail};
use crate::raw::RawExport;

impl Bench<'_> {
    /// export: allocate + export a 1 MiB region, against the raw memfd.
    pub(super) fn export(&mut self) -> CmdResult {
        let opts = self.opts(&[self.peer.pid]);
        let n = self.plan.export_n;
        let mut hal_ns = Vec::with_capacity(n);
        let mut raw_ns = Vec::with_capacity(n);
        for i in 0..n + IMPORT_WARMUP {
            for step in 0..2 {
                if (i + step) % 2 == 0 {
                    let t0 = Instant::now();
                    let fd = hal::kit::os::memfd("halctl-bench-raw", REGION, None)
                        .and_then(|fd| {
                            hal::kit::os::add_seals(fd.as_fd(), hal::kit::os::EXPORT_SEALS)
                                .map(|()| fd)
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
        let r = line.ratio_p50.unwrap_or(f64::INFINITY);
        let line = line.target("ratio_p50 <= 2", r <= 2.0);
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

    /// First imports of fresh regions (see `Cmd::ImportFirst`), `total`
    /// handles, in batches of fresh regions: series hal, raw, named,
    /// received, per handle.
    fn first_imports(
        &self,
        total: usize,
        fresh_connection: bool,
        group: usize,
        direct: bool,
    ) -> CmdResult<([Vec<u64>; 4], Taken)> {
        let pid = self.peer.pid;
        let opts = self.opts(&[pid]);
        let mut all: [Vec<u64>; 4] = Default::default();
        // Imports whose descriptors came by pidfd_getfd.
        let mut pidfd_taken = 0;
        let mut asked_none = 0;
        let mut done = 0;
        while done < total {
            // A whole number of groups per batch.
            let n = ((total - done).min(IMPORT_BATCH) / group * group).max(group);
            let (probes, exports) = self.probes(n, &opts)?;
            let size = probes[0].len();
            let raw = RawExport::new(size, n)?;
            let shm = ShmSet::new(size, n)?;
            let mut queue = RecvQueue::new(size, n)?;
            let theirs = queue.take_theirs()?;
            let raw_socket = raw.name().to_string();
            let server = raw.serve(pid, PEER_TIMEOUT);
            let feeder = queue.feed();
            proto::send_handles(&self.peer.chan, &self.peer.who(), &Self::texts(&exports))?;
            let cmd = Cmd::ImportFirst {
                raw_socket,
                shm_prefix: shm.prefix().to_string(),
                size,
                fresh_connection,
                group,
                direct,
            };
            self.peer.chan.send_json(&cmd, &[theirs.as_fd()])?;
            drop(theirs);
            let (reply, series) = proto::recv_reply(&self.peer.chan, &self.peer.who())?;
            let taken = reply.values.first().copied().unwrap_or(0.0) as usize;
            pidfd_taken += taken;
            asked_none += reply.values.get(1).copied().unwrap_or(0.0) as usize;
            for (what, joined) in [("raw", server.join()), ("queue", feeder.join())] {
                match joined {
                    Ok(r) => r?,
                    Err(_) => {
                        return Err(Fail::failed(format!("the {what} baseline's thread failed")))
                    }
                }
            }
            let four: [Vec<u64>; 4] = series
                .try_into()
                .map_err(|_| Fail::failed("the consumer sent the wrong number of series"))?;
            for (a, s) in all.iter_mut().zip(four) {
                a.extend(s);
            }
            done += n;
            drop(shm);
        }
        Ok((
            all,
            Taken {
                pidfd: pidfd_taken,
                asked_none,
            },
        ))
    }

    /// A line of first imports against the three baselines: `main` (0:
    /// the raw socket, 2: the named region) is the line's baseline, the
    /// others are listed with their ratios.
    fn first_line(
        &self,
        scenario: &'static str,
        series: [Vec<u64>; 4],
        skip: usize,
        main: usize,
        kept: bool,
    ) -> Line {
        let [hal, raw, named, received] =
            series.map(|s| summarize(s.into_iter().skip(skip).collect()));
        let raw_desc = if kept {
            "import: a request over a kept Unix socket connection answered with a sealed memfd \
             of 1 MiB (SCM_RIGHTS) + fstat + mmap + first touch, in the consumer"
        } else {
            "import-first: raw memfd of 1 MiB received over a Unix socket (connect + \
             SCM_RIGHTS) + fstat + mmap + first touch, in the consumer"
        };
        let baselines = [
            (1, raw_desc, raw),
            (
                2,
                "import: shm_open + fstat + mmap + first touch of a named region of 1 MiB, in \
                 the consumer",
                named,
            ),
            (
                3,
                "import: a sealed memfd of 1 MiB already queued on a socket (recvmsg + seals \
                 check + mmap + first touch), in the consumer",
                received,
            ),
        ];
        let main = if main == 2 { 2 } else { 1 };
        let (_, desc, b) = baselines[main - 1];
        let mut line = Line::new(scenario, &self.backend, hal, Some((desc, b)));
        for (k, desc, b) in baselines {
            if k != main {
                line.other_baselines.push(OtherBaseline::new(desc, hal, b));
            }
        }
        line
    }

    /// import-first, import-first-persistent, import-batch-16 and
    /// import-cached.
    pub(super) fn imports(&mut self) -> CmdResult {
        let pid = self.peer.pid;
        let opts = self.opts(&[pid]);
        let total = self.plan.import_n + IMPORT_WARMUP;
        if self.wants("import-first") {
            let (series, _) = self.first_imports(total, true, 1, false)?;
            let line = self.first_line("import-first", series, IMPORT_WARMUP, 0, false);
            let r = line.ratio_p50.unwrap_or(f64::INFINITY);
            let mut line = line.target("ratio_p50 <= 1.3", r <= 1.3);
            line.note = Some(format!(
                "a new connection to the exporter's broker for every import; {ASKING}"
            ));
            self.printer.emit(line)?;
        }
        if self.wants("import-first-persistent") {
            let (series, _) = self.first_imports(total, false, 1, false)?;
            // Against the same request over a kept connection, answered
            // with a sealed memfd: the floor of any broker path.
            let line = self.first_line("import-first-persistent", series, IMPORT_WARMUP, 1, true);
            let r = line.ratio_p50.unwrap_or(f64::INFINITY);
            let mut line = line.target("ratio_p50 <= 1.15", r <= 1.15);
            line.note = Some(format!(
                "the connection to the exporter's broker kept from import to import; {ASKING}"
            ));
            self.printer.emit(line)?;
        }
        if self.wants("import-batch-16") {
            let (series, _) =
                self.first_imports(total.max(2 * BATCH_GROUP), false, BATCH_GROUP, false)?;
            let line = self.first_line("import-batch-16", series, 1, 2, true);
            let r = line.ratio_p50.unwrap_or(f64::INFINITY);
            let mut line = line.target("ratio_p50 <= 1.2", r <= 1.2);
            line.note = Some(format!(
                "time per handle: import_memory_batch of {BATCH_GROUP} handles + first touch of \
                 each, divided by {BATCH_GROUP} (the baselines likewise); {ASKING}"
            ));
            self.printer.emit(line)?;
        }
        for (scenario, group, target) in [
            ("import-direct", 1, 1.5),
            ("import-direct-batch-16", BATCH_GROUP, 1.2),
        ] {
            if !self.wants(scenario) {
                continue;
            }
            // The direct path: the exporter's board, pidfd_getfd, no round
            // trip; against the named region, as the target says.
            let (
                series,
                Taken {
                    pidfd: taken,
                    asked_none,
                },
            ) = self.first_imports(total.max(2 * group), false, group, true)?;
            let skip = if group == 1 { IMPORT_WARMUP } else { 1 };
            let line = self.first_line(scenario, series, skip, 2, true);
            let r = line.ratio_p50.unwrap_or(f64::INFINITY);
            let mut line = line.target(&format!("ratio_p50 <= {target}"), r <= target);
            line.note = Some(format!(
                "the direct path, on by default where the importer has ptrace access to the \
                 exporter: {asked_none} of the \
                 imports found on the exporter's board and taken by pidfd_getfd, asking no one; \
                 {} more taken by pidfd_getfd after a request{}",
                taken.saturating_sub(asked_none),
                if group > 1 {
                    format!("; time per handle of a batch of {group}")
                } else {
                    String::new()
                }
            ));
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
                .target("p50_ns <= 60", v.p50_ns <= 60);
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
}

/// What the notes of the scenarios of the broker path say of it.
const ASKING: &str = "every import asks the broker (HAL_PIDFD_GETFD=0: the path of an importer \
                      without ptrace access to the exporter; with it, imports go direct, below)";

/// How the consumer's first imports took their descriptors.
struct Taken {
    /// By `pidfd_getfd`.
    pidfd: usize,
    /// Of those, found on the exporter's board without a request.
    asked_none: usize,
}
