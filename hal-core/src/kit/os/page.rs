//! The machine's page size.

use std::sync::OnceLock;

/// The page size of this machine.
pub fn page_size() -> u64 {
    static PS: OnceLock<u64> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PS.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as u64,
        _ => 4096,
    })
}
