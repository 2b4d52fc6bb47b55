//! The exporter's side: allocate, fill and export the buffer, start the
//! consumer, time the baselines beside it.

use std::os::fd::{AsFd, AsRawFd};
use std::time::Instant;

use hal::registry::Registry;
use hal::{AllocDesc, Capabilities, Exported, ImportOptions, Importers, Memory, SharedHandle};

use crate::backend;
use crate::child::ConsumerProcess;
use crate::fail::{CmdResult, Context, Fail};
use crate::out;
use crate::pattern::{self, Content};
use crate::raw::{sealed_probes, FutexPair, RawExport};
use crate::stats::{percentiles, ratio};

use super::protocol::{
    blocking_wait, decode, export_options, schedule, DemoArgs, FromConsumer, Hello, Kind, Report,
    IMPORT_SAMPLES, IMPORT_WARMUP, PASSES, PEER_TIMEOUT, PROBE_MARKER,
};
use super::report::{
    failure_summary, print_human, BandwidthOut, DemoOut, ImportOut, LeasesOut, Mismatch, NotifyOut,
    PathOut, VerifiedOut, BANDWIDTH_BASELINE, BROKER_BASELINE, DIRECT_BASELINE, NOTIFY_BASELINE,
};

/// hal's default import against the raw floor of the path it took: a raw
/// `pidfd_getfd` where every timed import was direct, else a raw
/// `SCM_RIGHTS` receipt.
fn import_out(report: &Report) -> ImportOut {
    let samples = report.import_ns.len() as u64;
    let direct = report.direct_imports;
    let path = if samples > 0 && direct >= samples {
        "direct"
    } else if direct == 0 {
        "broker"
    } else {
        "mixed"
    };
    let (raw, desc) = if path == "direct" && !report.getfd_import_ns.is_empty() {
        (&report.getfd_import_ns, DIRECT_BASELINE)
    } else {
        (&report.scm_import_ns, BROKER_BASELINE)
    };
    ImportOut {
        path,
        figures: PathOut::new(&report.import_ns, raw, desc),
        buffer_import_ns: report.buffer_import_ns,
        direct,
        direct_baseline_error: report.getfd_error.clone(),
    }
}

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
    // Each path is imported IMPORT_WARMUP + IMPORT_SAMPLES times: hal's
    // default path and its broker path, a raw SCM_RIGHTS receipt and a raw
    // pidfd_getfd.
    let per_path = IMPORT_WARMUP + IMPORT_SAMPLES;
    let mut probes = Vec::with_capacity(2 * per_path);
    for _ in 0..2 * per_path {
        let probe = dev.allocate(&desc).ctx("allocating a probe buffer")?;
        probe
            .write(0, &[PROBE_MARKER])
            .ctx("writing a probe buffer")?;
        probes.push(probe);
    }
    let raw_export = RawExport::new(size, per_path)?;
    let getfd_memfds = sealed_probes(size, per_path)?;
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
        exporter_pid: std::process::id(),
        memory: handle_text.clone(),
        probes: probe_exports[..per_path]
            .iter()
            .map(Exported::to_text)
            .collect(),
        broker_probes: probe_exports[per_path..]
            .iter()
            .map(Exported::to_text)
            .collect(),
        getfd_fds: getfd_memfds
            .iter()
            .map(|fd| fd.as_raw_fd() as u32)
            .collect(),
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
    drop(getfd_memfds);
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
        import: import_out(&report),
        import_broker: PathOut::new(
            &report.broker_import_ns,
            &report.scm_import_ns,
            BROKER_BASELINE,
        ),
        notify_round_trip: NotifyOut {
            ok: pingpong_done,
            wait: "blocking (no spin phase)",
            value: hal_p,
            baseline: raw_p,
            ratio_p50: ratio(hal_p.p50_ns as f64, raw_p.p50_ns as f64),
            ratio_p99: ratio(hal_p.p99_ns as f64, raw_p.p99_ns as f64),
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
