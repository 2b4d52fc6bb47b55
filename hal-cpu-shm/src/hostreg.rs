//! Existing host memory "registered" with the CPU: the processors reach
//! every mapping of the process already, so a registration checks the
//! range and keeps ranges from being registered twice (as the GPU backends
//! must).

use hal_core::kit::os::{HostRange, HostRegistry};
use hal_core::kit::RegisteredHost;
use hal_core::{Error, Result};

/// This process's registrations (the CPU is one device for all of them).
static REGISTERED: HostRegistry = HostRegistry::new();

/// Register `range`, refusing one that overlaps a registration.
pub(crate) fn register(range: HostRange) -> Result<RegisteredHost> {
    if let Err((s, l)) = REGISTERED.claim(&range) {
        return Err(Error::AlreadyExists {
            what: format!(
                "host range {:#x}+{:#x} overlaps the registered range {s:#x}+{l:#x}; drop that \
                 registration first",
                range.addr(),
                range.len()
            ),
        });
    }
    let addr = range.addr();
    Ok(RegisteredHost::new(range, addr, |r| REGISTERED.release(r)))
}
