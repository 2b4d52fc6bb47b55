//! What the host device is: memory, page sizes, a stable UUID.

use std::sync::OnceLock;

use hal_core::{BackendId, Capabilities, DeviceInfo, DlpackTypes};

/// Two mebibytes: the transparent and default explicit huge page.
pub const HUGE_2M: u64 = 2 << 20;
/// One gibibyte: the large explicit huge page.
pub const HUGE_1G: u64 = 1 << 30;

/// The capabilities of the host device.
pub const CAPABILITIES: Capabilities = Capabilities::IPC_MEMORY
    .union(Capabilities::IPC_EVENT)
    .union(Capabilities::IPC_NOTIFY)
    .union(Capabilities::IPC_EVENT_QUERY)
    .union(Capabilities::VMM)
    .union(Capabilities::PID_ALLOW_LIST)
    .union(Capabilities::FIXED_ADDRESS_IMPORT)
    .union(Capabilities::MEMORY_IS_HOST)
    .union(Capabilities::READ_ONLY_EXPORT)
    .union(Capabilities::GROWABLE)
    .union(Capabilities::LEASES)
    .union(Capabilities::HOST_NUMA_VMM)
    .union(Capabilities::STREAM_ORDERED_NOTIFY)
    .union(Capabilities::HOST_REGISTRATION);

/// The host device's information, computed once per process.
pub fn host_info() -> &'static DeviceInfo {
    static INFO: OnceLock<DeviceInfo> = OnceLock::new();
    INFO.get_or_init(|| {
        let page = hal_core::kit::os::page_size();
        let mut page_sizes = vec![page, HUGE_2M];
        if std::path::Path::new("/sys/kernel/mm/hugepages/hugepages-1048576kB").exists() {
            page_sizes.push(HUGE_1G);
        }
        DeviceInfo {
            backend: BackendId::CpuShm,
            ordinal: 0,
            uuid: host_uuid(),
            name: "host".into(),
            total_memory: total_memory(),
            page_sizes,
            granularity_min: page,
            granularity_recommended: HUGE_2M,
            capabilities: CAPABILITIES,
            dlpack: DlpackTypes::HOST,
        }
    })
}

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

/// FNV-1a over `bytes`, from `seed`.
pub(crate) fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(seed, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A UUID that names this machine's host device, the same in every process
/// and across reboots: a hash of `/etc/machine-id` (the boot id when there is
/// none), so the machine id itself is not disclosed. Version 8 (custom).
fn host_uuid() -> [u8; 16] {
    let source = std::fs::read_to_string("/etc/machine-id")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok())
        .unwrap_or_default();
    let key = format!("hal-cpu-shm host device\0{}", source.trim());
    let a = fnv1a(0xcbf2_9ce4_8422_2325, key.as_bytes());
    let b = fnv1a(a ^ 0x9e37_79b9_7f4a_7c15, key.as_bytes());
    let mut u = [0u8; 16];
    u[..8].copy_from_slice(&a.to_be_bytes());
    u[8..].copy_from_slice(&b.to_be_bytes());
    u[6] = (u[6] & 0x0f) | 0x80;
    u[8] = (u[8] & 0x3f) | 0x80;
    u
}
