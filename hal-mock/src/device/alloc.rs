//! Memory of a [`MockDevice`]: allocation (with the Ascend-like pool),
//! export, allow-lists and import.

use hal_core::lease::LazyLeases;
use std::os::fd::AsFd;
use std::sync::{Arc, Weak};

use hal_core::exchange::sealed::take_sealed;
use hal_core::handle::wire::MAX_PIDS;
use hal_core::kit::export::Expect;
use hal_core::kit::os::{self, Prot, SharedMap};
use hal_core::{
    AllocDesc, ByteRange, Capabilities, Error, ExportOptions, Exported, Handle, HandleError,
    HandleFlags, HandleKind, HugePages, ImportOptions, ImportPlacement, Location, Result,
    SharedHandle,
};

use crate::backing::{Backing, ImportRegion, RegionMemory};
use crate::device::{check_data_access, set_pid_api, ListKind, MockDevice};
use crate::fault::FaultOp;
use crate::memory::{MockAllocation, MockMapping, Payload, Release};
use crate::rules;
use crate::state::{lock, OwnBuffer};
use crate::vendor::Api;

impl MockDevice {
    pub(super) fn sim_allocate(&self, desc: &AllocDesc) -> Result<MockAllocation> {
        let vendor = self.dev.vendor();
        let api = match desc.location {
            Location::Device(_) => Api::MemAlloc,
            Location::Host => Api::MemAllocHost,
            Location::Managed => {
                self.dev
                    .require(Capabilities::MANAGED_MEMORY, "allocate managed memory")?;
                Api::MemAllocManaged
            }
        };
        self.dev.enter(api, Some(FaultOp::Allocate))?;
        if let Location::Device(d) = desc.location {
            if d != self.dev.ordinal {
                return Err(Error::invalid(format!(
                    "allocation for device {d} requested on device {}: allocate on device {d}",
                    self.dev.ordinal
                )));
            }
        }
        if desc.size == 0 {
            return Err(self.dev.err(
                vendor.invalid_value(),
                format!("{}: size 0", api.symbol(vendor)),
            ));
        }
        if desc.align != 0 && !desc.align.is_power_of_two() {
            return Err(Error::invalid(format!(
                "alignment {} is not a power of two",
                desc.align
            )));
        }
        let small = self.dev.profile().page_size();
        let page = match desc.placement.huge_pages {
            HugePages::None | HugePages::Transparent => small,
            HugePages::Explicit(p) if self.info.page_sizes.contains(&p) => p,
            HugePages::Explicit(p) => {
                return Err(Error::invalid(format!(
                    "page size {p:#x} is not one of the device's page sizes {:?}",
                    self.info.page_sizes
                )))
            }
        };
        let rounding = if page > small {
            page
        } else {
            self.dev.profile().alloc_rounding
        };
        let len = desc
            .size
            .checked_next_multiple_of(rounding)
            .ok_or_else(|| Error::invalid("allocation size overflows"))?;
        if let Some(a) = self.allocate_in_pool(len, desc.align, desc.location, page)? {
            return Ok(a);
        }
        let size = len.next_multiple_of(page.max(os::page_size()));
        // Pinned host memory is not the device's.
        let charged = if desc.location == Location::Host {
            0
        } else {
            size
        };
        let state = self.dev.state();
        state.charge(vendor, charged)?;
        let backing = match Backing::create(&self.label(), size, desc.align.max(page)) {
            Ok(b) => b,
            Err(e) => {
                state.refund(charged);
                return Err(e);
            }
        };
        let buffer_id = os::random_id();
        Ok(self.remember(MockAllocation {
            dev: self.dev.clone(),
            backing: Arc::clone(&backing),
            offset: 0,
            len,
            location: desc.location,
            page,
            buffer_id,
            lease: LazyLeases::default(),
            release: Some(Release {
                dev: self.dev.clone(),
                backing,
                slot: None,
                charged,
                buffer_id,
            }),
        }))
    }

    /// Note an allocation of this process by its buffer id, so that an
    /// import of its own export reaches it (dead entries are dropped here).
    fn remember(&self, alloc: MockAllocation) -> MockAllocation {
        let mut own = lock(&self.dev.shared.own_buffers);
        own.retain(|_, b| b.backing.strong_count() > 0);
        own.insert(
            alloc.buffer_id,
            OwnBuffer {
                backing: Arc::downgrade(&alloc.backing),
                offset: alloc.offset,
                len: alloc.len,
                location: alloc.location,
                page: alloc.page,
                ordinal: alloc.dev.ordinal,
            },
        );
        alloc
    }

