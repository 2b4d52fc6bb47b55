//! The memory keys this process's allocations exported: each allocation
//! keeps the keys its exports took ([`ExportedKeys`]) and closes them
//! (`aclrtIpcMemClose`) before its memory is freed; until then the process
//! remembers the range each key names, which an import in the exporting
//! process itself reaches directly ([`exported_range`]).

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Mutex, OnceLock};

use hal_core::kit::os::lock::lock;

/// The keys one allocation's exports took.
#[derive(Default)]
pub(crate) struct ExportedKeys(Mutex<Vec<CString>>);

impl ExportedKeys {
    /// Keep `key`, which an export took of the `len` bytes at `addr`: it
    /// is remembered for imports in this process until [`take`](Self::take).
    pub(crate) fn keep(&self, key: &CString, addr: u64, len: u64) {
        lock(&self.0).push(key.clone());
        lock(own()).insert(key.as_bytes().to_vec(), (addr, len));
    }

    /// The keys, forgotten by this process: their memory is being freed,
    /// and the caller closes them first.
    pub(crate) fn take(&self) -> Vec<CString> {
        let keys = std::mem::take(&mut *lock(&self.0));
        let mut own = lock(own());
        for k in &keys {
            own.remove(k.as_bytes());
        }
        keys
    }
}

/// Key → (address, length) of the exported range.
type Own = HashMap<Vec<u8>, (u64, u64)>;

fn own() -> &'static Mutex<Own> {
    static OWN: OnceLock<Mutex<Own>> = OnceLock::new();
    OWN.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The range `key` names, if this process exported it and still holds it.
pub(crate) fn exported_range(key: &[u8]) -> Option<(u64, u64)> {
    lock(own()).get(key).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_key_names_its_range_until_taken() {
        let keys = ExportedKeys::default();
        let key = CString::new("hal-ascend-keys-test-a").unwrap();
        assert_eq!(exported_range(key.as_bytes()), None);
        keys.keep(&key, 0x1000, 0x200);
        assert_eq!(exported_range(key.as_bytes()), Some((0x1000, 0x200)));
        assert_eq!(keys.take(), vec![key.clone()]);
        assert_eq!(exported_range(key.as_bytes()), None);
        assert!(keys.take().is_empty());
    }
}
