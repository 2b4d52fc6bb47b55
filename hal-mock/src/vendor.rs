//! Whose rules a simulated device follows ([`Vendor`]) and the vendor entry
//! points the simulator pretends to call ([`Api`]). What each vendor does
//! differently lives in `rules.rs`.

/// Whose rules a profile follows: error codes, entry point names and the
/// behaviour the capabilities cannot express.
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
