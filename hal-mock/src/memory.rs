//! Simulated device memory: memfd-backed allocations, imported mappings, and
//! the handle payload that names them.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use hal_core::device::check_bounds;
use hal_core::kit::os;
use hal_core::lease::LazyLeases;
use hal_core::{Allocation, Error, FreeError, Handle, Location, Mapping, Memory, Result};

use crate::backing::{Backing, Holder, ImportRegion};
use crate::fault::FaultOp;
use crate::rules;
use crate::state::{lock, DevRef};
use crate::vendor::{Api, Vendor};

pub(crate) mod sealed {
    use std::sync::Arc;

    use crate::backing::Holder;
    use crate::state::DevRef;

    /// The bytes of a memory object that queued stream work keeps alive.
    pub struct Span {
        pub(crate) holder: Arc<dyn Holder>,
        /// Offset of the first byte in the holder's mapping.
        pub(crate) base: u64,
        pub(crate) len: u64,
        pub(crate) writable: bool,
        /// Usable only by device-to-device copies (Ascend peer import).
        pub(crate) peer_only: bool,
        pub(crate) dev: DevRef,
    }

    /// Implemented by this crate's memory types only.
    pub trait Sealed {
        /// The bytes, kept alive.
        fn span(&self) -> Span;
    }
}

/// Memory that the stream copies of [`MockDevice`](crate::MockDevice) accept:
/// [`MockAllocation`] and [`MockMapping`].
pub trait DeviceMemory: Memory + sealed::Sealed {}

/// What freeing an allocation gives back to its device.
pub(crate) struct Release {
    pub(crate) dev: DevRef,
    pub(crate) backing: Arc<Backing>,
    /// (chunk, offset, length) of a sub-allocation.
    pub(crate) slot: Option<(u64, u64, u64)>,
    /// Bytes charged to the device for memory of its own.
    pub(crate) charged: u64,
    /// The allocation's id: the driver forgets it once freed.
    pub(crate) buffer_id: [u8; 16],
}

impl Release {
    fn run(self) {
        lock(&self.dev.shared.own_buffers).remove(&self.buffer_id);
        let state = self.dev.state();
        match self.slot {
            Some((chunk, offset, len)) => {
                let emptied = lock(&state.pool).give_back(chunk, offset, len);
                if let Some(size) = emptied {
                    state.refund(size);
                }
            }
            None => state.refund(self.charged),
        }
        drop(self.backing);
    }
}

/// Device (or host, or managed) memory allocated by this process.
///
/// Device memory is not host-visible: [`Memory::host_ptr`] is `None` and
/// [`Memory::addr`] is a device address (the address of the simulator's
/// private mapping, not to be dereferenced); bytes move with
/// [`Memory::read`] / [`Memory::write`] or the stream copies.
#[must_use = "the memory is freed when this value drops"]
pub struct MockAllocation {
    pub(crate) dev: DevRef,
    pub(crate) backing: Arc<Backing>,
    /// Offset of the first byte in the backing memfd.
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) location: Location,
    /// The page size exports of this allocation must be aligned to.
    pub(crate) page: u64,
    /// A unique id (CUDA's buffer id): the key of importers' caches.
    pub(crate) buffer_id: [u8; 16],
    /// The importers' lease table, made at the first export.
    pub(crate) lease: LazyLeases,
    pub(crate) release: Option<Release>,
}

impl std::fmt::Debug for MockAllocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockAllocation")
            .field("backend", &self.dev.name())
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("location", &self.location)
            .field("page", &self.page)
            .finish()
    }
}

impl MockAllocation {
    /// True when the allocation has its memory object to itself (not a
    /// sub-allocation of a pool chunk): only such an allocation can be
    /// exported read-only, since sealing it against writes seals all of its
    /// memory object.
    pub(crate) fn owns_its_memory(&self) -> bool {
        self.release.as_ref().is_some_and(|r| r.slot.is_none())
    }

    fn holders(&self) -> usize {
        self.lease.count()
    }

    /// The page size that exported ranges of this allocation must be whole
    /// multiples of, and aligned to in the device's address space.
    pub fn page_size(&self) -> u64 {
        self.page
    }

    fn copy_api(&self, to_device: bool) -> Option<Api> {
        match self.location {
            Location::Device(_) if to_device => Some(Api::MemcpyHtoD),
            Location::Device(_) => Some(Api::MemcpyDtoH),
            _ => None,
        }
    }

    fn access(&self, api: Option<Api>, offset: u64, len: u64) -> Result<()> {
        match api {
            Some(api) => self.dev.enter(api, None)?,
            None => self.dev.alive()?,
        }
        check_bounds(offset, len, self.len)
    }
}

