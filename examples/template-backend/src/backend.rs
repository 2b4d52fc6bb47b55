//! The backend and its one device.

use hal_core::Result;
use hal_core::{Availability, Backend, BackendId, DeviceInfo, Error};

use crate::device::TemplateDevice;
use crate::id::{BACKEND_ID, NAME};
use crate::info::info;

/// The template backend: always available on Linux, with one device.
#[derive(Debug, Clone, Copy, Default)]
pub struct TemplateBackend;

impl TemplateBackend {
    /// The backend. Its id is claimed under its name in this process
    /// ([`hal_core::naming::claim_external_name`]), so that messages say
    /// `template` also where no registry registered it. Should another
    /// backend of the process hold the id or the name already, the id stays
    /// unnamed here; `hal::registry::register` reports that collision.
    pub fn new() -> TemplateBackend {
        let _ = hal_core::naming::claim_external_name(crate::id::ID, NAME);
        TemplateBackend
    }
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
