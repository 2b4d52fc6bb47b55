//! Allocations and imports: host memory in a sealed memfd, exported with
//! its descriptor (served by this process's descriptor broker, so the
//! handle text alone imports it) and a lease for every importer.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use hal_core::exchange::sealed::take_sealed;
use hal_core::exchange::Lease;
use hal_core::kit::export::{new_handle, Expect, HandleSpec, SealedMemfd};
use hal_core::kit::os::{Prot, SharedMap};
use hal_core::lease::LazyLeases;
use hal_core::{
    AllocDesc, Allocation, ByteRange, Error, ExportOptions, Exported, Handle, HandleFlags,
    HandleKind, ImportOptions, ImportPlacement, Location, Mapping, Memory, Result, SharedHandle,
};

use crate::id::{BACKEND_ID, NAME};
use crate::info::info;

/// The handle of an export of `kind` from the device.
pub(crate) fn handle(kind: HandleKind, opts: &ExportOptions) -> Result<Handle> {
    let info = info();
    let spec = HandleSpec {
        kind,
        backend: BACKEND_ID,
        device: info.ordinal,
        device_uuid: info.uuid,
        location: Location::Host,
        default_allow_list: false,
    };
    new_handle(&spec, opts)
}

/// Host memory this process allocated: a sealed memfd and its mapping.
#[derive(Debug)]
#[must_use = "the memory is freed when this value drops"]
pub struct TemplateAllocation {
    memfd: SealedMemfd,
    leases: LazyLeases,
}

impl TemplateAllocation {
    pub(crate) fn allocate(desc: &AllocDesc) -> Result<TemplateAllocation> {
        desc.check_for(info().ordinal)?;
        let page = info().granularity_min;
        if desc.location == Location::Managed {
            return Err(Error::unsupported(
                BACKEND_ID,
                "allocate managed memory",
                "the template has host memory only (Capabilities::MANAGED_MEMORY is absent)",
            ));
        }
        let status = crate::errors::allocation_status(desc.size);
        crate::errors::CODES.check(BACKEND_ID, status, "allocate")?;
        if desc.align > page {
            return Err(Error::unsupported(
                BACKEND_ID,
                format!("an alignment of {} bytes", desc.align),
                format!("the template aligns memory to its page, {page} bytes"),
            ));
        }
        let len = desc
            .size
            .checked_next_multiple_of(page)
            .ok_or_else(|| Error::invalid(format!("{} bytes overflow", desc.size)))?;
        Ok(TemplateAllocation {
            memfd: SealedMemfd::create("hal-template", len)?,
            leases: LazyLeases::default(),
        })
    }

    pub(crate) fn export(&self, opts: &ExportOptions) -> Result<Exported> {
        opts.refuse_read_only(
            BACKEND_ID,
            "template memory",
            "its memfds are not sealed against writes",
        )?;
        let range = opts.range.unwrap_or(ByteRange::new(0, self.len()));
        range.check(self.len(), info().granularity_min)?;
        let mut handle = handle(HandleKind::Memory, opts)?;
        handle.size = range.len;
        handle.offset = range.offset;
        Exported::with_leases(handle, vec![self.memfd.dup_fd()?], self.leases.table()?)
    }
}

impl Memory for TemplateAllocation {
    fn addr(&self) -> u64 {
        self.memfd.map().as_ptr() as u64
    }

    fn len(&self) -> u64 {
        self.memfd.map().len() as u64
    }

    fn location(&self) -> Location {
        Location::Host
    }

    fn host_ptr(&self) -> Option<*mut u8> {
        Some(self.memfd.map().as_ptr())
    }

    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.memfd.map().read(offset, dst)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.memfd.map().write(offset, src)
    }
}

impl Allocation for TemplateAllocation {
    fn importers(&self) -> Result<usize> {
        Ok(self.leases.count())
    }

    fn wait_unleased(&self, timeout: Option<Duration>) -> Result<()> {
        self.leases.wait_empty(timeout)
    }
}

/// Memory another process (or this one) exported, mapped here. Clones share
/// one mapping.
#[derive(Debug, Clone)]
pub struct TemplateMapping {
    inner: Arc<Imported>,
}

#[derive(Debug)]
struct Imported {
    handle: Handle,
    map: SharedMap,
    /// Held as long as the mapping lives: the exporter counts it.
    _lease: Option<Lease>,
}

impl TemplateMapping {
    pub(crate) fn import(mut shared: SharedHandle, opts: &ImportOptions) -> Result<Self> {
        shared.handle.expect(HandleKind::Memory, BACKEND_ID)?;
        if opts.placement != ImportPlacement::Anywhere {
            return Err(Error::unsupported(
                BACKEND_ID,
                "an import at the exporter's address",
                "the template maps imports anywhere (Capabilities::FIXED_ADDRESS_IMPORT is \
                 absent); import with ImportPlacement::Anywhere",
            ));
        }
        if let Some(other) = opts.device.filter(|d| *d != info().ordinal) {
            return Err(Error::NotFound {
                what: format!("device {other} of backend {NAME} (it has one device, 0)"),
            });
        }
        let handle = shared.handle.clone();
        if handle.flags.contains(HandleFlags::READ_ONLY) {
            return Err(Error::invalid(
                "a read-only template handle: the template never makes one",
            ));
        }
        let end = handle
            .offset
            .checked_add(handle.size)
            .ok_or_else(|| Error::invalid("the handle's range overflows"))?;
        let expect = Expect {
            what: "a template memory handle",
            min_size: end,
            read_only: false,
            leased: true,
        };
        let sealed = take_sealed::<1>(&mut shared, &expect)?;
        let [fd] = sealed.fds;
        let map = SharedMap::map(
            fd.as_fd(),
            handle.size,
            handle.offset,
            Prot::ReadWrite,
            None,
        )?;
        Ok(TemplateMapping {
            inner: Arc::new(Imported {
                handle,
                map,
                _lease: sealed.lease,
            }),
        })
    }
}

impl Memory for TemplateMapping {
    fn addr(&self) -> u64 {
        self.inner.map.as_ptr() as u64
    }

    fn len(&self) -> u64 {
        self.inner.map.len() as u64
    }

    fn location(&self) -> Location {
        Location::Host
    }

    fn host_ptr(&self) -> Option<*mut u8> {
        Some(self.inner.map.as_ptr())
    }

    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.inner.map.read(offset, dst)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.inner.map.write(offset, src)
    }
}

impl Mapping for TemplateMapping {
    fn handle(&self) -> &Handle {
        &self.inner.handle
    }
}
