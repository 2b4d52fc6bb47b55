//! [`UvmBackend`]: shared managed memory over a GPU backend.

use hal_core::{Availability, Backend, BackendId, DeviceInfo, Result};
use hal_cuda::CudaBackend;

use crate::device::UvmDevice;
use crate::gpu::GpuDevice;

/// Shared managed memory over the GPU backend `B`: the CUDA driver by
/// default ([`UvmBackend::new`]), or any backend with host registration
/// ([`UvmBackend::over`], the simulator's CUDA-like profile in tests).
///
/// ```
/// use hal_core::Backend;
///
/// let uvm = hal_cuda_uvm::UvmBackend::new();
/// // Without the NVIDIA driver this says why, naming the paths searched.
/// println!("{:?}", uvm.availability());
/// ```
pub struct UvmBackend<B: Backend = CudaBackend> {
    gpu: B,
}

impl<B: Backend> std::fmt::Debug for UvmBackend<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UvmBackend")
            .field("gpu", &self.gpu.id())
            .finish()
    }
}

impl Default for UvmBackend<CudaBackend> {
    fn default() -> Self {
        UvmBackend::new()
    }
}

impl UvmBackend<CudaBackend> {
    /// Over the CUDA driver `hal-cuda` finds (`HAL_CUDA_LIBRARY`, then the
    /// search).
    pub fn new() -> Self {
        UvmBackend::over(CudaBackend::new())
    }

    /// Over the driver library at `path` (the stand-in driver in tests).
    pub fn with_library(path: impl Into<std::path::PathBuf>) -> Self {
        UvmBackend::over(CudaBackend::with_library(path))
    }
}

impl<B: Backend> UvmBackend<B> {
    /// Over the GPU backend `gpu`.
    pub fn over(gpu: B) -> Self {
        UvmBackend { gpu }
    }

    /// The GPU backend underneath.
    pub fn gpu(&self) -> &B {
        &self.gpu
    }
}

impl<B> Backend for UvmBackend<B>
where
    B: Backend,
    B::Device: GpuDevice,
{
    type Device = UvmDevice<B::Device>;

    fn id(&self) -> BackendId {
        BackendId::CudaUvm
    }

    /// The GPU backend's answer: shared managed memory needs its devices.
    fn availability(&self) -> Availability {
        self.gpu.availability()
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        Ok(self
            .gpu
            .devices()?
            .iter()
            .map(crate::info::device_info)
            .collect())
    }

    fn open(&self, ordinal: u32) -> Result<UvmDevice<B::Device>> {
        let count = self.gpu.devices()?.len() as u32;
        UvmDevice::new(self.gpu.open(ordinal)?, count)
    }
}
