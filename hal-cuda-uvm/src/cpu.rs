//! CPU-only processes: a shared managed buffer mapped without a GPU.

use hal_core::{Device, ImportOptions, Result, SharedHandle};
use hal_cpu_shm::{CpuMapping, CpuShm};

use crate::brand;

/// Map the shared managed buffer of `shared` in a process that never
/// initialises CUDA (a PostgreSQL backend that only reads results, a
/// monitoring tool): the same memfd pages, through `hal-cpu-shm`, with the
/// importer's lease. No GPU backend is loaded; the mapping is plain host
/// memory. Device memory handles are refused.
///
/// ```
/// use hal_core::{AllocDesc, Backend, Device, ExportOptions, ImportOptions, Memory};
///
/// let dev = hal_cuda_uvm::UvmBackend::over(hal_mock::MockBackend::cuda()).open(0)?;
/// let buffer = dev.allocate(&AllocDesc::managed(4096))?;
/// buffer.write(0, b"for the CPU")?;
/// let exported = dev.export_memory(&buffer, &ExportOptions::default())?;
/// // In a process without CUDA, from the handle text alone:
/// let handle = hal_core::Handle::from_text(&exported.to_text())?;
/// let pages = hal_cuda_uvm::open_on_cpu(handle.into(), &ImportOptions::default())?;
/// let mut got = [0u8; 11];
/// pages.read(0, &mut got)?;
/// assert_eq!(&got, b"for the CPU");
/// # Ok::<(), hal_core::Error>(())
/// ```
pub fn open_on_cpu(shared: SharedHandle, opts: &ImportOptions) -> Result<CpuMapping> {
    let host = CpuShm::new().host();
    let shared = brand::host(shared, host.info())?;
    let opts = ImportOptions {
        device: None,
        ..opts.clone()
    };
    host.import_memory(shared, &opts)
}
