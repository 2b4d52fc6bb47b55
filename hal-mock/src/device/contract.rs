//! The [`Device`] contract of [`MockDevice`]: each operation is the
//! simulated vendor call of its concern (`alloc.rs`, `streams.rs`,
//! `vmm.rs`).

use std::sync::Arc;
use std::time::Duration;

use hal_core::{
    Access, AccessGrant, AccessTarget, Advice, AllocDesc, Device, DeviceInfo, EventFlags,
    ExportOptions, Exported, Granularity, ImportOptions, Location, MemRef, PhysicalDesc, Result,
    SharedHandle, Vmm,
};

use crate::device::MockDevice;
use crate::fault::FaultOp;
use crate::memory::sealed::{Sealed, Span};
use crate::memory::{MockAllocation, MockMapping};
use crate::state::lock;
use crate::stream::MockStream;
use crate::sync::{MockEvent, MockNotify};
use crate::vendor::Api;
use crate::vmm::{MockPhysical, MockReservation};

impl Device for MockDevice {
    type Allocation = MockAllocation;
    type Mapping = MockMapping;
    type Stream = MockStream;
    type Event = MockEvent;
    type Notify = MockNotify;
    type HostRegistration = hal_core::kit::RegisteredHost;

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    // --- memory -------------------------------------------------------------

    unsafe fn adopt_memory(&self, addr: u64, len: u64) -> Result<MockAllocation> {
        self.sim_adopt_memory(addr, len)
    }

    unsafe fn register_host(
        &self,
        ptr: *mut u8,
        len: u64,
    ) -> Result<hal_core::kit::RegisteredHost> {
        // SAFETY: the caller gives `register_host`'s promise.
        unsafe { self.sim_register_host(ptr, len) }
    }

    fn allocate(&self, desc: &AllocDesc) -> Result<MockAllocation> {
        self.sim_allocate(desc)
    }

    fn export_memory(&self, alloc: &MockAllocation, opts: &ExportOptions) -> Result<Exported> {
        self.sim_export_memory(alloc, opts)
    }

    fn allow_importers(&self, exported: &mut Exported, pids: &[u32]) -> Result<()> {
        self.sim_allow_importers(exported, pids)
    }

