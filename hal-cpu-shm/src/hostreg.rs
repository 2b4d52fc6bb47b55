//! Existing host memory "registered" with the CPU: the processors reach
//! every mapping of the process already, so a registration checks the
//! range, keeps ranges from being registered twice (as the GPU backends
//! must), and gives it the contract's memory interface.

use hal_core::os::{HostRange, HostRegistry};
use hal_core::Error;
use hal_core::{Location, Memory, Result};

/// Host memory registered by [`Device::register_host`](hal_core::Device::register_host):
/// the caller's pages, read and written where they are.
#[derive(Debug)]
pub struct CpuHostRegistration {
    pub(crate) range: HostRange,
}

/// This process's registrations (the CPU is one device for all of them).
static REGISTERED: HostRegistry = HostRegistry::new();

impl CpuHostRegistration {
    /// Register `range`, refusing one that overlaps a registration.
    pub(crate) fn register(range: HostRange) -> Result<CpuHostRegistration> {
        if let Err((s, l)) = REGISTERED.claim(&range) {
            return Err(Error::AlreadyExists {
                what: format!(
                    "host range {:#x}+{:#x} overlaps the registered range {s:#x}+{l:#x}; drop \
                     that registration first",
                    range.addr(),
                    range.len()
                ),
            });
        }
        Ok(CpuHostRegistration { range })
    }
}

impl Drop for CpuHostRegistration {
    fn drop(&mut self) {
        REGISTERED.release(&self.range);
    }
}

impl Memory for CpuHostRegistration {
    fn addr(&self) -> u64 {
        self.range.addr()
    }

    fn len(&self) -> u64 {
        self.range.len()
    }

    fn location(&self) -> Location {
        Location::Host
    }

    fn host_ptr(&self) -> Option<*mut u8> {
        Some(self.range.ptr())
    }

    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.range.read(offset, dst)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.range.write(offset, src)
    }
}