impl Memory for MockAllocation {
    fn addr(&self) -> u64 {
        self.backing.map().as_ptr() as u64 + self.offset
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn location(&self) -> Location {
        self.location
    }

    fn host_ptr(&self) -> Option<*mut u8> {
        match self.location {
            Location::Device(_) => None,
            _ => Some(
                self.backing
                    .map()
                    .as_ptr()
                    .wrapping_add(self.offset as usize),
            ),
        }
    }

    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.access(self.copy_api(false), offset, dst.len() as u64)?;
        self.backing.map().read(self.offset + offset, dst)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.access(self.copy_api(true), offset, src.len() as u64)?;
        self.backing.map().write(self.offset + offset, src)
    }
}

impl Allocation for MockAllocation {
    fn importers(&self) -> Result<usize> {
        self.dev
            .require(hal_core::Capabilities::LEASES, "importers")?;
        Ok(self.holders())
    }

    fn wait_unleased(&self, timeout: Option<Duration>) -> Result<()> {
        self.dev
            .require(hal_core::Capabilities::LEASES, "wait_unleased")?;
        self.dev.inject(FaultOp::Wait)?;
        self.lease.wait_empty(timeout)
    }

    /// Refused with [`Error::Busy`] while importers hold the memory: Ascend
    /// documents that every importer closes (`aclrtIpcMemClose`) before the
    /// exporter frees, and CUDA makes freeing under an importer undefined.
    fn free(self) -> std::result::Result<(), FreeError<Self>> {
        let holders = self.holders();
        if holders > 0 {
            let what = format!(
                "allocation at {:#x} ({} bytes; {} before {})",
                self.addr(),
                self.len,
                Api::IpcCloseMem.symbol(self.dev.vendor()),
                Api::MemFree.symbol(self.dev.vendor()),
            );
            return Err(FreeError {
                resource: self,
                error: Error::Busy { what, holders },
            });
        }
        drop(self);
        Ok(())
    }
}

impl Drop for MockAllocation {
    fn drop(&mut self) {
        let Some(release) = self.release.take() else {
            return;
        };
        let holders = self.lease.count();
        let counted = holders > 0;
        if counted {
            log::warn!(
                "{}: allocation at {:#x} ({} bytes) dropped while {holders} importer(s) hold \
                 it; its memory is kept until they close (free it after wait_unleased instead)",
                self.dev.backend(),
                self.addr(),
                self.len
            );
            self.dev.state().deferred.fetch_add(1, Ordering::AcqRel);
        }
        let (dev, addr) = (self.dev.clone(), self.addr());
        // No timeout: the memory must outlive every importer; dead
        // importers are not counted.
        self.lease.release_when_unleased(
            "hal-mock-deferred-free",
            || format!("{}: the allocation at {addr:#x}", self.dev.name()),
            move || {
                release.run();
                if counted {
                    dev.state().deferred.fetch_sub(1, Ordering::AcqRel);
                }
            },
        );
    }
}

impl sealed::Sealed for MockAllocation {
    fn span(&self) -> sealed::Span {
        sealed::Span {
            holder: Arc::clone(&self.backing) as Arc<dyn Holder>,
            base: self.offset,
            len: self.len,
            writable: true,
            peer_only: false,
            dev: self.dev.clone(),
        }
    }
}

impl DeviceMemory for MockAllocation {}

/// Memory imported from another process (or this one).
///
/// CUDA-like: the whole exported base allocation is mapped once per process
/// and device; every import of a handle of that allocation shares the mapping
/// (reference counted), and the mapping's address is the base plus the
/// handle's offset. Ascend-like: each import maps exactly the exported range.
#[must_use = "the import is closed and its lease released when this value drops"]
pub struct MockMapping {
    pub(crate) dev: DevRef,
    pub(crate) region: Arc<ImportRegion>,
    /// Offset of the first byte in the region's mapping.
    pub(crate) view: u64,
    pub(crate) len: u64,
    pub(crate) handle: Handle,
    pub(crate) location: Location,
    pub(crate) read_only: bool,
    /// Ascend: imported onto another device, usable only by asynchronous
    /// device-to-device copies.
    pub(crate) peer_only: bool,
}

impl std::fmt::Debug for MockMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockMapping")
            .field("backend", &self.dev.name())
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("device", &self.dev.ordinal)
            .field("read_only", &self.read_only)
            .field("peer_only", &self.peer_only)
            .finish()
    }
}

