//! Memory a [`MockDevice`] did not hand out through the contract: a range
//! of an allocation adopted by address, and host memory registered with
//! the device.

use hal_core::lease::LazyLeases;

use hal_core::kit::os::{self, HostRange};
use hal_core::kit::RegisteredHost;
use hal_core::{Capabilities, Result};

use crate::device::MockDevice;
use crate::fault::FaultOp;
use crate::memory::MockAllocation;
use crate::rules;
use crate::state::lock;
use crate::vendor::Api;

impl MockDevice {
    /// Find the allocation of this process that holds `addr..addr + len`
    /// (the driver's `cuMemGetAddressRange`) and give that range as an
    /// allocation that frees nothing and counts its own importers.
    pub(super) fn sim_adopt_memory(&self, addr: u64, len: u64) -> Result<MockAllocation> {
        self.dev
            .require(Capabilities::FOREIGN_MEMORY, "adopt_memory")?;
        self.dev.enter(Api::MemGetAddressRange, None)?;
        let vendor = self.dev.vendor();
        let end = addr.checked_add(len).filter(|_| len > 0);
        let found = end.and_then(|end| {
            lock(&self.dev.shared.own_buffers)
                .values()
                .filter_map(|b| b.backing.upgrade().map(|backing| (b, backing)))
                .find_map(|(b, backing)| {
                    let start = backing.map().as_ptr() as u64 + b.offset;
                    (start <= addr && end <= start + b.len).then(|| {
                        (
                            backing,
                            b.offset + (addr - start),
                            b.location,
                            b.page,
                            b.ordinal,
                        )
                    })
                })
        });
        let Some((backing, offset, location, page, ordinal)) = found else {
            return Err(self.dev.err(
                vendor.invalid_value(),
                format!(
                    "{}: {addr:#x}+{len:#x} is not inside one allocation of this process",
                    Api::MemGetAddressRange.symbol(vendor)
                ),
            ));
        };
        if ordinal != self.dev.ordinal {
            return Err(hal_core::Error::invalid(format!(
                "the range is memory of device {ordinal}: adopt it on that device"
            )));
        }
        Ok(MockAllocation {
            dev: self.dev.clone(),
            backing,
            offset,
            len,
            location,
            page,
            // The adopted range is exported on its own: importers' caches
            // keep it apart from the allocation that holds it.
            buffer_id: os::random_id(),
            lease: LazyLeases::default(),
            release: None,
        })
    }

    /// Register `ptr..ptr + len` with the device (`cuMemHostRegister`).
    ///
    /// # Safety
    ///
    /// As [`Device::register_host`](hal_core::Device::register_host).
    pub(super) unsafe fn sim_register_host(
        &self,
        ptr: *mut u8,
        len: u64,
    ) -> Result<RegisteredHost> {
        self.dev
            .require(Capabilities::HOST_REGISTRATION, "register_host")?;
        self.dev
            .enter(Api::MemHostRegister, Some(FaultOp::Allocate))?;
        let vendor = self.dev.vendor();
        // SAFETY: the caller gives `register_host`'s promise: the range stays
        // mapped, readable and writable while the registration lives.
        let range = unsafe { HostRange::new(ptr, len) }?;
        if let Err((s, l)) = self.dev.shared.host_registered.claim(&range) {
            return Err(self.dev.err(
                rules::host_already_registered(vendor),
                format!(
                    "{}: {:#x}+{len:#x} overlaps the registered range {s:#x}+{l:#x}",
                    Api::MemHostRegister.symbol(vendor),
                    range.addr()
                ),
            ));
        }
        // The device reaches registered pages at their host address
        // (`cuMemHostGetDevicePointer`, measured).
        let addr = range.addr();
        let shared = std::sync::Arc::clone(&self.dev.shared);
        Ok(RegisteredHost::new(range, addr, move |r| {
            shared.host_registered.release(r)
        }))
    }
}
