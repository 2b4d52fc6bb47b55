//! Existing host memory registered with a device: the contract's memory
//! interface over the caller's pages, and the backend's unregistration when
//! it goes.

use std::sync::Arc;

use crate::device::Memory;
use crate::error::Result;
use crate::kit::os::HostRange;
use crate::types::Location;

/// What a backend does when a registration ends (`cuMemHostUnregister`).
type Unregister = Box<dyn FnOnce(&HostRange) + Send + Sync>;

/// Host memory registered by [`Device::register_host`](crate::Device::register_host):
/// the caller's pages, read and written where they are, at the address the
/// device uses (on CUDA the host address itself, measured with
/// `cuMemHostGetDevicePointer`). The backend's unregistration runs when the
/// last clone drops: a stream that queued work on the registration
/// ([`MemRef::Registered`](crate::MemRef::Registered)) holds a clone until
/// it ran that work.
#[derive(Clone)]
#[must_use = "the host memory is unregistered when the last clone drops"]
pub struct RegisteredHost(Arc<Inner>);

struct Inner {
    range: HostRange,
    device_addr: u64,
    unregister: Option<Unregister>,
}

impl std::fmt::Debug for RegisteredHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredHost")
            .field("range", &self.0.range)
            .field("device_addr", &format_args!("{:#x}", self.0.device_addr))
            .finish()
    }
}

impl RegisteredHost {
    /// `range`, reached by the device at `device_addr`; `unregister` runs
    /// once, when the last clone drops.
    pub fn new(
        range: HostRange,
        device_addr: u64,
        unregister: impl FnOnce(&HostRange) + Send + Sync + 'static,
    ) -> RegisteredHost {
        RegisteredHost(Arc::new(Inner {
            range,
            device_addr,
            unregister: Some(Box::new(unregister)),
        }))
    }

    /// The registered range.
    pub fn range(&self) -> &HostRange {
        &self.0.range
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(unregister) = self.unregister.take() {
            unregister(&self.range);
        }
    }
}

impl Memory for RegisteredHost {
    /// The address the device uses.
    fn addr(&self) -> u64 {
        self.0.device_addr
    }

    fn len(&self) -> u64 {
        self.0.range.len()
    }

    fn location(&self) -> Location {
        Location::Host
    }

    fn host_ptr(&self) -> Option<*mut u8> {
        Some(self.0.range.ptr())
    }

    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.0.range.read(offset, dst)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.0.range.write(offset, src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::os::{Prot, SharedMap};
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn dropping_unregisters_once() {
        let page = crate::kit::os::page_size();
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
        assert_eq!(reg.len(), page, "the whole range");
        assert_eq!(reg.location(), Location::Host);
        assert_eq!(reg.host_ptr(), Some(map.as_ptr()), "the caller's pages");
        assert_eq!(reg.range().ptr(), map.as_ptr());
        let shown = format!("{reg:?}");
        assert!(
            shown.starts_with("RegisteredHost") && shown.contains("device_addr: 0x1000"),
            "{shown}"
        );
        reg.write(0, b"reg").unwrap();
        let mut got = [0u8; 3];
        map.read(0, &mut got).unwrap();
        assert_eq!(&got, b"reg");
        map.write(page - 2, b"up").unwrap();
        reg.read(page - 2, &mut got[..2]).unwrap();
        assert_eq!(&got[..2], b"up", "read where the pages are");
        let held = reg.clone();
        drop(reg);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "a clone keeps it registered"
        );
        drop(held);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
