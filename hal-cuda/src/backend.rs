//! [`CudaBackend`]: the driver, loaded on first use, and its devices.

use std::ffi::c_int;
use std::sync::Arc;

use hal_core::dlpack::DLDeviceType;
use hal_core::{
    Availability, Backend, BackendId, Capabilities, DeviceInfo, DlpackTypes, Error, Result,
};

use crate::device::CudaDevice;
use hal_core::kit::vendor::runtime::{Failure, Lazy};

use crate::ffi::result::{self, device};
use crate::ffi::{sys, CUdevice, Driver};
use crate::needs;

/// The CUDA backend: `libcuda.so.1` loaded at run time (never linked; see
/// [`LIBRARY_VAR`](crate::LIBRARY_VAR) to name another library).
///
/// ```
/// use hal_core::Backend;
///
/// let cuda = hal_cuda::CudaBackend::new();
/// // On a machine without the NVIDIA driver this says why, naming the
/// // paths searched; it never panics.
/// println!("{:?}", cuda.availability());
/// ```
pub struct CudaBackend {
    /// The driver, from the library named by the program, else the one
    /// `HAL_CUDA_LIBRARY` names, else the search's.
    driver: Lazy<Driver>,
}

impl CudaBackend {
    /// The backend; nothing is loaded until it is used. The library is
    /// the one `HAL_CUDA_LIBRARY` names, or the first found by the search.
    pub fn new() -> CudaBackend {
        CudaBackend {
            driver: Lazy::new(None),
        }
    }

    /// The backend on the driver library at `path` (a stand-in driver, a
    /// driver outside the search path), whatever `HAL_CUDA_LIBRARY` says.
    pub fn with_library(path: impl Into<std::path::PathBuf>) -> CudaBackend {
        CudaBackend {
            driver: Lazy::new(Some(path.into())),
        }
    }

    /// The driver entry points this backend's code paths have asked for
    /// so far, by versioned name (capability probes do not count): what a
    /// coverage test compares with [`RESOLVED`](crate::RESOLVED). Empty
    /// when the driver is not loaded. Only with the `testing` feature.
    #[cfg(feature = "testing")]
    pub fn entry_points_called(&self) -> Vec<&'static str> {
        match self.driver.get(load_and_init) {
            Ok(d) => d.called(),
            Err(_) => Vec::new(),
        }
    }

    /// The loaded, initialised driver.
    fn driver(&self) -> Result<Arc<Driver>> {
        let what = "the CUDA backend (its driver was initialised)";
        self.driver.usable(load_and_init, "cuda", what)
    }
}

impl Default for CudaBackend {
    fn default() -> Self {
        CudaBackend::new()
    }
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend").finish_non_exhaustive()
    }
}

fn load_and_init(library: Option<std::path::PathBuf>) -> std::result::Result<Arc<Driver>, Failure> {
    let driver = Arc::new(Driver::new(sys::load(library).map_err(Failure::NotLoaded)?));
    result::init(&driver).map_err(|e| Failure::Init {
        path: driver.path().clone(),
        reason: e.to_string(),
    })?;
    Ok(driver)
}

/// The driver's handle of device `ordinal`.
pub(crate) fn device_handle(driver: &Driver, ordinal: u32) -> Result<CUdevice> {
    let count = device::count(driver)?;
    if ordinal >= count {
        return Err(Error::invalid(format!(
            "CUDA device {ordinal} does not exist: the driver sees {count} device(s)"
        )));
    }
    device::get(driver, ordinal)
}