impl MockMapping {
    /// The device the memory was imported onto.
    pub fn device(&self) -> u32 {
        self.dev.ordinal
    }

    /// True when the mapping is usable only by asynchronous
    /// device-to-device copies (Ascend: memory imported onto another device).
    pub fn is_peer_only(&self) -> bool {
        self.peer_only
    }

    fn check(&self, to_device: bool, offset: u64, len: u64) -> Result<()> {
        if self.peer_only {
            return Err(Error::unsupported(
                self.dev.backend(),
                Api::MemcpyDtoH.symbol(self.dev.vendor()),
                format!(
                    "memory imported onto device {} from another device is usable only for \
                     asynchronous device-to-device copies (MockDevice::copy_async); import it \
                     onto its own device to read or write it",
                    self.dev.ordinal
                ),
            ));
        }
        if to_device && self.read_only {
            return Err(Error::PermissionDenied {
                pid: None,
                reason: "the memory was exported read-only".into(),
            });
        }
        let api = if to_device {
            Api::MemcpyHtoD
        } else {
            Api::MemcpyDtoH
        };
        self.dev.enter(api, None)?;
        check_bounds(offset, len, self.len)
    }
}

impl Memory for MockMapping {
    fn addr(&self) -> u64 {
        self.region.memory().as_ptr() as u64 + self.view
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn location(&self) -> Location {
        self.location
    }

    fn host_ptr(&self) -> Option<*mut u8> {
        match self.location {
            Location::Device(_) => None,
            _ => Some(
                self.region
                    .memory()
                    .as_ptr()
                    .wrapping_add(self.view as usize),
            ),
        }
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.check(false, offset, dst.len() as u64)?;
        self.region.memory().read(self.view + offset, dst)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.check(true, offset, src.len() as u64)?;
        self.region.memory().write(self.view + offset, src)
    }
}

impl Mapping for MockMapping {
    fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl sealed::Sealed for MockMapping {
    fn span(&self) -> sealed::Span {
        sealed::Span {
            holder: Arc::clone(&self.region) as Arc<dyn Holder>,
            base: self.view,
            len: self.len,
            writable: !self.read_only,
            peer_only: self.peer_only,
            dev: self.dev.clone(),
        }
    }
}

impl DeviceMemory for MockMapping {}

/// The simulator's vendor payload: what a CUDA IPC handle or an Ascend key
/// would carry, padded to the vendor's size (64 bytes for `CUipcMemHandle`
/// and `CUipcEventHandle`, 65 for an Ascend key).
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 4 | magic `HMK1` |
/// | 4 | 1 | handle kind tag |
/// | 5 | 1 | vendor (1 CUDA, 2 Ascend) |
/// | 6 | 2 | zero |
/// | 8 | 8 | offset in the memfd where the importer's mapping starts |
/// | 16 | 8 | bytes the importer maps |
/// | 24 | 8 | offset of the exported range in that mapping |
/// | 32 | 16 | buffer id of the exported allocation |
/// | 48 | 8 | memory: offset in the memfd of the allocation's first byte; other kinds: zero |
/// | 56 | 8 or 9 | zero |
///
/// A memory handle's range ([`Handle::offset`] and [`Handle::size`], in the
/// allocation) must be the window the payload maps
/// ([`Payload::check_memory_window`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Payload {
    pub(crate) kind: u8,
    pub(crate) fd_offset: u64,
    pub(crate) map_len: u64,
    pub(crate) view: u64,
    pub(crate) buffer_id: [u8; 16],
    /// Memory: offset in the memfd of the exported allocation's first byte.
    pub(crate) alloc_offset: u64,
}

const PAYLOAD_MAGIC: &[u8; 4] = b"HMK1";

impl Payload {
    /// The window of the memory object this payload maps.
    pub(crate) fn window(&self) -> rules::Window {
        rules::Window {
            fd_offset: self.fd_offset,
            map_len: self.map_len,
            view: self.view,
        }
    }

    pub(crate) fn encode(&self, vendor: Vendor) -> Vec<u8> {
        let mut b = vec![0u8; rules::payload_len(vendor)];
        b[..4].copy_from_slice(PAYLOAD_MAGIC);
        b[4] = self.kind;
        b[5] = rules::payload_tag(vendor);
        b[8..16].copy_from_slice(&self.fd_offset.to_le_bytes());
        b[16..24].copy_from_slice(&self.map_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.view.to_le_bytes());
        b[32..48].copy_from_slice(&self.buffer_id);
        b[48..56].copy_from_slice(&self.alloc_offset.to_le_bytes());
        b
    }