    pub(super) fn sim_export_memory(
        &self,
        alloc: &MockAllocation,
        opts: &ExportOptions,
    ) -> Result<Exported> {
        self.dev.check_owner(&alloc.dev, "allocation", true)?;
        self.dev
            .require(Capabilities::IPC_MEMORY, "export_memory")?;
        let vendor = self.dev.vendor();
        match alloc.location {
            Location::Device(_) => {}
            Location::Managed => {
                if !self.dev.caps().contains(Capabilities::IPC_MANAGED_MEMORY) {
                    return Err(Error::unsupported(
                        self.dev.name(),
                        "export managed memory",
                        format!(
                            "managed memory ({}) cannot be exported through IPC ({} answers \
                             invalid value); share host memory instead (hal-cuda-uvm, cpu-shm)",
                            Api::MemAllocManaged.symbol(vendor),
                            Api::IpcGetMem.symbol(vendor)
                        ),
                    ));
                }
            }
            Location::Host => {
                return Err(Error::unsupported(
                    self.dev.name(),
                    "export host memory",
                    format!(
                        "{} exports device memory only; share host memory with the cpu-shm \
                         backend",
                        Api::IpcGetMem.symbol(vendor)
                    ),
                ))
            }
        }
        if opts.read_only && !self.dev.caps().contains(Capabilities::READ_ONLY_EXPORT) {
            return Err(Error::unsupported(
                self.dev.name(),
                "read-only export",
                format!(
                    "{} maps imported memory read-write; {} has no read-only IPC export",
                    Api::IpcOpenMem.symbol(vendor),
                    rules::vendor_name(vendor)
                ),
            ));
        }
        self.dev.enter(Api::IpcGetMem, Some(FaultOp::Export))?;
        let range = opts.range.unwrap_or(ByteRange::new(0, alloc.len));
        // Bounds first, then whole pages of the allocation's page size, in
        // the device's address space (a sub-allocation's start counts).
        range.check(alloc.len, 0)?;
        let start = alloc.offset + range.offset;
        if start % alloc.page != 0 || range.len % alloc.page != 0 {
            return Err(Error::Misaligned {
                offset: range.offset,
                len: range.len,
                page_size: alloc.page,
            });
        }
        let window = rules::export_window(
            vendor,
            alloc.offset,
            alloc.len,
            range.offset,
            range.len,
            os::page_size(),
        );
        let payload = Payload {
            kind: HandleKind::Memory.to_wire(),
            fd_offset: window.fd_offset,
            map_len: window.map_len,
            view: window.view,
            buffer_id: alloc.buffer_id,
            alloc_offset: alloc.offset,
        };
        let handle = self.handle(
            HandleKind::Memory,
            alloc.location,
            range.len,
            range.offset,
            opts,
            ListKind::Listed,
            payload,
        )?;
        if opts.read_only && !alloc.owns_its_memory() {
            return Err(Error::unsupported(
                self.dev.name(),
                "read-only export of a pooled allocation",
                format!(
                    "the allocation of {} bytes shares a pool chunk (one memory object) with \
                     other allocations, which a read-only export would seal against writes \
                     too; allocate at least {} bytes, so that it has memory of its own, to \
                     export it read-only",
                    alloc.len,
                    self.dev
                        .profile()
                        .suballocation
                        .as_ref()
                        .map_or(0, |s| s.max_size)
                ),
            ));
        }
        os::seal_for_export(alloc.backing.fd(), opts.read_only)?;
        let data = if opts.read_only {
            os::reopen_read_only(alloc.backing.fd())?
        } else {
            os::dup(alloc.backing.fd())?
        };
        let leases = alloc.lease.table()?;
        Exported::with_leases(handle, vec![data], leases)
    }

    pub(super) fn sim_allow_importers(&self, exported: &mut Exported, pids: &[u32]) -> Result<()> {
        let h = exported.handle();
        if h.backend != self.dev.backend() {
            return Err(HandleError::WrongBackend {
                expected: self.dev.name(),
                found: h.backend.name(),
            }
            .into());
        }
        self.dev
            .require(Capabilities::PID_ALLOW_LIST, "allow_importers")?;
        if h.kind == HandleKind::Event {
            return Err(Error::unsupported(
                self.dev.name(),
                "allow_importers",
                "IPC event handles have no pid allow-list",
            ));
        }
        let api = set_pid_api(h.kind);
        self.dev.enter(api, None)?;
        if h.allowed_pids.len() + pids.len() > MAX_PIDS {
            return Err(Error::invalid(format!(
                "at most {MAX_PIDS} importer pids fit in a handle"
            )));
        }
        exported.add_importers(pids)
    }

