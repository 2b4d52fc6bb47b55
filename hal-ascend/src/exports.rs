//! This process's exported memory keys, by key: the address each names,
//! which an import in the exporting process reaches directly.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Mutex, OnceLock};

use hal_core::lock::lock;

/// Key → (address, length) of the exported range.
type Own = HashMap<Vec<u8>, (u64, u64)>;

fn own() -> &'static Mutex<Own> {
    static OWN: OnceLock<Mutex<Own>> = OnceLock::new();
    OWN.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Remember that `key` names the `len` bytes at `addr`.
pub(crate) fn remember(key: &CString, addr: u64, len: u64) {
    lock(own()).insert(key.as_bytes().to_vec(), (addr, len));
}

/// The range `key` names, if this process exported it and still holds it.
pub(crate) fn range(key: &[u8]) -> Option<(u64, u64)> {
    lock(own()).get(key).copied()
}

/// Forget the keys of memory being freed.
pub(crate) fn forget(keys: &[CString]) {
    let mut own = lock(own());
    for k in keys {
        own.remove(k.as_bytes());
    }
}
