//! The memory of the backend: shared managed buffers (memfd home pages,
//! registered with the GPU in every process that maps them) beside the
//! inner GPU's own allocations and mappings.

use std::sync::Arc;
use std::time::Duration;

use hal_core::{Allocation, Device, FreeError, Handle, Location, Mapping, Memory, Result};
use hal_cpu_shm::{CpuAllocation, CpuMapping};

use crate::gpu::GpuDevice;
use crate::registration::Registered;

/// The home pages of a shared managed buffer in this process: the memfd
/// mapping and its registration with the GPU, dropped in that order. Held
/// by the buffer and by stream work queued on it, so that pages stay
/// mapped until the work ran.
pub(crate) struct Home<D: Device, P> {
    /// Dropped first; the last share keeps the pages mapped until it is
    /// unregistered (on a teardown worker, `registration.rs`).
    registration: Option<Arc<Registered<D>>>,
    /// The GPU reaches the pages unregistered, at their host address.
    direct: bool,
    pages: Arc<P>,
}

/// Home pages as plain host memory, whatever the GPU type.
pub(crate) trait HomePages: Send + Sync {
    /// The pages.
    fn memory(&self) -> &dyn Memory;
}

impl<D: Device, P: Memory> HomePages for Home<D, P> {
    fn memory(&self) -> &dyn Memory {
        &*self.pages
    }
}

impl<D: Device, P: Memory> Home<D, P> {
    /// The pages' registration with the GPU, when they are registered.
    pub(crate) fn registration(&self) -> Option<&D::HostRegistration> {
        self.registration.as_deref().map(Registered::registration)
    }

    fn device_addr(&self) -> Option<u64> {
        match &self.registration {
            Some(r) => Some(r.device_addr()),
            None if self.direct => Some(self.pages.addr()),
            None => None,
        }
    }
}

/// A shared managed buffer, as its creator holds it: host pages of a sealed
/// memfd (`hal-cpu-shm`), mapped here and registered with the GPU
/// (`cuMemHostRegister(PORTABLE | DEVICEMAP)`), so that this process's CPU
/// and GPU reach the same bytes at one address. Export it with
/// [`Device::export_memory`]; every importer maps the same pages and
/// registers them with its own GPU once.
#[must_use = "the buffer is unregistered and freed when this value drops"]
pub struct SharedManaged<D: Device> {
    home: Arc<Home<D, CpuAllocation>>,
    location: Location,
}

impl<D: Device> std::fmt::Debug for SharedManaged<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedManaged")
            .field("len", &self.home.pages.len())
            .field("registration", &self.home.registration)
            .finish()
    }
}

impl<D: Device> SharedManaged<D> {
    pub(crate) fn new(
        registration: Option<Arc<Registered<D>>>,
        direct: bool,
        home: Arc<CpuAllocation>,
        location: Location,
    ) -> Self {
        SharedManaged {
            home: Arc::new(Home {
                registration,
                direct,
                pages: home,
            }),
            location,
        }
    }

    /// The memfd pages (`hal-cpu-shm`'s allocation).
    pub fn home(&self) -> &CpuAllocation {
        &self.home.pages
    }

    /// The address this process's GPU uses: where the pages are
    /// registered, or reached directly ([`Strategy::Pageable`](crate::Strategy)).
    pub fn device_addr(&self) -> Option<u64> {
        self.home.device_addr()
    }

    pub(crate) fn pages(&self) -> Arc<dyn HomePages>
    where
        D: GpuDevice,
    {
        self.home.clone()
    }

    pub(crate) fn registration(&self) -> Option<&D::HostRegistration> {
        self.home.registration()
    }
}

/// A shared managed buffer imported from another process (or this one):
/// the same memfd pages, mapped here and registered with this process's
/// GPU, once per process however many times it is imported. A read-only
/// import is not registered (the driver registers writable pages); its
/// bytes reach the GPU through the backend's copies.
#[must_use = "the import is unmapped and its lease released when this value drops"]
pub struct SharedView<D: Device> {
    home: Arc<Home<D, CpuMapping>>,
    handle: Handle,
}

impl<D: Device> std::fmt::Debug for SharedView<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedView")
            .field("len", &self.home.pages.len())
            .field("registration", &self.home.registration)
            .finish()
    }
}

impl<D: Device> SharedView<D> {
    pub(crate) fn new(
        registration: Option<Arc<Registered<D>>>,
        direct: bool,
        home: CpuMapping,
        handle: Handle,
    ) -> Self {
        SharedView {
            home: Arc::new(Home {
                registration,
                direct,
                pages: Arc::new(home),
            }),
            handle,
        }
    }

    /// The address this process's GPU uses: where the pages are
    /// registered, or reached directly ([`Strategy::Pageable`](crate::Strategy)).
    pub fn device_addr(&self) -> Option<u64> {
        self.home.device_addr()
    }

