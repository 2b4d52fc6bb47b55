//! What both sides of the demo share: the arguments, the messages on the
//! control socket, the schedule of the measurements, and the helpers both
//! call.

use std::time::Duration;

use clap::Args;
use hal::dynamic::DynDevice;
use hal::{Capabilities, ExportOptions, Handle, Importers, WaitOptions};
use serde::{Deserialize, Serialize};

use crate::fail::{CmdResult, Fail};

/// How long either side waits for the other before giving up.
pub(super) const PEER_TIMEOUT: Duration = Duration::from_secs(60);
/// Untimed round trips of each kind before the timed ones.
pub(super) const WARMUP: u32 = 100;
/// Timed blocks of each kind, interleaved so that drift hits both alike.
pub(super) const BLOCKS: u32 = 4;
/// Bandwidth passes over each buffer; the median is reported.
pub(super) const PASSES: u32 = 5;
/// First imports timed of each kind (interleaved); the median is reported.
pub(super) const IMPORT_SAMPLES: usize = 5;
/// Imports of each kind before the timed ones, discarded (the first
/// connection to the broker, the board's first fetch, the raw socket's
/// connection are set up there).
pub(super) const IMPORT_WARMUP: usize = 1;
/// The byte at offset 0 of the probe buffers whose imports are timed.
pub(super) const PROBE_MARKER: u8 = 0xa5;

/// Arguments of `halctl demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Backend to share on: cpu-shm, cuda, cuda-uvm, ascend, mock-cuda,
    /// mock-ascend (`mock` means mock-cuda).
    #[arg(long, value_name = "NAME", default_value = "cpu-shm")]
    pub(super) backend: String,
    /// Size of the shared buffer (4096, 64K, 16M, 1G); rounded up to whole pages.
    #[arg(long, value_name = "BYTES", default_value = "64M", value_parser = crate::parse_size)]
    pub(super) size: u64,
    /// Notify round trips to time (and as many raw futex round trips).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 2000,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000)
    )]
    pub(super) round_trips: u32,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(super) json: bool,
}

/// Arguments of the hidden consumer subcommand.
#[derive(Debug, Args)]
pub struct ConsumerArgs {
    /// Abstract socket name of the exporter's control channel.
    #[arg(long)]
    pub(super) control: String,
    /// The backend: the consumer first reports its `process_id()` on it,
    /// the id the exporter's allow-list needs (an Ascend bare tgid is not
    /// the OS pid).
    #[arg(long)]
    pub(super) backend: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Kind {
    Raw,
    Hal,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct Block {
    pub(super) kind: Kind,
    pub(super) rounds: u32,
    pub(super) timed: bool,
}

/// What the exporter tells the consumer (the futex memfd travels with it).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Hello {
    pub(super) backend: String,
    pub(super) device: u32,
    /// The exporter's `Device::process_id()`, for the consumer's allow-list.
    pub(super) exporter_id: u32,
    /// The exporter's OS pid, for the raw `pidfd_getfd` baseline.
    pub(super) exporter_pid: u32,
    pub(super) memory: String,
    /// Buffers imported by hal's default path (the direct one where it may).
    pub(super) probes: Vec<String>,
    /// Buffers imported with the direct path off (through the broker).
    pub(super) broker_probes: Vec<String>,
    /// The exporter's descriptor numbers of the raw memfds taken with
    /// `pidfd_getfd`.
    pub(super) getfd_fds: Vec<u32>,
    pub(super) notify: String,
    pub(super) size: u64,
    pub(super) seed: u64,
    pub(super) crc32: u32,
    pub(super) raw_socket: String,
    pub(super) schedule: Vec<Block>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Report {
    /// Raw: a request and an `SCM_RIGHTS` reply over a kept connection.
    pub(super) scm_import_ns: Vec<u64>,
    /// Raw: `pidfd_getfd` of the exporter's descriptor (empty if refused).
    pub(super) getfd_import_ns: Vec<u64>,
    /// Why the raw `pidfd_getfd` baseline could not be measured.
    pub(super) getfd_error: Option<String>,
    /// hal's default import.
    pub(super) import_ns: Vec<u64>,
    /// hal's import with the direct path off.
    pub(super) broker_import_ns: Vec<u64>,
    pub(super) markers_ok: bool,
    pub(super) buffer_import_ns: u64,
    /// How many of the timed default imports asked no one (the exporter's
    /// board, `pidfd_getfd`): the direct path; the others asked its broker.
    pub(super) direct_imports: u64,
    pub(super) first_byte_ok: bool,
    pub(super) mapped_len: u64,
    pub(super) bytes: u64,
    pub(super) mismatches: u64,
    pub(super) first_mismatch: Option<(u64, u8, u8)>,
    pub(super) crc32: u32,
    pub(super) read_path: String,
    pub(super) shared_gbps: f64,
    pub(super) private_gbps: f64,
    pub(super) notify: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) enum FromConsumer {
    /// The consumer's `Device::process_id()`, sent first.
    Identity(u32),
    Report(Box<Report>),
    Done,
    Failed(String),
}

pub(super) fn schedule(round_trips: u32) -> Vec<Block> {
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

pub(super) fn export_options(dev: &dyn DynDevice, peer: u32) -> ExportOptions {
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

pub(super) fn blocking_wait() -> WaitOptions {
    WaitOptions {
        timeout: Some(PEER_TIMEOUT),
        spin: Duration::ZERO,
    }
}

pub(super) fn decode(text: &str, what: &str) -> CmdResult<Handle> {
    Handle::from_text(text).map_err(|e| Fail::failed(format!("decoding the {what} handle: {e}")))
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
