//! What both sides of the bench agree on: the probe marker, who may
//! import, and how waits wait.

use std::time::Duration;

use hal::channel::{ChannelOptions, SubscribeOptions};
use hal::dynamic::DynDevice;
use hal::{Capabilities, ExportOptions, Importers, WaitOptions};

use super::proto::PEER_TIMEOUT;

/// The byte at offset 0 of every region whose import is timed.
pub(crate) const PROBE_MARKER: u8 = 0xa5;

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

/// The size of a channel-pingpong sample.
pub(crate) const CHANNEL_SAMPLE: usize = 64;

/// A channel of two slots of [`CHANNEL_SAMPLE`] bytes whose publisher
/// busy-polls for a free slot (channel-pingpong).
pub(crate) fn busy_channel() -> ChannelOptions {
    ChannelOptions::default()
        .slots(2)
        .slot_size(4096)
        .timeout(PEER_TIMEOUT)
        .spin(PEER_TIMEOUT)
}

/// A subscriber that busy-polls for its samples (channel-pingpong).
pub(crate) fn busy_subscriber() -> SubscribeOptions {
    SubscribeOptions::default()
        .timeout(Some(PEER_TIMEOUT))
        .spin(PEER_TIMEOUT)
}

/// The byte every region of the CUDA scenarios starts with.
pub(crate) const CUDA_MARKER: u8 = 0xc7;
