//! Ids: random ones from the kernel, and the ids of exports and lease
//! tables, made in this process without a system call each.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::process::pid;

/// 16 random bytes from the kernel (`getrandom`).
pub fn random_id() -> [u8; 16] {
    fill_random(|tail| {
        // SAFETY: `tail` is writable for its whole length, the length given.
        let n = unsafe { libc::getrandom(tail.as_mut_ptr().cast(), tail.len(), 0) };
        usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
    })
}

/// 16 bytes from `draw`, which fills the front of the tail it is given and
/// says how many bytes it wrote: called again after a short draw or an
/// interrupted one. `getrandom` cannot fail on Linux >= 3.17 once the pool
/// is ready; should it fail anyway (or draw nothing), the bytes are the
/// time and the pid rather than a panic.
fn fill_random(mut draw: impl FnMut(&mut [u8]) -> std::io::Result<usize>) -> [u8; 16] {
    let mut buf = [0u8; 16];
    let mut filled = 0;
    while filled < buf.len() {
        match draw(&mut buf[filled..]) {
            Ok(n) if n > 0 => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            _ => return time_and_pid(),
        }
    }
    buf
}

/// The time in nanoseconds in the low 8 bytes, the pid in the high 8.
fn time_and_pid() -> [u8; 16] {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    (t ^ (u128::from(pid()) << 64)).to_le_bytes()
}

/// 16 bytes that no other call in this process gives, and that another
/// process cannot predict: a counter mixed under a key drawn from the kernel
/// once per process (SipHash, the keyed hash of the standard library's
/// `RandomState`). For the ids of exports and lease tables, which are made
/// often and only need to be unique on the machine: a [`random_id`] each
/// was a `getrandom` call each. A forked child draws its own key.
pub fn unique_id() -> [u8; 16] {
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
    derive(state, salt, COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// The key of [`unique_id`] (a SipHash key and a salt), drawn once per
/// process image.
static KEY: OnceLock<(std::hash::RandomState, [u8; 16])> = OnceLock::new();
/// How many ids [`unique_id`] has made under [`KEY`].
static COUNTER: AtomicU64 = AtomicU64::new(0);
/// The pid of the process that drew [`KEY`] (0: none yet).
static OWNER: AtomicU64 = AtomicU64::new(0);

/// The id numbered `n` under a key.
fn derive(state: &std::hash::RandomState, salt: &[u8; 16], n: u64) -> [u8; 16] {
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

    /// A draw of the given sizes, each byte its position in the id.
    fn draws(
        mut sizes: Vec<std::io::Result<usize>>,
    ) -> impl FnMut(&mut [u8]) -> std::io::Result<usize> {
        sizes.reverse();
        let mut at = 0u8;
        move |tail: &mut [u8]| {
            let n = sizes.pop().expect("no more draws than scripted")?;
            for b in &mut tail[..n] {
                *b = at;
                at += 1;
            }
            Ok(n)
        }
    }

    #[test]
    fn short_and_interrupted_draws_are_drawn_again() {
        let all: [u8; 16] = std::array::from_fn(|i| i as u8);
        assert_eq!(fill_random(draws(vec![Ok(16)])), all);
        assert_eq!(fill_random(draws(vec![Ok(5), Ok(5), Ok(5), Ok(1)])), all);
        let interrupted = std::io::Error::from_raw_os_error(libc::EINTR);
        assert_eq!(fill_random(draws(vec![Err(interrupted), Ok(16)])), all);
    }

    #[test]
    fn a_failed_or_empty_draw_gives_the_time_and_the_pid() {
        let failed = std::io::Error::from_raw_os_error(libc::EIO);
        for script in [vec![Err(failed)], vec![Ok(3), Ok(0)]] {
            let id = fill_random(draws(script));
            let (low, high) = id.split_at(8);
            assert_eq!(high, u64::from(pid()).to_le_bytes(), "{id:?}");
            let nanos = u64::from_le_bytes(low.try_into().unwrap());
            assert!(nanos > 1_700_000_000 * 1_000_000_000, "{id:?}");
        }
    }

    /// A forked child shares its parent's key and counter, so it must not
    /// draw ids from them: its ids would be the parent's next ones.
    #[test]
    fn a_forked_child_does_not_make_its_parents_ids() {
        let parent = unique_id();
        let (key, salt) = match KEY.get() {
            Some((state, salt)) => (state.clone(), *salt),
            None => panic!("unique_id drew a key"),
        };
        let from = COUNTER.load(Ordering::Relaxed);
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child makes an id (atomics and getrandom), writes it
        // and leaves with `_exit`.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            let id = unique_id();
            // SAFETY: `id` is 16 readable bytes; the write end is open.
            let wrote = unsafe { libc::write(fds[1], id.as_ptr().cast(), 16) };
            // SAFETY: leaves the child without the parent's exit handlers.
            unsafe { libc::_exit(i32::from(wrote != 16)) };
        }
        let mut got = [0u8; 16];
        // SAFETY: `got` has room for 16 bytes; the read end is open.
        let read = unsafe { libc::read(fds[0], got.as_mut_ptr().cast(), 16) };
        let mut status = 0;
        // SAFETY: waits for the child forked above; closes this test's pipe.
        unsafe {
            assert_eq!(libc::waitpid(child, &mut status, 0), child);
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert_eq!(read, 16);
        assert_ne!(got, parent);
        // Other tests of this process make ids meanwhile: none of the
        // counter values near the fork gives the child's id.
        for n in from..from + 10_000 {
            assert_ne!(derive(&key, &salt, n), got, "the id of counter {n}");
        }
    }
}
