//! Existing host memory registered with a device: the contract's memory
//! interface over the caller's pages, and the backend's unregistration when
//! it goes.

use crate::device::Memory;
use crate::error::Result;
use crate::os::HostRange;
use crate::types::Location;

/// What a backend does when a registration ends (`cuMemHostUnregister`).
type Unregister = Box<dyn FnOnce(&HostRange) + Send + Sync>;

/// Host memory registered by [`Device::register_host`](crate::Device::register_host):
/// the caller's pages, read and written where they are, at the address the
/// device uses (on CUDA the host address itself, measured with
/// `cuMemHostGetDevicePointer`). Dropping it runs the backend's
/// unregistration.
pub struct RegisteredHost {
    range: HostRange,
    device_addr: u64,
    unregister: Option<Unregister>,
}

impl std::fmt::Debug for RegisteredHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredHost")
            .field("range", &self.range)
            .field("device_addr", &format_args!("{:#x}", self.device_addr))
            .finish()
    }
}

impl RegisteredHost {
    /// `range`, reached by the device at `device_addr`; `unregister` runs
    /// once, when the value drops.
    pub fn new(
        range: HostRange,
        device_addr: u64,
        unregister: impl FnOnce(&HostRange) + Send + Sync + 'static,
    ) -> RegisteredHost {
        RegisteredHost {
            range,
            device_addr,
            unregister: Some(Box::new(unregister)),
        }
    }

    /// The registered range.
    pub fn range(&self) -> &HostRange {
        &self.range
    }
}

impl Drop for RegisteredHost {
    fn drop(&mut self) {
        if let Some(unregister) = self.unregister.take() {
            unregister(&self.range);
        }
    }
}

impl Memory for RegisteredHost {
    /// The address the device uses.
    fn addr(&self) -> u64 {
        self.device_addr
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::{Prot, SharedMap};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn dropping_unregisters_once() {
        let page = crate::os::page_size();
        let map = SharedMap::reserve(page, None).unwrap();
        map.protect(0, page, Prot::ReadWrite).unwrap();
        // SAFETY: `map` outlives the registration.
        let range = unsafe { HostRange::new(map.as_ptr(), page) }.unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&calls);
        let reg = RegisteredHost::new(range, 0x1000, move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(reg.addr(), 0x1000, "the device's address");
        reg.write(0, b"reg").unwrap();
        let mut got = [0u8; 3];
        map.read(0, &mut got).unwrap();
        assert_eq!(&got, b"reg");
        drop(reg);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
