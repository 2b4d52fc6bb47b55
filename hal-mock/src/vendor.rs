//! Whose rules a simulated device follows ([`Vendor`]) and the vendor entry
//! points the simulator pretends to call ([`Api`]). What each vendor does
//! differently lives in `rules.rs`.

/// Whose rules a profile follows: error codes, entry point names and the
/// behaviour the capabilities cannot express.
///
/// # The rules enforced, and where they come from
///
/// Every refusal that the vendor reports with an error code is an
/// [`Error::Vendor`](hal_core::Error::Vendor) with the vendor's number and
/// name ([`codes`](crate::codes)).
///
/// **Both profiles**
///
/// - *Exports are whole pages.* An exported range must start and end on a page
///   boundary of the allocation's page size (4 KiB, or 2 MiB / 1 GiB with
///   [`HugePages::Explicit`](hal_core::HugePages::Explicit)), in the device's
///   address space: otherwise
///   [`Error::Misaligned`](hal_core::Error::Misaligned), never a widened range
///   (Ascend's `aclrtIpcMemGetExportKey` checks that the range is page-table
///   aligned so that no neighbouring data leaks).
/// - *Import onto another device needs peer access*:
///   [`ImportOptions::peer_access`](hal_core::ImportOptions::peer_access)
///   (`CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`,
///   `ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS`) or a prior
///   [`MockDevice::enable_peer_access`](crate::MockDevice::enable_peer_access)
///   (`cuCtxEnablePeerAccess`, `aclrtDeviceEnablePeerAccess`); otherwise
///   `CUDA_ERROR_PEER_ACCESS_NOT_ENABLED` (705) or `ACL_ERROR_RT_NO_PERMISSION`
///   (207006).
/// - *IPC events need the IPC flag at creation*: exporting an event created
///   without [`EventFlags::interprocess`](hal_core::EventFlags) fails with
///   `CUDA_ERROR_INVALID_VALUE` (1) from `cuIpcGetEventHandle`, or
///   `ACL_ERROR_RT_PARAM_INVALID` (107000); and an IPC event cannot time:
///   `interprocess` with `timing` is refused at creation
///   (`CU_EVENT_INTERPROCESS` requires `CU_EVENT_DISABLE_TIMING`;
///   `ACL_EVENT_IPC` is not OR-ed with other flags).
/// - *Close order*: [`Allocation::free`](hal_core::Allocation::free) while
///   importers hold the memory is refused with
///   [`Error::Busy`](hal_core::Error::Busy) (Ascend documents that importers
///   `aclrtIpcMemClose` before the exporter frees; on CUDA freeing under an
///   importer is undefined). Dropping instead keeps the memory, with a warning
///   in the log, until the last importer closes
///   ([`MockDevice::deferred_frees`](crate::MockDevice::deferred_frees)); a
///   pool range is not reused meanwhile.
/// - *VMM*: physical sizes, reservation sizes and alignments, mapping
///   offsets, unmap and access ranges must be multiples of the minimum
///   granularity (`cuMemGetAllocationGranularity`,
///   `aclrtMemGetAllocationGranularity`), else the vendor's invalid-value
///   code. A new mapping has no access until `set_access`
///   (`cuMemSetAccess`, `aclrtMemSetAccess`); reads and writes of unmapped
///   or inaccessible parts of a reservation are refused; unmap takes whole
///   mappings only (`cuMemUnmap`).
/// - *Imports check the handle before mapping.* A memory handle whose
///   [`offset`](hal_core::Handle::offset) or [`size`](hal_core::Handle::size)
///   is not the window its vendor payload names (an edited handle text) is
///   refused with [`HandleError::Malformed`](hal_core::HandleError::Malformed)
///   for the field `payload`, so that a mapping's
///   [`handle()`](hal_core::Mapping::handle) always describes what it maps.
///   A data descriptor opened read-only (or write-only) for a writable
///   handle is refused with
///   [`Error::PermissionDenied`](hal_core::Error::PermissionDenied) before
///   anything is mapped, as `hal-cpu-shm` refuses it.
/// - *Managed and host memory cannot be exported through IPC*
///   (`cuMemAllocManaged` memory is refused by `cuIpcGetMemHandle`):
///   [`Error::Unsupported`](hal_core::Error::Unsupported). Read-only exports
///   are unsupported too: neither vendor's IPC maps read-only. A profile that
///   adds
///   [`Capabilities::READ_ONLY_EXPORT`](hal_core::Capabilities::READ_ONLY_EXPORT)
///   gets them with the guarantee of `hal-cpu-shm`: the first export of an
///   allocation decides, for all of its exports, whether its memory object is
///   sealed against writes (`F_SEAL_FUTURE_WRITE`; the exporter's own mapping
///   keeps writing, nothing else ever can, not even a descriptor reopened
///   read-write through `/proc`); the other kind of export is then refused with
///   [`Error::PermissionDenied`](hal_core::Error::PermissionDenied). A
///   read-only export sends an `O_RDONLY` descriptor, and an importer refuses a
///   read-only handle whose memory object lacks the seal. A sub-allocation of a
///   pool chunk is not exported read-only
///   ([`Error::Unsupported`](hal_core::Error::Unsupported)): the seal would
///   cover every allocation of its chunk.
///
/// **CUDA-like** ([`Vendor::Cuda`](crate::Vendor::Cuda))
///
/// - `cuIpcGetMemHandle` works on the base allocation: the handle names the
///   base plus [`Handle::offset`](hal_core::Handle::offset), and the importer
///   maps the base.
/// - Opening the same allocation twice in one process
///   (`cuIpcOpenMemHandle_v2`) returns the same mapping, reference counted:
///   the same base address, and closing one does not unmap the other.
/// - Notifies are built from stream memory operations on shared host memory
///   (`cuStreamWriteValue32_v2` / `cuStreamWaitValue32_v2`): any process may
///   wait, and there is no pid allow-list (`Importers::Pids` is unsupported).
///
/// **Ascend-like** ([`Vendor::Ascend`](crate::Vendor::Ascend))
///
/// - `aclrtMalloc` may hand out sub-allocations that are not page-aligned:
///   allocations under 1 MiB are carved from shared 2 MiB chunks in 512-byte
///   steps, so exporting one fails with `Misaligned` unless it was allocated
///   with [`AllocDesc::align`](hal_core::AllocDesc::align) of a page.
/// - The pid allow-list is on by default: with
///   [`Importers::BackendDefault`](hal_core::Importers) no other process may
///   import until pids are added, after the export too
///   ([`Device::allow_importers`](hal_core::Device::allow_importers):
///   `aclrtIpcMemSetImportPid`, `aclrtNotifySetImportPid`,
///   `aclrtMemSetPidToShareableHandle`); `Importers::Anyone` is
///   `DISABLE_PID_VALIDATION`. A refused importer gets
///   [`Error::PermissionDenied`](hal_core::Error::PermissionDenied), whether
///   it imports from the handle text or with the descriptors attached; the
///   exporting process itself is never refused.
/// - Only the creator of a notify waits on it (`aclrtWaitAndResetNotify`);
///   importers record. An importer's wait is `PermissionDenied`.
/// - IPC events cannot be queried or timed: `query` is `Unsupported`, and
///   handles carry [`HandleFlags::NO_QUERY`](hal_core::HandleFlags::NO_QUERY).
/// - Memory imported onto another device is usable only for asynchronous
///   device-to-device copies
///   ([`MockDevice::copy_async`](crate::MockDevice::copy_async)); `read` /
///   `write` on it are `Unsupported`.
/// - Importing a notify onto another device needs peer access too
///   (`ACL_RT_NOTIFY_IMPORT_FLAG_ENABLE_PEER_ACCESS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Vendor {
    /// The CUDA driver API: legacy IPC exports the base allocation plus an
    /// offset, a second open of one handle in a process returns the same
    /// mapping with a reference count.
    Cuda,
    /// Ascend ACL: pid allow-lists on by default, creator-only notify waits,
    /// IPC events that cannot be queried, memory imported onto another device
    /// usable only by asynchronous device-to-device copies.
    Ascend,
}

/// A vendor entry point the simulator pretends to call, named as the loader
/// would resolve it. [`Faults::remove_entry_point`](crate::fault::Faults::remove_entry_point)
/// takes these names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    MemAlloc,
    MemAllocManaged,
    MemAllocHost,
    MemFree,
    MemGetAddressRange,
    MemHostRegister,
    MemcpyHtoD,
    MemcpyDtoH,
    MemcpyAsync,
    MemsetAsync,
    IpcGetMem,
    IpcSetImportPid,
    IpcOpenMem,
    IpcCloseMem,
    StreamCreate,
    StreamSynchronize,
    StreamQuery,
    DeviceSynchronize,
    EventCreate,
    EventRecord,
    EventQuery,
    EventSynchronize,
    EventElapsedTime,
    StreamWaitEvent,
    IpcGetEvent,
    IpcOpenEvent,
    NotifyCreate,
    NotifyRecord,
    NotifyWait,
    NotifyExport,
    NotifySetImportPid,
    NotifyImport,
    Granularity,
    MemCreate,
    AddressReserve,
    MemMap,
    MemUnmap,
    MemSetAccess,
    MemExportShareable,
    MemImportShareable,
    MemSetPidShareable,
    EnablePeerAccess,
}
