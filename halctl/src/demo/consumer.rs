//! The consumer's side: import, check and read the buffer, ping-pong the notify, report back.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use hal::dynamic::{DynDevice, DynMapping, DynNotify};
use hal::kit::os;
use hal::registry::Registry;
use hal::{ImportOptions, Memory, SharedHandle};

use crate::backend;
use crate::channel::Channel;
use crate::fail::{CmdResult, Context, Fail};
use crate::pattern::{self, Content, ReadPath};
use crate::raw::{self, FutexPair};
use crate::stats::median;

use super::protocol::{
    blocking_wait, decode, export_options, ConsumerArgs, FromConsumer, Hello, Kind, Report,
    IMPORT_SAMPLES, IMPORT_WARMUP, PASSES, PEER_TIMEOUT, PROBE_MARKER,
};

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

    // First imports, timed, each path against its raw floor, interleaved,
    // each of a buffer of the demo's size: hal's default import (the direct
    // path where this process may take the exporter's descriptors) against
    // a raw `pidfd_getfd`, and hal's import through the broker against a raw
    // request and `SCM_RIGHTS` reply over a kept connection.
    let mut scm_ns = Vec::with_capacity(IMPORT_SAMPLES);
    let mut getfd_ns = Vec::with_capacity(IMPORT_SAMPLES);
    let mut hal_ns = Vec::with_capacity(IMPORT_SAMPLES);
    let mut broker_ns = Vec::with_capacity(IMPORT_SAMPLES);
    let mut markers_ok = true;
    let mut direct_imports = 0;
    let mut kept = None;
    let (mut pidfd, mut getfd_error) = match os::pidfd_open(hello.exporter_pid) {
        Ok(p) => (Some(p), None),
        Err(e) => (None, Some(format!("pidfd_open: {e}"))),
    };
    let rounds = hello
        .probes
        .len()
        .min(hello.broker_probes.len())
        .min(hello.getfd_fds.len());
    for k in 0..rounds {
        let timed = k >= IMPORT_WARMUP;
        if let Some(p) = &pidfd {
            match raw::raw_getfd_import(p.as_fd(), hello.getfd_fds[k], hello.size) {
                Ok((t, byte)) => {
                    if timed {
                        getfd_ns.push(t.as_nanos() as u64);
                    }
                    markers_ok &= byte == raw::RAW_MARKER;
                }
                Err(f) => {
                    getfd_error = Some(f.message);
                    getfd_ns.clear();
                    pidfd = None;
                }
            }
        }
        let before = hal::exchange::direct_import_count();
        let (t, byte, mapping) = hal_import(dev.as_ref(), &hello.probes[k], "probe")?;
        drop(mapping);
        markers_ok &= byte == PROBE_MARKER;
        if timed {
            hal_ns.push(t.as_nanos() as u64);
            if hal::exchange::direct_import_count() > before {
                direct_imports += 1;
            }
        }
        let (t, byte) = raw::raw_import_kept(&mut kept, &hello.raw_socket, hello.size)?;
        markers_ok &= byte == raw::RAW_MARKER;
        if timed {
            scm_ns.push(t.as_nanos() as u64);
        }
        hal::exchange::set_pidfd_getfd(Some(false));
        let r = hal_import(dev.as_ref(), &hello.broker_probes[k], "probe");
        hal::exchange::set_pidfd_getfd(None);
        let (t, byte, mapping) = r?;
        drop(mapping);
        markers_ok &= byte == PROBE_MARKER;
        if timed {
            broker_ns.push(t.as_nanos() as u64);
        }
    }
    drop(kept);
    drop(pidfd);

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
        scm_import_ns: scm_ns,
        getfd_import_ns: getfd_ns,
        getfd_error,
        import_ns: hal_ns,
        broker_import_ns: broker_ns,
        markers_ok,
        buffer_import_ns: buffer_time.as_nanos() as u64,
        direct_imports,
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
