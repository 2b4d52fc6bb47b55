//! Host memory registered with a simulated device (`cuMemHostRegister`).

use hal_core::os::HostRange;
use hal_core::{Location, Memory, Result};

use crate::state::DevRef;

/// Existing host memory registered with a [`MockDevice`](crate::MockDevice)
/// by [`Device::register_host`](hal_core::Device::register_host). The
/// device reaches it at the host address itself (as measured with
/// `cuMemHostGetDevicePointer` on an H200); dropping it unregisters the
/// range.
pub struct MockHostRegistration {
    pub(crate) dev: DevRef,
    pub(crate) range: HostRange,
}

impl std::fmt::Debug for MockHostRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockHostRegistration")
            .field("backend", &self.dev.name())
            .field("device", &self.dev.ordinal)
            .field("range", &self.range)
            .finish()
    }
}

impl Drop for MockHostRegistration {
    fn drop(&mut self) {
        self.dev.shared.host_registered.release(&self.range);
    }
}

impl Memory for MockHostRegistration {
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
        self.dev.alive()?;
        self.range.read(offset, dst)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.dev.alive()?;
        self.range.write(offset, src)
    }
}
