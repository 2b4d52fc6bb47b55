//! Exports kept as long as the object they export: what a language door
//! (the C library, the Python package) holds for an object whose exports
//! the caller does not own.

use std::sync::Mutex;

use crate::handle::Handle;
use crate::kit::export::Exported;
use crate::kit::lock::lock;

/// The exports of one object, kept until it drops. Declare it before the
/// object's other fields: fields drop in order, and an export must stop
/// (unregister from the broker) before what it exports goes.
#[derive(Debug, Default)]
pub struct KeptExports(Mutex<Vec<Exported>>);

impl KeptExports {
    /// Keep `exported` as long as this value; its handle.
    pub fn keep(&self, exported: Exported) -> Handle {
        let handle = exported.handle().clone();
        lock(&self.0).push(exported);
        handle
    }

    /// How many exports are kept.
    pub fn len(&self) -> usize {
        lock(&self.0).len()
    }

    /// True when none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::export::{new_handle, HandleSpec};
    use crate::{BackendId, ExportOptions, HandleKind, Location};

    #[test]
    fn an_export_is_kept_and_its_handle_given() {
        let spec = HandleSpec {
            kind: HandleKind::Memory,
            backend: BackendId::CpuShm,
            device: 0,
            device_uuid: [0; 16],
            location: Location::Host,
            default_allow_list: false,
        };
        let handle = new_handle(&spec, &ExportOptions::default()).unwrap();
        let kept = KeptExports::default();
        assert!(kept.is_empty());
        let given = kept.keep(Exported::new(handle.clone(), Vec::new()).unwrap());
        assert_eq!(given, handle);
        assert_eq!(kept.len(), 1);
    }
}
