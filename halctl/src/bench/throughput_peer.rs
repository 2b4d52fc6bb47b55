//! The subscriber's side of scenario channel-throughput: read a shared
//! region in place (the baseline), then receive the channel's samples and
//! read each in place before releasing it.

use std::time::Instant;

use hal::channel::{SubscribeOptions, Subscriber};
use hal::dynamic::DynDevice;
use hal::{ImportOptions, Memory, SharedHandle};

use super::proto::PEER_TIMEOUT;
use crate::fail::{CmdResult, Context, Fail};
use crate::pattern;

/// Pieces read, or samples received, in one block.
const BLOCK: u32 = 20;

/// Subscribe to `channel`, import the region `region` (as large as the
/// channel's slots together), read `passes` pieces of `sample` bytes of it
/// in place, in turn (so that caches hold as much of it as of the slots),
/// and receive `samples` samples, each read in place and released, in
/// blocks of [`BLOCK`] of each in turn; series: the pieces' read times, the
/// times from one sample's release to the next's (the first of each block
/// excluded: it waited while this subscriber read the region).
pub(super) fn run(
    dev: &dyn DynDevice,
    channel: &str,
    region: hal::Handle,
    sample: u64,
    samples: u32,
    passes: u32,
) -> CmdResult<[Vec<u64>; 2]> {
    let subscriber = Subscriber::open(
        dev,
        channel,
        &SubscribeOptions::default().timeout(Some(PEER_TIMEOUT)),
    )
    .ctx("subscribing to the throughput channel")?;
    let mapping = dev
        .import_memory(SharedHandle::from(region), &ImportOptions::default())
        .ctx("importing the throughput baseline's region")?;
    let pieces = mapping.len() / sample.max(1);
    if pieces == 0 {
        return Err(Fail::failed(
            "the baseline's region is smaller than a sample",
        ));
    }
    let mut bounce = vec![0u8; pattern::CHUNK];
    // The first pass maps the region's pages in.
    for k in 0..pieces {
        pattern::read_range(mapping.as_ref(), k * sample, sample, &mut bounce)?;
    }
    let memory = subscriber.memory();
    let mut baseline = Vec::with_capacity(passes as usize);
    let mut times = Vec::with_capacity(samples as usize);
    let (mut piece, mut received) = (0u64, 0u32);
    // Blocks of each in turn, so that both see the same moments of a
    // machine the five processes share.
    while received < samples || (baseline.len() as u32) < passes {
        for _ in 0..BLOCK.min(passes - baseline.len() as u32) {
            let t0 = Instant::now();
            pattern::read_range(
                mapping.as_ref(),
                (piece % pieces) * sample,
                sample,
                &mut bounce,
            )?;
            baseline.push(ns(t0.elapsed()));
            piece += 1;
        }
        let mut last: Option<Instant> = None;
        for _ in 0..BLOCK.min(samples - received) {
            let got = subscriber.receive().ctx("receiving a throughput sample")?;
            if got.len() != sample {
                return Err(Fail::failed(format!(
                    "a sample of {} bytes where {sample} were published",
                    got.len()
                )));
            }
            pattern::read_range(memory, got.offset(), got.len(), &mut bounce)?;
            drop(got);
            received += 1;
            let now = Instant::now();
            if let Some(t) = last {
                times.push(ns(now - t));
            }
            last = Some(now);
        }
    }
    Ok([baseline, times])
}

fn ns(d: std::time::Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}