    /// True when this view and `other` share one registration (a second
    /// open of a region costs a lookup).
    pub fn same_registration(&self, other: &SharedView<D>) -> bool {
        match (&self.home.registration, &other.home.registration) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    pub(crate) fn pages(&self) -> Arc<dyn HomePages>
    where
        D: GpuDevice,
    {
        self.home.clone()
    }

    pub(crate) fn registration(&self) -> Option<&D::HostRegistration> {
        self.home.registration()
    }
}

/// Memory this process allocated on a [`UvmDevice`](crate::UvmDevice).
#[derive(Debug)]
#[must_use = "the memory is freed when this value drops"]
pub enum UvmAllocation<D: Device> {
    /// A shared managed buffer (what [`Location::Host`] and
    /// [`Location::Managed`] allocate).
    Shared(SharedManaged<D>),
    /// The inner GPU's own memory ([`Location::Device`]).
    Inner(D::Allocation),
}

/// Memory imported on a [`UvmDevice`](crate::UvmDevice).
#[derive(Debug)]
pub enum UvmMapping<D: Device> {
    /// A shared managed buffer of another process (or of this one).
    Shared(SharedView<D>),
    /// The inner GPU's device memory, imported with its own IPC.
    Inner(D::Mapping),
}

impl<D: Device> UvmAllocation<D> {
    /// The shared managed buffer, when this is one.
    pub fn shared(&self) -> Option<&SharedManaged<D>> {
        match self {
            UvmAllocation::Shared(s) => Some(s),
            UvmAllocation::Inner(_) => None,
        }
    }

    fn memory(&self) -> &dyn Memory {
        match self {
            UvmAllocation::Shared(s) => &*s.home.pages,
            UvmAllocation::Inner(a) => a,
        }
    }
}

impl<D: Device> UvmMapping<D> {
    /// The shared managed buffer, when this is one.
    pub fn shared(&self) -> Option<&SharedView<D>> {
        match self {
            UvmMapping::Shared(s) => Some(s),
            UvmMapping::Inner(_) => None,
        }
    }

    fn memory(&self) -> &dyn Memory {
        match self {
            UvmMapping::Shared(s) => &*s.home.pages,
            UvmMapping::Inner(m) => m,
        }
    }
}

impl<D: Device> Memory for UvmAllocation<D> {
    /// The host address of a shared managed buffer (the GPU's too: the
    /// driver answers the host address for registered pages, measured;
    /// [`SharedManaged::device_addr`] says it), the device address of the
    /// inner GPU's memory.
    fn addr(&self) -> u64 {
        self.memory().addr()
    }
    fn len(&self) -> u64 {
        self.memory().len()
    }
    fn location(&self) -> Location {
        match self {
            UvmAllocation::Shared(s) => s.location,
            UvmAllocation::Inner(a) => a.location(),
        }
    }
    fn host_ptr(&self) -> Option<*mut u8> {
        self.memory().host_ptr()
    }
    fn is_read_only(&self) -> bool {
        self.memory().is_read_only()
    }
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.memory().read(offset, dst)
    }
    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.memory().write(offset, src)
    }
}

impl<D: Device> Memory for UvmMapping<D> {
    fn addr(&self) -> u64 {
        self.memory().addr()
    }
    fn len(&self) -> u64 {
        self.memory().len()
    }
    fn location(&self) -> Location {
        self.memory().location()
    }
    fn host_ptr(&self) -> Option<*mut u8> {
        self.memory().host_ptr()
    }
    fn is_read_only(&self) -> bool {
        self.memory().is_read_only()
    }
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.memory().read(offset, dst)
    }
    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.memory().write(offset, src)
    }
}

impl<D: Device> Allocation for UvmAllocation<D> {
    fn importers(&self) -> Result<usize> {
        match self {
            UvmAllocation::Shared(s) => s.home().importers(),
            UvmAllocation::Inner(a) => a.importers(),
        }
    }

    fn wait_unleased(&self, timeout: Option<Duration>) -> Result<()> {
        match self {
            UvmAllocation::Shared(s) => s.home().wait_unleased(timeout),
            UvmAllocation::Inner(a) => a.wait_unleased(timeout),
        }
    }

    fn free(self) -> std::result::Result<(), FreeError<Self>> {
        match self {
            // CPU shared memory frees at once (importers keep their own
            // mappings of the memfd); the registration goes first.
            shared @ UvmAllocation::Shared(_) => {
                drop(shared);
                Ok(())
            }
            UvmAllocation::Inner(a) => a.free().map_err(|e| FreeError {
                resource: UvmAllocation::Inner(e.resource),
                error: e.error,
            }),
        }
    }
}

impl<D: Device> Mapping for UvmMapping<D> {
    fn handle(&self) -> &Handle {
        match self {
            UvmMapping::Shared(s) => &s.handle,
            UvmMapping::Inner(m) => m.handle(),
        }
    }
}
