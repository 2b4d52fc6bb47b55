//! Ids: random ones from the kernel, and the ids of exports and lease
//! tables, made in this process without a system call each.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::process::pid;

/// 16 random bytes from the kernel (`getrandom`).
pub fn random_id() -> [u8; 16] {
    let mut buf = [0u8; 16];
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: the destination is the unfilled tail of `buf`.
        let n =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n > 0 {
            filled += n as usize;
        } else if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // getrandom cannot fail on Linux >= 3.17 once the pool is ready;
            // fall back on time and pid rather than panic.
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos();
            buf[..16].copy_from_slice(&(t ^ ((pid() as u128) << 64)).to_le_bytes());
            break;
        }
    }
    buf
}

/// 16 bytes that no other call in this process gives, and that another
/// process cannot predict: a counter mixed under a key drawn from the kernel
/// once per process (SipHash, the keyed hash of the standard library's
/// `RandomState`). For the ids of exports and lease tables, which are made
/// often and only need to be unique on the machine: a [`random_id`] each
/// was a `getrandom` call each. A forked child draws its own key.
pub fn unique_id() -> [u8; 16] {
    static KEY: OnceLock<(std::hash::RandomState, [u8; 16])> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static OWNER: AtomicU64 = AtomicU64::new(0);
    let me = u64::from(pid());
    if OWNER.load(Ordering::Relaxed) != me {
        // First use, or a forked child (which shares its parent's key and
        // counter): fall back on the kernel until a key of its own is
        // drawn; the key is drawn once per process image.
        if KEY.get().is_some() {
            return random_id();
        }
        OWNER.store(me, Ordering::Relaxed);
    }
    let (state, salt) = KEY.get_or_init(|| (std::hash::RandomState::new(), random_id()));
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut out = [0u8; 16];
    for (half, chunk) in out.chunks_exact_mut(8).enumerate() {
        let mut h = state.build_hasher();
        h.write(salt);
        h.write_u64(n);
        h.write_u8(half as u8);
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_ids_differ() {
        let ids: std::collections::HashSet<[u8; 16]> = (0..1000).map(|_| unique_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert_ne!(random_id(), random_id());
    }
}