    pub(super) fn sim_import_memory(
        &self,
        mut shared: SharedHandle,
        opts: &ImportOptions,
    ) -> Result<MockMapping> {
        let backend = self.dev.backend();
        shared.handle.expect(HandleKind::Memory, backend)?;
        self.dev
            .require(Capabilities::IPC_MEMORY, "import_memory")?;
        let vendor = self.dev.vendor();
        if opts.placement == ImportPlacement::ExporterAddress {
            self.dev.require(
                Capabilities::FIXED_ADDRESS_IMPORT,
                "import at the exporter's address",
            )?;
        }
        let payload = Payload::decode(vendor, &shared.handle)?;
        payload.check_memory_window(vendor, &shared.handle)?;
        let (source, target) = self.resolve(&shared.handle, opts, true)?;
        let on = self.on(target);
        on.enter(Api::IpcOpenMem, Some(FaultOp::Import))?;
        let h = &shared.handle;
        let read_only = h.flags.contains(HandleFlags::READ_ONLY);
        let location = match h.location {
            Location::Device(_) => Location::Device(source),
            other => other,
        };
        let mapping = |region: Arc<ImportRegion>, handle: Handle| MockMapping {
            dev: on.clone(),
            // A region of the original memory counts from the start of its
            // memory object, a mapping made for the import from the window.
            view: match region.memory {
                RegionMemory::Original(_) => payload.fd_offset + payload.view,
                RegionMemory::Mapped(_) => payload.view,
            },
            region,
            len: handle.size,
            handle,
            location,
            read_only,
            peer_only: rules::peer_import_copy_only(vendor) && target != source,
        };
        let key = (payload.buffer_id, target, read_only);
        if rules::shares_repeated_imports(vendor) {
            // A second open of the same allocation in this process returns
            // the same mapping, reference counted.
            let hit = lock(&self.dev.shared.import_cache)
                .get(&key)
                .and_then(Weak::upgrade)
                .filter(|r| r.memory().len() as u64 >= payload.map_len);
            if let Some(region) = hit {
                let handle = shared.handle.clone();
                return Ok(mapping(region, handle));
            }
        }
        self.check_attached_allowed(&shared)?;
        let expect = Expect {
            what: &self.what(HandleKind::Memory),
            min_size: payload.fd_offset + payload.map_len,
            read_only,
            leased: true,
        };
        let taken = take_sealed::<1>(&mut shared, &expect)?;
        let checked = taken.checked;
        let [data] = taken.fds;
        check_data_access(data.as_fd(), read_only)?;
        // The exporting process imports its own export (with its own
        // descriptors): the vendors refuse to open their own handle (CUDA
        // answers CUDA_ERROR_INVALID_CONTEXT), so the import reaches the
        // original memory, and still takes a lease.
        let own = (checked && target == source && shared.handle.is_own())
            .then(|| {
                lock(&self.dev.shared.own_buffers)
                    .get(&payload.buffer_id)
                    .and_then(|b| b.backing.upgrade())
            })
            .flatten();
        if let Some(backing) = own {
            let region = Arc::new(ImportRegion {
                memory: RegionMemory::Original(backing),
                _lease: taken.lease,
            });
            if rules::shares_repeated_imports(vendor) {
                let mut cache = lock(&self.dev.shared.import_cache);
                cache.retain(|_, w| w.strong_count() > 0);
                cache.insert(key, Arc::downgrade(&region));
            }
            return Ok(mapping(region, shared.handle));
        }
        let prot = if read_only {
            Prot::Read
        } else {
            Prot::ReadWrite
        };
        let map = SharedMap::map(data.as_fd(), payload.map_len, payload.fd_offset, prot, None)?;
        let region = Arc::new(ImportRegion {
            memory: RegionMemory::Mapped(map),
            _lease: taken.lease,
        });
        // Only descriptors from a checked source are cached: a forged
        // handle naming a genuine buffer id with a peer's descriptors must
        // not answer later imports of the genuine buffer.
        if rules::shares_repeated_imports(vendor) && checked {
            let mut cache = lock(&self.dev.shared.import_cache);
            cache.retain(|_, w| w.strong_count() > 0);
            cache.insert(key, Arc::downgrade(&region));
        }
        Ok(mapping(region, shared.handle))
    }

    fn allocate_in_pool(
        &self,
        len: u64,
        align: u64,
        location: Location,
        page: u64,
    ) -> Result<Option<MockAllocation>> {
        let Some(sub) = &self.dev.profile().suballocation else {
            return Ok(None);
        };
        if !matches!(location, Location::Device(_))
            || page != self.dev.profile().page_size()
            || len >= sub.max_size
            || align > page
        {
            return Ok(None);
        }
        let align = align.max(sub.quantum);
        let state = self.dev.state();
        let mut pool = lock(&state.pool);
        let slot = match pool.take(len, align) {
            Some(slot) => slot,
            None => {
                state.charge(self.dev.vendor(), sub.chunk_size)?;
                match Backing::create(&format!("{}-pool", self.label()), sub.chunk_size, page) {
                    Ok(b) => pool.add(b),
                    Err(e) => {
                        state.refund(sub.chunk_size);
                        return Err(e);
                    }
                }
                pool.take(len, align).ok_or_else(|| {
                    Error::invalid("a fresh pool chunk cannot hold the allocation")
                })?
            }
        };
        let buffer_id = os::random_id();
        Ok(Some(self.remember(MockAllocation {
            dev: self.dev.clone(),
            backing: Arc::clone(&slot.backing),
            offset: slot.offset,
            len,
            location,
            page,
            buffer_id,
            lease: LazyLeases::default(),
            release: Some(Release {
                dev: self.dev.clone(),
                backing: slot.backing,
                slot: Some((slot.chunk, slot.offset, len)),
                charged: 0,
                buffer_id,
            }),
        })))
    }
}
