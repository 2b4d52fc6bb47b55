//! What a device of this backend is and can do, from its GPU's answer.

use hal_core::{BackendId, Capabilities, DeviceInfo, DlpackTypes};

/// What this backend's memory brings, whatever the GPU: shared managed
/// buffers are memfd pages (`hal-cpu-shm`), exported by descriptor,
/// counted by leases, with read-only exports and fixed-address imports.
pub const MEMORY_CAPABILITIES: Capabilities = Capabilities::IPC_MEMORY
    .union(Capabilities::MANAGED_MEMORY)
    .union(Capabilities::IPC_MANAGED_MEMORY)
    .union(Capabilities::MEMORY_IS_HOST)
    .union(Capabilities::LEASES)
    .union(Capabilities::READ_ONLY_EXPORT)
    .union(Capabilities::FIXED_ADDRESS_IMPORT);

/// What passes through from the GPU unchanged: its events, notifies,
/// streams, VMM and host registration are the backend's. Pid allow-lists
/// too: the host's memory keeps them, but a backend claims them for every
/// kind of handle, so they are claimed only where the GPU keeps them.
pub const GPU_CAPABILITIES: Capabilities = Capabilities::PID_ALLOW_LIST
    .union(Capabilities::IPC_EVENT)
    .union(Capabilities::IPC_EVENT_QUERY)
    .union(Capabilities::IPC_NOTIFY)
    .union(Capabilities::CREATOR_ONLY_NOTIFY_WAIT)
    .union(Capabilities::STREAM_ORDERED_NOTIFY)
    .union(Capabilities::VMM)
    .union(Capabilities::HOST_NUMA_VMM)
    .union(Capabilities::HOST_REGISTRATION)
    .union(Capabilities::PAGEABLE_MEMORY_ACCESS);

/// The GPU capability without which no device of this backend opens.
pub const REQUIRED: Capabilities = Capabilities::HOST_REGISTRATION;

/// The DLPack device types of this backend's memory, whatever the GPU
/// underneath: CUDA's (`kDLCUDA`, `kDLCUDAHost`, `kDLCUDAManaged`).
pub const DLPACK: DlpackTypes = hal_cuda::DLPACK;

/// The information of the device over `gpu`: this backend's id, the GPU's
/// ordinal, UUID, memory and granularity, the host's page sizes (exported
/// ranges are host pages), and the capabilities above.
pub fn device_info(gpu: &DeviceInfo) -> DeviceInfo {
    let host = hal_cpu_shm::CpuShm::new().host();
    let host = hal_core::Device::info(&host);
    let passed = gpu
        .capabilities
        .difference(gpu.capabilities.difference(GPU_CAPABILITIES));
    let mut capabilities = MEMORY_CAPABILITIES.union(passed);
    if gpu.capabilities.contains(Capabilities::VMM) {
        // hal_core::growable over the GPU's VMM, its header a shared buffer.
        capabilities = capabilities.union(Capabilities::GROWABLE);
    }
    DeviceInfo {
        backend: BackendId::CudaUvm,
        ordinal: gpu.ordinal,
        uuid: gpu.uuid,
        name: format!("{} (shared managed memory)", gpu.name),
        total_memory: gpu.total_memory,
        page_sizes: host.page_sizes.clone(),
        granularity_min: gpu.granularity_min,
        granularity_recommended: gpu.granularity_recommended,
        capabilities,
        dlpack: DLPACK,
    }
}
