//! The backend and its one device.

use std::sync::OnceLock;

use hal_core::Result;
use hal_core::{Availability, Backend, BackendId, Capabilities, DeviceInfo, DlpackTypes, Error};

use crate::device::TemplateDevice;
use crate::{BACKEND_ID, NAME};

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

/// The template backend: always available on Linux, with one device.
#[derive(Debug, Clone, Copy, Default)]
pub struct TemplateBackend;

impl TemplateBackend {
    /// The backend. Its id is claimed under its name in this process
    /// ([`hal_core::types::claim_external_name`]), so that messages say
    /// `template` also where no registry registered it. Should another
    /// backend of the process hold the id or the name already, the id stays
    /// unnamed here; `hal::registry::register` reports that collision.
    pub fn new() -> TemplateBackend {
        let _ = hal_core::types::claim_external_name(crate::ID, NAME);
        TemplateBackend
    }
}

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

impl Backend for TemplateBackend {
    type Device = TemplateDevice;

    fn id(&self) -> BackendId {
        BACKEND_ID
    }

    fn availability(&self) -> Availability {
        Availability::Available
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        Ok(vec![info().clone()])
    }

    fn open(&self, ordinal: u32) -> Result<TemplateDevice> {
        if ordinal != 0 {
            return Err(Error::NotFound {
                what: format!("device {ordinal} of backend {NAME} (it has one device, 0)"),
            });
        }
        Ok(TemplateDevice::new(info()))
    }
}
