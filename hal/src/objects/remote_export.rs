//! Memory exported to other hosts, as a door holds it: the export and the
//! memory object it keeps alive.

use std::sync::Arc;

use hal_ucx::RemoteExported;

use super::memory::MemoryObj;

/// An export to other hosts and the memory object it exports (None where
/// the door exported memory it does not hold as an object), declared in
/// drop order: the export ends (the memory is unregistered, its importers'
/// connections close) before the memory can go, whichever holder lets go
/// last.
pub struct RemoteExportObj<X = ()> {
    exported: RemoteExported,
    _memory: Option<Arc<MemoryObj<X>>>,
}

impl<X> RemoteExportObj<X> {
    /// `exported`, keeping `memory` alive while it lives.
    pub fn new(exported: RemoteExported, memory: Option<Arc<MemoryObj<X>>>) -> Self {
        RemoteExportObj {
            exported,
            _memory: memory,
        }
    }
}

impl<X> std::ops::Deref for RemoteExportObj<X> {
    type Target = RemoteExported;

    fn deref(&self) -> &RemoteExported {
        &self.exported
    }
}
