//! What the driver state keeps of legacy IPC: the exports of this
//! process's allocations and events, and the memory handles it opened.

use hal_core::Exported;

/// The exports of one allocation, kept while it lives.
pub(crate) struct IpcExport {
    /// Its 64 bytes.
    pub(crate) bytes: [u8; 64],
    /// The simulator's export of the memory.
    pub(crate) _memory: Exported,
    /// The envelope holding the memory export's text.
    pub(crate) _envelope: Exported,
}

/// A handle opened in this process.
pub(crate) struct Opened {
    /// Where it is mapped.
    pub(crate) addr: u64,
    /// Opens minus closes.
    pub(crate) refs: u32,
    /// The buffer id of the opened memory's block here.
    pub(crate) buffer_id: u64,
}

/// The exports of one IPC event, kept while it lives.
pub(crate) struct EventExport {
    /// Its 64 bytes.
    pub(crate) bytes: [u8; 64],
    /// The simulator's export of the event.
    pub(crate) _event: Exported,
    /// The envelope holding the event export's text.
    pub(crate) _envelope: Exported,
}
