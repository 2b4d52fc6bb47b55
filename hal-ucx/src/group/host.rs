//! Which members of a group across hosts share this one, as far as hal's
//! local objects reach: a local group, a memory's local handle or a
//! notify of this host work between two processes only when they run on
//! one kernel, in one pid namespace (pidfds, `/proc/PID/fd`), with one
//! `/dev/shm` (the names of groups and channels) and as one user (each
//! user's names are in a directory of their own).

use std::os::unix::fs::MetadataExt;

use sha2::{Digest, Sha256};

/// Where a member runs, as far as hal's local objects reach: equal for
/// two members exactly when the kernel's boot id, the pid namespace, the
/// `/dev/shm` mounted and the effective uid are the same for both (the
/// first 16 bytes of a SHA-256 over them). It says nothing of the network:
/// two hosts never have one boot id.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct HostId(pub(crate) [u8; 16]);

impl std::fmt::Debug for HostId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostId(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

impl HostId {
    /// This process's.
    pub fn here() -> HostId {
        let mut h = Sha256::new();
        h.update(b"hal-ucx host v1\0");
        // One kernel: its boot id (a missing file hashes as empty, and the
        // namespaces below still tell processes apart).
        let boot = std::fs::read("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        h.update((boot.len() as u64).to_le_bytes());
        h.update(&boot);
        h.update(hal_core::kit::os::pid_namespace().to_le_bytes());
        // One /dev/shm: the mounted file system and its root directory.
        let shm = std::fs::metadata("/dev/shm").map_or((0, 0), |m| (m.dev(), m.ino()));
        h.update(shm.0.to_le_bytes());
        h.update(shm.1.to_le_bytes());
        let uid = hal_core::kit::os::process_euid(std::process::id()).unwrap_or(u32::MAX);
        h.update(uid.to_le_bytes());
        let d = h.finalize();
        let mut id = [0u8; 16];
        id.copy_from_slice(&d[..16]);
        HostId(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_in_one_process_and_its_threads() {
        let here = HostId::here();
        assert_eq!(here, HostId::here());
        let there = std::thread::spawn(HostId::here).join().unwrap();
        assert_eq!(here, there);
        assert_ne!(here, HostId([0; 16]));
    }
}