    /// Decode and check a handle's payload against the handle.
    pub(crate) fn decode(vendor: Vendor, handle: &Handle) -> Result<Payload> {
        let b = &handle.payload;
        if b.len() != rules::payload_len(vendor) {
            return Err(Error::malformed_payload(format!(
                "{} bytes, the simulator's {vendor:?} handles carry {}",
                b.len(),
                rules::payload_len(vendor)
            )));
        }
        if &b[..4] != PAYLOAD_MAGIC || b[5] != rules::payload_tag(vendor) {
            return Err(Error::malformed_payload(
                "not a handle of this simulator profile",
            ));
        }
        if b[4] != handle.kind.to_wire() {
            return Err(Error::malformed_payload(format!(
                "the payload is for kind {}, the handle says {}",
                b[4],
                handle.kind.name()
            )));
        }
        if b[6..8].iter().chain(&b[56..]).any(|&x| x != 0) {
            return Err(Error::malformed_payload("reserved bytes are not zero"));
        }
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let mut buffer_id = [0u8; 16];
        buffer_id.copy_from_slice(&b[32..48]);
        let p = Payload {
            kind: b[4],
            fd_offset: u64_at(8),
            map_len: u64_at(16),
            view: u64_at(24),
            buffer_id,
            alloc_offset: u64_at(48),
        };
        let page = os::page_size();
        let fits = p
            .view
            .checked_add(handle.size)
            .is_some_and(|end| end <= p.map_len);
        if p.map_len == 0
            || p.fd_offset % page != 0
            || p.fd_offset.checked_add(p.map_len).is_none()
            || !fits
        {
            return Err(Error::malformed_payload(format!(
                "span {:#x}+{:#x} with the range {:#x}+{:#x} is inconsistent",
                p.fd_offset, p.map_len, p.view, handle.size
            )));
        }
        Ok(p)
    }

    /// Check a memory handle's range against the window this payload maps:
    /// the range starts at memfd offset `alloc_offset + handle.offset`, which
    /// is where the importer's view starts (`fd_offset + view`). CUDA-like
    /// payloads map the base allocation (`fd_offset == alloc_offset`);
    /// Ascend-like ones map exactly the range (`view == 0`,
    /// `map_len == handle.size`). A handle whose offset or size was changed
    /// without its payload is refused, so that a mapping's
    /// [`Mapping::handle`] always describes what it maps.
    pub(crate) fn check_memory_window(&self, vendor: Vendor, handle: &Handle) -> Result<()> {
        let range_start = self.alloc_offset.checked_add(handle.offset);
        let view_start = self.fd_offset.checked_add(self.view);
        let vendor_rule =
            rules::window_has_vendor_shape(vendor, self.window(), self.alloc_offset, handle.size);
        if range_start.is_none() || range_start != view_start || !vendor_rule {
            return Err(Error::malformed_payload(format!(
                "the handle's range {:#x}+{:#x} of the allocation is not the window the \
                     payload maps ({:#x} bytes from {:#x} in the memory object, range at {:#x} \
                     in them, allocation at {:#x}): the handle's offset or size was altered",
                handle.offset,
                handle.size,
                self.map_len,
                self.fd_offset,
                self.view,
                self.alloc_offset
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use hal_core::{AllocDesc, Backend, ByteRange, Device, ExportOptions};

    use super::*;
    use crate::{MockBackend, Profile};

    #[test]
    fn an_altered_window_is_explained_in_plain_words() {
        for profile in [Profile::cuda(), Profile::ascend()] {
            let vendor = profile.vendor;
            let dev = MockBackend::new(profile).open(0).unwrap();
            let page = dev.info().page_size();
            let mut desc = AllocDesc::device(0, 4 * page);
            desc.align = page;
            let a = dev.allocate(&desc).unwrap();
            let opts = ExportOptions {
                range: Some(ByteRange::new(page, page)),
                ..ExportOptions::default()
            };
            let ex = dev.export_memory(&a, &opts).unwrap();
            let mut h = ex.handle().clone();
            h.offset += page;
            let payload = Payload::decode(vendor, &h).unwrap();
            let msg = payload
                .check_memory_window(vendor, &h)
                .unwrap_err()
                .to_string();
            assert!(
                msg.contains("is not the window the payload maps (")
                    && msg.contains(" in the memory object, range at ")
                    && msg.contains(" in them, allocation at "),
                "{vendor:?}: {msg}"
            );
            assert!(
                !msg.contains("  "),
                "{vendor:?}: a run of spaces in {msg:?}"
            );
        }
    }
}