    fn import_memory(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<MockMapping> {
        self.sim_import_memory(shared, opts)
    }

    // --- streams, events, notifies -----------------------------------------

    fn create_stream(&self) -> Result<MockStream> {
        self.sim_create_stream()
    }

    fn synchronize(&self, stream: &MockStream, timeout: Option<Duration>) -> Result<()> {
        self.sim_synchronize(stream, timeout)
    }

    /// Queued as a step of the stream that drops the value when reached.
    fn hold_until_done(
        &self,
        stream: &MockStream,
        value: Box<dyn std::any::Any + Send>,
    ) -> Result<()> {
        self.dev.check_owner(&stream.dev, "stream", true)?;
        stream.push(crate::stream::Op::Hold { value });
        Ok(())
    }

    fn copy_async(
        &self,
        stream: &MockStream,
        dst: MemRef<'_, Self>,
        dst_offset: u64,
        src: MemRef<'_, Self>,
        src_offset: u64,
        len: u64,
    ) -> Result<()> {
        self.copy_spans(
            stream,
            self.span(dst),
            dst_offset,
            self.span(src),
            src_offset,
            len,
        )
    }

    fn write_async(
        &self,
        stream: &MockStream,
        dst: MemRef<'_, Self>,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<()> {
        self.write_span(stream, self.span(dst), offset, data)
    }

    fn memset_async(
        &self,
        stream: &MockStream,
        dst: MemRef<'_, Self>,
        offset: u64,
        len: u64,
        value: u8,
    ) -> Result<()> {
        self.memset_span(stream, self.span(dst), offset, len, value)
    }

    fn advise(&self, mem: MemRef<'_, Self>, offset: u64, len: u64, advice: Advice) -> Result<()> {
        self.managed_range("advise", mem, offset, len)?;
        match advice {
            Advice::ReadMostly | Advice::PreferredLocation(Location::Host | Location::Managed) => {
                Ok(())
            }
            Advice::PreferredLocation(Location::Device(n)) | Advice::AccessedBy(n) => {
                self.known_device(n)
            }
        }
    }

    fn prefetch_async(
        &self,
        stream: &MockStream,
        mem: MemRef<'_, Self>,
        offset: u64,
        len: u64,
        to: Location,
    ) -> Result<()> {
        self.dev.check_owner(&stream.dev, "stream", true)?;
        self.managed_range("prefetch_async", mem, offset, len)?;
        match to {
            Location::Device(n) => self.known_device(n),
            Location::Host => Ok(()),
            Location::Managed => Err(self.dev.err(
                self.dev.vendor().invalid_value(),
                format!(
                    "prefetch to {}: name a device or the host",
                    Location::Managed
                ),
            )),
        }
        // The simulated pages live in one memfd wherever they are said to
        // be: a prefetch moves nothing and the bytes stay the same.
    }

    fn query_stream(&self, stream: &MockStream) -> Result<bool> {
        self.dev.check_owner(&stream.dev, "stream", true)?;
        self.dev.enter(Api::StreamQuery, None)?;
        stream.query()
    }

    fn synchronize_device(&self, timeout: Option<Duration>) -> Result<()> {
        self.dev
            .enter(Api::DeviceSynchronize, Some(FaultOp::Wait))?;
        let streams: Vec<_> = lock(&self.dev.state().streams)
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .collect();
        for s in streams {
            s.wait_idle(timeout)?;
        }
        Ok(())
    }

    fn create_event(&self, flags: EventFlags) -> Result<MockEvent> {
        self.sim_create_event(flags)
    }

    fn record_event(&self, stream: &MockStream, event: &MockEvent) -> Result<()> {
        self.sim_record_event(stream, event)
    }

    fn stream_wait_event(&self, stream: &MockStream, event: &MockEvent) -> Result<()> {
        self.sim_stream_wait_event(stream, event)
    }

    fn export_event(&self, event: &MockEvent, opts: &ExportOptions) -> Result<Exported> {
        self.sim_export_event(event, opts)
    }

    fn import_event(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<MockEvent> {
        self.sim_import_event(shared, opts)
    }

    fn create_notify_with(&self, flags: hal_core::NotifyFlags) -> Result<MockNotify> {
        self.sim_create_notify(flags)
    }

    fn record_notify(&self, stream: &MockStream, notify: &MockNotify) -> Result<()> {
        self.sim_record_notify(stream, notify)
    }

    fn stream_wait_notify(
        &self,
        stream: &MockStream,
        notify: &MockNotify,
        timeout: Option<Duration>,
    ) -> Result<()> {
        self.sim_stream_wait_notify(stream, notify, timeout)
    }

    fn export_notify(&self, notify: &MockNotify, opts: &ExportOptions) -> Result<Exported> {
        self.sim_export_notify(notify, opts)
    }

    fn import_notify(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<MockNotify> {
        self.sim_import_notify(shared, opts)
    }
}

impl Vmm for MockDevice {
    type Physical = MockPhysical;
    type Reservation = MockReservation;

    fn granularity(&self, which: Granularity) -> Result<u64> {
        self.sim_granularity(which)
    }

    fn allocate_physical_with(&self, desc: &PhysicalDesc) -> Result<MockPhysical> {
        self.sim_allocate_physical(desc)
    }

    fn reserve(&self, size: u64, align: u64) -> Result<MockReservation> {
        self.sim_reserve(size, align)
    }

    fn map_range(
        &self,
        reservation: &MockReservation,
        offset: u64,
        physical: &MockPhysical,
        physical_offset: u64,
        len: u64,
    ) -> Result<()> {
        self.sim_map(reservation, offset, physical, physical_offset, len)
    }

    fn unmap(&self, reservation: &MockReservation, offset: u64, len: u64) -> Result<()> {
        self.sim_unmap(reservation, offset, len)
    }

    fn set_access_for(
        &self,
        reservation: &MockReservation,
        offset: u64,
        len: u64,
        grants: &[AccessGrant],
    ) -> Result<()> {
        self.sim_set_access(reservation, offset, len, grants)
    }

    fn access(
        &self,
        reservation: &MockReservation,
        offset: u64,
        target: AccessTarget,
    ) -> Result<Access> {
        self.sim_access(reservation, offset, target)
    }

    fn export_physical(&self, physical: &MockPhysical, opts: &ExportOptions) -> Result<Exported> {
        self.sim_export_physical(physical, opts)
    }

    fn import_physical(&self, shared: SharedHandle, opts: &ImportOptions) -> Result<MockPhysical> {
        self.sim_import_physical(shared, opts)
    }
}

impl MockDevice {
    /// The bytes of a memory reference, kept alive for queued stream work
    /// (a registration: the clone the span holds keeps it registered).
    fn span(&self, m: MemRef<'_, MockDevice>) -> Span {
        match m {
            MemRef::Allocation(a) => a.span(),
            MemRef::Mapping(m) => m.span(),
            MemRef::Registered(r) => Span {
                holder: Arc::new(r.clone()),
                base: 0,
                len: hal_core::Memory::len(r),
                writable: true,
                peer_only: false,
                dev: self.on(self.dev.ordinal),
            },
        }
    }

    /// The checks of a managed-memory operation: the capability, the
    /// device's own memory, managed memory (the vendor refuses others with
    /// its invalid-value code, as CUDA does, measured), and the range.
    fn managed_range(
        &self,
        operation: &str,
        mem: MemRef<'_, Self>,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        self.dev
            .require(hal_core::Capabilities::MANAGED_MEMORY, operation)?;
        let span = self.span(mem);
        self.dev.check_owner(&span.dev, "memory", false)?;
        let memory = mem.memory();
        if memory.location() != Location::Managed {
            return Err(self.dev.err(
                self.dev.vendor().invalid_value(),
                format!(
                    "{operation}: the memory is {:?}, not managed memory",
                    memory.location()
                ),
            ));
        }
        hal_core::device::check_bounds(offset, len, memory.len())
    }

    /// A device ordinal of this backend, or the vendor's invalid-device code.
    pub(super) fn known_device(&self, ordinal: u32) -> Result<()> {
        if (ordinal as usize) < self.dev.shared.devices.len() {
            Ok(())
        } else {
            Err(self.dev.err(
                self.dev.vendor().invalid_device(),
                format!("device {ordinal} does not exist"),
            ))
        }
    }
}

impl hal_core::testing::ContextProbe for MockDevice {
    fn current_context(&self) -> Result<Option<u64>> {
        Ok(crate::context::current().map(crate::context::Context::id))
    }
}
