//! Scenarios export, import-first and import-cached.

use std::os::fd::AsFd;
use std::time::Instant;

use hal::{ExportOptions, Exported};

use super::host::ns;
use super::proto::{self, Cmd, PEER_TIMEOUT};
use super::report::{summarize, Line};
use super::{two, Allocation, Bench, IMPORT_BATCH, IMPORT_WARMUP, REGION};
use crate::fail::{CmdResult, Context, Fail};
use crate::raw::RawExport;
use crate::stats::ratio;

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
    pub(super) fn imports(&mut self) -> CmdResult {
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
}
