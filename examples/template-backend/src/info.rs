//! What the device is: its `DeviceInfo` and capabilities.

use std::sync::OnceLock;

use hal_core::{Capabilities, DeviceInfo, DlpackTypes};

use crate::id::{BACKEND_ID, NAME};

/// What the device can do: memory, events and notifies shared across
/// processes, importers counted and limited to pids. No VMM, no read-only
/// exports, no fixed-address imports: the conformance suite checks that
/// those answer `Unsupported`.
pub(crate) const CAPABILITIES: Capabilities = Capabilities::IPC_MEMORY
    .union(Capabilities::IPC_EVENT)
    .union(Capabilities::IPC_NOTIFY)
    .union(Capabilities::IPC_EVENT_QUERY)
    .union(Capabilities::MEMORY_IS_HOST)
    .union(Capabilities::PID_ALLOW_LIST)
    .union(Capabilities::LEASES)
    .union(Capabilities::STREAM_ORDERED_NOTIFY);

/// The device's information, the same in every process (so that importers
/// find the device by its UUID).
pub(crate) fn info() -> &'static DeviceInfo {
    static INFO: OnceLock<DeviceInfo> = OnceLock::new();
    INFO.get_or_init(|| {
        let page = hal_core::kit::os::page_size();
        DeviceInfo {
            backend: BACKEND_ID,
            ordinal: 0,
            uuid: *b"hal-template-dev",
            name: format!("{NAME} host memory"),
            total_memory: total_memory(),
            page_sizes: vec![page],
            granularity_min: page,
            granularity_recommended: page,
            capabilities: CAPABILITIES,
            dlpack: DlpackTypes::HOST,
        }
    })
}

/// The host's memory, from `/proc/meminfo` (the template's memory is the
/// host's).
fn total_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}
