//! The metadata object beside each region this library creates
//! (`/dev/shm/.hal-meta.NAME`): its format, how it is opened and trusted, and
//! the lock its removers hold.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::sync::OnceLock;
use std::time::Duration;

use hal_core::{Error, Result};

use super::name::{meta_path, region_id, SHM_DIR};

const META_MAGIC: &[u8; 8] = b"HALSHMD1";
const META_VERSION: u32 = 1;
const META_LEN: usize = 128;

pub(super) fn pid_namespace() -> u64 {
    static NS: OnceLock<u64> = OnceLock::new();
    *NS.get_or_init(|| {
        std::fs::read_link("/proc/self/ns/pid")
            .ok()
            .and_then(|p| {
                let s = p.to_string_lossy().into_owned();
                s.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
            })
            .unwrap_or(0)
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Meta {
    pub(super) uid: u32,
    pub(super) pid: u32,
    pub(super) start: u64,
    pub(super) size: u64,
    pub(super) created: u64,
    pub(super) ino: u64,
    pub(super) dev: u64,
    pub(super) pidns: u64,
}

impl Meta {
    pub(super) fn encode(&self, name: &str) -> [u8; META_LEN] {
        let mut b = [0u8; META_LEN];
        b[0..8].copy_from_slice(META_MAGIC);
        b[8..12].copy_from_slice(&META_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.uid.to_le_bytes());
        b[16..20].copy_from_slice(&self.pid.to_le_bytes());
        b[24..32].copy_from_slice(&self.start.to_le_bytes());
        b[32..40].copy_from_slice(&self.size.to_le_bytes());
        b[40..48].copy_from_slice(&self.created.to_le_bytes());
        b[48..56].copy_from_slice(&self.ino.to_le_bytes());
        b[56..64].copy_from_slice(&self.dev.to_le_bytes());
        b[64..72].copy_from_slice(&self.pidns.to_le_bytes());
        b[72..80].copy_from_slice(&region_id(name).to_le_bytes());
        b
    }

    pub(super) fn decode(b: &[u8; META_LEN]) -> Option<Meta> {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        if &b[0..8] != META_MAGIC || u32_at(8) != META_VERSION {
            return None;
        }
        Some(Meta {
            uid: u32_at(12),
            pid: u32_at(16),
            start: u64_at(24),
            size: u64_at(32),
            created: u64_at(40),
            ino: u64_at(48),
            dev: u64_at(56),
            pidns: u64_at(64),
        })
    }
}

/// An open metadata object: what it says, who owns the file, and which file
/// it is (so that it is removed only while its name still leads to it).
#[derive(Debug)]
pub(super) struct MetaFile {
    pub(super) file: std::fs::File,
    /// `None` when the file is not complete metadata of this version.
    pub(super) meta: Option<Meta>,
    /// The owner of the metadata file.
    pub(super) uid: u32,
    pub(super) ino: u64,
    pub(super) dev: u64,
}

/// Open the metadata of `name`: `Ok(None)` when there is none.
pub(super) fn open_meta(name: &str) -> Result<Option<MetaFile>> {
    let f = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(meta_path(name))
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("opening {}", meta_path(name)), e)),
    };
    let m = f
        .metadata()
        .map_err(|e| Error::io(format!("stat of {}", meta_path(name)), e))?;
    let mut b = [0u8; META_LEN];
    let meta = if m.file_type().is_file() && m.len() == META_LEN as u64 {
        (&f).read_exact(&mut b).ok().and_then(|()| Meta::decode(&b))
    } else {
        None
    };
    Ok(Some(MetaFile {
        file: f,
        meta,
        uid: m.uid(),
        ino: m.ino(),
        dev: m.dev(),
    }))
}

/// Read the metadata of `name`: `Ok(None)` when there is none or it is not a
/// complete metadata object; also returns the metadata file's uid.
pub(super) fn read_meta(name: &str) -> Result<Option<(Meta, u32)>> {
    Ok(open_meta(name)?.and_then(|mf| Some((mf.meta?, mf.uid))))
}

/// Metadata counts only when the user it names wrote it: the file's owner is
/// the uid recorded inside, and, for a process other than root, that uid is
/// this process's. (Anyone may create files in [`SHM_DIR`]; only this check
/// keeps a user from describing another user's object as theirs.)
pub(super) fn meta_trusted(file_uid: u32, meta_uid: u32, me: u32) -> bool {
    file_uid == meta_uid && (me == 0 || meta_uid == me)
}

/// How long a creator waits for another process's hold on stale metadata
/// it wants to replace (removers hold it for a few system calls). The
/// cleanup does not wait: metadata that someone holds is being judged or
/// removed there, and waiting would let a user who holds locks on many files
/// of their own slow every cleanup down.
pub(super) const META_LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// Take the lock every remover of metadata holds (`flock` on the metadata
/// file itself), then check that the name still leads to that file. While a
/// process holds it, nobody else removes the file, so the name cannot pass
/// to newer metadata (which is only ever linked exclusively, never put over
/// an existing file) until the holder has judged and removed the file it
/// read. False when the lock could not be had within `patience` or the name
/// has moved on.
pub(super) fn lock_meta(name: &str, mf: &MetaFile, patience: Duration) -> bool {
    hal_core::kit::os::lock_patiently(mf.file.as_fd(), patience)
        && std::fs::symlink_metadata(meta_path(name))
            .is_ok_and(|m| m.ino() == mf.ino && m.dev() == mf.dev)
}

/// Remove what sits at the metadata path of `name` when it cannot be opened
/// to be judged (a symbolic link, a socket): never a regular file or a
/// directory. Such entries cannot be locked themselves, so their removers
/// hold the lock of [`SHM_DIR`] and check, under it, that the name still
/// leads to the entry they saw.
pub(super) fn remove_junk_meta(name: &str) {
    let path = meta_path(name);
    let Ok(seen) = std::fs::symlink_metadata(&path) else {
        return;
    };
    if seen.file_type().is_file() || seen.file_type().is_dir() {
        return;
    }
    let Ok(dir) = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(SHM_DIR)
    else {
        return;
    };
    if hal_core::kit::os::lock_patiently(dir.as_fd(), META_LOCK_PATIENCE)
        && std::fs::symlink_metadata(&path)
            .is_ok_and(|m| m.ino() == seen.ino() && m.dev() == seen.dev())
    {
        let _ = std::fs::remove_file(&path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_round_trips_and_rejects_foreign_bytes() {
        let m = Meta {
            uid: 1000,
            pid: 4242,
            start: 123_456,
            size: 1 << 30,
            created: 1_700_000_000,
            ino: 77,
            dev: 0x2a,
            pidns: 4_026_531_836,
        };
        let b = m.encode("region");
        assert_eq!(Meta::decode(&b), Some(m));
        assert_eq!(&b[72..80], &region_id("region").to_le_bytes());
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(Meta::decode(&bad), None);
        let mut newer = b;
        newer[8] = 2;
        assert_eq!(Meta::decode(&newer), None);
    }
}
