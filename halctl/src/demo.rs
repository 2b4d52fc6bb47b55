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

use std::time::Duration;

use clap::Args;
use hal::dynamic::DynDevice;
use hal::{Capabilities, ExportOptions, Handle, Importers, WaitOptions};
use serde::{Deserialize, Serialize};

use crate::fail::{CmdResult, Fail};

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

mod consumer;
mod exporter;
mod report;

pub use consumer::consumer;
pub use exporter::run;

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