/// What the device is and can do.
pub(crate) fn device_info(driver: &Driver, ordinal: u32) -> Result<DeviceInfo> {
    let dev = device_handle(driver, ordinal)?;
    let name = device::name(driver, dev)?;
    let uuid = device::uuid(driver, dev)?;
    let total = device::total_mem(driver, dev)?;
    // Notifies are host pages shared by descriptor: every device has them.
    let mut capabilities = Capabilities::IPC_NOTIFY;
    if driver.grants(dev, &needs::MANAGED_MEMORY)? {
        capabilities = capabilities | Capabilities::MANAGED_MEMORY;
    }
    if driver.grants(dev, &needs::HOST_REGISTER)? {
        // Stream-ordered notifies write and wait on registered host pages
        // (32-bit stream memory operations are always there in CUDA 12).
        capabilities =
            capabilities | Capabilities::HOST_REGISTRATION | Capabilities::STREAM_ORDERED_NOTIFY;
    }
    if driver.offers(&needs::IPC_MEMORY) {
        // Legacy IPC of device memory; importers are counted by leases.
        // Memory of other libraries is adopted by address and exported the
        // same way (the same entry points find its allocation).
        capabilities = capabilities
            | Capabilities::IPC_MEMORY
            | Capabilities::LEASES
            | Capabilities::FOREIGN_MEMORY;
    }
    if driver.offers(&needs::IPC_EVENT) && driver.grants(dev, &needs::IPC_EVENT_SUPPORTED)? {
        // IPC events; an opened one answers cuEventQuery (measured).
        // Importers are counted by leases.
        capabilities = capabilities
            | Capabilities::IPC_EVENT
            | Capabilities::IPC_EVENT_QUERY
            | Capabilities::LEASES;
    }
    if device::count(driver).is_ok_and(|n| crate::peer::has_peers(driver, dev, n as c_int)) {
        // Imports onto this device of another device's memory.
        capabilities = capabilities | Capabilities::PEER_ACCESS;
    }
    if driver.grants(dev, &needs::PAGEABLE_MEMORY_ACCESS)? {
        capabilities = capabilities | Capabilities::PAGEABLE_MEMORY_ACCESS;
    }
    let (mut granularity_min, mut granularity_recommended) = (2 << 20, 2 << 20);
    if driver.offers(&needs::VMM)
        && driver.grants(dev, &needs::VMM_SUPPORTED)?
        && driver.grants(dev, &needs::POSIX_DESCRIPTOR)?
    {
        // VMM shared by POSIX descriptor (fabric is tried per allocation).
        capabilities = capabilities | Capabilities::VMM;
        if capabilities.contains(Capabilities::IPC_MEMORY) {
            // hal_core::growable: VMM chunks shared by descriptor, and a
            // header shared with legacy IPC.
            capabilities = capabilities | Capabilities::GROWABLE;
        }
        if driver.grants(dev, &needs::HOST_NUMA_VMM)? {
            capabilities = capabilities | Capabilities::HOST_NUMA_VMM;
        }
        match (
            crate::vmm::ops::device_granularity(driver, ordinal, false),
            crate::vmm::ops::device_granularity(driver, ordinal, true),
        ) {
            (Ok(min), Ok(rec)) if rec % min == 0 => {
                (granularity_min, granularity_recommended) = (min, rec);
            }
            (min, rec) => log::warn!(
                "CUDA device {ordinal}: the VMM granularity is unknown ({min:?}, {rec:?}); \
                 assuming 2 MiB, the H200's"
            ),
        }
    }
    Ok(DeviceInfo {
        backend: BackendId::Cuda,
        ordinal,
        uuid,
        name,
        total_memory: total as u64,
        page_sizes: vec![4096, 2 << 20],
        granularity_min,
        granularity_recommended,
        capabilities,
        dlpack: DLPACK,
    })
}

/// The DLPack device types of CUDA memory: `kDLCUDA` for device memory,
/// `kDLCUDAHost` for pinned host memory, `kDLCUDAManaged` for managed
/// memory.
pub const DLPACK: DlpackTypes = DlpackTypes {
    device: Some(DLDeviceType::CUDA.0),
    host: DLDeviceType::CUDA_HOST.0,
    managed: Some(DLDeviceType::CUDA_MANAGED.0),
};

impl Backend for CudaBackend {
    type Device = CudaDevice;

    fn id(&self) -> BackendId {
        BackendId::Cuda
    }

    fn availability(&self) -> Availability {
        let none = "the driver sees no CUDA device";
        self.driver.availability(load_and_init, device::count, none)
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        let driver = self.driver()?;
        (0..device::count(&driver)?)
            .map(|i| device_info(&driver, i))
            .collect()
    }

    fn open(&self, ordinal: u32) -> Result<CudaDevice> {
        let driver = self.driver()?;
        let info = device_info(&driver, ordinal)?;
        let dev = device_handle(&driver, ordinal)?;
        CudaDevice::open(driver, dev, info)
    }
}
